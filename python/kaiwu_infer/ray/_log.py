"""The weight log of a pool of Ray inference servers: every refit, add_version and
remove_version in order, each weight set as an ObjectRef into Ray's object store.

A server actor that Ray restarts replays the log in its constructor, so it comes
back with the versions and weights its peers have. Entries are numbered; a server
skips entries it already applied (a refit that raced a restart is not applied twice).
The log compacts itself: a refit of version v that replaced every weight makes the
earlier weight sets of v unreachable, unless a version added in between copied from
v (add_version without a full weight set takes its base's weights at that moment).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LogEntry:
    seq: int
    op: str                 # "refit", "add", "remove"
    tag: str | None         # version (None for a refit: the latest)
    base: str | None        # add_version's base
    box: list | None        # [ObjectRef] (boxed: Ray resolves only top-level refs)
    strict: bool = False
    check_finite: bool = False
    full: bool = False      # the weights replaced every engine weight


class WeightLog:
    """Plain class; ``ray.remote(num_cpus=0)(WeightLog)`` makes the log actor."""

    def __init__(self, base_version: str = "base") -> None:
        self._entries: list[LogEntry] = []
        self._seq = 0
        self._latest = base_version

    def append(self, op: str, tag: str | None, base: str | None, box: list | None,
               strict: bool = False, check_finite: bool = False) -> LogEntry:
        """Records an operation before the servers apply it; returns the entry (its
        ``tag`` and ``base`` resolved: None means the latest version at this point)."""
        self._seq += 1
        if op == "refit" and tag is None:
            tag = self._latest  # resolve now: a later add_version moves "latest"
        if op == "add":
            base = base or self._latest
            self._latest = tag
        entry = LogEntry(self._seq, op, tag, base, box, strict, check_finite)
        self._entries.append(entry)
        if op == "remove":
            self._compact_removed(tag)
        return entry

    def set_latest(self, tag: str) -> None:
        """The servers' latest version after a remove_version."""
        self._latest = tag

    def mark_full(self, seq: int) -> None:
        """The servers reported that entry ``seq`` replaced every weight."""
        for i, e in enumerate(self._entries):
            if e.seq == seq:
                e.full = True
                if e.op == "add":
                    e.base = None  # needs no base: replays even after its base is removed
                self._compact_before(i)
                return

    def discard(self, seq: int) -> None:
        """Forgets entry ``seq`` (the servers refused it, e.g. a RefitError)."""
        self._entries = [e for e in self._entries if e.seq != seq]

    def entries(self) -> list[LogEntry]:
        return list(self._entries)

    def size(self) -> int:
        return len(self._entries)

    # ---- compaction
    def _compact_before(self, i: int) -> None:
        """Entry i replaced every weight of its version: drop the weight sets of
        that version before it, back to the nearest partial add_version (which may
        have copied them) or the version's own add."""
        tag = self._entries[i].tag
        keep: list[LogEntry] = []
        blocked_from = 0
        for j in range(i - 1, -1, -1):
            e = self._entries[j]
            if e.op == "add" and not e.full and e.tag != tag:
                blocked_from = j + 1
                break
        for j, e in enumerate(self._entries):
            drop = (blocked_from <= j < i and e.tag == tag and e.op == "refit")
            if not drop:
                keep.append(e)
        self._entries = keep

    def _compact_removed(self, tag: str) -> None:
        """After remove_version(tag): its entries go unless a later partial
        add_version may have copied from it."""
        last_partial_add = -1
        for j, e in enumerate(self._entries):
            if e.op == "add" and not e.full and e.tag != tag:
                last_partial_add = j
        keep = [e for j, e in enumerate(self._entries)
                if not (e.tag == tag and j > last_partial_add and e.op != "remove")]
        if not any(e.tag == tag and e.op != "remove" for e in keep):
            keep = [e for e in keep if e.tag != tag]  # nothing of it left to remove
        self._entries = keep

    def __repr__(self) -> str:  # for debugging a replay
        return "WeightLog(" + ", ".join(f"{e.seq}:{e.op}:{e.tag}{'*' if e.full else ''}"
                                        for e in self._entries) + ")"
