#!/usr/bin/env bash
# Installs everything kaiwu_infer needs on a fresh Debian machine and builds the package.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBS=(build-essential cmake ninja-build libprotobuf-dev protobuf-compiler libeigen3-dev libgtest-dev)
missing=()
for p in "${DEBS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

python3 -m pip install -q --upgrade pip
# torch is pinned to the CPU build; the test/demo extras pull onnxruntime, gymnasium, ray, ...
python3 -m pip install -q "torch==2.13.0"
# The C++ tests are built in the same (kept) build tree, so the test script need not compile twice.
python3 -m pip install -q ".[test]" -Ccmake.define.KAIWU_BUILD_TESTS=ON
