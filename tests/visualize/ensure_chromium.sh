#!/bin/sh
# Install headless Chromium for the report tests (tests/visualize/test_report.py) and Open MPI's
# mpirun for the MPI launcher test (tests/capture/test_launchers.py) from the Debian packages.
# Idempotent: does nothing when both are already there.
# Graphviz (`dot`) is optional; set WITH_GRAPHVIZ=1 to install it too.
set -eu
need=""
[ -x /usr/bin/chromium ] || need="chromium"
command -v mpirun >/dev/null 2>&1 || need="$need openmpi-bin"
if [ "${WITH_GRAPHVIZ:-0}" = "1" ] && ! command -v dot >/dev/null 2>&1; then
    need="$need graphviz"
fi
[ -z "$need" ] && exit 0
SUDO=""
[ "$(id -u)" = "0" ] || SUDO="sudo"
$SUDO apt-get update
# shellcheck disable=SC2086
$SUDO apt-get install -y --no-install-recommends $need
