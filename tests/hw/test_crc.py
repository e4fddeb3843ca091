"""The gateware CRC step equals the protocol's reference CRC for every byte value."""

import random

import pytest
from amaranth import Module, Signal
from amaranth.sim import Simulator

from attn import protocol as P
from hw.crc import crc16_next


def test_crc16_next_matches_reference():
    m = Module()
    crc, byte, out = Signal(16), Signal(8), Signal(16)
    m.d.comb += out.eq(crc16_next(crc, byte))
    rng = random.Random(0)
    cases = [(P.CRC_INIT, b) for b in range(256)] + \
        [(rng.randrange(1 << 16), rng.randrange(256)) for _ in range(300)]
    got = []

    async def bench(ctx):
        for c, b in cases:
            ctx.set(crc, c)
            ctx.set(byte, b)
            got.append(ctx.get(out))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert got == [P.crc16(bytes([b]), c) for c, b in cases]


def test_crc16_next_widths():
    with pytest.raises(ValueError, match="needs a 16-bit crc and an 8-bit byte, not 8 and 8"):
        crc16_next(Signal(8), Signal(8))
