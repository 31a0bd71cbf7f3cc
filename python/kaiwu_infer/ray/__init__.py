"""kaiwu_infer on a Ray cluster: InferenceServers as Ray actors, weights through the
object store.

    import ray, kaiwu_infer.ray as kr
    ray.init()
    srv = kr.RayInferenceServer(model, num_cpus=2, max_batch=256, state={"h0": "hn"})
    client = srv.client()                      # picklable: give it to env workers
    out = client.infer(actor_id, {"obs": obs}, done=dones)   # a whole vector env per call
    srv.refit(policy.state_dict())             # ray.put once, every server refits from it

Ray does the placement, restarts and broadcast; see docs/ray.md. Needs
``pip install kaiwu_infer[ray]``.
"""

from __future__ import annotations

try:
    import ray as _ray  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "kaiwu_infer.ray needs Ray: pip install 'kaiwu_infer[ray]' (or pip install ray)") from e

from ._client import RayClient, StepFuture, StepResult, route
from ._pool import RayInferenceServer, RayInferenceServerPool, put_weights

__all__ = ["RayInferenceServer", "RayInferenceServerPool", "RayClient", "StepResult",
           "StepFuture", "put_weights", "route"]
