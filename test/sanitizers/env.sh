# Runtime options of the ASan + UBSan build (TELETRON_SANITIZE=address,undefined): sourced by
# scripts/ci.sh before the sanitizer ctest run and the fuzzers. Every report is fatal; the
# suppression files next to this one list only third-party code, each entry with its reason, and
# README.md here explains each option that differs from the sanitizers' defaults.
_tt_san_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:suppressions=$_tt_san_dir/asan.supp:symbolize=1"
export LSAN_OPTIONS="suppressions=$_tt_san_dir/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$_tt_san_dir/ubsan.supp:print_suppressions=0"
# Symbolised stacks: Debian's llvm-14 package puts llvm-symbolizer off PATH (the unversioned
# /usr/bin link comes with the "llvm" package).
if ! command -v llvm-symbolizer >/dev/null && [ -x /usr/lib/llvm-14/bin/llvm-symbolizer ]; then
  export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer
fi
unset _tt_san_dir
