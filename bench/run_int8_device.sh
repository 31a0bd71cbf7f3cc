#!/bin/bash
# One device call for the CPU int8 kernels on the GPU machine's host (AVX-512 VNNI, AMX):
# a CPU build (kaiwu_core and the Python module; the int8 GoogleTest files compiled alone
# against the library); the int8 gtests and tests/python/test_quant*.py with KAIWU_INT8_ISA
# unset (the best path: AMX there) and =$ALT (default avx512vnni), side by side on cores
# 4-15; then, one at a time on cores 0-1: bench_int8.py at 1 and 2 threads (best path; mlp and
# atari_cnn, then impala_lstm, gru_seq and multi_input at $RBATCH unless RECURRENT=0),
# bench/int8_layout_ab.py (each switch of $AB against the defaults, same process) and
# bench/profile_int8.py (per node, core 2). ALT_BENCH=1 adds bench_int8.py under $ALT.
# Run from the repository root; writes logs and the results under $OUT.
set -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p $OUT
B=${BUILD_DIR:-/tmp/kaiwu_cpu}
BATCH=${BATCH:-32,256,1024}
REPEATS=${REPEATS:-3}
ALT=${ALT:-avx512vnni}
grep -m1 "model name" /proc/cpuinfo; nproc
grep -m1 flags /proc/cpuinfo | tr ' ' '\n' | grep -E "avx512(f|bw|_vbmi)|vnni|amx_int8" | tr '\n' ' '; echo
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
tests=()
for isa in unset $ALT; do
  ( [ $isa = unset ] && unset KAIWU_INT8_ISA || export KAIWU_INT8_ISA=$isa
    echo "== int8 gtests, KAIWU_INT8_ISA=$isa"
    taskset -c 4-15 timeout 60 $B/quant_tests --gtest_brief=1 2>&1 | tail -4
    echo "== pytest test_quant*.py, KAIWU_INT8_ISA=$isa: int8_isa() = $(PYTHONPATH=python python3 -c \
      'import kaiwu_infer as k; print(k.int8_isa())')"
    PYTHONPATH=python taskset -c 4-15 timeout 150 python3 -m pytest -q -p no:cacheprovider -n 6 \
      tests/python/test_quant_ops.py tests/python/test_quant_fused.py tests/python/test_quant_policies.py \
      tests/python/test_quant_byte_ops.py 2>&1 |
      tail -8 ) > $OUT/tests_$isa.log 2>&1 &
  tests+=($!)
done
wait ${tests[@]}
cat $OUT/tests_unset.log $OUT/tests_$ALT.log
bench() {  # $1: KAIWU_INT8_ISA value or 'unset', $2: name, then bench_int8.py arguments
  local isa=$1 name=$2
  shift 2
  ( [ "$isa" = unset ] && unset KAIWU_INT8_ISA || export KAIWU_INT8_ISA=$isa
    PYTHONPATH=python taskset -c 0,1 timeout ${BENCH_TIMEOUT:-300} python3 bench/bench_int8.py \
      --threads 1,2 --repeats $REPEATS --block-s ${BLOCK_S:-0.1} --out-dir $OUT --name $name "$@" > $OUT/$name.log 2>&1 )
  echo "== bench $name"; tail -3 $OUT/$name.log; sed -n '3,6p;/^| /p;/^Geometric/p' $OUT/$name.md
}
bench unset int8 --batch $BATCH
[ -n "$ALT_BENCH" ] && bench $ALT int8_$ALT --batch $BATCH
# The policies whose LSTM/GRU stay float (RECURRENT=0 skips them).
[ "${RECURRENT:-1}" = 1 ] && bench unset int8_recurrent --policies impala_lstm,gru_seq,multi_input \
  --batch ${RBATCH:-32,256,1024}
echo "== each CPU int8 switch against the defaults, same process (bench/int8_layout_ab.py)"
: > $OUT/int8_layout_ab.txt
for ab in ${AB:-atari_cnn:KAIWU_INT8_NHWC=0 impala_lstm:KAIWU_INT8_INPLACE=0 impala_lstm:KAIWU_INT8_BYTE_OPS=0}; do
  PYTHONPATH=python taskset -c 0,1 timeout 300 python3 bench/int8_layout_ab.py ${ab%%:*} --env ${ab#*:} \
    --batch 32,256 --threads 1 2>&1 | grep -v WARN | tee -a $OUT/int8_layout_ab.txt
done
echo "== per node (bench/profile_int8.py)"
PYTHONPATH=python taskset -c 2 timeout 300 python3 bench/profile_int8.py mlp:256,1024 atari_cnn:32,256 \
  impala_lstm:32,256 2>&1 | grep -v WARN > $OUT/profile_int8.txt
grep "total us" $OUT/profile_int8.txt
echo "total $(( $(date +%s) - t0 )) s"
