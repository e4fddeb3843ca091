"""Benchmarks of the systolic matmul engine: utilization, simulator speed and synthesis.

Run ``python -m bench.systolic`` (``--quick`` for a short run, ``--synth`` to add FPGA builds,
which take minutes each; ``--only NAME ...`` picks synthesis builds by name). Prints tables and
writes ``build/bench/systolic.json``.

* Utilization: streams of tiles with a fixed reduction length ``K``, no stalls, in the Amaranth
  simulator (cycle-exact with the Verilog); every result is checked against golden/.
  ``ideal`` is ``MACs / PEs = tiles * K``; ``end-to-end`` divides it by the cycles from the
  first accepted beat to the last result row (fill and drain of the whole stream included);
  ``steady`` by the cycles from the first to the last accepted input beat (the sustained rate).
  ``latency`` is the cycles from accepting the first tile's ``last`` beat to its first row.
* Simulator speed: cycles per second of wall time while streaming tiles (``K = 64``), for the
  Amaranth simulator (elaboration excluded), cocotb + Icarus and cocotb + Verilator (build
  excluded; Python drives one beat per cycle).
* Synthesis: :func:`boards.synth.synthesize` out of context; LUT/FF/DSP and nextpnr fmax.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from amaranth.sim import Simulator

import attn
from golden.quant import matmul_exact, qmax, qmin
from hw.requant import Requantizer
from hw.systolic import SystolicArray
from sim.cocotb_runner import BUILD, REPO, run_cocotb, simulator_missing, write_verilog
from sim.scoreboard import assert_equal
from sim.streams import get_all, put_all

__all__ = ["utilization", "amaranth_speed", "cocotb_speed", "synth_builds", "main"]

OUT = BUILD / "bench" / "systolic.json"


def _config(shape, dsp="infer"):
    rows, cols = shape
    return attn.preset("default").replace(rows=rows, cols=cols, dsp=dsp)


def _tiles(cfg, count, k, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.integers(qmin(cfg.a_bits), qmax(cfg.a_bits) + 1, (cfg.rows, k)),
             rng.integers(qmin(cfg.b_bits), qmax(cfg.b_bits) + 1, (cfg.cols, k)))
            for _ in range(count)]


def utilization(shape, k, tiles, dsp="infer") -> dict:
    """Stream ``tiles`` tiles of reduction ``k`` through the array (Amaranth simulator, no
    stalls); returns cycle counts, utilization, latency and simulator speed."""
    cfg = _config(shape, dsp)
    dut = SystolicArray.from_config(cfg)
    stimulus = _tiles(cfg, tiles, k, seed=k)
    beats = [w for a, b in stimulus for w in dut.encode_tile(a, b)]
    n_rows = cfg.rows * tiles
    accepted, emitted, got = [], [], []

    async def producer(ctx):
        await put_all(ctx, dut.i_stream, beats)

    async def consumer(ctx):
        got.extend(await get_all(ctx, dut.o_stream, n_rows))

    async def monitor(ctx):
        cycle = 0
        i, o = dut.i_stream, dut.o_stream
        async for _, _, iv, ir, ov, orr in ctx.tick().sample(i.valid, i.ready, o.valid,
                                                             o.ready):
            if iv and ir:
                accepted.append(cycle)
            if ov and orr:
                emitted.append(cycle)
            cycle += 1
            if len(emitted) == n_rows:
                return

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for bench in (producer, consumer, monitor):
        sim.add_testbench(bench)
    start = time.perf_counter()
    sim.run()
    wall = time.perf_counter() - start
    values, _ = dut.decode_rows(got)
    assert_equal(f"bench {shape} K={k}", np.concatenate([matmul_exact(a, b.T)
                                                         for a, b in stimulus]), values)
    ideal = tiles * k
    total = emitted[-1] - accepted[0] + 1
    steady = accepted[-1] - accepted[0] + 1
    return {"rows": cfg.rows, "cols": cfg.cols, "dsp": dsp, "K": k, "tiles": tiles,
            "ideal_cycles": ideal, "cycles": total, "input_cycles": steady,
            "utilization": ideal / total, "steady_utilization": ideal / steady,
            "latency": emitted[0] - accepted[k - 1], "documented_latency": dut.latency,
            "sim_cycles": emitted[-1] + 1, "amaranth_cycles_per_s": (emitted[-1] + 1) / wall}


def amaranth_speed(shape, tiles, k=64) -> dict:
    """Amaranth-simulator cycles per second (from a utilization run)."""
    run = utilization(shape, k, tiles)
    return {"simulator": "amaranth", "rows": shape[0], "cols": shape[1],
            "cycles": run["sim_cycles"], "cycles_per_s": run["amaranth_cycles_per_s"]}


def cocotb_speed(sim, shape, tiles, k=64) -> dict | None:
    """cocotb cycles per second on ``sim`` (build time reported separately)."""
    if simulator_missing(sim):
        return None
    # The testbench lives in tests/ (not an installed package); cocotb's runner hands the
    # simulator this process's sys.path as PYTHONPATH.
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    rows, cols = shape
    changes = {"rows": rows, "cols": cols}
    cfg = attn.preset("default").replace(**changes)
    tag = f"systolic_{rows}x{cols}_{cfg.dsp}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = write_verilog(SystolicArray.from_config(cfg), BUILD / "verilog" / f"{tag}.v",
                             name="systolic")
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        start = time.perf_counter()
        run_cocotb(sim=sim, verilog_file=path, toplevel="systolic",
                   test_module="tests.hw.cocotb_systolic", build_name=tag,
                   params={"preset": "default", "changes": changes, "tiles": tiles,
                           "stalls": [[0, 0]], "seed": 3, "fixed_k": k,
                           "report": str(report)})
        total = time.perf_counter() - start
        (run,) = json.loads(report.read_text())
    return {"simulator": f"cocotb+{sim}", "rows": rows, "cols": cols, "cycles": run["cycles"],
            "cycles_per_s": run["cycles"] / run["wall_s"], "run_s": total,
            "utilization": run["macs"] / (rows * cols) / run["cycles"]}


# name -> (family, clock_mhz, dsp option of synthesize, factory)
def _synth_table():
    ice = attn.preset("icebreaker")
    ulx = attn.preset("ulx3s")
    return {
        "ice40_array_2x4": ("ice40", 60, True, lambda: SystolicArray.from_config(ice)),
        "ice40_requant_shift_add": ("ice40", 60, False, lambda: Requantizer.from_config(
            ice, out_bits=ice.qkv_bits, multiplier="shift_add")),
        "ice40_requant_infer_lut": ("ice40", 60, False, lambda: Requantizer.from_config(
            ice, out_bits=ice.qkv_bits, multiplier="infer")),
        "ecp5_array_12x12_registered": ("ecp5", 130, None, lambda: SystolicArray.from_config(
            ulx.replace(rows=12, cols=12))),
        "ecp5_array_8x8_infer": ("ecp5", 120, None, lambda: SystolicArray.from_config(
            _config((8, 8)))),
        "ecp5_array_8x8_registered": ("ecp5", 130, None, lambda: SystolicArray.from_config(
            _config((8, 8), "ecp5_registered"))),
        "ecp5_requant_infer": ("ecp5", 160, None, lambda: Requantizer.from_config(
            ulx, out_bits=ulx.qkv_bits, multiplier="infer")),
    }


def synth_builds(names=None) -> list:
    """Synthesize the named builds (all by default); one report dict per build."""
    from boards.synth import synthesize
    table = _synth_table()
    out = []
    for name in names or table:
        family, clock, dsp, make = table[name]
        start = time.perf_counter()
        report = synthesize(make(), family=family, name=f"systolic_{name}", clock_mhz=clock,
                            dsp=dsp, check=False, log=None)
        row = {"name": name, "family": family, "lut": report.lut, "lut_dut": report.lut_dut,
               "lut_total": report.lut_total, "ff": report.ff, "ff_dut": report.ff_dut,
               "dsp": report.dsp, "dsp_total": report.dsp_total, "bram": report.bram,
               "fmax_mhz": report.fmax_mhz, "clock_mhz": clock, "routed": report.routed,
               "seconds": time.perf_counter() - start, "error": report.error}
        print(_format([row], ["name", "lut", "lut_dut", "ff", "dsp", "fmax_mhz", "routed",
                              "seconds"]), flush=True)
        out.append(row)
    return out


def _format(rows, columns) -> str:
    def cell(v):
        if isinstance(v, float):
            return f"{v:.3f}" if v < 10 else f"{v:,.0f}"
        return str(v)
    table = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(t[i]) for t in table)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.rjust(w) for v, w in zip(t, widths)) for t in table]
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer tiles, no 8x8 on Icarus")
    parser.add_argument("--synth", action="store_true", help="also run the FPGA builds")
    parser.add_argument("--only", nargs="*", help="synthesis builds to run (with --synth): "
                        + ", ".join(_synth_table()))
    parser.add_argument("--no-sim", action="store_true", help="skip utilization and speed")
    args = parser.parse_args(argv)
    results = json.loads(OUT.read_text()) if OUT.exists() else {}

    if not args.no_sim:
        tiles = 8 if args.quick else 16
        runs = []
        shapes = [(2, 4), (4, 4), (8, 8)]
        for shape in shapes:
            for k in (16, 32, 64):
                runs.append(utilization(shape, k, tiles))
        for k in (1, 2, 4, 6, 8):  # K < R on 8x8: the documented throughput limit
            runs.append(utilization((8, 8), k, tiles))
        runs.append(utilization((8, 8), 64, tiles, dsp="ecp5_registered"))
        print("Utilization (Amaranth simulator, no stalls)")
        print(_format(runs, ["rows", "cols", "dsp", "K", "tiles", "ideal_cycles", "cycles",
                             "utilization", "steady_utilization", "latency",
                             "documented_latency"]))
        results["utilization"] = runs

        speed_tiles = 16 if args.quick else 64
        speeds = []
        for shape in [(4, 4), (8, 8)]:
            speeds.append(amaranth_speed(shape, speed_tiles // 4))
            for sim in ("icarus", "verilator"):
                if args.quick and sim == "icarus" and shape == (8, 8):
                    continue
                result = cocotb_speed(sim, shape, speed_tiles // (4 if sim == "icarus" else 1))
                if result:
                    speeds.append(result)
        print("\nSimulator speed (K = 64, no stalls)")
        print(_format(speeds, ["simulator", "rows", "cols", "cycles", "cycles_per_s"]))
        results["speed"] = speeds

    if args.synth:
        print("\nSynthesis (boards.synth, out of context)")
        builds = synth_builds(args.only)
        previous = {b["name"]: b for b in results.get("synthesis", [])}
        previous.update({b["name"]: b for b in builds})
        results["synthesis"] = list(previous.values())
        print(_format(results["synthesis"], ["name", "lut", "lut_dut", "ff", "dsp", "fmax_mhz",
                                             "clock_mhz", "routed", "seconds"]))

    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=1))
    print(f"\nwrote {OUT}")
    return results


if __name__ == "__main__":
    sys.exit(main() and 0)
