// teletron entry point: parse, run, and the one place where errors become messages and exit codes.
#include <execinfo.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <exception>
#include <iostream>

#include "app/cli.h"
#include "core/errors.h"

namespace {

// An exception that leaves a destructor or a thread ends the process through std::terminate, past
// main's catch: it still says what it was and where it was thrown from (the executable is linked
// with -rdynamic, so teletron's own frames have names) before the abort.
[[noreturn]] void explain_terminate() {
  std::cout.flush();
  std::cerr << "TT_ERR_INTERNAL: teletron is terminating";
  if (const std::exception_ptr current = std::current_exception()) {
    try {
      std::rethrow_exception(current);
    } catch (const std::exception& error) {
      std::cerr << " on an exception nothing caught: " << error.what();
    } catch (...) {
      std::cerr << " on an exception nothing caught (not a std::exception)";
    }
  }
  std::cerr << "\nbacktrace:" << std::endl;
  void* frames[64];
  const int count = backtrace(frames, 64);
  backtrace_symbols_fd(frames, count, 2);
  std::abort();
}

}  // namespace

int main(int argc, char** argv) {
  std::set_terminate(explain_terminate);
  spdlog::set_pattern("%H:%M:%S %^%l%$ %v");
  try {
    return tt::run_cli(argc, argv);
  } catch (...) {
    const tt::Error error = tt::error_of_current_exception();
    std::cout.flush();
    std::cerr << tt::format_error(error) << std::endl;
    return tt::error_exit_code(error.code());
  }
}
