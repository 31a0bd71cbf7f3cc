#!/bin/bash
# One device call for the int8 kernels on the GPU machine's AVX-512 VNNI host (CPU only):
# a CPU build (kaiwu_core and the Python module; the int8 GoogleTest files compiled
# alone against the library), the int8 gtests and tests/python/test_quant*.py with
# KAIWU_INT8_ISA unset (the best path: AMX there) and =$ALT (default avx512vnni), then
# bench_int8.py at 1 and 2 threads for both and for the best path with KAIWU_INT8_NHWC=0
# (each bench pinned to two cores of its own, all at once, after the tests).
# Run from the repository root; writes logs and the results under $OUT.
set -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p $OUT
B=${BUILD_DIR:-/tmp/kaiwu_cpu}
BATCH=${BATCH:-32,256,1024}
REPEATS=${REPEATS:-3}
ALT=${ALT:-avx512vnni}
grep -m1 "model name" /proc/cpuinfo; nproc
grep -m1 flags /proc/cpuinfo | tr ' ' '\n' | grep -E "avx512(f|bw)|vnni|amx_int8" | tr '\n' ' '; echo
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DKAIWU_BUILD_TESTS=OFF -DKAIWU_BUILD_PYTHON=ON \
  -Dpybind11_DIR=$(python3 -c 'import pybind11;print(pybind11.get_cmake_dir())') > $OUT/build.log 2>&1 &&
  cmake --build $B -j16 >> $OUT/build.log 2>&1 ||
  { tail -40 $OUT/build.log; exit 1; }
PROTO=$(dirname $(find $B -name onnx.pb.h | head -1))
g++ -std=c++17 -O2 -march=native -DNDEBUG -DEIGEN_DONT_PARALLELIZE -DEIGEN_MPL2_ONLY -Icpp/include -Icpp/src \
  -I$PROTO -I/usr/include/eigen3 tests/cpp/quant_*_test.cc $B/libkaiwu_core.a -lgtest_main -lgtest -lprotobuf \
  -pthread -o $B/quant_tests >> $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
python3 -c "import onnxruntime, numpy; print('onnxruntime', onnxruntime.__version__, 'numpy', numpy.__version__)"
bench() {  # $1: cores, $2: KAIWU_INT8_ISA value or 'unset', $3: name
  ( [ "$2" = unset ] && unset KAIWU_INT8_ISA || export KAIWU_INT8_ISA=$2
    PYTHONPATH=python taskset -c $1 timeout ${BENCH_TIMEOUT:-150} python3 bench/bench_int8.py --batch $BATCH \
      --threads 1,2 --repeats $REPEATS --block-s ${BLOCK_S:-0.1} --out-dir $OUT --name $3 > $OUT/$3.log 2>&1 )
}
tests=()
for isa in unset $ALT; do
  ( [ $isa = unset ] && unset KAIWU_INT8_ISA || export KAIWU_INT8_ISA=$isa
    echo "== int8 gtests, KAIWU_INT8_ISA=$isa"
    taskset -c 4-15 timeout 60 $B/quant_tests --gtest_brief=1 2>&1 | tail -4
    echo "== pytest test_quant*.py, KAIWU_INT8_ISA=$isa: int8_isa() = $(PYTHONPATH=python python3 -c \
      'import kaiwu_infer as k; print(k.int8_isa())')"
    PYTHONPATH=python taskset -c 4-15 timeout 150 python3 -m pytest -q -p no:cacheprovider -n 6 \
      tests/python/test_quant_ops.py tests/python/test_quant_fused.py tests/python/test_quant_policies.py 2>&1 |
      tail -8 ) > $OUT/tests_$isa.log 2>&1 &
  tests+=($!)
done
wait ${tests[@]}
cat $OUT/tests_unset.log $OUT/tests_$ALT.log
bench 0,1 unset int8 &
b1=$!
bench 2,3 $ALT int8_$ALT &
b2=$!
KAIWU_INT8_NHWC=0 bench 4,5 unset int8_nchw &  # the best path with integer convs kept NCHW
b3=$!
wait $b1 $b2 $b3
for n in int8 int8_$ALT int8_nchw; do echo "== bench $n"; tail -3 $OUT/$n.log; sed -n '3,6p;/^| /p;/^Geometric/p' $OUT/$n.md; done
echo "total $(( $(date +%s) - t0 )) s"
