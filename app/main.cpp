// teletron entry point: parse, run, and the one place where errors become messages and exit codes.
#include <c10/util/Exception.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "app/cli.h"
#include "core/errors.h"

namespace {

int report(const tt::Error& error) {
  std::cout.flush();
  std::cerr << tt::format_error(error) << std::endl;
  return tt::error_exit_code(error.code());
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_pattern("%H:%M:%S %^%l%$ %v");
  try {
    return tt::run_cli(argc, argv);
  } catch (const tt::Error& error) {
    return report(error);
  } catch (const c10::OutOfMemoryError& error) {
    return report(tt::Error(tt::ErrorCode::kMemory, "out of memory: " + tt::first_line(error.what_without_backtrace())));
  } catch (const c10::Error& error) {
    // A bug report wants the stack: with TELETRON_BACKTRACE=1 (and TORCH_SHOW_CPP_STACKTRACES=1,
    // which makes LibTorch record it) the whole LibTorch message goes to stderr first.
    if (const char* trace = std::getenv("TELETRON_BACKTRACE"); trace != nullptr && std::string(trace) == "1")
      std::cerr << error.what() << std::endl;
    return report(tt::Error(tt::ErrorCode::kInternal, "LibTorch: " + tt::first_line(error.what_without_backtrace())));
  } catch (const std::filesystem::filesystem_error& error) {
    return report(tt::Error(tt::ErrorCode::kIo, error.what()));
  } catch (const std::bad_alloc&) {
    return report(tt::Error(tt::ErrorCode::kMemory, "out of host memory"));
  } catch (const std::exception& error) {
    return report(tt::Error(tt::ErrorCode::kInternal, error.what()));
  }
}
