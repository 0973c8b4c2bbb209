// teletron entry point: parse, run, and the one place where errors become messages and exit codes.
#include <spdlog/spdlog.h>

#include <iostream>

#include "app/cli.h"
#include "core/errors.h"

int main(int argc, char** argv) {
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
