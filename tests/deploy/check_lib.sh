# Sourced by the offline deployment checks (deploy_test.sh, collect_runtime_test.sh): the tree's
# paths, a scratch folder removed at exit, and failures counted instead of stopping at the first.
#   ROOT  the project; BIN  the built binaries ($PS_BIN_DIR, else build/bin); WORK  scratch
#   pass NAME / fail NAME   report one check; finish NAME   exits 1 when any check failed
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${PS_BIN_DIR:-$ROOT/build/bin}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
failures=0
pass() { echo "PASS  $1"; }
fail() { echo "FAIL  $1"; failures=$((failures + 1)); }
finish() {
  if ((failures > 0)); then
    echo "$1: $failures check(s) failed"
    exit 1
  fi
}
