"""Exact comparison of hardware results with golden/: the one place mismatches are reported.

A mismatch raises :class:`AssertionError` whose message holds both arrays and the first
differing index (and the cycle the value left the hardware, where known).
"""

from __future__ import annotations

import numpy as np

__all__ = ["assert_equal", "first_difference", "Scoreboard"]


def first_difference(expected, actual):
    """Index (tuple) of the first element where the arrays differ, or ``None``."""
    diff = np.argwhere(np.asarray(expected) != np.asarray(actual))
    return None if len(diff) == 0 else tuple(int(i) for i in diff[0])


def _format(arr):
    with np.printoptions(threshold=4096, linewidth=120):
        return np.array2string(np.asarray(arr))


def assert_equal(name: str, expected, actual, cycles=None) -> None:
    """Assert that ``actual`` equals ``expected`` integer for integer.

    ``cycles``, if given, is an array of the same shape as ``actual`` holding the cycle each
    value was observed at.
    """
    expected = np.asarray(expected, dtype=np.int64)
    actual = np.asarray(actual, dtype=np.int64)
    if expected.shape != actual.shape:
        raise AssertionError(f"{name}: shape mismatch, expected {expected.shape}, "
                             f"got {actual.shape}\nexpected:\n{_format(expected)}\n"
                             f"actual:\n{_format(actual)}")
    idx = first_difference(expected, actual)
    if idx is None:
        return
    where = f" at cycle {int(np.asarray(cycles)[idx])}" if cycles is not None else ""
    count = int(np.count_nonzero(expected != actual))
    raise AssertionError(
        f"{name}: {count} of {expected.size} values differ; first at index {idx}{where}: "
        f"expected {expected[idx]}, got {actual[idx]}\n"
        f"expected:\n{_format(expected)}\nactual:\n{_format(actual)}")


class Scoreboard:
    """In-order checker: expected items are queued, observed items are compared as they come.

    Each item is an integer array (or scalar); :meth:`observe` raises on the first mismatch.
    """

    def __init__(self, name: str):
        self.name = name
        self._expected = []
        self.checked = 0

    def expect(self, item) -> None:
        self._expected.append(np.asarray(item))

    def observe(self, item, cycle=None) -> None:
        if not self._expected:
            raise AssertionError(f"{self.name}: unexpected item {item!r} at cycle {cycle} "
                                 f"(nothing more was expected)")
        expected = self._expected.pop(0)
        label = f"{self.name} item {self.checked}"
        if cycle is not None:
            label += f" (cycle {cycle})"
        assert_equal(label, expected, item)
        self.checked += 1

    @property
    def pending(self) -> int:
        return len(self._expected)

    def check_done(self) -> None:
        if self._expected:
            raise AssertionError(f"{self.name}: {len(self._expected)} expected item(s) never "
                                 f"arrived after {self.checked} matched")
