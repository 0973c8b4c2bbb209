// config_to_yaml: prints a resolved tt::Config as YAML rooted at `tele_tron:`, every key of the
// schema (app/config_schema.cpp) in its order, unset optional keys as `null`. What
// `teletron config FILE` shows and what a run folder's config.resolved.yaml holds; the loader
// reads it back to the same Config.
#include <string>
#include <vector>

#include "app/config.h"
#include "app/config_schema.h"
#include "core/errors.h"

namespace tt {
namespace {

using config_text::format_double;
using config_text::join;
using config_text::parse_bool;
using config_text::parse_float;
using config_text::parse_int;
using config_text::split;

constexpr const char* kPlainChars =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./+-";

// Plain when any YAML reader reads it back as this string (not as null, a boolean or a number),
// else double-quoted.
std::string quote_if_needed(const std::string& text) {
  int64_t as_int = 0;
  double as_float = 0;
  bool as_bool = false;
  bool plain = !text.empty() && text.find_first_not_of(kPlainChars) == std::string::npos &&
               text[0] != '-' && text[0] != '.';
  const char* special[] = {"null", "Null", "NULL", "y", "Y", "n", "N"};
  for (const char* word : special) plain = plain && text != word;
  plain = plain && !parse_bool(text, &as_bool) && !parse_int(text, &as_int) &&
          !parse_float(text, &as_float);
  if (plain) return text;
  const char* hex = "0123456789abcdef";
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += std::string("\\") + c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += str_cat("\\x", hex[c >> 4], hex[c & 15]);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string int_list_text(const std::vector<int64_t>& values) {
  std::vector<std::string> parts;
  for (int64_t v : values) parts.push_back(std::to_string(v));
  return "[" + join(parts, ", ") + "]";
}

// The value of a key as it follows `key:` on its line ("" for the block-style buckets list).
std::string value_text(const ConfigField& field, Config& config) {
  void* at = field.at(config);
  switch (field.kind) {
    case ConfigKind::kInt:
      return std::to_string(*static_cast<int64_t*>(at));
    case ConfigKind::kFloat:
      return format_double(*static_cast<double*>(at));
    case ConfigKind::kBool:
      return *static_cast<bool*>(at) ? "true" : "false";
    case ConfigKind::kString:
      return quote_if_needed(*static_cast<std::string*>(at));
    case ConfigKind::kBuckets:
      return "";
    case ConfigKind::kBatchSize:
      return config.batch_size_dynamic ? "dynamic" : std::to_string(config.batch_size);
    case ConfigKind::kIntOrAuto: {
      const int64_t v = *static_cast<int64_t*>(at);
      return v == 0 ? "auto" : std::to_string(v);
    }
    case ConfigKind::kCheckpointing: {
      int64_t n = *static_cast<int64_t*>(at);
      if (n == kCheckpointingAuto) return "auto";
      return n == 0 ? "false" : n == 1 ? "true" : str_cat("{every_n: ", n, "}");
    }
    case ConfigKind::kBetas: {
      auto* optimizer = static_cast<OptimizerSection*>(at);
      return "[" + format_double(optimizer->beta1) + ", " + format_double(optimizer->beta2) + "]";
    }
    case ConfigKind::kOptInt: {
      auto& v = *static_cast<std::optional<int64_t>*>(at);
      return v ? std::to_string(*v) : "null";
    }
    case ConfigKind::kOptFloat: {
      auto& v = *static_cast<std::optional<double>*>(at);
      return v ? format_double(*v) : "null";
    }
    case ConfigKind::kOptBool: {
      auto& v = *static_cast<std::optional<bool>*>(at);
      return v ? (*v ? "true" : "false") : "null";
    }
    case ConfigKind::kOptString: {
      auto& v = *static_cast<std::optional<std::string>*>(at);
      return v ? quote_if_needed(*v) : "null";
    }
    case ConfigKind::kOptIntList: {
      auto& v = *static_cast<std::optional<std::vector<int64_t>>*>(at);
      return v ? int_list_text(*v) : "null";
    }
    case ConfigKind::kStringList: {
      std::vector<std::string> parts;
      for (const std::string& v : *static_cast<std::vector<std::string>*>(at)) parts.push_back(quote_if_needed(v));
      return "[" + join(parts, ", ") + "]";
    }
  }
  return "null";
}

std::string indent(size_t depth) { return std::string(2 * depth, ' '); }

}  // namespace

std::string config_value_text(const ConfigField& field, const Config& original) {
  Config config = original;  // the schema's accessors take a mutable Config
  if (field.kind != ConfigKind::kBuckets) return value_text(field, config);
  std::vector<std::string> buckets;
  for (const Bucket& b : config.data.buckets)
    buckets.push_back(str_cat("{frames: ", b.frames, ", height: ", b.height, ", width: ", b.width, "}"));
  return "[" + join(buckets, ", ") + "]";
}

std::string config_to_yaml(const Config& original) {
  Config config = original;  // the schema's accessors take a mutable Config
  std::string out = "tele_tron:\n";
  std::vector<std::string> open;  // the sections of the previous key
  for (const ConfigField& field : config_fields()) {
    std::vector<std::string> sections = split(field.path, '.');
    std::string name = sections.back();
    sections.pop_back();
    size_t common = 0;
    while (common < open.size() && common < sections.size() && open[common] == sections[common])
      ++common;
    for (size_t i = common; i < sections.size(); ++i) out += indent(i + 1) + sections[i] + ":\n";
    open = sections;
    size_t depth = sections.size() + 1;
    std::string value = value_text(field, config);
    out += indent(depth) + name + ":" + (value.empty() ? "" : " " + value) + "\n";
    if (field.kind != ConfigKind::kBuckets) continue;
    for (const Bucket& b : config.data.buckets)
      out += str_cat(indent(depth + 1), "- {frames: ", b.frames, ", height: ", b.height,
                     ", width: ", b.width, "}\n");
  }
  return out;
}

}  // namespace tt
