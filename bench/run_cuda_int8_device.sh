#!/bin/bash
# One device call for the int8 CUDA kernels: a CUDA build of the Python module (TESTS=ON: the
# GoogleTest binary too), tests/python/test_cuda_int8.py (plus $EXTRA_TESTS), docs/ops.md
# regenerated on this CUDA build, then bench_cuda_int8.py writing cuda_int8.{md,json}.
# Run from the repository root; writes logs and results under $OUT (at most 6 files).
set -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p $OUT
B=${BUILD_DIR:-build/cuda}
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DKAIWU_CUDA=ON -DKAIWU_BUILD_TESTS=${TESTS:-OFF} \
  -DKAIWU_BUILD_PYTHON=ON -Dpybind11_DIR=$(python3 -c 'import pybind11;print(pybind11.get_cmake_dir())') \
  > $OUT/build.log 2>&1 && cmake --build $B -j16 >> $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
PYTHONPATH=python python3 -m kaiwu_infer ops --markdown > $OUT/ops.md 2>&1
PYTHONPATH=python timeout ${TEST_TIMEOUT:-240} python3 -m pytest -q -p no:cacheprovider -n ${JOBS:-8} \
  tests/python/test_cuda_int8.py ${EXTRA_TESTS} > $OUT/tests.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" $OUT/tests.log | head -40
echo "tests $(( $(date +%s) - t0 )) s"
[ "${BENCH:-1}" = 0 ] && exit 0
PYTHONPATH=python timeout ${BENCH_TIMEOUT:-240} python3 bench/bench_cuda_int8.py --batch ${BATCH:-1,32,256,1024} \
  --seconds ${BENCH_SECONDS:-0.3} --out $OUT --profile ${PROFILE:-atari_cnn:256} > $OUT/bench.log 2>&1 ||
  tail -20 $OUT/bench.log
sed -n '/^| /p' $OUT/cuda_int8.md
echo "total $(( $(date +%s) - t0 )) s"
