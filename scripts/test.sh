#!/usr/bin/env bash
# Runs the whole test suite: pytest on the installed package, then the C++
# tests (Release, then AddressSanitizer + UndefinedBehaviorSanitizer) with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
PYBIND11_DIR=$(python3 -c "import pybind11; print(pybind11.get_cmake_dir())")

echo "== pytest"
python3 -m pytest tests/python -q -p no:cacheprovider

echo "== ctest (Release)"
cmake -S . -B build/ctest -G Ninja -DCMAKE_BUILD_TYPE=Release -DKAIWU_BUILD_TESTS=ON \
  -DKAIWU_BUILD_PYTHON=OFF -Dpybind11_DIR="$PYBIND11_DIR" >/dev/null
cmake --build build/ctest -j "$JOBS"
ctest --test-dir build/ctest --output-on-failure -j "$JOBS"

echo "== ctest (address,undefined sanitizers)"
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O1 -DKAIWU_BUILD_TESTS=ON \
  -DKAIWU_BUILD_PYTHON=OFF -DKAIWU_SANITIZE=address,undefined >/dev/null
cmake --build build/asan -j "$JOBS"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build/asan --output-on-failure -j "$JOBS"
