"""cocotb testbench of the pass-through (run by test_harness.py)."""

import cocotb

from sim.cocotb_streams import StreamSink, StreamSource, start_clock, test_params
from sim.scoreboard import assert_equal
from sim.streams import Pattern, pack, unpack
from tests.sim.passthrough import LAYOUT


@cocotb.test()
async def passthrough_in_order(dut):
    params = test_params()
    payloads = [pack(LAYOUT, {"value": v, "last": v % 5 == 0})
                for v in range(-params["count"] // 2, params["count"] // 2)]
    await start_clock(dut)
    source = StreamSource(dut, "i_stream", Pattern(params["stall_in"], 1))
    sink = StreamSink(dut, "o_stream", Pattern(params["stall_out"], 2))
    cocotb.start_soon(source.send(payloads))
    got = await sink.receive(len(payloads))
    assert_equal("passthrough", [unpack(LAYOUT, p)["value"] for p in payloads],
                 [unpack(LAYOUT, p)["value"] for p in got], cycles=sink.cycles)
