#!/bin/sh
# Build the FeederV3 drain driver against ASTRA-sim's Chakra sources (optional; nothing in
# chakra-tools needs it). Usage:
#
#   bench/feederv3_drain/build.sh CHAKRA_DIR [OUT]
#
# CHAKRA_DIR: a Chakra checkout with FeederV3, e.g. ASTRA-sim's extern/graph_frontend/chakra
# (astra-sim 518bd51 pins astra-sim/chakra f37c2bb); it needs src/feeder_v3/,
# src/third_party/utils/ and schema/protobuf/et_def.proto. OUT: the binary (default
# build/feederv3_drain beside this script). Needs g++ (C++17), protoc and libprotobuf
# (Debian: protobuf-compiler libprotobuf-dev). Compiled with -O3 as ASTRA-sim's Release build.
set -eu
if [ $# -lt 1 ] || [ ! -d "$1/src/feeder_v3" ]; then
  echo "usage: $0 CHAKRA_DIR [OUT]  (CHAKRA_DIR/src/feeder_v3 must exist)" >&2
  exit 2
fi
CHAKRA=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${2:-$HERE/build/feederv3_drain}
GEN=$(dirname "$OUT")/gen
mkdir -p "$GEN"
protoc et_def.proto --proto_path="$CHAKRA/schema/protobuf" --cpp_out="$GEN"
g++ -std=c++17 -O3 -o "$OUT" \
  -I"$CHAKRA" -I"$GEN" -I"$CHAKRA/src/third_party/utils" \
  "$HERE/drain.cpp" "$CHAKRA"/src/feeder_v3/*.cpp "$CHAKRA/src/third_party/utils/protoio.cc" \
  "$GEN/et_def.pb.cc" -lprotobuf -lpthread
echo "$OUT"
