// Loads the teletron YAML file into tt::Config: parses it with yaml-cpp, merges the environment
// and `--set` overrides into the tree (remembering where each came from), then validates every key
// against the one schema table (app/config_schema.cpp). Errors name the full key path, where it
// was written (file:line:col, `--set ...` or the environment variable) and the expected form.
// config_print.cpp prints the tree back. No torch here: it compiles fast.
#include "app/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "app/config_schema.h"
#include "core/errors.h"

namespace tt {
namespace {

using config_text::format_double;
using config_text::join;
using config_text::nearest_name;
using config_text::parse_bool;
using config_text::parse_float;
using config_text::parse_int;
using config_text::range_text;
using config_text::split;

constexpr const char* kRoot = "tele_tron";
constexpr ConfigRange kAtLeastOne = {1, kConfigInf, false, false};
constexpr const char* kHelpHint =
    "fix the key named above; `teletron config FILE` prints every key with its default";
constexpr const char* kFileHint =
    "pass the path of a YAML file rooted at `tele_tron:` (see configs/)";

// ---- small text helpers ---------------------------------------------------------------------

std::string trim(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  size_t end = text.find_last_not_of(" \t");
  return text.substr(begin, end - begin + 1);
}

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

std::string join_path(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::string full_path(const std::string& path) {
  return path.empty() ? std::string(kRoot) : std::string(kRoot) + "." + path;
}

// ---- YAML node helpers ----------------------------------------------------------------------

// A quoted scalar ("16") or one tagged !!str is a string, never a number or a boolean.
bool is_quoted(const YAML::Node& node) {
  const std::string& tag = node.Tag();
  return tag == "!" || (tag.size() >= 4 && tag.compare(tag.size() - 4, 4, ":str") == 0);
}

bool plain_scalar(const YAML::Node& node, std::string* text) {
  if (!node.IsScalar() || is_quoted(node)) return false;
  *text = node.Scalar();
  return true;
}

// How a wrong value reads in a message: `got fast`, `got "16"`, `got a map`.
std::string describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "null";
  if (node.IsMap()) return "a map";
  if (node.IsSequence())
    return str_cat("a list of ", node.size(), node.size() == 1 ? " entry" : " entries");
  if (is_quoted(node)) return "the string \"" + node.Scalar() + "\"";
  return node.Scalar();
}

bool has_mark(const YAML::Node& node) { return node.IsDefined() && node.Mark().line >= 0; }

std::string mark_text(const std::string& origin, const YAML::Mark& mark) {
  return str_cat(origin, ":", mark.line + 1, ":", mark.column + 1);
}

// A const view, so that looking a missing key up never inserts it.
YAML::Node child(const YAML::Node& map, const std::string& name) { return map[name]; }

// ---- ranges and choices ---------------------------------------------------------------------

bool in_range(double value, const ConfigRange& r) {
  bool low_ok = r.lo_open ? value > r.lo : value >= r.lo;
  bool high_ok = r.hi_open ? value < r.hi : value <= r.hi;
  return low_ok && high_ok;
}

std::string with_range(const std::string& form, const ConfigRange& r) {
  std::string text = range_text(r);
  return text.empty() ? form : form + " " + text;
}

std::string choices_text(const char* choices) {
  return "one of " + join(split(choices, '|'), " | ");
}

// "sigmoid=logit_normal,true=on": the canonical spelling of `text`, or `text` itself.
std::string resolve_alias(const char* aliases, const std::string& text) {
  if (!aliases) return text;
  for (const std::string& pair : split(aliases, ',')) {
    size_t eq = pair.find('=');
    if (pair.substr(0, eq) == text) return pair.substr(eq + 1);
  }
  return text;
}

// ---- the schema as a tree -------------------------------------------------------------------

bool is_section(const std::string& path) {
  std::string start = path + ".";
  for (const ConfigField& field : config_fields()) {
    if (std::string(field.path).rfind(start, 0) == 0) return true;
  }
  return false;
}

// The names valid directly under `prefix` ("" = the root), in schema order.
std::vector<std::string> child_names(const std::string& prefix) {
  std::vector<std::string> names;
  std::string start = prefix.empty() ? "" : prefix + ".";
  for (const ConfigField& field : config_fields()) {
    std::string path = field.path;
    if (path.rfind(start, 0) != 0) continue;
    std::string name = path.substr(start.size(), path.find('.', start.size()) - start.size());
    if (!contains(names, name)) names.push_back(name);
  }
  return names;
}

// Every key and section whose last name is `name` but which lives under another parent.
std::vector<std::string> same_name_elsewhere(const std::string& prefix, const std::string& name) {
  std::vector<std::string> found;
  for (const ConfigField& field : config_fields()) {
    std::vector<std::string> parts = split(field.path, '.');
    for (size_t i = 0; i < parts.size(); ++i) {
      if (parts[i] != name) continue;
      std::vector<std::string> head(parts.begin(), parts.begin() + i);
      std::string path = full_path(join(head, ".") + (i ? "." : "") + name);
      if (join(head, ".") != prefix && !contains(found, path)) found.push_back(path);
    }
  }
  return found;
}

std::string unknown_key_text(const std::string& prefix, const std::string& name) {
  std::vector<std::string> elsewhere = same_name_elsewhere(prefix, name);
  if (!elsewhere.empty())
    return "unknown key here; did you mean `" + join(elsewhere, "` or `") + "`?";
  std::vector<std::string> names = child_names(prefix);
  std::string nearest = nearest_name(name, names);
  if (!nearest.empty()) return "unknown key; did you mean `" + nearest + "`?";
  return "unknown key; valid keys here: " + join(names, ", ");
}

// ---- the loader -----------------------------------------------------------------------------

// One key being read: its path below the root, the key node (for its position) and the value.
struct Item {
  std::string path;
  YAML::Node key, value;
};

class Loader {
 public:
  Loader(Config* config, std::string origin) : config_(config), origin_(std::move(origin)) {}

  /// Records that `path` (and everything below it) came from an override, not from the file.
  void set_override_origin(const std::string& path, const std::string& origin);
  void walk(const YAML::Node& map, const std::string& prefix);
  void check_dynamic_batch();
  /// mixed_precision.master_weights: bf16 needs bf16 autocast (enabled, dtype bf16).
  void check_master_weights();
  /// Throws every collected problem as one kConfig error, the first one first.
  void throw_if_errors() const;

 private:
  std::string location(const Item& item, const YAML::Node& at) const;
  bool fail(const Item& item, const std::string& what) { return fail_at(item, item.value, what); }
  bool fail_at(const Item& item, const YAML::Node& at, const std::string& what);
  bool check_keys(const Item& item, const std::vector<std::string>& names);

  void read_field(const ConfigField& field, const Item& item);
  bool read_value(const ConfigField& field, const Item& item, void* at);
  bool read_int(const Item& item, const ConfigRange& range, int64_t* out);
  bool read_float(const Item& item, const ConfigRange& range, double* out);
  bool read_bool(const Item& item, bool* out);
  bool read_string(const Item& item, const ConfigField& field, std::string* out);
  bool read_int_list(const Item& item, const ConfigField& field, std::vector<int64_t>* out);
  bool read_string_list(const Item& item, const ConfigField& field, std::vector<std::string>* out);
  bool read_batch_size(const Item& item, Config* config);
  bool read_int_or_auto(const Item& item, const ConfigRange& range, int64_t* out);
  bool read_checkpointing(const Item& item, int64_t* every_n);
  bool read_betas(const Item& item, const ConfigField& field, OptimizerSection* optimizer);
  bool read_buckets(const Item& item, std::vector<Bucket>* buckets);
  bool read_bucket(const Item& item, Bucket* bucket);
  std::string where_set(const std::vector<std::string>& paths) const;

  Config* config_;
  std::string origin_;
  std::map<std::string, std::string> override_origin_;  // path -> "--set k=v" / env variable
  std::map<std::string, std::string> set_at_;           // path of every key read -> location
  std::vector<std::string> errors_;
};

void Loader::set_override_origin(const std::string& path, const std::string& origin) {
  for (auto it = override_origin_.begin(); it != override_origin_.end();) {
    const std::string& key = it->first;
    bool below = key == path || key.rfind(path + ".", 0) == 0;
    it = below ? override_origin_.erase(it) : std::next(it);
  }
  override_origin_[path] = origin;
}

// The override that wrote `item.path`, one of its parents or something below it (an override
// `a.b.c` turns `a.b` into a map), else the node's file:line:col.
std::string Loader::location(const Item& item, const YAML::Node& at) const {
  auto below = override_origin_.lower_bound(item.path + ".");
  if (below != override_origin_.end() && below->first.rfind(item.path + ".", 0) == 0)
    return below->second;
  std::string path = item.path;
  while (!path.empty()) {
    auto found = override_origin_.find(path);
    if (found != override_origin_.end()) return found->second;
    size_t cut = path.find_last_of(".[");
    path = cut == std::string::npos ? "" : path.substr(0, cut);
  }
  // A null value's mark points past the key, at the next line: use the key's position instead.
  if (has_mark(at) && !at.IsNull()) return mark_text(origin_, at.Mark());
  if (has_mark(item.key)) return mark_text(origin_, item.key.Mark());
  return origin_;
}

bool Loader::fail_at(const Item& item, const YAML::Node& at, const std::string& what) {
  errors_.push_back(full_path(item.path) + ": " + what + " (" + location(item, at) + ")");
  return false;
}

void Loader::throw_if_errors() const {
  if (!errors_.empty()) throw Error(ErrorCode::kConfig, join(errors_, "\n"), kHelpHint);
}

// For the small fixed maps inside a value ({every_n: k}, a bucket): unknown and repeated keys.
bool Loader::check_keys(const Item& item, const std::vector<std::string>& names) {
  bool ok = true;
  std::vector<std::string> seen;
  for (auto it = item.value.begin(); it != item.value.end(); ++it) {
    std::string name = it->first.Scalar();
    Item sub{item.path + "." + name, it->first, it->second};
    if (contains(seen, name)) {
      ok = fail_at(sub, it->first, "duplicate key");
    } else if (!contains(names, name)) {
      std::string nearest = nearest_name(name, names);
      ok = fail_at(sub, it->first,
                   nearest.empty() ? "unknown key; valid keys here: " + join(names, ", ")
                                   : "unknown key; did you mean `" + nearest + "`?");
    }
    seen.push_back(name);
  }
  return ok;
}

void Loader::walk(const YAML::Node& map, const std::string& prefix) {
  std::vector<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    Item item{join_path(prefix, it->first.Scalar()), it->first, it->second};
    if (!it->first.IsScalar()) {
      fail_at(Item{prefix, it->first, it->first}, it->first, "keys must be plain names");
    } else if (contains(seen, it->first.Scalar())) {
      fail_at(item, item.key, "duplicate key");
    } else if (const ConfigField* field = find_config_field(item.path)) {
      read_field(*field, item);
    } else if (is_section(item.path)) {
      if (item.value.IsMap()) {
        walk(item.value, item.path);
      } else if (!item.value.IsNull()) {  // an empty section (`model:`) keeps the defaults
        fail(item, "expected a map of keys (" + join(child_names(item.path), ", ") + "), got " +
                       describe(item.value));
      }
    } else {
      fail_at(item, item.key, unknown_key_text(prefix, it->first.Scalar()));
    }
    if (it->first.IsScalar()) seen.push_back(it->first.Scalar());
  }
}

void Loader::read_field(const ConfigField& field, const Item& item) {
  set_at_[item.path] = location(item, item.value);
  config_->set_keys.push_back({item.path, set_at_[item.path]});
  read_value(field, item, field.at(*config_));
}

bool Loader::read_value(const ConfigField& field, const Item& item, void* at) {
  bool null = item.value.IsNull();
  switch (field.kind) {
    case ConfigKind::kInt:
      return read_int(item, field.range, static_cast<int64_t*>(at));
    case ConfigKind::kFloat:
      return read_float(item, field.range, static_cast<double*>(at));
    case ConfigKind::kBool:
      return read_bool(item, static_cast<bool*>(at));
    case ConfigKind::kString:
      return read_string(item, field, static_cast<std::string*>(at));
    case ConfigKind::kBatchSize:
      return read_batch_size(item, static_cast<Config*>(at));
    case ConfigKind::kIntOrAuto:
      return read_int_or_auto(item, field.range, static_cast<int64_t*>(at));
    case ConfigKind::kCheckpointing:
      return read_checkpointing(item, static_cast<int64_t*>(at));
    case ConfigKind::kBetas:
      return read_betas(item, field, static_cast<OptimizerSection*>(at));
    case ConfigKind::kBuckets:
      return read_buckets(item, static_cast<std::vector<Bucket>*>(at));
    case ConfigKind::kOptInt: {
      auto* out = static_cast<std::optional<int64_t>*>(at);
      int64_t value = 0;
      if (null) return out->reset(), true;
      if (!read_int(item, field.range, &value)) return false;
      return *out = value, true;
    }
    case ConfigKind::kOptFloat: {
      auto* out = static_cast<std::optional<double>*>(at);
      double value = 0;
      if (null) return out->reset(), true;
      if (!read_float(item, field.range, &value)) return false;
      return *out = value, true;
    }
    case ConfigKind::kOptBool: {
      auto* out = static_cast<std::optional<bool>*>(at);
      bool value = false;
      if (null) return out->reset(), true;
      if (!read_bool(item, &value)) return false;
      return *out = value, true;
    }
    case ConfigKind::kOptString: {
      auto* out = static_cast<std::optional<std::string>*>(at);
      std::string value;
      if (null) return out->reset(), true;
      if (!read_string(item, field, &value)) return false;
      return *out = value, true;
    }
    case ConfigKind::kOptIntList: {
      auto* out = static_cast<std::optional<std::vector<int64_t>>*>(at);
      std::vector<int64_t> value;
      if (null) return out->reset(), true;
      if (!read_int_list(item, field, &value)) return false;
      return *out = value, true;
    }
    case ConfigKind::kStringList:
      return read_string_list(item, field, static_cast<std::vector<std::string>*>(at));
  }
  return false;
}

bool Loader::read_int(const Item& item, const ConfigRange& range, int64_t* out) {
  std::string text;
  int64_t value = 0;
  if (!plain_scalar(item.value, &text) || !parse_int(text, &value))
    return fail(item,
                "expected " + with_range("an integer", range) + ", got " + describe(item.value));
  if (!in_range(double(value), range))
    return fail(item, "must be " + range_text(range) + ", got " + text);
  *out = value;
  return true;
}

bool Loader::read_float(const Item& item, const ConfigRange& range, double* out) {
  std::string text;
  double value = 0;
  if (!plain_scalar(item.value, &text) || !parse_float(text, &value))
    return fail(item,
                "expected " + with_range("a number", range) + ", got " + describe(item.value));
  if (!in_range(value, range)) return fail(item, "must be " + range_text(range) + ", got " + text);
  *out = value;
  return true;
}

bool Loader::read_bool(const Item& item, bool* out) {
  std::string text;
  if (plain_scalar(item.value, &text) && parse_bool(text, out)) return true;
  return fail(item, "expected true or false, got " + describe(item.value));
}

bool Loader::read_string(const Item& item, const ConfigField& field, std::string* out) {
  std::string form = field.choices ? choices_text(field.choices) : "a string";
  if (!item.value.IsScalar())
    return fail(item, "expected " + form + ", got " + describe(item.value));
  std::string text = resolve_alias(field.aliases, item.value.Scalar());
  if (field.choices && !contains(split(field.choices, '|'), text))
    return fail(item, "must be " + form + ", got " + item.value.Scalar());
  if (text.empty()) return fail(item, "must not be empty");
  *out = text;
  return true;
}

// model.rope_axes_dim: `list_size` even integers (each axis is split into cos/sin pairs).
bool Loader::read_int_list(const Item& item, const ConfigField& field, std::vector<int64_t>* out) {
  std::string form =
      str_cat("a list of ", field.list_size, " even integers ", range_text(field.range));
  if (!item.value.IsSequence() || int(item.value.size()) != field.list_size)
    return fail(item, "expected " + form + ", got " + describe(item.value));
  bool ok = true;
  std::vector<int64_t> values(field.list_size);
  for (int i = 0; i < field.list_size; ++i) {
    Item entry{str_cat(item.path, "[", i, "]"), item.key, item.value[i]};
    if (!read_int(entry, field.range, &values[i])) {
      ok = false;
    } else if (values[i] % 2 != 0) {
      ok = fail(entry, str_cat("must be even, got ", values[i]));
    }
  }
  if (ok) *out = values;
  return ok;
}

bool Loader::read_string_list(const Item& item, const ConfigField& field, std::vector<std::string>* out) {
  if (item.value.IsNull()) return out->clear(), true;
  if (!item.value.IsSequence()) return fail(item, "expected a list of names, e.g. [to_q, to_k], got " + describe(item.value));
  bool ok = true;
  std::vector<std::string> values(item.value.size());
  for (size_t i = 0; i < item.value.size(); ++i) {
    Item entry{str_cat(item.path, "[", i, "]"), item.key, item.value[i]};
    if (!read_string(entry, field, &values[i])) {
      ok = false;
    } else if (values[i].empty()) {
      ok = fail(entry, "must not be empty");
    }
  }
  if (ok) *out = values;
  return ok;
}

bool Loader::read_batch_size(const Item& item, Config* config) {
  std::string text;
  int64_t value = 0;
  if (item.value.IsScalar() && item.value.Scalar() == "dynamic") {
    config->batch_size_dynamic = true;
    return true;
  }
  if (!plain_scalar(item.value, &text) || !parse_int(text, &value))
    return fail(item, "expected an integer >= 1 or `dynamic`, got " + describe(item.value));
  if (value < 1) return fail(item, "must be an integer >= 1 or `dynamic`, got " + text);
  config->batch_size = value;
  config->batch_size_dynamic = false;
  return true;
}

// `auto` -> 0; otherwise an integer in `range`.
bool Loader::read_int_or_auto(const Item& item, const ConfigRange& range, int64_t* out) {
  std::string text;
  int64_t value = 0;
  if (plain_scalar(item.value, &text) && text == "auto") return *out = 0, true;
  if (!plain_scalar(item.value, &text) || !parse_int(text, &value))
    return fail(item, "expected " + with_range("an integer", range) + " or auto, got " + describe(item.value));
  if (!in_range(double(value), range)) return fail(item, "must be " + range_text(range) + " or auto, got " + text);
  *out = value;
  return true;
}

// false -> 0 (off), true -> 1 (every block), {every_n: k} -> k, auto -> kCheckpointingAuto.
bool Loader::read_checkpointing(const Item& item, int64_t* every_n) {
  std::string text;
  bool on = false;
  if (plain_scalar(item.value, &text) && parse_bool(text, &on)) return *every_n = on ? 1 : 0, true;
  if (plain_scalar(item.value, &text) && text == "auto") return *every_n = kCheckpointingAuto, true;
  if (!item.value.IsMap())
    return fail(item, "expected false, true, {every_n: k} or auto, got " + describe(item.value));
  if (!check_keys(item, {"every_n"})) return false;
  Item sub{item.path + ".every_n", item.key, child(item.value, "every_n")};
  if (!sub.value.IsDefined())
    return fail(item, "expected {every_n: k} with k >= 1, got a map without every_n");
  return read_int(sub, kAtLeastOne, every_n);
}

bool Loader::read_betas(const Item& item, const ConfigField& field, OptimizerSection* optimizer) {
  if (!item.value.IsSequence() || item.value.size() != 2)
    return fail(item, "expected a list of 2 numbers [beta1, beta2] " + range_text(field.range) +
                          ", got " + describe(item.value));
  double betas[2] = {0, 0};
  bool ok = true;
  for (int i = 0; i < 2; ++i) {
    Item entry{str_cat(item.path, "[", i, "]"), item.key, item.value[i]};
    if (!read_float(entry, field.range, &betas[i])) ok = false;
  }
  if (ok) optimizer->beta1 = betas[0], optimizer->beta2 = betas[1];
  return ok;
}

bool Loader::read_buckets(const Item& item, std::vector<Bucket>* buckets) {
  if (!item.value.IsSequence() || item.value.size() == 0)
    return fail(
        item, "expected a non-empty list of {frames, height, width}, got " + describe(item.value));
  std::vector<Bucket> values(item.value.size());
  bool ok = true;
  for (size_t i = 0; i < item.value.size(); ++i) {
    Item entry{str_cat(item.path, "[", i, "]"), item.key, item.value[i]};
    if (!read_bucket(entry, &values[i])) ok = false;
  }
  if (ok) *buckets = values;
  return ok;
}

// One bucket: frames 4n+1 (the VAE keeps the first frame and compresses time by 4), height and
// width multiples of 16 (VAE stride 8 times patch size 2).
bool Loader::read_bucket(const Item& item, Bucket* bucket) {
  const char* names[3] = {"frames", "height", "width"};
  int64_t* outs[3] = {&bucket->frames, &bucket->height, &bucket->width};
  if (!item.value.IsMap())
    return fail(item, "expected a map {frames: 4n+1, height: 16k, width: 16k}, got " +
                          describe(item.value));
  if (!check_keys(item, {"frames", "height", "width"})) return false;
  bool ok = true;
  for (int i = 0; i < 3; ++i) {
    Item sub{item.path + "." + names[i], item.key, child(item.value, names[i])};
    if (!sub.value.IsDefined()) {
      ok = fail(item, str_cat("missing `", names[i], "` (a bucket is {frames, height, width})"));
    } else if (!read_int(sub, kAtLeastOne, outs[i])) {
      ok = false;
    } else if (i == 0 && (*outs[i] - 1) % 4 != 0) {
      ok = fail(sub, str_cat("must be 4n+1 (1, 5, 9, ..., 33, ...), got ", *outs[i]));
    } else if (i > 0 && *outs[i] % 16 != 0) {
      ok = fail(sub, str_cat("must be a multiple of 16 (e.g. 480, 832), got ", *outs[i]));
    }
  }
  return ok;
}

// Where the first of `paths` that the input set was written; the defaults when none was.
std::string Loader::where_set(const std::vector<std::string>& paths) const {
  for (const std::string& path : paths) {
    auto found = set_at_.find(path);
    if (found != set_at_.end()) return found->second;
  }
  return "defaults";
}

void Loader::check_dynamic_batch() {
  const DynamicBatchSection& d = config_->dynamic_batch;
  if (d.mode == "token_budget" && !config_->batch_size_dynamic) {
    errors_.push_back(str_cat(full_path("dynamic_batch.mode"), ": token_budget sizes each bucket's global batch, which "
                              "needs batch_size: dynamic (", where_set({"dynamic_batch.mode", "batch_size"}),
                              "); set batch_size: dynamic or dynamic_batch.mode: memory"));
  }
  if (d.max < d.min) {
    errors_.push_back(str_cat(full_path("dynamic_batch.max"), ": must be >= dynamic_batch.min (",
                              d.min, "), got ", d.max, " (",
                              where_set({"dynamic_batch.max", "dynamic_batch.min"}), ")"));
  } else if (d.initial < d.min || d.initial > d.max) {
    errors_.push_back(str_cat(
        full_path("dynamic_batch.initial"), ": must be within [dynamic_batch.min, ",
        "dynamic_batch.max] = [", d.min, ", ", d.max, "], got ", d.initial, " (",
        where_set({"dynamic_batch.initial", "dynamic_batch.min", "dynamic_batch.max"}), ")"));
  }
}

void Loader::check_master_weights() {
  const MixedPrecisionSection& m = config_->mixed_precision;
  if (m.master_weights_usable()) return;
  // The key that makes bf16 weights impossible, and where each of the two was written.
  const std::string other = !m.enabled ? "mixed_precision.enabled" : "mixed_precision.dtype";
  const std::string value = !m.enabled ? "false" : m.dtype;
  errors_.push_back(str_cat(
      full_path("mixed_precision.master_weights"), ": bf16 needs mixed_precision.enabled: true and ",
      "mixed_precision.dtype: bf16 (the weights are used as bf16 only under bf16 autocast), got ", other, ": ",
      value, " (master_weights set at ", where_set({"mixed_precision.master_weights"}), ", ", other, " at ",
      where_set({other}), ")"));
}

// ---- the document and its overrides ---------------------------------------------------------

Error config_error(const std::string& message, const char* hint = kHelpHint) {
  return Error(ErrorCode::kConfig, message, hint);
}

YAML::Node parse_yaml(const std::string& text, const std::string& origin) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw config_error(origin + ": not valid YAML: " + e.msg + " (" + mark_text(origin, e.mark) +
                       ")");
  }
}

// The file's root map; checks it holds exactly the `tele_tron:` key.
YAML::Node parse_document(const std::string& text, const std::string& origin) {
  YAML::Node doc = parse_yaml(text, origin);
  std::string expected = "a map with the root key `tele_tron:`";
  if (doc.IsNull()) throw config_error(origin + ": the file is empty; expected " + expected);
  if (!doc.IsMap())
    throw config_error(origin + ": expected " + expected + ", got " + describe(doc) + " (" +
                       mark_text(origin, doc.Mark()) + ")");
  int roots = 0;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    std::string name = it->first.IsScalar() ? it->first.Scalar() : "?";
    if (name == kRoot && ++roots == 1) continue;
    if (name == kRoot)
      throw config_error(
          str_cat(kRoot, ": duplicate root key (", mark_text(origin, it->first.Mark()), ")"));
    std::string advice = nearest_name(name, {kRoot}).empty() ? "every key lives under `tele_tron:`"
                                                             : "did you mean `tele_tron`?";
    throw config_error(name + ": unknown root key; " + advice + " (" +
                       mark_text(origin, it->first.Mark()) + ")");
  }
  YAML::Node root = child(doc, kRoot);
  if (!root.IsDefined()) throw config_error(origin + ": no `tele_tron:` root key");
  if (!root.IsMap() && !root.IsNull())
    throw config_error(str_cat(kRoot, ": expected a map of keys (", join(child_names(""), ", "),
                               "), got ", describe(root), " (", mark_text(origin, root.Mark()),
                               ")"));
  return doc;
}

// Sets `path` (a.b.c below the root) to `value`, creating or replacing maps on the way:
// an override wins over whatever the file had there.
void merge_value(YAML::Node doc, const std::vector<std::string>& parts, const YAML::Node& value) {
  // yaml-cpp's `a = b` overwrites what `a` refers to; reset() only re-points the handle.
  YAML::Node node;
  node.reset(doc[kRoot]);
  if (node.IsNull()) {  // `tele_tron:` with nothing below
    doc[kRoot] = YAML::Node(YAML::NodeType::Map);
    node.reset(doc[kRoot]);
  }
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (!node[parts[i]].IsMap()) node[parts[i]] = YAML::Node(YAML::NodeType::Map);
    YAML::Node next;
    next.reset(node[parts[i]]);
    node.reset(next);
  }
  node[parts.back()] = value;
}

// "optimizer.lr=2e-5" (or "tele_tron.optimizer.lr=2e-5"): the value is YAML, like in the file.
void merge_set(YAML::Node doc, Loader* loader, const std::string& arg) {
  std::string origin = "--set " + arg;
  size_t eq = arg.find('=');
  std::string key = trim(arg.substr(0, eq));
  if (key.rfind(std::string(kRoot) + ".", 0) == 0) key.erase(0, std::strlen(kRoot) + 1);
  std::vector<std::string> parts = split(key, '.');
  if (eq == std::string::npos || key.empty() || contains(parts, ""))
    throw config_error(str_cat(
        "--set expects key=value with a dotted key such as optimizer.lr=2e-5, got `", arg, "`"));
  YAML::Node value = parse_yaml(trim(arg.substr(eq + 1)), origin);
  merge_value(doc, parts, value);
  loader->set_override_origin(key, origin);
}

// TELETRON_GRAPH_RETRY / TELETRON_GRAPH_THRESHOLD; an empty variable counts as unset.
void merge_environment(YAML::Node doc, Loader* loader) {
  const char* variables[2][2] = {{"TELETRON_GRAPH_RETRY", "cuda_graph.retry"},
                                 {"TELETRON_GRAPH_THRESHOLD", "cuda_graph.threshold"}};
  for (const auto& variable : variables) {
    const char* text = std::getenv(variable[0]);
    if (!text || !*text) continue;
    merge_value(doc, split(variable[1], '.'), YAML::Node(std::string(text)));
    loader->set_override_origin(variable[1],
                                str_cat("environment variable ", variable[0], "=", text));
  }
}

}  // namespace

Config load_config_text(const std::string& text, const std::string& origin,
                        const std::vector<std::string>& overrides) {
  YAML::Node doc = parse_document(text, origin);
  Config config;
  Loader loader(&config, origin);
  merge_environment(doc, &loader);  // file < environment < --set
  for (const std::string& arg : overrides) merge_set(doc, &loader, arg);
  YAML::Node root = child(doc, kRoot);
  if (root.IsMap()) loader.walk(root, "");  // null: `tele_tron:` alone keeps every default
  loader.throw_if_errors();
  loader.check_dynamic_batch();
  loader.check_master_weights();
  loader.throw_if_errors();
  return config;
}

bool config_key_set(const Config& config, const std::string& path) {
  for (const ConfigSetKey& key : config.set_keys) {
    if (key.path == path) return true;
  }
  return false;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw config_error("cannot read config file " + path + " (it is a folder)", kFileHint);
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw config_error("cannot read config file " + path + " (" + std::strerror(errno) + ")",
                       kFileHint);
  std::stringstream text;
  text << in.rdbuf();
  Config config = load_config_text(text.str(), path, overrides);
  std::string folder = std::filesystem::path(path).parent_path().string();
  config.source_path = folder.empty() ? "." : folder;
  return config;
}

}  // namespace tt
