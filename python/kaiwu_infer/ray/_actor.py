"""The Ray actor holding one InferenceServer.

An asyncio actor: every remote ``infer`` is a coroutine awaiting
``InferenceServer.infer_async``, so the requests of many env workers in flight at
once meet in the server's batches (one event-loop wake-up resolves a whole batch).
The same server also serves clients on its node through shared memory
(``serve_shm``); those never touch Ray after connecting.

On (re)start the constructor replays the pool's weight log from the object store,
so a server that Ray restarted has the versions and weights of its peers.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
import warnings
from typing import Any, Mapping

import ray

from .. import _core
from ..refit_map import _as_array
from ..server import InferenceServer
from ._log import LogEntry


def _translate(session: Any, weights: Mapping[str, Any], strict: bool) -> tuple[dict, list]:
    """{name: array} in engine names: a torch state_dict goes through the model's refit
    map (``kaiwu_infer.torch.export``), anything else is taken as initializer names."""
    if not isinstance(weights, Mapping):
        raise _core.RefitError(
            f"weights must be a mapping of names to arrays (or an ObjectRef of one), "
            f"got {type(weights).__name__}")
    m = getattr(session, "refit_map", None)
    names = getattr(session, "_weight_names", frozenset(session.weights_info))
    if m is not None and m.looks_like_state_dict(weights.keys(), names):
        arrays, ignored = m.apply(weights, strict=strict)
        return arrays, list(ignored)
    out = {}
    for k, v in weights.items():
        try:
            out[str(k)] = _as_array(v)
        except Exception as e:  # noqa: BLE001 - reported as a refit error
            raise _core.RefitError(f"weight '{k}' cannot be read as an array: {e}") from e
    return out, []


class ServerActor:
    """Plain class; the pool wraps it with ``ray.remote(...)``."""

    def __init__(self, model: Any, server_kwargs: dict, log: Any, index: int, shm: dict | None,
                 actor_timeout: float):
        self.index = index
        self.init_error: BaseException | None = None
        try:
            self.srv = InferenceServer(model, **server_kwargs)
        except (_core.KaiwuError, TypeError, ValueError) as e:
            # kept, and raised by info(): a constructor that raises kills the actor and
            # Ray reports it as ActorDiedError, losing the typed error
            self.init_error = e
            return
        self.weight_names = frozenset(self.srv.session.weights_info)
        self.incarnation = uuid.uuid4().hex
        ctx = ray.get_runtime_context()
        self.node_id = ctx.get_node_id()
        with warnings.catch_warnings():  # Ray's own deprecation notice inside this property
            warnings.simplefilter("ignore")
            self.restarted = bool(ctx.was_current_actor_reconstructed)
        self.shm_name = None
        self.shm_rows = 0
        if shm is not None:
            try:
                self.shm_name = self.srv.serve_shm(None, **shm)
                self.shm_rows = int(shm.get("max_rows") or min(self.srv.max_batch, 64))
            except _core.KaiwuError:
                self.shm_name = None  # no /dev/shm here: remote clients only
        self.actor_timeout = float(actor_timeout)
        self.seen: dict[int, float] = {}
        self.dropped = 0
        self.applied = 0
        self.replayed = 0
        self.log = log
        self._reaper: asyncio.Task | None = None
        if log is not None:
            # Blocking on purpose: no request may run before the weights are back. Ray warns
            # about any blocking get in an asyncio actor; this one is not a mistake.
            key = "RAY_WARN_BLOCKING_GET_INSIDE_ASYNC"
            old = os.environ.get(key)
            os.environ[key] = "0"
            try:
                self._replay(log)
            finally:
                if old is None:
                    del os.environ[key]
                else:
                    os.environ[key] = old

    def _replay(self, log: Any) -> None:
        for e in ray.get(log.entries.remote()):
            try:
                self._apply(e, ray.get(e.box[0]) if e.box else None)
            except _core.KaiwuError as err:  # the driver discards refused entries
                warnings.warn(f"server {self.index}: weight log entry {e.seq} ({e.op}) refused on replay: {err}")
            self.replayed += 1

    # ---- requests
    async def infer(self, actor_id: int, feeds: Mapping[str, Any], done: Any, version: str | None):
        """One step of one actor (all its rows): (outputs, fresh). ``fresh`` is True when
        the model is recurrent and this server holds no state for the actor (first step
        here, after a restart, or after the actor was dropped as silent)."""
        if self._reaper is None and self.actor_timeout > 0:
            self._reaper = asyncio.get_running_loop().create_task(self._reap())
        out = await self.srv.infer_async(int(actor_id), feeds, done=done, version=version)
        fresh = actor_id not in self.seen and bool(self.srv.state)
        self.seen[actor_id] = time.monotonic()
        return out, fresh

    async def release(self, actor_id: int) -> None:
        self.seen.pop(actor_id, None)
        self.srv.release(int(actor_id))

    async def reset(self, actor_id: int) -> None:
        self.srv.reset(int(actor_id))

    async def _reap(self) -> None:
        """Drops actors that sent nothing for ``actor_timeout`` s (their env worker
        died or stopped): their state goes, and batches stop waiting for them."""
        period = max(0.05, self.actor_timeout / 4)
        while not self.srv.closed:
            await asyncio.sleep(period)
            now = time.monotonic()
            for aid in [a for a, t in self.seen.items() if now - t > self.actor_timeout]:
                del self.seen[aid]
                self.srv.release(aid)
                self.dropped += 1

    # ---- weights
    async def apply(self, entry: LogEntry, weights: Any) -> dict:
        """Applies log entry ``entry`` (``weights`` is its resolved weight set)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self._apply, entry, weights)

    def _apply(self, e: LogEntry, weights: Any) -> dict:
        if e.seq <= self.applied:
            return {"skipped": True, "latest": self.srv.latest}
        res: dict = {"skipped": False}
        if e.op == "remove":
            self.srv.remove_version(e.tag)
        else:
            arrays, ignored = _translate(self.srv.session, weights, e.strict)
            if e.op == "refit":
                rep = self.srv.refit(arrays, version=e.tag, strict=e.strict,
                                     check_finite=e.check_finite)
                res["updated"], res["ignored"] = rep.updated, ignored + rep.ignored
            else:
                self.srv.add_version(e.tag, arrays, base=e.base, strict=e.strict,
                                     check_finite=e.check_finite)
                res["updated"], res["ignored"] = sorted(set(arrays) & self.weight_names), ignored
            res["full"] = self.weight_names <= set(res["updated"])
        self.applied = e.seq
        res["latest"] = self.srv.latest
        return res

    # ---- introspection and lifetime
    async def info(self) -> dict:
        if self.init_error is not None:
            raise self.init_error
        return {"index": self.index, "node_id": self.node_id, "pid": os.getpid(), "incarnation": self.incarnation,
                "shm_name": self.shm_name, "shm_rows": self.shm_rows, "restarted": self.restarted,
                "closed": self.srv.closed, "feed_inputs": self.srv.feed_inputs,
                "state": dict(self.srv.state), "versions": self.srv.versions,
                "latest": self.srv.latest, "applied": self.applied}

    async def stats(self) -> dict:
        s = dict(self.srv.stats())
        s.update(server=self.index, node_id=self.node_id, restarted=self.restarted,
                 incarnation=self.incarnation, remote_actors=len(self.seen),
                 dropped_actors=self.dropped, log_entries_replayed=self.replayed,
                 version_tags=self.srv.versions, latest=self.srv.latest, plans=self.srv.session.plans)
        return s

    async def reset_stats(self) -> None:
        self.srv.reset_stats()

    async def warmup(self) -> int:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.srv.warmup)

    async def close(self) -> None:
        self.srv.close()

    async def ping(self) -> str:
        return self.incarnation

