"""cocotb 2 stream drivers and monitors for the Verilog that Amaranth generates.

A stream ``s`` of a component appears in Verilog as ports ``s__valid``, ``s__ready`` and
``s__payload`` (the whole ``data`` layout as one vector; pack and unpack it with
:func:`sim.streams.pack` / :func:`sim.streams.unpack`). Inputs are driven on the falling clock
edge and handshakes are read in the ReadOnly phase of the same time step, which behaves the
same on Icarus and Verilator.
"""

from __future__ import annotations

import json
import os

from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly

from .streams import Pattern

__all__ = ["test_params", "start_clock", "StreamSource", "StreamSink"]


def test_params() -> dict:
    """Parameters passed by :func:`sim.cocotb_runner.run_cocotb` (a JSON file)."""
    path = os.environ.get("ATTN_TEST_PARAMS")
    if not path:
        return {}
    with open(path) as f:
        return json.load(f)


async def start_clock(dut, period_ns: int = 10):
    """Start the clock and pulse reset for two cycles. Create the :class:`StreamSource` and
    :class:`StreamSink` objects first: they drive ``valid``/``ready`` low, and an undriven
    (X) input during reset can leave X in the design's state on Icarus."""
    Clock(dut.clk, period_ns, unit="ns").start()
    dut.rst.value = 1
    for _ in range(2):
        await FallingEdge(dut.clk)
    dut.rst.value = 0


class _Port:
    def __init__(self, dut, name):
        self.valid = getattr(dut, f"{name}__valid")
        self.ready = getattr(dut, f"{name}__ready")
        self.payload = getattr(dut, f"{name}__payload")


class StreamSource:
    """Drives pre-packed integer payloads into input stream ``name`` of ``dut``."""

    def __init__(self, dut, name: str, pattern: Pattern | None = None):
        self.clk = dut.clk
        self.port = _Port(dut, name)
        self.pattern = pattern or Pattern()
        self.port.valid.value = 0
        self.sent = 0

    async def send(self, payloads) -> None:
        port = self.port
        await FallingEdge(self.clk)
        for payload in payloads:
            for _ in range(self.pattern.idle_cycles()):
                port.valid.value = 0
                await FallingEdge(self.clk)
            port.valid.value = 1
            port.payload.value = payload
            while True:
                await ReadOnly()
                accepted = bool(port.ready.value)
                await FallingEdge(self.clk)
                if accepted:
                    break
            self.sent += 1
        port.valid.value = 0


class StreamSink:
    """Collects integer payloads from output stream ``name`` of ``dut`` with backpressure.

    ``cycles`` records the clock cycle (counted from the first call) of each beat.
    """

    def __init__(self, dut, name: str, pattern: Pattern | None = None):
        self.clk = dut.clk
        self.port = _Port(dut, name)
        self.pattern = pattern or Pattern()
        self.port.ready.value = 0
        self.cycles = []

    async def receive(self, count: int, on_beat=None) -> list:
        port = self.port
        out = []
        cycle = 0
        await FallingEdge(self.clk)
        while len(out) < count:
            ready = self.pattern.idle_cycles() == 0
            port.ready.value = int(ready)
            await ReadOnly()
            if ready and port.valid.value:
                if not port.payload.value.is_resolvable:
                    raise AssertionError(f"{self.port.payload._name}: unresolved bits (X/Z) in "
                                         f"beat {len(out)} at cycle {cycle}: "
                                         f"{port.payload.value}")
                payload = int(port.payload.value)
                if on_beat is not None:
                    on_beat(len(out), payload)
                out.append(payload)
                self.cycles.append(cycle)
            await FallingEdge(self.clk)
            cycle += 1
        port.ready.value = 0
        return out
