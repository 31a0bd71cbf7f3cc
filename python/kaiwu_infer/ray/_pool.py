"""RayInferenceServerPool / RayInferenceServer: InferenceServers as Ray actors.

The driver-side object owns the server actors and the weight log actor; it is
not picklable (hand env workers a :meth:`client`). Weight operations go to the
log first (so a server restarting meanwhile replays them), then to every
server with the weights as one ObjectRef: ``ray.put`` once, each node fetches
the object once into its object store, each server reads it there.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import ray
from ray.exceptions import ActorDiedError, RayTaskError

from .. import _core
from ..refit_map import _as_array
from ..session import RefitReport, _model_bytes
from ._actor import ServerActor
from ._client import RayClient, _closed, _unwrap
from ._log import WeightLog


def _server_options(server_kwargs: Mapping[str, Any], threads: int, base_version: str,
                    warmup: bool | None) -> dict:
    """The InferenceServer options of each server actor: the caller's, with the session's
    threads, the base version and warm-up; a GPU server gets two batching threads unless
    ``workers`` is given (one batch's gather overlaps the other's run: 1.13-1.39x the env
    steps/s of one thread in ``bench/results/h100/ray_gpu_w2.md``)."""
    kw = dict(server_kwargs, threads=threads, base_version=base_version, warmup=warmup)
    if "workers" not in kw and str(kw.get("device", "cpu")).startswith("cuda"):
        kw["workers"] = 2
    return kw


def _weights_ref(weights: Any) -> Any:
    """An ObjectRef of {name: numpy array} (torch tensors converted), put once."""
    if isinstance(weights, ray.ObjectRef):
        return weights
    if not isinstance(weights, Mapping):
        raise _core.RefitError(
            f"weights must be a mapping of names to arrays, a torch state_dict or an ObjectRef, "
            f"got {type(weights).__name__}")
    arrays = {}
    for k, v in weights.items():
        try:
            arrays[str(k)] = _as_array(v)
        except Exception as e:  # noqa: BLE001 - reported as a refit error
            raise _core.RefitError(f"weight '{k}' cannot be read as an array: {e}") from e
    return ray.put(arrays)


def put_weights(weights: Mapping[str, Any]) -> Any:
    """``ray.put`` of a weight dict or torch state_dict as numpy arrays: the ObjectRef
    to pass to ``refit`` / ``add_version`` of one or several pools."""
    return _weights_ref(weights)


class RayInferenceServerPool:
    """``num_servers`` InferenceServers, each a Ray actor, serving one model.

    Args:
        num_servers: server actors (spread over the cluster's nodes by default).
        model: a path (readable on every node), bytes or an ``onnx.ModelProto``
            (``kaiwu_infer.torch.export`` output: then ``refit(state_dict)`` works).
        num_cpus, num_gpus, resources: Ray resources of each server actor;
            ``threads`` (compute threads of its session) defaults to ``num_cpus``.
        max_batch, max_wait_us, state, workers, pad_batches, split_batches, device,
            base_version, ...: as for :class:`kaiwu_infer.InferenceServer`, except that a
            server on a GPU (``device="cuda"``) runs ``workers=2`` batching threads unless
            told otherwise.
        max_restarts: how often Ray restarts a dead server (-1: always). A restarted
            server replays the weight log (latest weights and every version) and its
            actors' recurrent state restarts from zeros (``StepResult.state_reset``).
        actor_timeout: seconds after which an actor that sent nothing is dropped
            from its server (its env worker died); 0: never.
        shm: also serve clients on the server's node through shared memory;
            ``shm_max_clients`` actors at once, ``shm_max_rows`` rows per step
            (default ``min(max_batch, 64)``); other actors use Ray calls.
        scheduling_strategy: Ray placement of the servers (default ``"SPREAD"``).
        warmup: as for :class:`kaiwu_infer.InferenceServer` (``None``: where that server
            warms up, i.e. channels-last conv sessions, every padded batch size's plan is
            built when the server starts, and again after a restart).
    """

    def __init__(self, num_servers: int, model: Any, *, num_cpus: float = 1, num_gpus: float = 0,
                 resources: Mapping[str, float] | None = None, threads: int | None = None,
                 max_restarts: int = 3, actor_timeout: float = 60.0, shm: bool = True,
                 shm_max_clients: int = 64, shm_max_rows: int | None = None,
                 scheduling_strategy: Any = "SPREAD", base_version: str = "base",
                 warmup: bool | None = None, **server_kwargs: Any):
        if int(num_servers) < 1:
            raise ValueError("num_servers must be at least 1")
        if isinstance(model, (str, os.PathLike)):
            payload: Any = os.path.abspath(os.fspath(model))
            if not os.path.isfile(payload):
                raise _core.ModelFileNotFoundError(f"model file '{payload}' does not exist")
        else:
            payload = _model_bytes(model)[0]
        if threads is None:
            threads = max(1, int(num_cpus))
        kw = _server_options(server_kwargs, threads, base_version, warmup)
        self._model_ref = ray.put(payload)
        self._log = ray.remote(num_cpus=0, max_restarts=0)(WeightLog).remote(base_version)
        shm_opts = None
        if shm:
            shm_opts = {"max_clients": int(shm_max_clients), "client_timeout": float(actor_timeout)}
            if shm_max_rows:
                shm_opts["max_rows"] = int(shm_max_rows)
        opts: dict = {"num_cpus": num_cpus, "num_gpus": num_gpus, "max_restarts": int(max_restarts),
                      "max_task_retries": -1 if max_restarts else 0, "max_concurrency": 4096,
                      "scheduling_strategy": scheduling_strategy}
        if resources:
            opts["resources"] = dict(resources)
        cls = ray.remote(ServerActor)
        self._handles = [
            cls.options(**opts).remote(self._model_ref, kw, self._log, i, shm_opts, actor_timeout)
            for i in range(int(num_servers))]
        self._closed = False
        try:
            self._infos = self._all("info")
        except BaseException:
            self._kill()
            raise

    # ---- clients
    def client(self, *, transport: str = "auto", retry_s: float = 120.0) -> RayClient:
        """A picklable client (see :class:`RayClient`)."""
        return RayClient(self._handles, transport=transport, retry_s=retry_s)

    @property
    def handles(self) -> list:
        """The server actors' handles, by pool index."""
        return list(self._handles)

    @property
    def num_servers(self) -> int:
        return len(self._handles)

    @property
    def feed_inputs(self) -> list[str]:
        return list(self._infos[0]["feed_inputs"])

    @property
    def node_ids(self) -> list[str]:
        """The node of each server now (refreshed: a restart may move it)."""
        self._infos = self._all("info")
        return [i["node_id"] for i in self._infos]

    # ---- weights
    def refit(self, weights: Any, *, version: str | None = None, strict: bool = False,
              check_finite: bool = False) -> RefitReport:
        """Replaces weights of ``version`` (default: the latest) on every server:
        ``weights`` is a dict of arrays, a torch ``state_dict`` (model exported by
        ``kaiwu_infer.torch.export``) or an ObjectRef of one (``put_weights``).
        Returns once every server runs on them; RefitError (nothing changed) on a
        bad name, shape or dtype."""
        res = self._op("refit", version, None, weights, strict, check_finite)
        return RefitReport(list(res.get("updated", [])), list(res.get("ignored", [])), 0)

    def add_version(self, tag: str, weights: Any, *, base: str | None = None, strict: bool = False,
                    check_finite: bool = False) -> None:
        """Adds version ``tag`` on every server (``base`` with ``weights`` replaced);
        it becomes the latest."""
        self._op("add", str(tag), base, weights, strict, check_finite)

    def remove_version(self, tag: str) -> None:
        self._op("remove", str(tag), None, None, False, False)

    @property
    def versions(self) -> list[str]:
        return list(self._get(0, self._handles[0].info.remote())["versions"])

    @property
    def latest(self) -> str:
        return self._get(0, self._handles[0].info.remote())["latest"]

    def _op(self, op: str, tag: str | None, base: str | None, weights: Any, strict: bool,
            check_finite: bool) -> dict:
        self._check_open()
        ref = _weights_ref(weights) if op != "remove" else None
        entry = ray.get(self._log.append.remote(op, tag, base, [ref] if ref is not None else None,
                                                bool(strict), bool(check_finite)))
        try:
            results = [self._get(i, h.apply.remote(entry, ref)) for i, h in enumerate(self._handles)]
        except BaseException:
            # deterministic checks fail on every server alike: forget the entry
            ray.get(self._log.discard.remote(entry.seq))
            raise
        first = next((r for r in results if not r.get("skipped")), results[0])
        if op != "remove" and all(r.get("full") for r in results if not r.get("skipped")):
            ray.get(self._log.mark_full.remote(entry.seq))
        ray.get(self._log.set_latest.remote(first["latest"]))
        return first

    # ---- stats and lifetime
    def stats(self) -> dict:
        """Per server (``servers``: each InferenceServer's stats plus its node, restart
        flag, remote actors, dropped actors, plans built by its session) and totals of
        rows_per_s, requests_per_s."""
        per = self._all("stats")
        tot = {k: sum(s.get(k, 0) for s in per) for k in ("rows_per_s", "requests_per_s")}
        tot["servers"] = per
        tot["log_entries"] = ray.get(self._log.size.remote())
        return tot

    def reset_stats(self) -> None:
        self._all("reset_stats")

    def warmup(self) -> int:
        return sum(self._all("warmup"))

    def close(self) -> None:
        """Closes every server (queued steps fail with ServerClosedError) and ends the actors."""
        if self._closed:
            return
        self._closed = True
        for h in self._handles:
            try:
                ray.get(h.close.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - dead already
                pass
        self._kill()

    @property
    def closed(self) -> bool:
        return self._closed

    def _kill(self) -> None:
        for h in self._handles + [self._log]:
            try:
                ray.kill(h, no_restart=True)
            except Exception:  # noqa: BLE001
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __reduce__(self):
        raise TypeError("a Ray inference server pool stays with its driver: pass .client() instead")

    def _check_open(self) -> None:
        if self._closed:
            raise _core.ServerClosedError("the Ray inference server pool is closed")

    def _all(self, method: str) -> list:
        self._check_open()
        refs = [getattr(h, method).remote() for h in self._handles]
        return [self._get(i, r) for i, r in enumerate(refs)]

    def _get(self, i: int, ref: Any) -> Any:
        try:
            return ray.get(ref)
        except RayTaskError as e:
            raise _unwrap(e) from None
        except ActorDiedError as e:
            # a constructor error (bad model) kills the actor: raise it as in-process
            cause = _unwrap(getattr(e, "cause", None) or e)
            if isinstance(cause, _core.KaiwuError):
                raise cause from None
            raise _closed(i, e) from None


class RayInferenceServer(RayInferenceServerPool):
    """One InferenceServer as one Ray actor (a pool of one); ``stats()`` is that
    server's stats dict."""

    def __init__(self, model: Any, **kwargs: Any):
        super().__init__(1, model, **kwargs)

    def stats(self) -> dict:
        return self._all("stats")[0]
