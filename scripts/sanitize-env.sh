# Sourced by scripts/fuzz.sh and scripts/sanitize-check.sh: the options every program of
# build-asan/ (unit tests, fuzz targets) runs under. A report of either sanitizer ends
# the process with a stack; the suppressions in tests/sanitize/ hold only reports about
# code glint does not build (each entry says why).
_glint_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:check_initialization_order=1:print_suppressions=0}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$_glint_root/tests/sanitize/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-suppressions=$_glint_root/tests/sanitize/ubsan.supp:print_stacktrace=1:halt_on_error=1:print_suppressions=0}
export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$(command -v llvm-symbolizer || true)}
# One thread per process: two fuzz targets (or test processes) share the two cores.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
unset _glint_root
