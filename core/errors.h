// teletron's error model: every user-facing failure is a tt::Error carrying one TT_ERR_* code,
// a message that says what and where, and a hint. Library code throws; main() catches once,
// prints the code's name first on stderr and exits with the code's exit status.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace tt {

enum class ErrorCode {
  kConfig,      // bad config file, key, value or command line
  kData,        // dataset or manifest problem (missing file, wrong tensor shape/dtype)
  kDecode,      // a video cannot be decoded
  kMemory,      // out of (GPU) memory
  kGraph,       // CUDA-graph capture or replay failed
  kSync,        // a failed stream/event synchronisation or a cross-stream hazard
  kNan,         // non-finite loss or gradients beyond what loss scaling absorbs
  kCheckpoint,  // checkpoint missing, incomplete or not matching the model
  kIo,          // file system errors (permissions, disk full)
  kInternal,    // a broken invariant: a teletron bug
};

inline constexpr int kErrorCodeCount = 10;

/// "TT_ERR_CONFIG", ...
const char* error_name(ErrorCode code);
/// Distinct process exit status per code, between 2 and 30.
int error_exit_code(ErrorCode code);
/// The hint printed when the thrower gave none.
const char* error_default_hint(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message, std::string hint = "");
  ErrorCode code() const { return code_; }
  /// The hint given at the throw site, or the code's default hint.
  const std::string& hint() const { return hint_; }

 private:
  ErrorCode code_;
  std::string hint_;
};

/// "TT_ERR_X: message\n  hint: ..." — the text main() writes to stderr.
std::string format_error(const Error& error);

/// The tt::Error an exception in flight stands for (call inside a catch block): a tt::Error as it
/// is; LibTorch's out-of-memory TT_ERR_MEMORY; other LibTorch errors TT_ERR_INTERNAL (with
/// TELETRON_BACKTRACE=1 their whole message, stack included, goes to stderr first); file-system
/// errors TT_ERR_IO; host allocation failures TT_ERR_MEMORY; anything else TT_ERR_INTERNAL.
/// main() and the bench's rows report errors through it.
Error error_of_current_exception();

/// The first line of a message (LibTorch's carry a C++ backtrace after it).
inline std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

/// Concatenates anything streamable into one string.
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace tt

/// User or data error: throws tt::Error(code, message) when cond is false.
#define TT_CHECK(cond, code, ...)                                    \
  do {                                                               \
    if (!(cond)) throw ::tt::Error((code), ::tt::str_cat(__VA_ARGS__)); \
  } while (0)

/// Same, with an explicit hint as the last argument.
#define TT_CHECK_HINT(cond, code, hint, ...)                                     \
  do {                                                                           \
    if (!(cond)) throw ::tt::Error((code), ::tt::str_cat(__VA_ARGS__), (hint)); \
  } while (0)

/// Invariant: a failure is a teletron bug (TT_ERR_INTERNAL) with file and line.
#define TT_ASSERT(cond, ...)                                                          \
  do {                                                                                \
    if (!(cond))                                                                      \
      throw ::tt::Error(::tt::ErrorCode::kInternal,                                   \
                        ::tt::str_cat("assertion `" #cond "` failed at ", __FILE__, ":", \
                                      __LINE__, " ", ##__VA_ARGS__));                 \
  } while (0)
