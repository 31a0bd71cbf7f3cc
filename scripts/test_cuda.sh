#!/usr/bin/env bash
# The CUDA backend's tests, on a machine with an NVIDIA GPU and the CUDA toolkit
# (nvcc, cuBLAS): builds with -DKAIWU_CUDA=ON into build/cuda (the Python module
# lands in python/kaiwu_infer), then runs the CUDA kernel tests (GoogleTest,
# each op against the CPU kernel; Conv on both its paths), the whole C++ suite,
# and the CUDA pytest module (policies against onnxruntime, refit, the server on
# the GPU, device-resident and page-locked I/O with their counters, user streams,
# the direct channels-last conv against cuDNN and onnxruntime, fused attention, GELU,
# GEMMs with cuBLASLt epilogues, batched MatMuls of a few rows)
# with the host-side DLPack tests, half precision (test_precision.py), then that module again with cuDNN
# convolutions (KAIWU_CUDNN=1).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
PYBIND11_DIR=$(python3 -c "import pybind11; print(pybind11.get_cmake_dir())")
cmake -S . -B build/cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DKAIWU_CUDA=ON -DKAIWU_BUILD_TESTS=ON \
  -DKAIWU_BUILD_PYTHON=ON -Dpybind11_DIR="$PYBIND11_DIR" >/dev/null
cmake --build build/cuda -j "$JOBS"
echo "== C++ tests (CUDA kernels first)"
./build/cuda/kaiwu_tests --gtest_filter='Cuda*' --gtest_brief=1
./build/cuda/kaiwu_tests --gtest_filter='-Cuda*' --gtest_brief=1
echo "== pytest (CUDA)"
PYTHONPATH=python python3 -m pytest tests/python/test_cuda.py tests/python/test_precision.py \
  tests/python/test_cuda_graph_nodes.py tests/python/test_cuda_fused_mlp_rank3.py tests/python/test_cast_half.py tests/python/test_device_io.py tests/python/test_refit_cuda.py tests/python/test_cuda_int8.py tests/python/test_matmul_trans_b.py tests/python/test_server_host.py tests/python/test_cuda_conv_direct.py tests/python/test_refit_cuda_paths.py tests/python/test_cuda_attention.py tests/python/test_gelu.py tests/python/test_gather_view.py tests/python/test_cuda_lt_epilogue.py tests/python/test_cuda_skinny_matmul.py -q -p no:cacheprovider "$@"
echo "== pytest (CUDA, KAIWU_CUDNN=1: convolutions on cuDNN when the build found it)"
KAIWU_CUDNN=1 PYTHONPATH=python python3 -m pytest tests/python/test_cuda.py tests/python/test_precision.py -q -p no:cacheprovider "$@"
