"""kaiwu_infer.ray on a simulated 2-node cluster (ray.cluster_utils.Cluster: two
raylets on this machine, each its own node): servers spread over nodes, one env
worker per node; actors whose server shares the worker's node go through shared
memory, the others through Ray calls, and every step equals a per-actor Session."""

from __future__ import annotations

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'kaiwu_infer[ray]')")

import kaiwu_infer as ki  # noqa: E402
import kaiwu_infer.ray as kr  # noqa: E402
import ray_workers as rw  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402
from test_server import _lstm_policy_bytes  # noqa: E402

STATE = {"h0": "hn", "c0": "cn"}


@pytest.fixture(scope="module")
def cluster():
    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 80 << 20})
    c.add_node(num_cpus=1, object_store_memory=80 << 20)
    c.wait_for_nodes()
    rw.ray_init(ray, address=c.address)
    yield c
    ray.shutdown()
    c.shutdown()


def test_two_nodes_shm_on_node_ray_across(cluster):
    lstm = _lstm_policy_bytes()
    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    assert len(nodes) == 2
    sess = ki.Session(lstm)
    rng = np.random.default_rng(11)
    w = {n: (0.3 * rng.standard_normal(s)).astype(d) for n, (s, d) in sess.weights_info.items()}
    sess.refit(w)
    with kr.RayInferenceServerPool(2, lstm, state=STATE, num_cpus=0.5, max_wait_us=200) as pool:
        pool.refit(w)                     # one put; each node pulls the object once
        server_nodes = pool.node_ids
        assert len(set(server_nodes)) == 2, server_nodes   # SPREAD
        Worker = ray.remote(num_cpus=0)(rw.EnvWorker)
        groups = [{100 * k + j: 2 + j % 3 for j in range(4)} for k in range(2)]
        workers = [Worker.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False))
                   .remote(pool.client(), g) for n, g in zip(nodes, groups)]
        assert ray.get([wk.node_id.remote() for wk in workers]) == nodes
        res = ray.get([wk.run.remote(list(range(4))) for wk in workers])
        c = pool.client()
        seen = set()
        for node, g, r in zip(nodes, groups, res):
            for aid, rows in g.items():
                want, _ = rw.reference(sess, aid, range(4), rows)
                for t, (got, ref) in enumerate(zip(r[aid]["outs"], want)):
                    for k in ref:
                        np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-6,
                                                   err_msg=f"actor {aid} step {t} {k}")
                srv = c.server_of(aid)
                expect = "shm" if server_nodes[srv] == node else "ray"
                assert set(r[aid]["transport"]) == {expect}, (aid, node, server_nodes)
                assert set(r[aid]["server"]) == {srv}
                seen.add(expect)
        assert seen == {"shm", "ray"}
