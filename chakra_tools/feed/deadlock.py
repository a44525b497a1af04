"""A feeder whose nodes remain but none can ever issue (feeder.py's `check_deadlock`): what is
said, naming each blocked node and what it still waits for.

`DeadlockCheck` is a part of `ETFeeder` (its window, its ready heap, its reading), kept apart so
the feeder reads as its contract.
"""

from __future__ import annotations

from chakra_tools.core.errors import ChakraToolsError


class DeadlockError(ChakraToolsError):
    """Nodes remain but none can ever issue: names each blocked node and what it waits for."""

    exit_code = 3


class DeadlockCheck:
    """Finding a feeder stuck for good, and saying why."""

    def blocked(self, limit: int = 10) -> list[tuple[int, list[int]]]:
        """Up to `limit` blocked nodes with the dependencies each still waits for."""
        out = []
        for nid in sorted(self._loaded):
            rec = self._loaded[nid]
            if rec.state == 0:
                waits = [d for d in rec.deps if d not in self._finished]
                out.append((nid, waits))
                if len(out) >= limit:
                    break
        return out

    def check_deadlock(self) -> None:
        """Raise `DeadlockError` if nodes remain, none is issuable and none is in flight."""
        self._fill()
        if self._ready or self._in_flight or not self._unfinished:
            return
        while self._read_one():
            if self._ready:
                return
        if self._ready or not self._unfinished:
            return
        raise DeadlockError(self.deadlock_message())

    def deadlock_message(self) -> str:
        parts = [f"%{nid} {self.info(nid).name!r} waits for "
                 + ", ".join(f"%{d}" for d in waits) for nid, waits in self.blocked()]
        more = self._unfinished - len(parts)
        tail = f" (and {more} more)" if more > 0 else ""
        return (f"{self._where()}deadlock: {self._unfinished} nodes left, none issuable, none in "
                f"flight: " + "; ".join(parts) + tail)
