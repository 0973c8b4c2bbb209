// The `teletron` command line (CLI11): every subcommand, --version, --help; unknown commands are usage errors.
#pragma once

namespace tt {

/// Parses argv and runs the chosen subcommand. Returns the process exit status; throws tt::Error
/// (main() turns it into the TT_ERR_* line and exit code).
int run_cli(int argc, char** argv);

}  // namespace tt
