"""The picklable client of a pool of Ray inference servers.

Each actor id goes to one server of the pool, always the same (rendezvous hashing
of the id over the server indices), because its recurrent state lives there. For
each actor the client picks a transport at its first step: the server's
shared-memory segment when the server is on this node (no Ray call, no
serialization), else a Ray actor call carrying the actor's whole batch of rows.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any, Mapping

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayTaskError

from .. import _core
from ..client import Client as ShmClient
from ..refit_map import _as_array

_M64 = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64 finalizer: a well-spread 64-bit hash of an int."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def route(actor_id: int, num_servers: int) -> int:
    """The server of ``actor_id`` (highest random weight: adding a server would move
    only the actors that the new server wins)."""
    if num_servers == 1:
        return 0
    h = _mix(int(actor_id))
    return max(range(num_servers), key=lambda i: _mix(h ^ _mix(i + 1)))


class StepResult(dict):
    """``{output: array}`` of one step, plus where it came from.

    ``state_reset``: True when the server held no recurrent state for this actor
    although it had stepped before (its server restarted, or dropped the actor as
    silent): the state fed to this step was zeros, not the carried one.
    ``server``: the pool index of the server that ran it. ``transport``: ``"shm"`` or
    ``"ray"``."""

    __slots__ = ("state_reset", "server", "transport")

    def __init__(self, out: Mapping, state_reset: bool, server: int, transport: str):
        super().__init__(out)
        self.state_reset = bool(state_reset)
        self.server = server
        self.transport = transport

    def __reduce__(self):
        return (StepResult, (dict(self), self.state_reset, self.server, self.transport))


def _unwrap(e: BaseException) -> BaseException:
    """The kaiwu error a server raised (the same class as in-process), else ``e``."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, _core.KaiwuError):
        return cause
    return e


def _closed(i: int, e: BaseException | None = None) -> _core.ServerClosedError:
    why = f": {type(e).__name__}" if e is not None else ""
    return _core.ServerClosedError(f"Ray inference server {i} is closed or dead{why}")


class StepFuture:
    """A step in flight (``RayClient.submit``): ``result(timeout=None)`` returns the
    :class:`StepResult` or raises the step's error; ``done()`` polls."""

    def __init__(self, client: "RayClient", actor_id: int, server: int, ref: Any = None,
                 args: tuple = (), fut: concurrent.futures.Future | None = None):
        self._client, self._aid, self._server = client, actor_id, server
        self._ref, self._args, self._fut = ref, args, fut

    def done(self) -> bool:
        if self._fut is not None:
            return self._fut.done()
        ready, _ = ray.wait([self._ref], timeout=0)
        return bool(ready)

    def result(self, timeout: float | None = None) -> StepResult:
        if self._fut is not None:
            return self._fut.result(timeout)
        return self._client._finish_remote(self._aid, self._server, self._ref, self._args, timeout)


class RayClient:
    """Steps actors on a pool of Ray inference servers from any Ray worker or driver.

    Pickle it into env-worker tasks and actors. ``infer(actor_id, feeds, done=False,
    version=None)`` runs one step of one actor, all its rows (a vectorized env's
    observations, rows on axis 0) in one call, and returns a :class:`StepResult`.
    ``submit`` returns a :class:`StepFuture`. One actor has at most one step in flight;
    use a client from one thread, or different actors from different threads.

    transport: ``"auto"`` (shared memory to a server on this node, Ray otherwise),
    ``"ray"`` (always a Ray call) or ``"shm"`` (shared memory or InputError).
    retry_s: how long a step keeps retrying while its server restarts.
    """

    def __init__(self, handles: list, *, transport: str = "auto", retry_s: float = 120.0):
        if transport not in ("auto", "ray", "shm"):
            raise ValueError("transport must be 'auto', 'ray' or 'shm'")
        self._handles = list(handles)
        self._transport = transport
        self._retry_s = float(retry_s)
        self._setup()

    def _setup(self) -> None:
        self._lock = threading.Lock()
        self._node: str | None = None
        self._infos: list[dict | None] = [None] * len(self._handles)
        self._routes: dict[int, int] = {}
        self._paths: dict[int, ShmClient | None] = {}   # None: Ray calls
        self._stepped: set[int] = set()
        self._pending_reset: set[int] = set()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def __getstate__(self) -> dict:
        return {"handles": self._handles, "transport": self._transport, "retry_s": self._retry_s}

    def __setstate__(self, st: dict) -> None:
        self._handles, self._transport, self._retry_s = st["handles"], st["transport"], st["retry_s"]
        self._setup()

    @property
    def num_servers(self) -> int:
        return len(self._handles)

    def server_of(self, actor_id: int) -> int:
        i = self._routes.get(actor_id)
        if i is None:
            i = self._routes[actor_id] = route(actor_id, len(self._handles))
        return i

    def transport_of(self, actor_id: int) -> str | None:
        """``"shm"``, ``"ray"``, or None before the actor's first step."""
        if actor_id not in self._paths:
            return None
        return "ray" if self._paths[actor_id] is None else "shm"

    # ---- steps
    def infer(self, actor_id: int, feeds: Mapping[str, Any], *, done: Any = False,
              version: str | None = None, timeout: float | None = None) -> StepResult:
        i = self.server_of(actor_id)
        feeds = {k: _as_array(v) for k, v in feeds.items()}
        shm = self._path(actor_id, i, feeds)
        if shm is not None:
            return self._infer_shm(actor_id, i, feeds, done, version)
        args = (actor_id, feeds, done, version)
        return self._finish_remote(actor_id, i, self._handles[i].infer.remote(*args), args, timeout)

    def submit(self, actor_id: int, feeds: Mapping[str, Any], *, done: Any = False,
               version: str | None = None) -> StepFuture:
        i = self.server_of(actor_id)
        feeds = {k: _as_array(v) for k, v in feeds.items()}
        if self._path(actor_id, i, feeds) is not None:
            with self._lock:
                if self._executor is None:
                    self._executor = concurrent.futures.ThreadPoolExecutor(64, "kaiwu-ray-shm")
            fut = self._executor.submit(self._infer_shm, actor_id, i, feeds, done, version)
            return StepFuture(self, actor_id, i, fut=fut)
        args = (actor_id, feeds, done, version)
        return StepFuture(self, actor_id, i, self._handles[i].infer.remote(*args), args)

    def reset(self, actor_id: int) -> None:
        """Zeroes the actor's recurrent state at its next step."""
        i = self.server_of(actor_id)
        c = self._paths.get(actor_id)
        if c is not None:
            c.reset()
        else:
            self._get(i, self._handles[i].reset.remote(actor_id))

    def release(self, actor_id: int) -> None:
        """Forgets the actor on its server (state dropped; batches stop waiting for it)."""
        i = self.server_of(actor_id)
        c = self._paths.pop(actor_id, None)
        self._stepped.discard(actor_id)
        if c is not None:
            c.close()
        else:
            self._get(i, self._handles[i].release.remote(actor_id))

    def close(self) -> None:
        """Releases every actor this client stepped through shared memory."""
        for aid, c in list(self._paths.items()):
            if c is not None:
                try:
                    c.close()
                except _core.KaiwuError:
                    pass
        self._paths.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    # ---- transports
    def _info(self, i: int, refresh: bool = False) -> dict:
        if refresh or self._infos[i] is None:
            self._infos[i] = self._get(i, self._handles[i].info.remote())
        return self._infos[i]

    def _path(self, actor_id: int, i: int, feeds: Mapping[str, Any]) -> ShmClient | None:
        if actor_id in self._paths:
            return self._paths[actor_id]
        c = None
        if self._transport != "ray":
            c = self._connect(i, feeds)
            if c is None and self._transport == "shm":
                raise _core.InputError(
                    f"actor {actor_id}: no shared-memory path to server {i} (another node, no "
                    "segment, or more rows than its shm_max_rows)")
        self._paths[actor_id] = c
        return c

    def _connect(self, i: int, feeds: Mapping[str, Any], refresh: bool = False) -> ShmClient | None:
        info = self._info(i, refresh)
        if self._node is None:
            self._node = ray.get_runtime_context().get_node_id()
        rows = max((int(v.shape[0]) for v in feeds.values() if v.ndim), default=1)
        if info["node_id"] != self._node or not info["shm_name"] or rows > info["shm_rows"]:
            return None
        try:
            return ShmClient(info["shm_name"], timeout=1.0)
        except _core.KaiwuError:  # no free slot, or /dev/shm not shared with the server
            return None

    def _infer_shm(self, actor_id: int, i: int, feeds: Mapping[str, Any], done: Any,
                   version: str | None) -> StepResult:
        deadline = time.monotonic() + self._retry_s
        while True:
            c = self._paths[actor_id]
            try:
                out = c.infer(feeds, done=done, version=version)
                break
            except _core.ServerClosedError:
                # The server process died (Ray restarts it), or reclaimed a silent slot:
                # ask the actor (waits for the restart); reconnect unless it is closed.
                info = self._info(i, refresh=True)
                if info["closed"] or time.monotonic() > deadline:
                    raise
                c2 = self._connect(i, feeds)
                if c2 is None:
                    raise
                self._paths[actor_id] = c2
                if actor_id in self._stepped and info["state"]:
                    self._pending_reset.add(actor_id)
        reset = actor_id in self._pending_reset
        self._pending_reset.discard(actor_id)
        self._stepped.add(actor_id)
        return StepResult(out, reset, i, "shm")

    def _finish_remote(self, actor_id: int, i: int, ref: Any, args: tuple,
                       timeout: float | None) -> StepResult:
        deadline = time.monotonic() + self._retry_s
        while True:
            try:
                out, fresh = self._get(i, ref, timeout, retry=False)
                break
            except ActorUnavailableError:
                # restarting; Ray retries queued calls itself, this covers the rest
                if time.monotonic() > deadline:
                    raise _closed(i) from None
                time.sleep(0.05)
                ref = self._handles[i].infer.remote(*args)
        reset = fresh and actor_id in self._stepped
        self._stepped.add(actor_id)
        return StepResult(out, reset, i, "ray")

    def _get(self, i: int, ref: Any, timeout: float | None = None, retry: bool = True) -> Any:
        try:
            return ray.get(ref, timeout=timeout)
        except RayTaskError as e:
            raise _unwrap(e) from None
        except ActorDiedError as e:
            raise _closed(i, e) from None
        except ActorUnavailableError:
            if not retry:
                raise
            raise _closed(i) from None
        except GetTimeoutError:
            raise concurrent.futures.TimeoutError() from None
