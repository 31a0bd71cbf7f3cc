#!/bin/bash
# One device call for the FusedMlp cluster work (bench/notes/cuda.md): the kernel bench
# (all variants checked and timed), then the CUDA build, its FusedMlp tests, the Python
# fused-MLP tests and, with FULL=1, the policy benchmark with and without the cluster kernel.
# Run from the repository root; writes logs under $OUT.
set -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p $OUT
nproc; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
[ "$KERNEL_ONLY" = 1 ] || ( cmake -S . -B build/cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DKAIWU_CUDA=ON -DKAIWU_BUILD_TESTS=ON \
    -DKAIWU_BUILD_PYTHON=ON -Dpybind11_DIR=$(python3 -c 'import pybind11;print(pybind11.get_cmake_dir())') >/dev/null \
  && cmake --build build/cuda -j14 ) > $OUT/build.log 2>&1 &
build=$!
nvcc -std=c++17 -arch=sm_90 -O3 -Icpp/src -Icpp/include --expt-relaxed-constexpr bench/cuda_fused_mlp_bench.cu \
  -o /tmp/fused_mlp_bench -Xlinker --unresolved-symbols=ignore-all 2>&1 | grep -v "^$" | tail -5
if [ -f .base/cpp/src/backends/cuda/fused_mlp.cu ]; then  # the kernel before this branch, its own bench
  nvcc -std=c++17 -arch=sm_90 -O3 -I.base/cpp/src -Icpp/src -Icpp/include --expt-relaxed-constexpr .base/bench/cuda_fused_mlp_bench.cu \
    -o /tmp/fused_mlp_bench_base -Xlinker --unresolved-symbols=ignore-all 2>&1 | grep -v "^$" | tail -3
  echo "== base kernel (main), its bench (zero data)"; timeout 60 /tmp/fused_mlp_bench_base 2>&1 | tee $OUT/kernel_bench_base.txt
fi
timeout 90 /tmp/fused_mlp_bench ${BATCHES:-1,32,256,1024} --odd 2>&1 | tee $OUT/kernel_bench.txt
[ "$KERNEL_ONLY" = 1 ] && exit 0
wait $build || { tail -30 $OUT/build.log; exit 1; }
timeout 120 ./build/cuda/kaiwu_tests --gtest_filter='*FusedMlp*:*FuseMlp*' 2>&1 | tee $OUT/gtest.txt | grep -v "^\[ *RUN\|^\[ *OK" | tail -25
PYTHONPATH=python timeout 150 python3 -m pytest -q -x tests/python/test_precision.py -k "mlp" 2>&1 | tail -5 | tee $OUT/pytest.txt
if [ "$FULL" = 1 ]; then
  for c in auto 0; do
    if [ $c = auto ]; then unset KAIWU_FUSED_MLP_CLUSTER; else export KAIWU_FUSED_MLP_CLUSTER=$c; fi
    timeout 150 env PYTHONPATH=python python3 bench/bench_cuda_precision.py --policies mlp,multi_input --seconds 0.3 \
      --batch 1,32,256,1024 --out $OUT --name cuda_precision_cluster_$c > $OUT/policy_$c.log 2>&1
  done
  unset KAIWU_FUSED_MLP_CLUSTER
  for c in auto 0; do echo "== cluster $c"; grep "^## \|^| mlp\|^| multi_input" $OUT/cuda_precision_cluster_$c.md; done
fi
