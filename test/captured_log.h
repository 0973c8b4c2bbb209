// tt::test::CapturedLog, apart from test_util.h so that a test can use it without LibTorch's
// headers (their logging header defines a CHECK and stream operators that clash with Catch's).
#pragma once

#include <memory>
#include <sstream>
#include <string>

namespace spdlog {
class logger;
}

namespace tt::test {

/// Routes spdlog's default logger into a string for its scope (level and message per line).
class CapturedLog {
 public:
  CapturedLog();
  ~CapturedLog();
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;
  std::string text() const { return out_->str(); }

 private:
  std::shared_ptr<std::ostringstream> out_;
  std::shared_ptr<spdlog::logger> previous_;  // the default logger before
};

}  // namespace tt::test
