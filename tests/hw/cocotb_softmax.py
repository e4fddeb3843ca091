"""cocotb testbenches of hw/softmax.py (run by test_softmax.py and bench/softmax.py).

Parameters (``sim.cocotb_streams.test_params``): ``cfg`` (an ``AttnConfig.to_dict()``),
``seed``, ``count`` (random rows after the adversarial ones); for ``throughput``: ``length``,
``rows`` and ``out`` (a JSON file the figures are written to).
"""

import json

import cocotb
import numpy as np

from attn.config import AttnConfig
from sim.cocotb_streams import StreamSink, StreamSource, start_clock, test_params
from sim.streams import Pattern
from tests.hw.test_softmax import check_output, input_payloads, make_rows


async def run_rows(dut, cfg, rows, stall_in, stall_out, seed):
    payloads = input_payloads(cfg, rows)
    await start_clock(dut)
    source = StreamSource(dut, "i_stream", Pattern(stall_in, seed + 1))
    sink = StreamSink(dut, "o_stream", Pattern(stall_out, seed + 2))
    cocotb.start_soon(source.send(payloads))
    got = await sink.receive(len(payloads))
    check_output(cfg, rows, got)
    return sink.cycles


@cocotb.test()
@cocotb.parametrize(stalls=[(0.0, 0.0), (0.5, 0.5), (0.9, 0.2), (0.2, 0.9)])
async def bit_exact(dut, stalls):
    """Adversarial and random rows against golden, with random idle and backpressure."""
    params = test_params()
    cfg = AttnConfig.from_dict(params["cfg"])
    seed = params["seed"] + int(100 * stalls[0] + 10 * stalls[1])
    rows = make_rows(cfg, seed=seed, count=params["count"])
    await run_rows(dut, cfg, rows, stalls[0], stalls[1], seed)


@cocotb.test(skip=True)
async def throughput(dut):
    """``rows`` random rows of ``length`` without stalls: sustained elements per cycle at the
    output, and the latency of the first row (checked against golden too). Selected by name
    (``testcase="throughput"``) from bench/softmax.py."""
    params = test_params()
    cfg = AttnConfig.from_dict(params["cfg"])
    rng = np.random.default_rng(params["seed"])
    length, count = params["length"], params["rows"]
    lo, hi = -(1 << (cfg.score_bits - 1)), (1 << (cfg.score_bits - 1)) - 1
    rows = []
    for _ in range(count):
        t = np.clip(np.rint(rng.normal(0, 4 << cfg.score_frac_bits, size=length)), lo, hi)
        rows.append((t.astype(np.int64), rng.random(length) < (0.2 if cfg.masks else 0.0)))
    cycles = await run_rows(dut, cfg, rows, 0.0, 0.0, params["seed"])
    beats = len(cycles)
    result = {
        "length": length, "rows": count, "elements": beats,
        "first_output_cycle": cycles[0],
        "cycles_first_to_last_output": cycles[-1] - cycles[0],
        "elements_per_cycle": (beats - 1) / (cycles[-1] - cycles[0]) if beats > 1 else 1.0,
    }
    with open(params["out"], "w") as f:
        json.dump(result, f)
