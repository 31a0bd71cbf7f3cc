#!/usr/bin/env bash
# Device call for bench_ray on the 16-core host (run from a copy of this tree beside ../devsrc_ray,
# which holds Ray 2.60 without its jars and the wheels of torchrl 0.12.0 / tensordict 0.12.4):
# the install in the background while the CUDA module builds, then every peer of issue 17 in
# one invocation: conv and MLP, 8/32/64 workers x 16 envs, per-worker onnxruntime and kaiwu
# Session, the GPU server (2 batching threads), torchrl's Ray InferenceServer, the CPU server
# pool, and the broadcast to 1/4/16 servers. bench_ray rewrites $OUT/$NAME.{md,json} after every
# config, so a run cut short leaves its rows. LIMIT: seconds from the start to the bench's end.
set -uo pipefail
T0=$(date +%s)
LIMIT=${LIMIT:-540}
RAY=${RAY_DIR:-../devsrc_ray}
SITE=${SITE:-/tmp/site}
mkdir -p $SITE
( python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $SITE $RAY/whl/*.whl &&
  tar -xJf $RAY/ray.tar.xz -C $SITE && chmod -R u+x $SITE/ray/core ) > $OUT/install.log 2>&1 &
INSTALL=$!
if [ ! -f python/kaiwu_infer/_core$(python3 -c "import sysconfig;print(sysconfig.get_config_var('EXT_SUFFIX'))") ]; then
  timeout 150 bash -c 'cmake -S . -B build/cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DKAIWU_CUDA=ON -DKAIWU_BUILD_TESTS=OFF \
    -DKAIWU_BUILD_PYTHON=ON -Dpybind11_DIR=$(python3 -c "import pybind11;print(pybind11.get_cmake_dir())") >/dev/null &&
    cmake --build build/cuda --target _core -j16 >/dev/null' || { echo "build failed"; exit 5; }
fi
wait $INSTALL || { echo "install failed"; cat $OUT/install.log; exit 4; }
LEFT=$((LIMIT - ($(date +%s) - T0)))
echo "build and install done at $(( $(date +%s) - T0 )) s; ${LEFT} s left"
# --budget-s: no new config after it; the rest of LEFT covers the last config and the broadcast
PYTHONUNBUFFERED=1 PYTHONPATH=$SITE:$PWD/python timeout -s TERM $LEFT python3 -W ignore bench/bench_ray.py \
  --out-dir $OUT --name ${NAME:-ray} --budget-s $((LEFT - ${RESERVE:-90})) --config-timeout-s 30 --workers ${WORKERS:-8,32,64} \
  --envs 16 --policies ${POLICIES:-conv,mlp} --modes ${MODES:-local_ort,local,kaiwu_gpu,torchrl,kaiwu} --gpu-workers 2 \
  --servers 2 --server-threads 7 --max-batch 1024 --seconds 1.5 --update-s 0.6 --cost-s 0.4 --broadcast-reps 3 ${EXTRA:-} 2>&1 |
  grep --line-buffered -v -E "WARNING|core_worker|INFO" | tee $OUT/bench.log
echo "bench rc=$? at $(( $(date +%s) - T0 )) s"
