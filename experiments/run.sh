#!/usr/bin/env bash
# One command for a staleness sweep: installs what it needs (the project's packages and build,
# like scripts/setup.sh, and Debian's python3-matplotlib for the plots), then runs the sweep.
#   experiments/run.sh                                  # the quick sweep (under 10 minutes)
#   experiments/run.sh experiments/configs/full.json    # everything, longer
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
if ! /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    python3-matplotlib
fi
exec /usr/bin/python3 experiments/run_sweep.py "$@"
