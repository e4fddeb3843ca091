"""``attn sweep``: the design space of one board — array sizes (and any other configuration
field) against resources, fmax and cycles — with its Pareto front.

For each array size the board's device (:class:`boards.top.BoardTop`: PLL, UART, host link
and the attention core of the board's preset with that array and the given overrides) is

- synthesized, placed and routed for the board's FPGA (YoWASP or native tools), in parallel on
  the available cores: logic, DSP, block RAM, whether it fits, nextpnr's fmax;
- simulated on a layer shape (Verilator when available, else the Amaranth simulator), checked
  bit-exact against golden/: cycles and MAC utilization.

A build is reused when its folder holds the result of the same configuration, seed and nextpnr
options (``result.json``), so a sweep can be extended or rerun without rebuilding. With several
placement seeds (``seeds``) every point is built once per seed and its fmax is the median of
the seeds that routed, with the lowest and highest beside it: on the large ECP5 designs one
seed can differ from the next by 10 MHz or more, so a single build says little. Throughput is
layers per second at the achieved fmax. A point is on the Pareto front if no other fitting
point has at most its logic and more throughput. :func:`write_sweep` writes ``sweep.json``,
``sweep.md`` and ``sweep.png`` (throughput against logic, front highlighted).
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

__all__ = ["parse_arrays", "parse_vary", "parse_seeds", "point_config", "sweep", "combine_seeds",
           "pareto_front", "fmax_text", "write_sweep", "DEFAULT_ARRAYS"]

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


def parse_seeds(text: str) -> list:
    """``"1,2,3"`` -> ``[1, 2, 3]``: distinct non-negative integers; anything else raises
    ``ValueError``."""
    items = [item.strip() for item in text.split(",")]
    if not all(item.isdigit() for item in items) or len(set(map(int, items))) != len(items):
        raise ValueError(f"seeds are distinct non-negative integers separated by commas "
                         f"(e.g. 1,2,3), not {text!r}")
    return [int(item) for item in items]


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


def _synth_point(board, cfg_dict, name, build_dir, seed=1, nextpnr_opts="", target_mhz=None):
    """Worker: one build of the board's whole device with this configuration, placement seed,
    nextpnr options and timing target (runs in its own process): the place-and-route result,
    or ``{"build_error": ...}``."""
    from attn.config import AttnConfig
    from boards.build import board_spec
    from boards.synth import SynthError, build_top
    from boards.top import BoardTop

    spec = board_spec(board)
    cfg = AttnConfig.from_dict(cfg_dict)
    cache = Path(build_dir) / "result.json"
    key = {"config": cfg_dict, "seed": seed, "nextpnr_opts": nextpnr_opts,
           "target_mhz": target_mhz}
    if cache.exists():                 # an earlier sweep built this very configuration
        try:
            cached = json.loads(cache.read_text())
            if {k: cached.get(k) for k in key} == key:
                return {**cached["report"], "reused": True}
        except (OSError, ValueError, KeyError):
            pass
    try:
        report = build_top(BoardTop(spec, cfg, target_mhz=target_mhz), family=spec.family,
                           name=name, dsp=True, check=False, build_dir=build_dir,
                           platform=spec.platform(), seed=seed, nextpnr_opts=nextpnr_opts, log=None)
    except SynthError:
        rpt = Path(build_dir) / f"{name}.rpt"
        lines = rpt.read_text(errors="replace").splitlines() if rpt.exists() else []
        return {"build_error": next((line for line in lines if line.startswith("ERROR")),
                                    "Yosys failed")}
    result = report.as_dict()
    cache.write_text(json.dumps({**key, "report": result}, default=float))
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


def point_config(base_cfg, rows: int, cols: int, changes: dict):
    """The configuration of the sweep point with a ``rows x cols`` array and the field
    ``changes``, named after both. The point that changes nothing keeps ``base_cfg``'s name:
    the name is part of the device (its identification ROM), and so that point is the very
    netlist ``attn build`` places and routes (a renamed copy routed 4 to 7 MHz apart on the
    16x8 ULX3S device at the same seeds)."""
    if (rows, cols) == (base_cfg.rows, base_cfg.cols) and all(
            getattr(base_cfg, k) == v for k, v in changes.items()):
        return base_cfg
    suffix = "".join(f"_{k}{v}" for k, v in changes.items())
    return base_cfg.replace(rows=rows, cols=cols, **changes,
                            name=f"{base_cfg.name}_{rows}x{cols}{suffix}")


def sweep(spec, base_cfg, arrays, layer, *, variants=({},), jobs: int | None = None,
          sim: str = "verilator", out_dir, seeds=(1,), nextpnr_opts: str = "",
          target_mhz: float | None = None, log=print) -> list:
    """Sweep ``arrays`` (times each dict of field changes in ``variants``) on board ``spec``
    from ``base_cfg``, each built once per placement seed in ``seeds`` with the extra
    ``nextpnr_opts`` (:func:`boards.build.nextpnr_options`) and nextpnr's timing target
    ``target_mhz`` (:class:`boards.top.BoardTop`); return one dict per point
    (:func:`combine_seeds` gives its build figures)."""
    from hw.core import AttentionCore

    say = log or (lambda line: None)
    out_dir = Path(out_dir)
    seeds = list(seeds)
    if not seeds:
        raise ValueError("a sweep needs at least one seed")
    base_cfg.check_shape(*layer)
    from boards.build import constraint_warning
    from boards.top import timing_target
    target = timing_target(spec.pll().f_out_mhz, target_mhz)    # a bad target before building
    configs, labels = [], {}
    for changes in variants:
        for rows, cols in arrays:
            cfg = point_config(base_cfg, rows, cols, changes)
            AttentionCore(cfg)._MustUse__silence = True     # parameter errors before building
            configs.append(cfg)
            labels[cfg.name] = " ".join([f"{rows}x{cols}"]
                                        + [f"{k}={v}" for k, v in changes.items()])
    jobs = jobs or os.cpu_count() or 1
    builds = len(configs) * len(seeds)
    say(f"attn sweep: {builds} builds on {spec.family} ({jobs} at a time), then "
        f"{len(configs)} simulations of L={layer[0]} D={layer[1]} H={layer[2]} on {sim}")
    synth = {cfg.name: {} for cfg in configs}
    start = time.monotonic()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {}
        for cfg in configs:
            for seed in seeds:
                folder = out_dir / "synth" / (cfg.name if seed == 1 else f"{cfg.name}_seed{seed}")
                future = pool.submit(_synth_point, spec.name, cfg.to_dict(), "attn",
                                     str(folder), seed, nextpnr_opts, target_mhz)
                futures[future] = (cfg, seed)
        for done, future in enumerate(as_completed(futures), 1):
            cfg, seed = futures[future]
            report = future.result()
            synth[cfg.name][seed] = report
            what = labels[cfg.name] + (f" seed {seed}" if len(seeds) > 1 else "")
            if "build_error" in report:
                say(f"attn sweep: [{done}/{builds}] {what}: the build failed: "
                    f"{report['build_error']}")
                continue
            fmax = f"{report['fmax_mhz']:.1f} MHz" if report["fmax_mhz"] else "no fmax"
            took = f"built in {report['seconds']:.0f} s"
            if report.get("reused"):
                took = f"reused ({took})"
            say(f"attn sweep: [{done}/{builds}] {what} {took}: "
                f"{report['lut']:,}/{report['lut_total']:,} logic, "
                f"{report['dsp']}/{report['dsp_total']} DSP, "
                f"{'fits' if report['routed'] else 'does NOT fit'}, {fmax} "
                f"({time.monotonic() - start:.0f} s elapsed)")
            # (`get`: results cached by an earlier sweep may not have it)
            warning = constraint_warning(report.get("constraint_mhz"), target)
            if warning:
                say(f"attn sweep: [{done}/{builds}] {what}: warning: {warning}")
    points = []
    for index, cfg in enumerate(configs, 1):
        reports = synth[cfg.name]
        if any("build_error" in report for report in reports.values()):
            continue
        built = combine_seeds(reports)
        cycles, ideal = _cycles(cfg, layer, sim)
        fmax = built["fmax_mhz"]
        latency_us = cycles / fmax if fmax else None
        points.append(dict(
            array=labels[cfg.name], rows=cfg.rows, cols=cfg.cols, pes=cfg.pes, **built,
            cycles=cycles, utilization=ideal / cycles, latency_us=latency_us,
            layers_per_s=1e6 / latency_us if latency_us else None,
            nextpnr_opts=nextpnr_opts, target_mhz=target_mhz, config=cfg.to_dict()))
        say(f"attn sweep: [{index}/{len(configs)}] {labels[cfg.name]} simulated: "
            f"{cycles:,} cycles ({ideal / cycles:.1%} utilization)")
    for point, front in zip(points, pareto_front(points), strict=True):
        point["pareto"] = front
    return points


def combine_seeds(reports: dict) -> dict:
    """The build figures of one point from its builds ``{seed: report}`` (the seeds place
    and route one netlist): its resources (the first seed's), ``fits`` if any seed routed,
    ``fmax_mhz`` the median fmax of the seeds that routed (``None`` if none did) with
    ``fmax_min_mhz`` and ``fmax_max_mhz``, ``fmax_by_seed`` (``None`` for a seed that did not
    route) and the build seconds of all seeds together."""
    if not reports:
        raise ValueError("no builds to combine")
    seeds = sorted(reports)
    first = reports[seeds[0]]
    by_seed = {seed: reports[seed]["fmax_mhz"] if reports[seed]["routed"] else None
               for seed in seeds}
    routed = [fmax for fmax in by_seed.values() if fmax]
    return dict(
        logic=first["lut"], logic_total=first["lut_total"], ff=first["ff"], dsp=first["dsp"],
        dsp_total=first["dsp_total"], bram=first["bram"], bram_total=first["bram_total"],
        fits=bool(routed), fmax_mhz=statistics.median(routed) if routed else None,
        fmax_min_mhz=min(routed, default=None), fmax_max_mhz=max(routed, default=None),
        seeds=seeds, fmax_by_seed=by_seed,
        build_seconds=sum(reports[seed]["seconds"] for seed in seeds))


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


def fmax_text(point: dict) -> str:
    """A point's fmax in MHz for a table: ``"—"`` if it has none; the median and, over several
    seeds, the lowest and highest and how many seeds routed: ``"66.6 (52.8–70.6, 3/3 seeds)"``."""
    fmax = point.get("fmax_mhz")
    if not fmax:
        return "—"
    text = f"{fmax:.1f}"
    seeds, by_seed = point.get("seeds"), point.get("fmax_by_seed")
    low, high = point.get("fmax_min_mhz"), point.get("fmax_max_mhz")
    if isinstance(seeds, list) and len(seeds) > 1 and isinstance(by_seed, dict) \
            and all(isinstance(v, (int, float)) and v for v in (low, high)):
        routed = sum(1 for value in by_seed.values() if value)
        text += f" ({low:.1f}–{high:.1f}, {routed}/{len(seeds)} seeds)"
    return text


def write_sweep(points, out_dir, *, board: str, layer) -> dict:
    """Write ``sweep.json``, ``sweep.md`` and ``sweep.png`` into ``out_dir``; return paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    shape = "x".join(map(str, layer))
    paths = {"json": out / "sweep.json", "md": out / "sweep.md", "png": out / "sweep.png"}
    paths["json"].write_text(json.dumps({"board": board, "layer": list(layer),
                                         "points": points}, indent=2) + "\n")
    lines = [f"# Design-space sweep: {board}, layer {shape}", ""]
    seeds = sorted({seed for p in points for seed in p.get("seeds", [1])})
    options = sorted({p.get("nextpnr_opts", "") for p in points} - {""})
    options += [f"timing target {t:g} MHz" for t in
                sorted({p.get("target_mhz") for p in points} - {None})]
    if seeds != [1] or options:
        lines += [f"Placement seeds {', '.join(map(str, seeds))}"
                  + (" (fmax: the median of the seeds that routed, lowest–highest beside it)"
                     if len(seeds) > 1 else "")
                  + (f"; nextpnr {'; '.join(options)}" if options else "") + ".", ""]
    lines += ["| array | PEs | logic | DSP | BRAM | fits | fmax MHz | cycles | util | "
              "latency µs | layers/s | Pareto |", "|" + "---|" * 12]
    for p in points:
        fmax = fmax_text(p)
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
