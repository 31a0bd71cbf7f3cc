"""Self-play inference server: dynamic batching across actors, recurrent state per
actor kept by the server, and a pool of weight versions sharing one compiled graph.

The batching loop runs in C++ threads (gather rows, one ``Session.run``, scatter
rows, update state) with the GIL released; Python only converts at the edges.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import weakref
from typing import Any, Callable, Mapping, Sequence

from . import _core
from .refit_map import _as_array
from .session import Session

__all__ = ["InferenceServer", "ServerFuture"]


class ServerFuture:
    """The result of :meth:`InferenceServer.submit` (concurrent.futures.Future-like).

    ``result(timeout)`` returns the output dict or raises the request's error
    (InputError, ServerClosedError, ...). ``add_done_callback(fn)`` calls ``fn(future)``
    from a server thread once the request is done (at once if it already is).
    """

    __slots__ = ("_ticket",)

    def __init__(self, ticket: Any):
        self._ticket = ticket

    def done(self) -> bool:
        return self._ticket.done()

    def running(self) -> bool:
        return not self._ticket.done()

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        return False

    def result(self, timeout: float | None = None) -> dict:
        if not self._ticket.wait(-1.0 if timeout is None else float(timeout)):
            raise concurrent.futures.TimeoutError()
        return self._ticket.result(-1.0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            self.result(timeout)
        except concurrent.futures.TimeoutError:
            raise
        except BaseException as e:  # noqa: BLE001 - returned, not raised
            return e
        return None

    def add_done_callback(self, fn: Callable[["ServerFuture"], Any]) -> None:
        self._ticket.add_callback(fn, self)


class _LoopQueue:
    """The requests one asyncio event loop has in flight. Server threads report
    completions through one pipe the loop watches; the loop drains every finished
    request per wake-up and resolves their futures (no GIL taken by server threads).

    It holds no reference to its loop (only pending futures do), so that the
    server's weak map from loops to queues lets a finished loop go, pipe and all."""

    __slots__ = ("_cq", "_server", "_futures", "_token", "_reading")

    def __init__(self, server: Any):
        self._cq = _core._CompletionQueue()
        self._server = server
        self._futures: dict[int, asyncio.Future] = {}
        self._token = 0
        self._reading = False

    def submit(self, loop: asyncio.AbstractEventLoop, actor_id: int, feeds: Mapping[str, Any], done: Any,
               version: str | None) -> asyncio.Future:
        token = self._token
        self._token += 1
        self._cq.submit(self._server, token, actor_id, feeds, done, version)  # raises on bad input
        fut = loop.create_future()
        self._futures[token] = fut
        if not self._reading:
            loop.add_reader(self._cq.fd, self._drain, loop)
            self._reading = True
        return fut

    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        futures = self._futures
        for token, value in self._cq.drain(self._server):
            fut = futures.pop(token, None)
            if fut is None or fut.cancelled():
                continue
            if isinstance(value, BaseException):
                fut.set_exception(value)
            else:
                fut.set_result(value)
        if not futures:
            loop.remove_reader(self._cq.fd)
            self._reading = False


def _state_pairs(state: Any) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """state: {in: out} or {in: (out, batch_axis)} -> pairs, explicit axes."""
    pairs: list[tuple[str, str]] = []
    axes: dict[str, int] = {}
    if not state:
        return pairs, axes
    if not isinstance(state, Mapping):
        raise TypeError("state must map each recurrent-state input to the output carrying its next value")
    for k, v in state.items():
        if isinstance(v, (tuple, list)):
            out, axis = v
            axes[str(k)] = int(axis)
        else:
            out = v
        pairs.append((str(k), str(out)))
    return pairs, axes


class InferenceServer:
    """Batches many actors' steps through one model.

    Args:
        model_or_session: a :class:`Session`, or anything ``Session()`` loads (path,
            bytes, ``onnx.ModelProto``); the server uses (and keeps alive) the session.
        max_batch: most rows in one run.
        max_wait_us: a batch runs this long after its first request at the latest,
            or, for requests that queued while every worker was busy, this long after a
            worker came free (so the actors of the batch that just ran can join them).
            It runs earlier when it reaches ``max_batch`` rows or when every connected
            actor has a request waiting.
        state: ``{state_input: next_state_output}``, e.g. ``{"h0": "hn", "c0": "cn"}``.
            The server keeps each actor's state per row, feeds it, and stores the next
            value. The batch axis of a state input is the dim whose symbolic name is the
            observation's batch symbol (ONNX LSTM's ``[layers, batch, hidden]`` works),
            else axis 0; give ``{"h0": ("hn", 1)}`` to set it explicitly.
        threads: compute threads of a session the server loads (ignored for a Session).
        workers: threads running batches (1 is right unless several versions run at once).
        max_queue_rows: most rows waiting (default max(1024, 4 * max_batch)).
        queue_full: ``"block"`` (wait for room) or ``"raise"`` (QueueFullError).
        pad_batches: round batch sizes up to buckets so the session compiles a
            bounded number of plans; pad rows are zeros and are dropped. On the CPU
            the buckets are fine (every size to 16, then eight an octave: 18, 20, ...,
            32, 36, ...: under 12.5% padding, 64 sizes up to 1024); on a device coarse
            (1, 2, 4, 8, 12, 16, 24, ...: each size is a CUDA graph and cuDNN plans).
            Turn off for models that mix rows.
        split_batches: run a batch as slices of rows side by side, one thread each
            (data parallel: better cache use and no per-layer thread hand-offs),
            instead of one run with the session's intra-op threads. Each slice keeps
            at least ``min_slice_us`` of work (from measured run times), so cheap
            batches still run whole. Like ``pad_batches``, assumes rows are independent.
            Ignored on a GPU, which runs each batch whole.
        min_slice_us: least work per slice (0: one slice per thread, or per row).
        copy_threads: threads that copy a batch's observation rows into its inputs when
            a batch holds 2 MB of them or more (large observations: Atari frames are
            113 KB a row in float32). 0 (default): on a device, up to 4 (half the physical
            cores); on the CPU, the slice threads. 1: the batching thread alone. On a
            device the rows are gathered into page-locked memory, so the run moves them
            to the GPU with one DMA.
        device: where a session the server loads runs (``"cpu"``, ``"cuda"``); see
            ``Session``. With ``"cuda"``, ``workers=2`` lets one batch's copies overlap
            another's compute.
        warmup: run every padded batch size once at start (see :meth:`warmup`), so
            that the first requests do not wait for plans to be built. ``None`` (the
            default) warms up when the session runs channels-last half-precision convs on
            cuDNN, whose first run of a new batch size costs 20-75 ms (IMPALA on an H100:
            a cold 256-actor server stalls for its first seconds; warm-up takes 0.7 s at
            start), and not otherwise.
        precision, keep_fp32: as for ``Session`` (``"fp16"`` / ``"bf16"`` on a device);
            ignored when a ``Session`` is passed.
        base_version: tag of the session's own weights in the version pool (the
            weights it holds when the server starts; a later ``Session.refit`` does not
            change the server's versions: use ``server.refit``).

    Requests: ``infer(actor_id, feeds, done=False, version=None)`` blocks and returns
    ``{output_name: array}`` for this actor's rows; ``submit`` returns a
    :class:`ServerFuture`; ``await infer_async(...)`` is the same step for actors that
    are asyncio coroutines (the fastest in-process form: see ``infer_async``).
    ``feeds`` holds the non-state inputs only, rows on axis 0 (one env or a small
    vector of envs; an actor keeps its row count until ``release``).
    State outputs are returned too (this actor's slice, batch axis as in the model)
    and are also consumed by the server. ``done`` (a bool or one flag per row) zeroes
    the state of those rows before the step. A recurrent actor has at most one
    request in flight. Actor ids are ints in ``[0, 2**62)``. An actor's recurrent state
    does not depend on the version it names: switching versions mid-episode carries
    the state over (``reset`` to start fresh). Requests are grouped into batches per
    version (and per feature shape); a batch never mixes weights.
    """

    def __init__(
        self,
        model_or_session: Any,
        *,
        max_batch: int = 256,
        max_wait_us: int = 500,
        state: Mapping[str, Any] | None = None,
        threads: int | None = None,
        workers: int = 1,
        max_queue_rows: int | None = None,
        queue_full: str = "block",
        pad_batches: bool = True,
        base_version: str = "base",
        split_batches: bool = True,
        min_slice_us: float = 30.0,
        copy_threads: int = 0,
        device: str = "cpu",
        warmup: bool | None = None,
        precision: str = "fp32",
        keep_fp32: Sequence[str] | None = None,
    ):
        if queue_full not in ("block", "raise"):
            raise _core.InputError(f"queue_full must be 'block' or 'raise', got {queue_full!r}")
        if isinstance(model_or_session, _core._Session):
            session = model_or_session
        else:
            session = Session(model_or_session, threads=threads, device=device,
                              precision=precision, keep_fp32=keep_fp32)
        self.session = session
        pairs, axes = _state_pairs(state)
        self._server = _core._InferenceServer(
            session, int(max_batch), int(max_wait_us), pairs, axes, int(workers),
            int(max_queue_rows or 0), queue_full == "block", bool(pad_batches), str(base_version),
            bool(split_batches), float(min_slice_us), int(copy_threads),
        )
        self.state = dict(pairs)
        self.max_batch = int(max_batch)
        self._shm_names: list[str] = []
        self._lock = threading.Lock()
        self._loop_queues: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        if warmup is None:
            warmup = "layout_nhwc" in session.describe()
        if warmup:
            self.warmup()

    # ---- requests
    def infer(self, actor_id: int, feeds: Mapping[str, Any], *, done: Any = False,
              version: str | None = None) -> dict:
        """One step of one actor (blocks). Returns this actor's rows of every output."""
        return self._server.infer(actor_id, feeds, done, version)

    def submit(self, actor_id: int, feeds: Mapping[str, Any], *, done: Any = False,
               version: str | None = None) -> ServerFuture:
        """Queues one step and returns a future. Keep ``feeds`` unchanged until it is done."""
        return ServerFuture(self._server.submit(actor_id, feeds, done, version))

    async def infer_async(self, actor_id: int, feeds: Mapping[str, Any], *, done: Any = False,
                          version: str | None = None) -> dict:
        """``infer`` for actors that are asyncio coroutines: awaits the step without
        blocking the event loop. Bad feeds, a closed server or a full queue
        (``queue_full="raise"``) raise at once; errors of the run raise from the await.

        In one process, many actors as coroutines on one thread step much faster
        than as threads: each blocking ``infer`` of a thread costs a GIL hand-off,
        while the coroutines of one loop get all the results of a batch in one
        wake-up. Cancelling the await does not cancel the step: it still runs and
        advances the actor's recurrent state. Keep ``feeds`` unchanged until the
        await returns (the server reads them in place)."""
        loop = asyncio.get_running_loop()
        q = self._loop_queues.get(loop)
        if q is None:
            with self._lock:
                q = self._loop_queues.get(loop)
                if q is None:
                    q = self._loop_queues[loop] = _LoopQueue(self._server)
        return await q.submit(loop, actor_id, feeds, done, version)

    def warmup(self) -> int:
        """Runs every padded batch size up to ``max_batch`` once on zeros (the latest
        version's weights; ``workers`` runs at a time), so that the session's plans,
        run contexts and CUDA graphs exist before the first request. A new batch size
        otherwise costs its first batch a plan build (a few ms; up to a second for
        cuDNN convolutions under load, see ``bench/notes/cuda.md``). Returns the
        number of batch sizes run: 0 without ``pad_batches`` or when an input's
        per-row shape is not fixed. Actors, their state and the stats are untouched.
        On the CPU, with its fine buckets, that is 48 sizes up to 256 rows (IMPALA+LSTM
        on 2 cores: 1.7 s at start)."""
        return self._server.warmup()

    def reset(self, actor_id: int) -> None:
        """Zeroes an actor's recurrent state (takes effect at its next step)."""
        self._server.reset(actor_id)

    def release(self, actor_id: int) -> None:
        """Forgets an actor: drops its state and stops counting it as connected
        (a connected actor that stops stepping makes batches wait max_wait_us)."""
        self._server.release(actor_id)

    # ---- weight versions
    def add_version(self, tag: str, weights: Mapping[str, Any], *, base: str | None = None,
                    strict: bool = False, check_finite: bool = False) -> None:
        """Adds version ``tag``: ``base`` (default the latest) with ``weights`` replaced.
        It becomes the latest, i.e. the default for requests naming no version."""
        self._server.add_version(str(tag), _arrays(weights), bool(strict), bool(check_finite), base or "")

    def remove_version(self, tag: str) -> None:
        """Removes a version; requests already queued for it still run on it."""
        self._server.remove_version(str(tag))

    def refit(self, weights: Mapping[str, Any], *, version: str | None = None,
              strict: bool = False, check_finite: bool = False):
        """Replaces weights of one version (default: the latest) atomically. Other
        versions never pause; requests queued or running keep the weights they had."""
        from .session import RefitReport

        updated, ignored = self._server.refit(_arrays(weights), version or "", bool(strict),
                                              bool(check_finite))
        return RefitReport(list(updated), list(ignored), 0)

    @property
    def versions(self) -> list[str]:
        return list(self._server.versions)

    @property
    def latest(self) -> str:
        return self._server.latest

    @property
    def feed_inputs(self) -> list[str]:
        """The inputs an actor feeds (the model's inputs minus the state inputs)."""
        return list(self._server.feed_inputs)

    # ---- cross-process
    def serve_shm(self, name: str | None = None, *, max_clients: int = 64, max_rows: int | None = None,
                  client_timeout: float = 60.0) -> str:
        """Serves actors in other processes of this machine through shared memory
        segment ``name`` (default: a fresh one); returns the name to give
        ``kaiwu_infer.connect``. ``max_rows``: most rows per client request (default
        min(max_batch, 64)). A client whose process died is reclaimed within ~0.1 s;
        one silent for ``client_timeout`` seconds (0: never) is reclaimed too, its
        state dropped."""
        if name is None:
            name = f"kaiwu_srv_{os.getpid()}_{id(self) & 0xFFFFFF:x}_{len(self._shm_names)}"
        rows = int(max_rows) if max_rows else min(self.max_batch, 64)
        n = self._server.serve_shm(str(name), int(max_clients), rows, float(client_timeout))
        self._shm_names.append(n)
        return n

    # ---- stats and lifetime
    def stats(self) -> dict:
        """Throughput (rows_per_s, requests_per_s over elapsed_s), batch_rows_hist
        {rows: batches}, queue_wait_p50_us / _p99_us (recent requests), run_mean_us,
        sliced_batches (batches run as slices side by side), per-version request and row
        counts, connected actors, queued and running requests. Where a batch's time goes,
        mean per batch in us: gather_mean_us (rows copied into the inputs), session_mean_us
        (the runs, device copies included), scatter_mean_us (rows handed to requests),
        finish_mean_us (callers woken; shared-memory results copied into the slots);
        gathered_bytes (feed bytes copied, padding excluded), parallel_gathers (batches
        copied on several threads) and pinned_inputs (batches
        gather into page-locked memory: a device session)."""
        return self._server.stats()

    def reset_stats(self) -> None:
        self._server.reset_stats()

    def close(self) -> None:
        """Finishes the batches running, fails queued requests with ServerClosedError,
        and removes the shared-memory segments."""
        self._server.close()

    @property
    def closed(self) -> bool:
        return self._server.closed

    def __enter__(self) -> "InferenceServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        srv = getattr(self, "_server", None)
        if srv is not None:
            try:
                srv.close()
            except Exception:  # noqa: BLE001 - interpreter teardown
                pass


def _arrays(weights: Mapping[str, Any]) -> dict:
    if not isinstance(weights, Mapping):
        raise _core.RefitError("weights must be a mapping of names to arrays")
    return {str(k): _as_array(v) for k, v in weights.items()}
