"""cocotb testbench of the systolic array (run by test_systolic.py and bench/systolic.py).

Parameters (the JSON file named by ``ATTN_TEST_PARAMS``): ``preset`` and ``changes`` rebuild the
:class:`attn.AttnConfig` (so widths come from the config, not from here), ``tiles`` per stall
pattern, ``stalls`` as ``[[stall_in, stall_out], ...]``, ``seed``, optional ``max_k`` /
``fixed_k``, and optional ``report`` (a JSON file that receives cycle counts and wall time).
"""

import json
import time
import warnings

import cocotb
import numpy as np
from cocotb.triggers import FallingEdge

import attn
from golden.quant import matmul_exact
from hw.systolic import SystolicArray
from sim.cocotb_streams import StreamSink, StreamSource, start_clock, test_params
from sim.scoreboard import assert_equal
from sim.streams import Pattern
from tests.hw.test_systolic import random_tiles

PERIOD_NS = 10


@cocotb.test()
async def systolic_tiles(dut):
    params = test_params()
    cfg = attn.preset(params["preset"]).replace(**params.get("changes", {}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = SystolicArray.from_config(cfg)  # only for encode/decode; never elaborated
    await start_clock(dut, PERIOD_NS)
    report = []
    for n, (stall_in, stall_out) in enumerate(params["stalls"]):
        tiles = random_tiles(cfg, params["tiles"], seed=params["seed"] + n,
                             max_k=params.get("max_k"), fixed_k=params.get("fixed_k"))
        beats = [w for a, b in tiles for w in model.encode_tile(a, b)]
        expected = np.concatenate([matmul_exact(a, b.T) for a, b in tiles])
        expected_last = np.tile(np.arange(cfg.rows) == cfg.rows - 1, len(tiles))
        source = StreamSource(dut, "i_stream", Pattern(stall_in, 2 * n + 1))
        sink = StreamSink(dut, "o_stream", Pattern(stall_out, 2 * n + 2))
        start_ns = cocotb.utils.get_sim_time(unit="ns")
        wall = time.perf_counter()
        cocotb.start_soon(source.send(beats))
        got = await sink.receive(len(expected))
        wall = time.perf_counter() - wall
        cycles = round((cocotb.utils.get_sim_time(unit="ns") - start_ns) / PERIOD_NS)
        values, last = model.decode_rows(got)
        name = f"{cfg.rows}x{cfg.cols} stalls {stall_in}/{stall_out}"
        assert_equal(f"{name} results", expected, values)
        assert_equal(f"{name} last", expected_last.astype(np.int64), last)
        report.append({"stall_in": stall_in, "stall_out": stall_out, "tiles": len(tiles),
                       "beats": len(beats), "macs": int(sum(a.size * b.shape[0]
                                                            for a, b in tiles)),
                       "cycles": cycles, "wall_s": wall})
        await FallingEdge(dut.clk)
    if params.get("report"):
        with open(params["report"], "w") as f:
            json.dump(report, f)
