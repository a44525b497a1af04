#!/usr/bin/env bash
# `make demo`: the whole pipeline on bundled examples, in about a minute on 2 CPU cores.
#   capture a 2-rank DDP training run -> convert -> validate -> replay -> report, timeline, graph,
#   then the front ends: a generated 8-rank GPT workload, and the bundled ASTRA-sim ring trace.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${DEMO_OUT:-out/demo}
rm -rf "$OUT" && mkdir -p "$OUT"
step() { printf '\n== %s\n' "$*"; }

step "capture: DDP over gloo on 2 ranks (examples/ddp.py), steps 2-5 of 10"
trace-capture --out "$OUT/run" --active 4 -- torchrun --standalone --nproc-per-node 2 examples/ddp.py --steps 10

step "convert: host + device traces -> Chakra ET per rank + comm_group.json (validated)"
trace-convert "$OUT/run" -o "$OUT/et"

step "validate and summarise"
trace-validate "$OUT/et" --stats

step "replay as captured (communication calibrated from the capture, recorded host timeline); compare with the measured step time"
trace-replay "$OUT/et" --manifest "$OUT/run/manifest.json" --as-captured \
    --out "$OUT/result.json" --timeline "$OUT/timeline.json.gz"

step "visualize: HTML report (measured vs simulated), Perfetto timeline, dependency graph"
trace-visualize report "$OUT/run" "$OUT/result.json" -o "$OUT/report.html"
trace-visualize graph "$OUT/et" --rank 0 -o "$OUT/rank0.graphml"

step "front end: a generated 8-rank GPT workload (tp=2, dp=2, pp=2), replayed on a 2-level network"
trace-convert generate --config examples/workloads/gpt_8rank.yml -o "$OUT/gpt8"
trace-replay "$OUT/gpt8" --network examples/configs/ring4_switch2.yml | tail -12

step "the bundled ASTRA-sim ring all-reduce (8 ranks of send/recv): validate and replay"
trace-validate traces/examples/custom_ring_allreduce | tail -1
trace-replay traces/examples/custom_ring_allreduce --network examples/configs/ring4_switch2.yml | head -3

printf '\nDone. Open %s/report.html in a browser and %s/timeline.json.gz in https://ui.perfetto.dev\n' "$OUT" "$OUT"
