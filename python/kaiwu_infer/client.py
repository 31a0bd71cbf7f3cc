"""Actors in other processes: a client of an InferenceServer's shared-memory segment."""

from __future__ import annotations

from typing import Any, Mapping

from . import _core

__all__ = ["connect", "Client"]


class Client:
    """One actor's connection (one slot of the segment). Not thread-safe: use one
    client per actor. ``infer(feeds, done=False, version=None)`` copies the rows into
    the slot, wakes the server, sleeps until the answer and returns the outputs
    (copies by default; ``copy=False`` returns views into the slot, valid until the
    next call). To skip the input copy, write into ``input_views()[i][:rows]`` and
    call ``step(rows)``. The server keeps this client's recurrent state;
    ``reset()`` zeroes it at the next step."""

    def __init__(self, name: str, *, timeout: float = 10.0):
        self._c = _core._ShmClient(str(name), float(timeout))
        self._reset = False

    @property
    def inputs(self) -> list[str]:
        return list(self._c.inputs)

    @property
    def outputs(self) -> list[str]:
        return list(self._c.outputs)

    @property
    def max_rows(self) -> int:
        return self._c.max_rows

    def infer(self, feeds: Mapping[str, Any], *, done: Any = False, version: str | None = None,
              copy: bool = True) -> dict:
        done = self._take_done(done)
        return self._c.infer(feeds, done, version, copy)

    def step(self, rows: int, *, done: Any = False, version: str | None = None,
             copy: bool = True) -> dict:
        done = self._take_done(done)
        return self._c.step(int(rows), done, version, copy)

    def input_views(self) -> list:
        """numpy views of the slot's input areas, ``max_rows`` rows each."""
        return self._c.input_views()

    def reset(self) -> None:
        self._reset = True

    def heartbeat(self) -> None:
        """Marks this client alive (needed only when idle longer than the server's
        client_timeout between steps)."""
        self._c.heartbeat()

    def close(self) -> None:
        """Gives the slot back; the server drops this client's state."""
        self._c.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _take_done(self, done: Any) -> Any:
        if self._reset:
            self._reset = False
            return True
        return done


def connect(name: str, *, timeout: float = 10.0) -> Client:
    """Connects to the server serving shared-memory segment ``name``
    (``InferenceServer.serve_shm``), waiting up to ``timeout`` s for it to appear."""
    return Client(name, timeout=timeout)
