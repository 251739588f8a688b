"""The set of event seqs a follower has delivered, in bounded memory.

Held as disjoint, sorted, inclusive ranges: an in-order stream is one range per segment (a resumed
segment's seqs jump to a new range), and an event that arrives out of order opens a small one. A
server that sends a pathological pattern (every other seq) could grow the ranges without end, so
past :data:`MAX_RANGES` the two lowest ranges merge, and the seqs between them count as
delivered from then on (:attr:`SeqSet.forgotten` counts how many): memory stays bounded, and a
late event in that old gap is the only thing a follower could then mistake for a duplicate.
"""

from __future__ import annotations

import bisect
from typing import Final

__all__ = ["MAX_RANGES", "SeqSet"]

MAX_RANGES: Final = 4096


class SeqSet:
    """Delivered seqs: ``add(seq)`` is True for a new seq, False for one already delivered."""

    def __init__(self, max_ranges: int = MAX_RANGES) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []  # inclusive; _starts[i] <= _ends[i] < _starts[i + 1] - 1
        self._max_ranges = max(2, max_ranges)
        self.forgotten = 0  # seqs never delivered that merging ranges now counts as delivered

    def __contains__(self, seq: int) -> bool:
        i = bisect.bisect_right(self._starts, seq) - 1
        return i >= 0 and seq <= self._ends[i]

    @property
    def ranges(self) -> int:
        return len(self._starts)

    def add(self, seq: int) -> bool:
        starts, ends = self._starts, self._ends
        if ends and seq == ends[-1] + 1:  # the usual case: the next seq of the last range
            ends[-1] = seq
            return True
        i = bisect.bisect_right(starts, seq) - 1
        if i >= 0 and seq <= ends[i]:
            return False
        joins_left = i >= 0 and ends[i] == seq - 1
        joins_right = i + 1 < len(starts) and starts[i + 1] == seq + 1
        if joins_left and joins_right:
            ends[i] = ends[i + 1]
            del starts[i + 1], ends[i + 1]
        elif joins_left:
            ends[i] = seq
        elif joins_right:
            starts[i + 1] = seq
        else:
            starts.insert(i + 1, seq)
            ends.insert(i + 1, seq)
            if len(starts) > self._max_ranges:
                self.forgotten += starts[1] - ends[0] - 1
                ends[0] = ends[1]
                del starts[1], ends[1]
        return True
