"""The attention core on its generated Verilog, in cocotb (Icarus or Verilator).

:func:`run_core_hdl` writes the core's Verilog, runs the cocotb test :func:`core_run` of this
module on it, and returns what the core produced; the comparison with golden/ happens in the
caller. The testbench streams pre-packed beats (:func:`sim.core_sim.pack_streams`) with random
stalls and writes the output beats, their cycles, the run's cycle count and the performance
counters to a JSON file.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly

from .cocotb_streams import StreamSink, StreamSource, start_clock, test_params
from .streams import Pattern

__all__ = ["run_core_hdl", "core_run"]


@cocotb.test()
async def core_run(dut):
    params = test_params()
    stall = params["stall"]
    start = StreamSource(dut, "start")      # drive every valid low before the reset
    results = []
    for run in range(params["runs"]):
        sources = [StreamSource(dut, f"{name}_stream", Pattern(stall, 10 * run + i))
                   for i, name in enumerate("pxw")]
        sink = StreamSink(dut, "o_stream", Pattern(stall, 10 * run + 9))
        if run == 0:
            await start_clock(dut)
        for source, name in zip(sources, "pxw"):
            cocotb.start_soon(source.send(params[name]))
        await start.send([params["start"]])
        got = await sink.receive(params["out_beats"])
        while True:
            await ReadOnly()
            if not int(dut.busy.value):
                break
            await FallingEdge(dut.clk)
        counters = int(dut.counters.value)
        names = params["counter_names"]
        results.append(dict(beats=[str(b) for b in got], beat_cycles=sink.cycles,
                            counters={n: (counters >> (32 * i)) & 0xFFFFFFFF
                                      for i, n in enumerate(names)}))
        await FallingEdge(dut.clk)
    Path(params["result_file"]).write_text(json.dumps(results))


def run_core_hdl(sim: str, cfg, model, x_int, *, causal=False, valid_len=None,
                 stall: float = 0.0, runs: int = 1, build_name: str | None = None):
    """Run the core on ``sim`` ("icarus" or "verilator"); returns (y, run info dict).

    The run info holds ``cycles``, ``counters``, ``beat_cycles`` and ``seconds`` (wall time of
    the simulation including the build).
    """
    from hw.core import COUNTERS, AttentionCore
    from hw.core_io import collect_output, core_streams

    from .cocotb_runner import BUILD, run_cocotb, write_verilog
    from .core_sim import pack_streams
    from .streams import unpack

    core = AttentionCore(cfg)
    streams = core_streams(cfg, model, x_int, causal=causal, valid_len=valid_len)
    shape = streams["shape"]
    packed = pack_streams(core, streams)
    name = build_name or f"core_{cfg.name}_{cfg.rows}x{cfg.cols}"
    path = write_verilog(core, BUILD / "verilog" / f"{name}.v", name="attention_core")
    result_file = BUILD / "cocotb" / sim / name / f"result_{os.getpid()}.json"
    result_file.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    run_cocotb(sim=sim, verilog_file=path, toplevel="attention_core",
               test_module="sim.core_cocotb", build_name=name,
               params=dict(packed, stall=stall, runs=runs, out_beats=shape.wpd * shape.seq_len,
                           counter_names=list(COUNTERS), result_file=str(result_file)))
    seconds = time.perf_counter() - start
    results = json.loads(result_file.read_text())
    result_file.unlink()
    layout = core.o_stream.payload.shape()
    last = results[-1]
    beats = [unpack(layout, int(b)) for b in last["beats"]]
    flags = [b["last"] for b in beats]
    if flags[-1] != 1 or any(flags[:-1]):
        raise AssertionError(f"{name}: 'last' must mark only the final output beat")
    y = collect_output(cfg, [b["y"] for b in beats], shape.seq_len, shape.d_model)
    info = dict(cycles=last["counters"]["cycles"], counters=last["counters"],
                beat_cycles=last["beat_cycles"], seconds=seconds,
                runs=[r["counters"] for r in results])
    return y, info
