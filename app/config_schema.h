// The schema of the teletron YAML file: one row per key (path below `tele_tron:`, value kind,
// allowed range or choices, whether its feature is built yet, where it lives in tt::Config).
// app/config.cpp walks this one table to validate and to suggest the nearest key, and
// app/config_print.cpp to print, so a new key is one new row here plus one field in app/config.h.
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
  kBatchSize,      // an integer >= 1 or `dynamic`
  kCheckpointing,  // false | true | {every_n: k}
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

struct ConfigField {
  const char* path;  // below the root, e.g. "optimizer.lr"
  ConfigKind kind;
  void* (*at)(Config&);                  // the field this key fills (special kinds: see their rows)
  ConfigRange range = kConfigUnbounded;  // numbers, and the entries of list kinds
  const char* choices = nullptr;         // "tiny|1b|13b": the allowed values of a string
  const char* aliases = nullptr;         // "sigmoid=logit_normal,true=on": accepted spellings
  const char* not_yet = nullptr;  // the feature that makes this key do something, when not built
  const char* not_yet_value = nullptr;  // only this value is not built (nullptr: any value)
  int list_size = 0;                    // kOptIntList: the required length
};

/// Every key, in CONFIG.md order (the order config_to_yaml prints them in).
std::span<const ConfigField> config_fields();

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
/// The entry of `names` closest to `name` (a typo such as lrr/widht, or a prefix), "" if none is.
std::string nearest_name(const std::string& name, const std::vector<std::string>& names);
}  // namespace config_text

}  // namespace tt
