#!/usr/bin/env bash
# `make demo`: the pipeline end to end on a bundled example. Grows with each stage.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${DEMO_OUT:-out/demo}
rm -rf "$OUT" && mkdir -p "$OUT"

echo "== validate and summarise the bundled ASTRA-sim ring all-reduce (8 ranks, send/recv)"
trace-validate traces/examples/custom_ring_allreduce --stats | tail -6
