#!/usr/bin/env bash
# ThreadSanitizer over the C++ concurrency tests: one session run from many
# threads, refits while runs are in flight, the inference server's batching
# loop (actors joining and leaving, versions added, refitted and removed, close
# with requests in flight) and its shared-memory slots (the kernels' thread pool
# runs inside all of them).
#
# Too slow for CI's 25-minute budget on 2 cores (a -O1 TSan build of the whole
# engine), so it runs on its own:   bash scripts/test_tsan.sh [gtest filter]
# (default filter below; "all" runs every C++ test under TSan). Any data race,
# lock-order inversion or thread leak fails the run (halt_on_error=1).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
FILTER=${1:-'Concurrency*:Server*'}
[ "$FILTER" = "all" ] && FILTER='*'
PYBIND11_DIR=$(python3 -c "import pybind11; print(pybind11.get_cmake_dir())" 2>/dev/null || true)

LAUNCHER=()
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
  -DKAIWU_BUILD_TESTS=ON -DKAIWU_BUILD_PYTHON=OFF -DKAIWU_SANITIZE=thread \
  ${PYBIND11_DIR:+-Dpybind11_DIR="$PYBIND11_DIR"} "${LAUNCHER[@]}" >/dev/null
cmake --build build/tsan -j "$JOBS" --target kaiwu_tests

echo "== ThreadSanitizer: kaiwu_tests --gtest_filter='$FILTER'"
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 history_size=4 ${TSAN_OPTIONS:-}" \
  ./build/tsan/kaiwu_tests --gtest_filter="$FILTER" --gtest_brief=1 --gtest_repeat="${REPEAT:-3}"
