"""``attn sweep``: the design space of one board — array sizes (and any other configuration
field) against resources, fmax and cycles — with its Pareto front.

For each array size the board's device (:class:`boards.top.BoardTop`: PLL, UART, host link
and the attention core of the board's preset with that array and the given overrides) is

- synthesized, placed and routed for the board's FPGA (YoWASP or native tools), in parallel on
  the available cores: logic, DSP, block RAM, whether it fits, nextpnr's fmax;
- simulated on a layer shape (Verilator when available, else the Amaranth simulator), checked
  bit-exact against golden/: cycles and MAC utilization.

A build is reused when its folder holds the result of the same configuration (``result.json``),
so a sweep can be extended or rerun without rebuilding. Throughput is layers per second at the
achieved fmax. A point is on the Pareto front if no
other fitting point has at most its logic and more throughput. :func:`write_sweep` writes
``sweep.json``, ``sweep.md`` and ``sweep.png`` (throughput against logic, front highlighted).
"""

from __future__ import annotations

import itertools
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

__all__ = ["parse_arrays", "parse_vary", "sweep", "pareto_front", "write_sweep", "DEFAULT_ARRAYS"]

#: Arrays swept by default, per FPGA family.
DEFAULT_ARRAYS = {"ice40": ["1x2", "2x2", "2x4"], "ecp5": ["2x2", "2x4", "4x4", "4x8", "8x8"]}


def parse_arrays(text: str) -> list:
    """``"2x2,4x4"`` -> ``[(2, 2), (4, 4)]``; a malformed item raises ``ValueError``."""
    arrays = []
    for item in text.split(","):
        rows, sep, cols = item.strip().lower().partition("x")
        if not sep or not rows.isdigit() or not cols.isdigit() or not int(rows) or \
                not int(cols):
            raise ValueError(f"array sizes are ROWSxCOLS separated by commas (e.g. 2x4,4x4), "
                             f"not {item!r}")
        arrays.append((int(rows), int(cols)))
    return arrays


def _layer(cfg, seq_len, d_model, heads, seed=0):
    from golden import FloatMHA, attention_int, calibrate, make_mask, quantize_input

    rng = np.random.default_rng(seed)
    s = 1 / np.sqrt(d_model)
    mha = FloatMHA(rng.normal(0, s, (3 * d_model, d_model)), rng.normal(0, 0.02, 3 * d_model),
                   rng.normal(0, s, (d_model, d_model)), rng.normal(0, 0.02, d_model), heads)
    x = rng.normal(0, 1, (seq_len, d_model))
    mask = make_mask(seq_len, causal=True)
    qm = calibrate(cfg, mha, x, mask)
    xi = quantize_input(x, qm, cfg)
    return qm, xi, attention_int(cfg, qm, xi, mask).y


def _synth_point(board, cfg_dict, name, build_dir):
    """Worker: one build of the board's whole device with this configuration (runs in its own
    process): the place-and-route result, or ``{"build_error": ...}``."""
    from attn.config import AttnConfig
    from boards.build import board_spec
    from boards.synth import SynthError, build_top
    from boards.top import BoardTop

    spec = board_spec(board)
    cfg = AttnConfig.from_dict(cfg_dict)
    cache = Path(build_dir) / "result.json"
    if cache.exists():                 # an earlier sweep built this very configuration
        try:
            cached = json.loads(cache.read_text())
            if cached.get("config") == cfg_dict:
                return cached["report"]
        except (OSError, ValueError, KeyError):
            pass
    try:
        report = build_top(BoardTop(spec, cfg), family=spec.family, name=name, dsp=True,
                           check=False, build_dir=build_dir, platform=spec.platform(),
                           log=None)
    except SynthError:
        rpt = Path(build_dir) / f"{name}.rpt"
        lines = rpt.read_text(errors="replace").splitlines() if rpt.exists() else []
        return {"build_error": next((line for line in lines if line.startswith("ERROR")),
                                    "Yosys failed")}
    result = report.as_dict()
    cache.write_text(json.dumps({"config": cfg_dict, "report": result}, default=float))
    return result


def _cycles(cfg, layer, sim):
    from hw.core_io import CoreShape

    qm, xi, expected = _layer(cfg, *layer)
    if sim == "amaranth":
        from sim.core_sim import simulate_core
        run = simulate_core(cfg, qm, xi, causal=True, name=f"sweep_{cfg.name}")
        y, cycles = run.y, run.cycles
    else:
        from sim.core_cocotb import run_core_hdl
        y, info = run_core_hdl(sim, cfg, qm, xi, causal=True, build_name=f"sweep_{cfg.name}")
        cycles = info["cycles"]
    if not np.array_equal(y, expected):
        raise AssertionError(f"{cfg.name}: the core's output differs from golden")
    return cycles, CoreShape(cfg, *layer).macs() / cfg.pes


def parse_vary(items, base_cfg) -> list:
    """``["w_bits=6,8", "prob_bits=10,12"]`` -> every combination as a list of dicts of field
    changes (``[{}]`` for none); unknown fields and non-integer values raise ``ValueError``."""
    axes = []
    fields = base_cfg.to_dict()
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or name not in fields or name in ("name", "rows", "cols") \
                or not isinstance(fields[name], int) or isinstance(fields[name], bool):
            raise ValueError(f"--vary takes FIELD=V1,V2,... with FIELD an integer field of the "
                             f"configuration other than rows/cols (e.g. w_bits=6,8), not "
                             f"{item!r}")
        try:
            axes.append([(name, int(v)) for v in values.split(",")])
        except ValueError:
            raise ValueError(f"--vary {name} takes integers, not {values!r}") from None
    return [dict(combo) for combo in itertools.product(*axes)]


def sweep(spec, base_cfg, arrays, layer, *, variants=({},), jobs: int | None = None,
          sim: str = "verilator", out_dir, log=print) -> list:
    """Sweep ``arrays`` (times each dict of field changes in ``variants``) on board ``spec``
    from ``base_cfg``; return one dict per point."""
    from hw.core import AttentionCore

    say = log or (lambda line: None)
    out_dir = Path(out_dir)
    base_cfg.check_shape(*layer)
    configs, labels = [], {}
    for changes in variants:
        for rows, cols in arrays:
            suffix = "".join(f"_{k}{v}" for k, v in changes.items())
            cfg = base_cfg.replace(rows=rows, cols=cols, **changes,
                                   name=f"{base_cfg.name}_{rows}x{cols}{suffix}")
            AttentionCore(cfg)._MustUse__silence = True     # parameter errors before building
            configs.append(cfg)
            labels[cfg.name] = " ".join([f"{rows}x{cols}"]
                                        + [f"{k}={v}" for k, v in changes.items()])
    jobs = jobs or os.cpu_count() or 1
    say(f"attn sweep: {len(configs)} builds on {spec.family} ({jobs} at a time), then "
        f"{len(configs)} simulations of L={layer[0]} D={layer[1]} H={layer[2]} on {sim}")
    synth = {}
    start = time.monotonic()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(_synth_point, spec.name, cfg.to_dict(), f"sweep_{cfg.name}",
                               str(out_dir / "synth" / cfg.name)): cfg
                   for cfg in configs}
        for done, future in enumerate(as_completed(futures), 1):
            cfg = futures[future]
            report = future.result()
            synth[cfg.name] = report
            if "build_error" in report:
                say(f"attn sweep: [{done}/{len(configs)}] {labels[cfg.name]}: the build "
                    f"failed: {report['build_error']}")
                continue
            fmax = f"{report['fmax_mhz']:.1f} MHz" if report["fmax_mhz"] else "no fmax"
            say(f"attn sweep: [{done}/{len(configs)}] {labels[cfg.name]} built in "
                f"{report['seconds']:.0f} s: {report['lut']:,}/{report['lut_total']:,} logic, "
                f"{report['dsp']}/{report['dsp_total']} DSP, "
                f"{'fits' if report['routed'] else 'does NOT fit'}, {fmax} "
                f"({time.monotonic() - start:.0f} s elapsed)")
    points = []
    for index, cfg in enumerate(configs, 1):
        report = synth[cfg.name]
        if "build_error" in report:
            continue
        cycles, ideal = _cycles(cfg, layer, sim)
        fmax = report["fmax_mhz"] if report["routed"] else None
        latency_us = cycles / fmax if fmax else None
        points.append(dict(
            array=labels[cfg.name], rows=cfg.rows, cols=cfg.cols, pes=cfg.pes,
            logic=report["lut"], logic_total=report["lut_total"], ff=report["ff"],
            dsp=report["dsp"], dsp_total=report["dsp_total"], bram=report["bram"],
            bram_total=report["bram_total"], fits=bool(report["routed"]), fmax_mhz=fmax,
            cycles=cycles, utilization=ideal / cycles, latency_us=latency_us,
            layers_per_s=1e6 / latency_us if latency_us else None,
            build_seconds=report["seconds"], config=cfg.to_dict()))
        say(f"attn sweep: [{index}/{len(configs)}] {labels[cfg.name]} simulated: "
            f"{cycles:,} cycles ({ideal / cycles:.1%} utilization)")
    for point, front in zip(points, pareto_front(points), strict=True):
        point["pareto"] = front
    return points


def pareto_front(points) -> list:
    """For each point: True if it fits and no other fitting point has at most its logic and
    strictly more throughput (or equal throughput with less logic)."""
    flags = []
    for p in points:
        if not p["fits"] or not p["layers_per_s"]:
            flags.append(False)
            continue
        dominated = any(
            q is not p and q["fits"] and q["layers_per_s"]
            and q["logic"] <= p["logic"] and q["layers_per_s"] >= p["layers_per_s"]
            and (q["logic"] < p["logic"] or q["layers_per_s"] > p["layers_per_s"])
            for q in points)
        flags.append(not dominated)
    return flags


def write_sweep(points, out_dir, *, board: str, layer) -> dict:
    """Write ``sweep.json``, ``sweep.md`` and ``sweep.png`` into ``out_dir``; return paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    shape = "x".join(map(str, layer))
    paths = {"json": out / "sweep.json", "md": out / "sweep.md", "png": out / "sweep.png"}
    paths["json"].write_text(json.dumps({"board": board, "layer": list(layer),
                                         "points": points}, indent=2) + "\n")
    lines = [f"# Design-space sweep: {board}, layer {shape}", "",
             "| array | PEs | logic | DSP | BRAM | fits | fmax MHz | cycles | util | "
             "latency µs | layers/s | Pareto |", "|" + "---|" * 12]
    for p in points:
        fmax = f"{p['fmax_mhz']:.1f}" if p["fmax_mhz"] else "—"
        latency = f"{p['latency_us']:.0f}" if p["latency_us"] else "—"
        rate = f"{p['layers_per_s']:,.0f}" if p["layers_per_s"] else "—"
        lines.append(f"| {p['array']} | {p['pes']} | {p['logic']:,}/{p['logic_total']:,} | "
                     f"{p['dsp']}/{p['dsp_total']} | {p['bram']}/{p['bram_total']} | "
                     f"{'yes' if p['fits'] else 'no'} | {fmax} | {p['cycles']:,} | "
                     f"{p['utilization']:.1%} | {latency} | {rate} | "
                     f"{'**yes**' if p['pareto'] else ''} |")
    paths["md"].write_text("\n".join(lines) + "\n")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    fits = [p for p in points if p["fits"] and p["layers_per_s"]]
    front = sorted((p for p in fits if p["pareto"]), key=lambda p: p["logic"])
    ax.scatter([p["logic"] for p in fits], [p["layers_per_s"] for p in fits], color="tab:blue",
               label="fits")
    if front:
        ax.plot([p["logic"] for p in front], [p["layers_per_s"] for p in front], color="tab:red",
                marker="o", label="Pareto front")
    for p in fits:
        ax.annotate(p["array"], (p["logic"], p["layers_per_s"]), textcoords="offset points",
                    xytext=(4, 4), fontsize=8)
    misfits = [p for p in points if not p["fits"]]
    if misfits:
        ax.scatter([p["logic"] for p in misfits], [0] * len(misfits), marker="x",
                   color="tab:gray", label="does not fit")
    ax.set_xlabel("logic (LUT4 / logic cells)")
    ax.set_ylabel(f"layers/s at fmax (layer {shape})")
    ax.set_title(f"{board}: throughput against area")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(paths["png"], dpi=120)
    plt.close(fig)
    return paths
