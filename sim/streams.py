"""Amaranth-simulator stream drivers and monitors (async testbenches).

Payloads are pre-packed to integers once (:func:`pack`) because building a ``data`` layout
constant per beat costs ~160 us in the simulator. Idle and backpressure come from seeded
random patterns so every run is reproducible.
"""

from __future__ import annotations

import numpy as np
from amaranth.hdl import Shape, Value
from amaranth.lib import data

__all__ = ["pack", "unpack", "Pattern", "put_all", "get_all", "stream_put", "stream_get"]


def pack(layout, fields: dict) -> int:
    """Integer bit pattern of ``fields`` in ``layout`` (a ``data.Layout`` or a shape)."""
    if isinstance(layout, data.Layout):
        return layout.const(fields).as_value().value
    return Shape.cast(layout).const(fields).value if not isinstance(fields, int) else fields


def unpack(layout, value: int):
    """Fields of ``value`` in ``layout`` as Python integers, signed as declared: a dict for a
    struct layout, a list for an array layout, an int for a plain shape (recursively)."""
    if not isinstance(layout, data.Layout):
        shape = Shape.cast(layout)
        value &= (1 << shape.width) - 1
        if shape.signed and shape.width and value >> (shape.width - 1):
            value -= 1 << shape.width
        return value
    fields = [(name, field) for name, field in layout]
    out = {name: unpack(field.shape, value >> field.offset) for name, field in fields}
    if isinstance(layout, data.ArrayLayout):
        return [out[i] for i in range(layout.length)]
    return out


class Pattern:
    """Random stall pattern: each cycle is a stall with probability ``stall`` (0 <= stall < 1).

    ``Pattern(0)`` never stalls. Seeded, so a failing run repeats.
    """

    def __init__(self, stall: float = 0.0, seed: int = 0):
        if not 0 <= stall < 1:
            raise ValueError(f"stall must be in [0, 1), not {stall!r}")
        self.stall = stall
        self._rng = np.random.default_rng(seed)

    def idle_cycles(self) -> int:
        """Number of stall cycles before the next beat (geometric distribution)."""
        if self.stall == 0:
            return 0
        return int(self._rng.geometric(1 - self.stall)) - 1


async def stream_put(ctx, stream, payload) -> None:
    """Offer one beat and return after the cycle it was accepted in."""
    ctx.set(stream.valid, 1)
    ctx.set(Value.cast(stream.payload), payload)
    await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)


async def stream_get(ctx, stream):
    """Accept one beat; returns its payload as an integer."""
    ctx.set(stream.ready, 1)
    (payload,) = await ctx.tick().sample(Value.cast(stream.payload)).until(stream.valid)
    ctx.set(stream.ready, 0)
    return payload


async def put_all(ctx, stream, payloads, pattern: Pattern | None = None) -> None:
    """Drive pre-packed ``payloads`` (integers) into ``stream``, with random idle cycles."""
    pattern = pattern or Pattern()
    for payload in payloads:
        idle = pattern.idle_cycles()
        if idle:
            await ctx.tick().repeat(idle)
        await stream_put(ctx, stream, payload)


async def get_all(ctx, stream, count: int, pattern: Pattern | None = None,
                  on_beat=None, cycles: list | None = None) -> list:
    """Collect ``count`` payloads (integers) from ``stream`` with random backpressure.

    ``on_beat(index, payload)`` is called as each beat arrives (e.g. a scoreboard check);
    ``cycles``, if given, gets the cycle number each beat was taken at.
    """
    pattern = pattern or Pattern()
    out = []
    cycle = 0
    ctx.set(stream.ready, 0)
    while len(out) < count:
        idle = pattern.idle_cycles()
        if idle:
            await ctx.tick().repeat(idle)
            cycle += idle
        ctx.set(stream.ready, 1)
        while True:
            _, _, valid, payload = await ctx.tick().sample(stream.valid,
                                                           Value.cast(stream.payload))
            cycle += 1
            if valid:
                break
        ctx.set(stream.ready, 0)
        if on_beat is not None:
            on_beat(len(out), payload)
        if cycles is not None:
            cycles.append(cycle)
        out.append(payload)
    return out
