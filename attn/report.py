"""``attn report``: the measured figures in one Markdown page with plots.

Reads what the benchmarks and builds left behind and writes ``report.md`` and its PNGs into
the output folder. From the bench folder (default ``build/bench``):

- ``core.json`` (``python -m bench.core``): ``rows``, utilization per layer shape; ``fmax``;
- ``systolic.json`` (``python -m bench.systolic [--synth]``): ``utilization`` per tile shape,
  ``synthesis`` (out-of-context builds);
- ``softmax.json`` (``python -m bench.softmax [--synth]``): ``throughput``, ``synth``;
- ``accuracy.json`` (``python -m bench.accuracy``): ``rows``, integer model against float64;
- ``board.json`` (``python -m bench.board``): ``rows``, end-to-end time per board;

plus ``<build>/boards/<board>/report.json`` (``attn build``: resources per board) and
``<build>/sweep/<board>/sweep.json`` (``attn sweep``). Out-of-context synthesis results
(``bench.systolic --synth``, ``bench.softmax --synth``) are gathered per FPGA family; a family
without any is reported as "not measured".

A missing file is reported as not measured, with the command that makes it; a file that is
not JSON, or a row that lacks a field or has one of the wrong type, is skipped with a note
naming the file, the row and the field. The report never stops on a bad file.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from . import report_plots

__all__ = ["make_report", "FAMILIES"]

#: FPGA families of the boards, with the command whose synthesis results cover them.
FAMILIES = {"ice40": "iCE40UP5K (iCEBreaker)", "ecp5": "ECP5-85F (ULX3S)"}

_PICTURES = ("utilization.png", "systolic.png", "accuracy.png", "resources.png",
             "families.png")
_SYNTH_HOW = "python -m bench.systolic --synth, python -m bench.softmax --synth"


# -- reading and validating -------------------------------------------------------------------

def _is(value, kind: str) -> bool:
    if kind == "num":
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value))
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "text":                     # a figure printed as it is: string or number
        return isinstance(value, str) or _is(value, "num")
    if kind == "dict":
        return isinstance(value, dict)
    if kind == "pair":                     # [used, available] of a board report, or null
        return value is None or (isinstance(value, list) and len(value) == 2
                                 and all(_is(v, "num") for v in value) and value[1] > 0)
    raise ValueError(f"unknown kind {kind!r}")


class _Reader:
    """Loads JSON files and keeps the notes about what was missing or skipped."""

    def __init__(self):
        self.notes = []

    def load(self, path: Path, how: str):
        if not path.exists():
            self.notes.append(f"- not measured: `{path}` is missing (run `{how}`)")
            return None
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            self.notes.append(f"- skipped `{path}`: not readable JSON ({exc})")
            return None

    def records(self, data, key, path: Path, fields: dict) -> list:
        """The dicts of ``data[key]`` (``data`` itself if ``key`` is None) whose ``fields``
        (name -> kind, ``"num?"`` = optional) are present and of the right kind; a note for
        each row that is not."""
        if data is None:
            return []
        items = data if key is None else (data.get(key) if isinstance(data, dict) else None)
        where = f"`{path}`" + (f" ({key})" if key else "")
        if key is not None and isinstance(data, dict) and key not in data:
            return []                        # the file exists but has no such part
        if not isinstance(items, list):
            self.notes.append(f"- skipped {where}: not a list of rows")
            return []
        good = []
        for i, item in enumerate(items):
            problem = self.problem(item, fields)
            if problem:
                self.notes.append(f"- skipped row {i} of {where}: {problem}")
            else:
                good.append(item)
        return good

    @staticmethod
    def problem(item, fields: dict) -> str | None:
        if not isinstance(item, dict):
            return "not an object"
        for name, kind in fields.items():
            optional = kind.endswith("?")
            value = item.get(name)
            if value is None and optional:
                continue
            if name not in item:
                return f"no field {name!r}"
            if not _is(value, kind.rstrip("?")):
                return f"field {name!r} is {value!r}, not a {kind.rstrip('?')}"
        return None


def _pct(value) -> str:
    return f"{value:.1%}" if value is not None else "—"


def _num(value, spec=",.0f") -> str:
    return format(value, spec) if value is not None else "—"


# -- sections ---------------------------------------------------------------------------------

def _core(reader, bench, out, fmax_out) -> list:
    path = bench / "core.json"
    data = reader.load(path, "python -m bench.core")
    rows = reader.records(data, "rows", path, {
        "preset": "str", "array": "str", "layer": "str", "shape": "str", "util": "num",
        "cycles": "num", "softmax_wait": "num?", "latency_us": "num?", "exact": "bool?",
        "util_masked": "num?"})
    if isinstance(data, dict) and isinstance(data.get("fmax"), dict):
        fmax_out.update({k: v for k, v in data["fmax"].items() if _is(v, "num")})
    lines = ["## Attention core: MAC utilization per layer shape", ""]
    if not rows:
        return lines + ["Not measured (`python -m bench.core`).", ""]
    lines += ["Cycle-exact simulation of whole layers (causal mask), output checked against "
              "golden/; utilization = ideal cycles (MACs / PEs) / measured cycles, with the "
              "layer's MACs counted without the mask (the core skips masked key blocks, so "
              "this can pass 100 %) and with the MACs the mask leaves.", "",
              "| preset | array | layer | cycles | utilization | of unmasked MACs "
              "| softmax wait | equals golden | latency µs |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        exact = {True: "yes", False: "**NO**", None: "—"}[r.get("exact")]
        lines.append(f"| {r['preset']} | {r['array']} | {r['layer']} {r['shape']} | "
                     f"{r['cycles']:,} | {r['util']:.1%} | "
                     f"{_num(r.get('util_masked'), '.1%')} | "
                     f"{_num(r.get('softmax_wait'), '.2%')} | {exact} | "
                     f"{_num(r.get('latency_us'), '.1f')} |")
    report_plots.bars(out / "utilization.png",
                      [f"{r['preset']} {r['array']}\n{r['shape']}" for r in rows],
                      [100 * r["util"] for r in rows], "MAC utilization %",
                      "Attention core: utilization per layer shape", percent=True, target=95)
    return lines + ["", "![utilization per layer shape](utilization.png)", ""]


def _systolic(reader, bench, out, synth_out) -> list:
    path = bench / "systolic.json"
    data = reader.load(path, "python -m bench.systolic")
    runs = reader.records(data, "utilization", path, {
        "rows": "num", "cols": "num", "K": "num", "tiles": "num", "utilization": "num",
        "steady_utilization": "num?", "latency": "num?", "dsp": "str?"})
    synth_out += [dict(r, source="bench.systolic") for r in
                  reader.records(data, "synthesis", path, _SYNTH_FIELDS)]
    lines = ["## Systolic array: utilization per tile shape", ""]
    if not runs:
        return lines + ["Not measured (`python -m bench.systolic`).", ""]
    lines += ["Streams of tiles with reduction length K, no stalls (Amaranth simulator, "
              "checked against golden/): end to end includes fill and drain; sustained is the "
              "input side.", "",
              "| array | multipliers | K | tiles | end to end | sustained | latency cycles |",
              "|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['rows']}x{r['cols']} | {r.get('dsp') or '—'} | {r['K']} | "
                     f"{r['tiles']} | {r['utilization']:.1%} | "
                     f"{_pct(r.get('steady_utilization'))} | {_num(r.get('latency'))} |")
    report_plots.utilization_vs_k(out / "systolic.png", runs)
    return lines + ["", "![systolic utilization](systolic.png)", ""]


def _softmax(reader, bench, synth_out) -> list:
    path = bench / "softmax.json"
    data = reader.load(path, "python -m bench.softmax")
    rows = reader.records(data, "throughput", path, {
        "preset": "str", "length": "num", "rows": "num", "elements_per_cycle": "num",
        "first_output_cycle": "num?"})
    synth_out += [dict(r, source="bench.softmax") for r in
                  reader.records(data, "synth", path, _SYNTH_FIELDS)]
    if not rows:
        return []
    lines = ["## Softmax unit: throughput", "",
             "| preset | row length | rows | elements/cycle | first output cycle |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['preset']} | {r['length']} | {r['rows']:,} | "
                     f"{r['elements_per_cycle']:.3f} | {_num(r.get('first_output_cycle'))} |")
    return lines + [""]


def _accuracy(reader, bench, out) -> list:
    path = bench / "accuracy.json"
    data = reader.load(path, "python -m bench.accuracy")
    rows = reader.records(data, "rows", path, {
        "config": "str", "inputs": "str", "rel_mean": "num", "rel_max": "num",
        "p_err_lsb": "num?", "argmax": "num?", "layers": "num?"})
    lines = ["## Accuracy of the integer model against float64", ""]
    if not rows:
        return lines + ["Not measured (`python -m bench.accuracy`).", ""]
    lines += ["Relative Frobenius error of the dequantized output; probability error in LSBs "
              "of the configuration's probability format; argmax agreement of the "
              "probability rows.", "",
              "| configuration | inputs | layers | relative error mean / max | prob error LSB | "
              "argmax agreement |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['inputs']} | {_num(r.get('layers'))} | "
                     f"{r['rel_mean']:.3%} / {r['rel_max']:.3%} | "
                     f"{_num(r.get('p_err_lsb'), '.1f')} | {_num(r.get('argmax'), '.2%')} |")
    report_plots.bars(out / "accuracy.png",
                      [f"{r['config'].split(' (')[0]}\n{r['inputs']}" for r in rows],
                      [100 * r["rel_mean"] for r in rows], "relative error %",
                      "Integer model vs float64 (mean over layers)")
    return lines + ["", "![accuracy](accuracy.png)", ""]


def _boards(reader, build, bench, out) -> list:
    lines = ["## Resources per board", ""]
    reports = []
    for path in sorted((build / "boards").glob("*/report.json")):
        data = reader.load(path, "attn build")
        if data is None:
            continue
        problem = reader.problem(data, {"board": "str", "config": "dict", "routed": "bool",
                                        "resources": "dict", "clock_mhz": "num",
                                        "fmax_mhz": "num?"})
        if problem is None and not isinstance(data["config"].get("name"), str):
            problem = "config has no name"
        if problem is None:
            bad = [k for k, v in data["resources"].items() if not _is(v, "pair")]
            problem = f"resources {bad} are not [used, available]" if bad else None
        if problem:
            reader.notes.append(f"- skipped `{path}`: not an attn build report ({problem})")
        else:
            reports.append(data)
    if reports:
        lines += ["Whole device (core, host link, UART, PLL) built by `attn build`.", "",
                  "| board | preset | logic | FF | DSP | BRAM | fmax / clock MHz | fits |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in reports:
            def cell(name, res=r["resources"]):
                pair = res.get(name)
                return f"{pair[0]:,}/{pair[1]:,}" if pair else "—"
            lines.append(f"| {r['board']} | {r['config']['name']} | {cell('logic')} | "
                         f"{cell('ff')} | {cell('dsp')} | {cell('bram')} | "
                         f"{_num(r.get('fmax_mhz'), '.1f')} / {r['clock_mhz']:g} | "
                         f"{'yes' if r['routed'] else '**no**'} |")
        report_plots.board_resources(out / "resources.png", reports)
        lines += ["", "![resources per board](resources.png)", ""]
    else:
        reader.notes.append(f"- not measured: no board builds in `{build / 'boards'}` (run "
                            f"`attn build --board NAME`)")
        lines += ["Not measured (`attn build --board NAME`).", ""]

    path = bench / "board.json"
    rows = reader.records(reader.load(path, "python -m bench.board"), "rows", path, {
        "board": "str", "compute_ms": "text", "transfer_ms": "text", "usb_ms": "text?",
        "total_ms": "text?"})
    if rows:
        lines += ["End to end, reference layer 64×64×4 (`python -m bench.board`):", "",
                  "| board | compute ms | transfer ms | USB ms | total ms |",
                  "|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['board']} | {r['compute_ms']} | {r['transfer_ms']} | "
                         f"{r.get('usb_ms') or '—'} | {r.get('total_ms') or '—'} |")
        lines.append("")
    return lines


_SYNTH_FIELDS = {"name": "str", "family": "str", "lut": "num", "lut_total": "num?",
                 "lut_dut": "num?",
                 "ff": "num?", "dsp": "num", "dsp_total": "num?", "bram": "num?",
                 "bram_total": "num?", "fmax_mhz": "num?", "clock_mhz": "num?",
                 "routed": "bool"}


def _families(synth, fmax, out) -> list:
    lines = ["## Resources per FPGA family (out-of-context builds)", "",
             "Each component alone in a measurement wrapper (`boards/synth.py`); logic and "
             "flip-flops include the wrapper.", ""]
    by_family = {}
    for r in synth:
        by_family.setdefault(r["family"], []).append(r)
    for family in list(FAMILIES) + sorted(set(by_family) - set(FAMILIES)):
        rows = by_family.get(family, [])
        lines += [f"### {FAMILIES.get(family, family)}", ""]
        if not rows:
            lines += [f"Not measured (`{_SYNTH_HOW}`).", ""]
            continue

        def frac(used, total):
            if used is None:
                return "—"
            return f"{used:,}/{total:,}" if total else f"{used:,}"
        lines += ["| design | from | logic | logic w/o wrapper | FF | DSP | BRAM | "
                  "fmax / clock MHz | routed |", "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['name']} | {r['source']} | {frac(r['lut'], r.get('lut_total'))}"
                         f" | {_num(r.get('lut_dut'))} | {_num(r.get('ff'))} | "
                         f"{frac(r['dsp'], r.get('dsp_total'))} | "
                         f"{frac(r.get('bram'), r.get('bram_total'))} | "
                         f"{_num(r.get('fmax_mhz'), '.1f')} / {_num(r.get('clock_mhz'), 'g')} "
                         f"| {'yes' if r['routed'] else '**no**'} |")
        lines.append("")
    if fmax:
        lines += ["Attention core fmax (`python -m bench.core --synth`): "
                  + ", ".join(f"{k} {v:.1f} MHz" for k, v in sorted(fmax.items())), ""]
    if by_family:
        report_plots.family_resources(out / "families.png", by_family)
        lines += ["![resources per family](families.png)", ""]
    return lines


def _sweeps(reader, build, out) -> list:
    from .sweep import fmax_text

    lines = []
    for path in sorted((build / "sweep").glob("*/sweep.json")):
        data = reader.load(path, "attn sweep")
        points = reader.records(data, "points", path, {
            "array": "str", "logic": "num", "logic_total": "num", "dsp": "num",
            "dsp_total": "num", "fits": "bool", "fmax_mhz": "num?", "cycles": "num",
            "utilization": "num", "layers_per_s": "num?", "pareto": "bool?"})
        if not points:
            continue
        board = data.get("board") if isinstance(data.get("board"), str) else path.parent.name
        lines += [f"## Design-space sweep: {board}", "",
                  "| array | logic | DSP | fits | fmax MHz | cycles | utilization | layers/s "
                  "| Pareto |", "|---|---|---|---|---|---|---|---|---|"]
        for p in points:
            lines.append(f"| {p['array']} | {p['logic']:,}/{p['logic_total']:,} | "
                         f"{p['dsp']}/{p['dsp_total']} | {'yes' if p['fits'] else 'no'} | "
                         f"{fmax_text(p)} | {p['cycles']:,} | "
                         f"{p['utilization']:.1%} | {_num(p.get('layers_per_s'))} | "
                         f"{'**yes**' if p.get('pareto') else ''} |")
        lines.append("")
        png = path.with_name("sweep.png")
        if png.exists():
            target = out / f"sweep_{board}.png"
            shutil.copyfile(png, target)
            lines += [f"![sweep {board}]({target.name})", ""]
    return lines


# -- the report -------------------------------------------------------------------------------

def make_report(build_dir="build", out_dir="build/report", bench_dir=None) -> Path:
    """Write ``report.md`` (and its PNGs) into ``out_dir`` from the results in ``bench_dir``
    (default ``<build_dir>/bench``) and ``build_dir``; return the path of ``report.md``."""
    build, out = Path(build_dir), Path(out_dir)
    bench = Path(bench_dir) if bench_dir is not None else build / "bench"
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*map(out.joinpath, _PICTURES), *out.glob("sweep_*.png")]:
        stale.unlink(missing_ok=True)        # pictures of an earlier report
    reader, synth, fmax = _Reader(), [], {}
    lines = ["# attn-fpga: measured figures", "",
             f"Gathered by `attn report` from `{bench}` and `{build}`.", ""]
    sections = [("utilization", lambda: _core(reader, bench, out, fmax)),
                ("systolic", lambda: _systolic(reader, bench, out, synth)),
                ("softmax", lambda: _softmax(reader, bench, synth)),
                ("accuracy", lambda: _accuracy(reader, bench, out)),
                ("boards", lambda: _boards(reader, build, bench, out)),
                ("families", lambda: _families(synth, fmax, out)),
                ("sweeps", lambda: _sweeps(reader, build, out))]
    for name, section in sections:
        try:
            lines += section()
        except Exception as exc:            # a file shaped in a way no check foresaw
            reader.notes.append(f"- section {name} skipped: {type(exc).__name__}: {exc}")
    if reader.notes:
        lines += ["## Notes", ""] + reader.notes + [""]
    report = out / "report.md"
    report.write_text("\n".join(lines))
    return report
