#!/usr/bin/env bash
# Device call for the server's host side (run from a copy of this tree beside ../devsrc_ray,
# which holds Ray 2.60 without its jars): Ray's install in the background while the CUDA
# module builds, test_server_host on CUDA, bench_server_host on the GPU (the pageable
# one-thread gather before page-locked and threaded gathers, then each step), and bench_ray's
# conv policy, onnxruntime per worker against the GPU server, 8/32/64 workers. Results in $OUT.
set -uo pipefail
T0=$(date +%s)
END=$((T0 + ${BUDGET:-235}))
RAY=${RAY_DIR:-../devsrc_ray}
mkdir -p /tmp/site
( python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $RAY/whl/*.whl &&
  tar -xJf $RAY/ray.tar.xz -C /tmp/site && chmod -R u+x /tmp/site/ray/core ) > $OUT/install.log 2>&1 &
INSTALL=$!
timeout 120 bash -c 'cmake -S . -B build/cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DKAIWU_CUDA=ON -DKAIWU_BUILD_TESTS=OFF \
  -DKAIWU_BUILD_PYTHON=ON -Dpybind11_DIR=$(python3 -c "import pybind11;print(pybind11.get_cmake_dir())") >/dev/null &&
  cmake --build build/cuda --target _core -j16 >/dev/null' || { echo "build failed"; exit 5; }
echo "build done at $(( $(date +%s) - T0 )) s"
export PYTHONUNBUFFERED=1
PYTHONPATH=python timeout 40 python3 -m pytest tests/python/test_server_host.py -q -p no:cacheprovider 2>&1 | tail -4
echo "tests done at $(( $(date +%s) - T0 )) s"
PYTHONPATH=python timeout 60 python3 bench/bench_server_host.py --device cuda --precision fp16 --procs 32 \
  --seconds 1.5 --configs ${CONFIGS:-pageable_serial,serial,auto,auto_w2} --out-dir $OUT --name server_host 2>&1 | cut -c1-400
echo "micro done at $(( $(date +%s) - T0 )) s"
wait $INSTALL || { echo "install failed"; cat $OUT/install.log; exit 4; }
LEFT=$((END - $(date +%s)))
echo "ray: ${LEFT} s left"
PYTHONPATH=/tmp/site:$PWD/python timeout $LEFT python3 -W ignore bench/bench_ray.py --out-dir $OUT --name ray_gpu_warm \
  --budget-s $((LEFT - 40)) --config-timeout-s 30 --workers 8,32,64 --envs 16 --policies conv --modes local_ort,kaiwu_gpu \
  --broadcast-servers 1 --servers 2 --server-threads 7 --max-batch 1024 --seconds 1.5 --update-s 0.6 --cost-s 0.4 \
  --broadcast-reps 3 2>&1 | tail -25
echo "bench rc=$? at $(( $(date +%s) - T0 )) s"
