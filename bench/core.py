"""The attention core end to end: MAC utilization, softmax share, simulation speed, latency.

For each (preset, layer shape) it simulates the whole layer on the core (cocotb + Verilator by
default, ``--sim amaranth`` or ``--sim icarus`` otherwise), checks the output against golden/
integer for integer, and reports:

- ``util``: MAC utilization = ideal cycles (all MACs / PEs) / measured cycles, from the
  accepted ``start`` to the last output beat (loading X and the constants included). The
  layer's MACs are counted without its causal mask; the core skips the score and P.V work of
  keys a row block's queries cannot see, so ``util`` can pass 100 %;
- ``util_m``: the same for the MACs the masks leave (``masked_ideal``: the projections, and
  the scores and weighted values of unmasked (query, key) pairs) - how busy the array is with
  work the layer needs;
- ``sm_wait``: cycles the array waited for the softmax, as a share of the run (the latency
  the softmax adds);
- wall time of the simulation (build included, and without the build) and cycles/s;
- ``us@fmax``: compute latency in microseconds at the nextpnr fmax given with
  ``--fmax preset=MHz`` (figures from ``bench/core.py --synth`` or the board builds).

    python -m bench.core [--quick] [--sim verilator] [--fmax ulx3s=130 ...] [--synth]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from attn import PRESETS, preset
from golden import FloatMHA, attention_int, calibrate, make_mask, quantize_input
from hw.core_io import CoreShape

from .common import print_table, write_json

#: (L, D, H, valid_len): every layer has a causal mask; ``padded`` is the reference layer of a
#: sequence of 40 tokens padded to 64 (a key-padding mask too)
LAYERS = {"reference": (64, 64, 4, None), "minilm": (16, 384, 12, None),
          "padded": (64, 64, 4, 40)}
RUNS = [("default", "reference"), ("icebreaker", "reference"), ("ulx3s_8x4", "reference"),
        ("ulx3s_8x8", "reference"), ("ulx3s_16x8", "reference"), ("ulx3s", "reference"),
        ("ulx3s", "minilm")]
QUICK = [("default", "reference"), ("ulx3s", "minilm")]


def make_layer(cfg, seq_len, d_model, heads, valid_len=None, seed=0):
    rng = np.random.default_rng(seed)
    s = 1 / np.sqrt(d_model)
    mha = FloatMHA(rng.normal(0, s, (3 * d_model, d_model)), rng.normal(0, 0.02, 3 * d_model),
                   rng.normal(0, s, (d_model, d_model)), rng.normal(0, 0.02, d_model), heads)
    x = rng.normal(0, 1, (seq_len, d_model))
    mask = make_mask(seq_len, causal=True, valid_len=valid_len)
    qm = calibrate(cfg, mha, x, mask)
    xi = quantize_input(x, qm, cfg)
    return qm, xi, attention_int(cfg, qm, xi, mask)


def run_one(sim, name, layer, fmax):
    cfg = preset(name)
    *shape, valid_len = LAYERS[layer]
    qm, xi, expected = make_layer(cfg, *shape, valid_len)
    masks = dict(causal=True, valid_len=valid_len)
    start = time.perf_counter()
    if sim == "amaranth":
        from sim.core_sim import simulate_core
        run = simulate_core(cfg, qm, xi, **masks, name=f"bench_{name}_{layer}")
        y, cycles, counters = run.y, run.cycles, run.counters
        sim_seconds = time.perf_counter() - start
        build_seconds = 0.0
    else:
        from sim.core_cocotb import run_core_hdl
        y, info = run_core_hdl(sim, cfg, qm, xi, **masks, build_name=f"bench_{name}")
        cycles, counters = info["cycles"], info["counters"]
        total = time.perf_counter() - start
        # a second run reuses the build: its wall time is the simulation alone
        start = time.perf_counter()
        run_core_hdl(sim, cfg, qm, xi, **masks, build_name=f"bench_{name}")
        sim_seconds = time.perf_counter() - start
        # (with the build cached the difference is noise around zero)
        build_seconds = max(0.0, total - sim_seconds)
    exact = bool(np.array_equal(y, expected.y))
    ideal = CoreShape(cfg, *shape).macs() / cfg.pes
    masked_ideal = CoreShape(cfg, *shape).masked_macs(**masks) / cfg.pes
    mhz = fmax.get(name)
    label = "x".join(map(str, shape)) + (f", {valid_len} keys" if valid_len else "")
    return dict(preset=name, layer=layer, shape=label,
                array=f"{cfg.rows}x{cfg.cols}", exact=exact, cycles=cycles,
                ideal=int(ideal), util=ideal / cycles, masked_ideal=int(masked_ideal),
                util_masked=masked_ideal / cycles,
                softmax_wait=counters["softmax_wait"] / cycles, counters=counters,
                sim=sim, sim_seconds=sim_seconds, build_seconds=build_seconds,
                cycles_per_second=cycles / sim_seconds,
                fmax_mhz=mhz, latency_us=cycles / mhz if mhz else None)


def synth_fmax():
    """fmax of the core on its board's FPGA (out of context)."""
    from boards.synth import synthesize
    from hw.core import AttentionCore

    out = {}
    for name, family, mhz in (("icebreaker", "ice40", 48), ("ulx3s", "ecp5", 125)):
        report = synthesize(AttentionCore(preset(name)), family=family, name=f"core_{name}",
                            clock_mhz=mhz, dsp=True if family == "ice40" else None,
                            check=False)
        print(report)
        if report.routed:
            out[name] = report.fmax_mhz
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="two runs only")
    parser.add_argument("--run", action="append", default=[], metavar="PRESET:LAYER",
                        help=f"only these runs (layers: {', '.join(LAYERS)}; by default "
                             "reference); repeatable")
    parser.add_argument("--sim", default="verilator", choices=["verilator", "icarus",
                                                               "amaranth"])
    parser.add_argument("--fmax", action="append", default=[], metavar="PRESET=MHZ",
                        help="nextpnr fmax of a preset, for latency in microseconds")
    parser.add_argument("--synth", action="store_true", help="measure fmax with nextpnr")
    args = parser.parse_args(argv)
    fmax = {k: float(v) for k, v in (item.split("=") for item in args.fmax)}
    runs = QUICK if args.quick else RUNS
    if args.run:
        runs = [(name, layer or "reference") for name, _, layer in
                (item.partition(":") for item in args.run)]
        for name, layer in runs:
            if name not in PRESETS or layer not in LAYERS:
                parser.error(f"--run {name}:{layer}: choose a preset of {', '.join(PRESETS)} "
                             f"and a layer of {', '.join(LAYERS)}")
    if args.synth:
        fmax.update(synth_fmax())
    rows = [run_one(args.sim, name, layer, fmax) for name, layer in runs]
    table = [dict(preset=r["preset"], array=r["array"], layer=f"{r['layer']} {r['shape']}",
                  exact="yes" if r["exact"] else "NO", cycles=f"{r['cycles']:,}",
                  ideal=f"{r['ideal']:,}", util=f"{r['util']:.1%}",
                  util_m=f"{r['util_masked']:.1%}",
                  sm_wait=f"{r['softmax_wait']:.2%}", sim_s=f"{r['sim_seconds']:.1f}",
                  build_s=f"{r['build_seconds']:.0f}" if r["build_seconds"] >= 1 else "cached",
                  cyc_per_s=f"{r['cycles_per_second']:,.0f}",
                  us=f"{r['latency_us']:.1f}" if r["latency_us"] else "-") for r in rows]
    print_table(table, ["preset", "array", "layer", "exact", "cycles", "ideal", "util", "util_m",
                        "sm_wait", "sim_s", "build_s", "cyc_per_s", "us"],
                f"Attention core on {args.sim} (causal mask, L x D x H)")
    write_json("core", dict(rows=rows, fmax=fmax))
    if not all(r["exact"] for r in rows):
        raise SystemExit("core output differs from golden/")


if __name__ == "__main__":
    main()
