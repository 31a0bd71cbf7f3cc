#!/usr/bin/env bash
# Runs the whole test suite: pytest on the installed package, then the C++
# tests (Release, then AddressSanitizer + UndefinedBehaviorSanitizer) with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
PYBIND11_DIR=$(python3 -c "import pybind11; print(pybind11.get_cmake_dir())")

echo "== pytest"
KAIWU_REQUIRE_ENGINE=1 python3 -m pytest tests/python -q -p no:cacheprovider

echo "== ctest (Release)"
# scripts/setup.sh builds the GoogleTest binary in pip's build tree (build/<wheel tag>);
# without it, build the C++ tests here.
RELEASE_DIR=$(dirname "$(ls build/cp3*/kaiwu_tests 2>/dev/null | head -n 1)" 2>/dev/null || true)
if [ -z "$RELEASE_DIR" ] || [ ! -x "$RELEASE_DIR/kaiwu_tests" ]; then
  RELEASE_DIR=build/ctest
  cmake -S . -B "$RELEASE_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKAIWU_BUILD_TESTS=ON \
    -DKAIWU_BUILD_PYTHON=OFF -Dpybind11_DIR="$PYBIND11_DIR" >/dev/null
  cmake --build "$RELEASE_DIR" -j "$JOBS"
fi
ctest --test-dir "$RELEASE_DIR" --output-on-failure -j "$JOBS"

echo "== ctest (address,undefined sanitizers)"
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O1 -DKAIWU_BUILD_TESTS=ON \
  -DKAIWU_BUILD_PYTHON=OFF -DKAIWU_SANITIZE=address,undefined >/dev/null
cmake --build build/asan -j "$JOBS"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build/asan --output-on-failure -j "$JOBS"
