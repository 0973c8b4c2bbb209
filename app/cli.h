// The `teletron` command line (CLI11): train, config, synth-data, --version, --help.
#pragma once

namespace tt {

/// Parses argv and runs the chosen subcommand. Returns the process exit status; throws tt::Error
/// (main() turns it into the TT_ERR_* line and exit code).
int run_cli(int argc, char** argv);

}  // namespace tt
