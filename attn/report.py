"""``attn report``: the measured figures in one Markdown page with plots.

Reads what the benchmarks and builds left in ``build/`` — ``build/bench/{core,accuracy,board,
systolic}.json`` (``python -m bench.<name>``), ``build/boards/<board>/report.json`` (``attn
build``) and ``build/sweep/<board>/sweep.json`` (``attn sweep``) — and writes ``report.md``
with ``utilization.png``, ``accuracy.png`` and ``resources.png``. A missing or malformed file
becomes a note saying which command produces it; nothing else stops the report.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

__all__ = ["make_report"]


def _load(path: Path, notes: list, how: str):
    if not path.exists():
        notes.append(f"- not measured: `{path}` is missing (run `{how}`)")
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        notes.append(f"- skipped `{path}`: not readable JSON ({exc})")
        return None


def _rows(data, path, notes, required):
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and required <= set(r)
                                             for r in rows):
        notes.append(f"- skipped `{path}`: rows lack {', '.join(sorted(required))}")
        return []
    return rows


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _bar(path, labels, values, ylabel, title, *, percent=False, target=None):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(4.5, 0.9 * len(labels) + 2), 3.6))
    ax.bar(range(len(labels)), values, color="tab:blue")
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if target is not None:
        ax.axhline(target, color="tab:red", linestyle="--", label=f"target {target:g}")
        ax.legend(fontsize=8)
    if percent:
        ax.set_ylim(0, 100)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def make_report(build_dir="build", out_dir="build/report") -> Path:
    """Write the report; return the path of ``report.md``."""
    build, out = Path(build_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    notes, lines = [], ["# attn-fpga: measured figures", ""]

    # -- utilization per layer shape ------------------------------------------------------
    lines += ["## MAC utilization per layer shape", ""]
    path = build / "bench" / "core.json"
    core = _load(path, notes, "python -m bench.core")
    rows = _rows(core, path, notes, {"preset", "array", "layer", "shape", "util", "cycles"}) \
        if core else []
    if rows:
        lines += ["| preset | array | layer | cycles | utilization | softmax wait | latency µs |",
                  "|---|---|---|---|---|---|---|"]
        for r in rows:
            wait = r.get("softmax_wait")
            lat = r.get("latency_us")
            lines.append(f"| {r['preset']} | {r['array']} | {r['layer']} {r['shape']} | "
                         f"{r['cycles']:,} | {r['util']:.1%} | "
                         f"{f'{wait:.2%}' if wait is not None else '—'} | "
                         f"{f'{lat:.1f}' if lat else '—'} |")
        _bar(out / "utilization.png", [f"{r['preset']} {r['array']}\n{r['shape']}" for r in rows],
             [100 * r["util"] for r in rows], "MAC utilization %",
             "Attention core: utilization per layer shape", percent=True, target=95)
        lines += ["", "![utilization](utilization.png)", ""]
    else:
        lines += ["Not measured.", ""]

    # -- accuracy ---------------------------------------------------------------------------
    lines += ["## Accuracy of the integer model against float64", ""]
    path = build / "bench" / "accuracy.json"
    acc = _load(path, notes, "python -m bench.accuracy")
    rows = _rows(acc, path, notes, {"config", "inputs", "rel_mean", "rel_max"}) if acc else []
    if rows:
        lines += ["| configuration | inputs | relative error (mean / max) | prob error LSB | "
                  "argmax agreement |", "|---|---|---|---|---|"]
        for r in rows:
            lsb = r.get("p_err_lsb")
            arg = r.get("argmax")
            lines.append(f"| {r['config']} | {r['inputs']} | {r['rel_mean']:.3%} / "
                         f"{r['rel_max']:.3%} | {f'{lsb:.1f}' if lsb is not None else '—'} | "
                         f"{f'{arg:.2%}' if arg is not None else '—'} |")
        _bar(out / "accuracy.png", [f"{r['config'].split(' (')[0]}\n{r['inputs']}" for r in rows],
             [100 * r["rel_mean"] for r in rows], "relative error %",
             "Integer model vs float64 (mean over layers)")
        lines += ["", "![accuracy](accuracy.png)", ""]
    else:
        lines += ["Not measured.", ""]

    # -- boards -----------------------------------------------------------------------------
    lines += ["## Resources per board", ""]
    reports = []
    for report_path in sorted((build / "boards").glob("*/report.json")):
        data = _load(report_path, notes, "attn build")
        if isinstance(data, dict) and {"board", "resources", "routed"} <= set(data):
            reports.append(data)
        elif data is not None:
            notes.append(f"- skipped `{report_path}`: not an attn build report")
    if reports:
        lines += ["| board | preset | logic | DSP | BRAM | fmax / clock MHz | fits |",
                  "|---|---|---|---|---|---|---|"]
        for r in reports:
            res = r["resources"]

            def cell(name, res=res):
                pair = res.get(name)
                return f"{pair[0]:,}/{pair[1]:,}" if pair else "—"
            fmax = f"{r['fmax_mhz']:.1f}" if r.get("fmax_mhz") else "—"
            lines.append(f"| {r['board']} | {r['config']['name']} | {cell('logic')} | "
                         f"{cell('dsp')} | {cell('bram')} | {fmax} / {r['clock_mhz']:g} | "
                         f"{'yes' if r['routed'] else 'no'} |")
        plt = _plt()
        fig, ax = plt.subplots(figsize=(6, 3.6))
        kinds = ["logic", "ff", "dsp", "bram"]
        width = 0.8 / len(reports)
        for i, r in enumerate(reports):
            values = [100 * r["resources"][k][0] / r["resources"][k][1]
                      if r["resources"].get(k) else 0 for k in kinds]
            ax.bar([k + i * width for k in range(len(kinds))], values, width,
                   label=f"{r['board']} ({r['config']['name']})")
        ax.axhline(100, color="tab:red", linestyle="--")
        ax.set_xticks([k + width * (len(reports) - 1) / 2 for k in range(len(kinds))], kinds)
        ax.set_ylabel("% of the device")
        ax.set_title("Resources per board (above 100 %: does not fit)", fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / "resources.png", dpi=110)
        plt.close(fig)
        lines += ["", "![resources](resources.png)", ""]
    else:
        notes.append("- no board builds in `build/boards` (run `attn build --board NAME`)")
        lines += ["Not measured.", ""]

    path = build / "bench" / "board.json"
    board = _load(path, notes, "python -m bench.board")
    rows = _rows(board, path, notes, {"board", "compute_ms", "transfer_ms"}) if board else []
    if rows:
        lines += ["End to end, reference layer 64×64×4:", "",
                  "| board | compute ms | transfer ms | USB ms | total ms |",
                  "|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['board']} | {r['compute_ms']} | {r['transfer_ms']} | "
                         f"{r.get('usb_ms', '—')} | {r.get('total_ms', '—')} |")
        lines.append("")

    # -- sweeps -----------------------------------------------------------------------------
    sweeps = sorted((build / "sweep").glob("*/sweep.json"))
    if sweeps:
        lines += ["## Design-space sweeps", ""]
        for sweep_path in sweeps:
            data = _load(sweep_path, notes, "attn sweep")
            if not isinstance(data, dict) or "points" not in data:
                continue
            md = sweep_path.with_name("sweep.md")
            if md.exists():
                lines += md.read_text().splitlines()[2:] + [""]
            png = sweep_path.with_name("sweep.png")
            if png.exists():
                target = out / f"sweep_{data.get('board', sweep_path.parent.name)}.png"
                shutil.copyfile(png, target)
                lines += [f"![sweep]({target.name})", ""]

    if notes:
        lines += ["## Notes", ""] + notes + [""]
    report = out / "report.md"
    report.write_text("\n".join(lines))
    return report
