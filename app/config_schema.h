// The schema of the teletron YAML file: one row per key (path below `tele_tron:`, value kind,
// allowed range or choices, whether its feature is built yet, which commands read it, a one-line
// meaning, where it lives in tt::Config). app/config.cpp walks this one table to validate and to
// suggest the nearest key, app/config_print.cpp to print, app/config_use.cpp to warn about keys
// that do nothing for a command and to write the reference (`teletron config --explain`,
// docs/CONFIG.md), so a new key is one new row here plus one field in app/config.h.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "app/config.h"

namespace tt {

enum class ConfigKind {
  kInt,
  kFloat,
  kBool,
  kString,  // any scalar; `choices` restricts it to an enum
  kOptInt,  // the kOpt* kinds accept `null` (= unset)
  kOptFloat,
  kOptBool,
  kOptString,
  kOptIntList,     // model.rope_axes_dim: null or a list of `list_size` integers
  kStringList,     // a list of strings, possibly empty (model.lora.targets)
  kBatchSize,      // an integer >= 1 or `dynamic`
  kIntOrAuto,      // an integer within `range`, or `auto` (stored as 0, outside the range)
  kCheckpointing,  // false | true | {every_n: k} | auto
  kBetas,          // [beta1, beta2]
  kBuckets,        // a non-empty list of {frames, height, width}
};

/// A closed/open interval; infinite bounds mean "no bound".
struct ConfigRange {
  double lo, hi;
  bool lo_open, hi_open;
};

inline constexpr double kConfigInf = std::numeric_limits<double>::infinity();
inline constexpr ConfigRange kConfigUnbounded = {-kConfigInf, kConfigInf, false, false};

// Who reads a key (ConfigField::read_by): one bit per command that takes a config, `train` split
// by data.source. `teletron config` answers for `train`; bench-vae, bench-video and probe take no
// config, so they read nothing. A key no bit names is read by nothing: its `not_yet` says why.
inline constexpr unsigned kReadTrainLatents = 1u << 0;  // train with data.source: latents
inline constexpr unsigned kReadTrainVideo = 1u << 1;    // train with data.source: video
inline constexpr unsigned kReadBench = 1u << 2;
inline constexpr unsigned kReadPreprocess = 1u << 3;
inline constexpr unsigned kReadValidateData = 1u << 4;
inline constexpr unsigned kReadSynthData = 1u << 5;
inline constexpr unsigned kReadModelCheck = 1u << 6;
inline constexpr unsigned kReadEncodeText = 1u << 7;
inline constexpr unsigned kReadSample = 1u << 8;
inline constexpr unsigned kReadTrain = kReadTrainLatents | kReadTrainVideo;
inline constexpr int kReadBitCount = 9;

struct ConfigField {
  const char* path;  // below the root, e.g. "optimizer.lr"
  ConfigKind kind;
  void* (*at)(Config&);                  // the field this key fills (special kinds: see their rows)
  ConfigRange range = kConfigUnbounded;  // numbers, and the entries of list kinds
  const char* choices = nullptr;         // "tiny|1b|13b": the allowed values of a string
  const char* aliases = nullptr;         // "sigmoid=logit_normal,true=on": accepted spellings
  const char* not_yet = nullptr;  // the feature that makes this key do something, when not built
  const char* not_yet_value = nullptr;  // only this value is not built (nullptr: any value)
  const char* instead = nullptr;        // with not_yet_value: what runs when that value is given
  int list_size = 0;                    // kOptIntList: the required length
  unsigned read_by = 0;                 // kRead* bits: the commands this key does something for
  const char* doc = "";                 // one line: what the key means
};

/// Every key, in the order of docs/CONFIG.md (the order config_to_yaml prints them in).
std::span<const ConfigField> config_fields();

/// The row of `path` (below the root, e.g. "optimizer.lr"), nullptr when there is none.
const ConfigField* find_config_field(const std::string& path);

/// The value of `field` in `config` as config_to_yaml writes it after `key:` (the buckets list in
/// flow style: [{frames: 33, height: 480, width: 832}]).
std::string config_value_text(const ConfigField& field, const Config& config);

/// How scalars are spelled, shared by the loader (config.cpp) and the printer (config_print.cpp).
namespace config_text {
std::vector<std::string> split(const std::string& text, char sep);
std::string join(const std::vector<std::string>& parts, const std::string& sep);
/// Shortest text that reads back to the same double, always with a '.' so YAML 1.1 readers
/// (PyYAML) see a float: 1e-05 -> 1.0e-05, 7 -> 7.0.
std::string format_double(double value);
/// Whole-text parses (a leading '+' allowed): "1.5" is not an int, "inf" is not a float.
bool parse_int(std::string text, int64_t* out);
bool parse_float(std::string text, double* out);
/// YAML 1.1 booleans, as yaml-cpp reads them (true/false, yes/no, on/off).
bool parse_bool(const std::string& text, bool* out);
/// "> 0", ">= 1", "in [0, 1)"; "" when unbounded.
std::string range_text(const ConfigRange& range);
/// The entry of `names` closest to `name` (a typo such as lrr/widht, or a prefix), "" if none is.
std::string nearest_name(const std::string& name, const std::vector<std::string>& names);
}  // namespace config_text

}  // namespace tt
