"""Every timing endpoint of a routed design by its latest arrival: all that a route misses.

nextpnr's report names one critical path per clock, so a half-hour route of the 16×8 shows
one slow path and hides the others behind it. With ``--detailed-timing-report`` (every board
build asks for it) the report also lists, for each net into a timing endpoint (a flip-flop's
or a block RAM's or DSP's clocked input), the latest time a signal arrives there. This module
ranks those endpoints and their register families (named as :mod:`boards.depth` names them)
against clock frequencies: how many endpoints, and which families, miss 90, 100 or 123 MHz::

    python -m boards.slack build/boards/ulx3s/work/attn.report.json --mhz 100,123 --top 20
    python -m boards.slack attn.report.json --netlist attn.json    # + where the paths start

With the netlist Yosys wrote for the route (``--netlist``), each family's latest endpoint also
gets :mod:`boards.depth`'s deepest path into that register: its start and logic levels. A
family whose routed arrival is far above that estimate lost its time in wires (a register
far from its users); one near it, in logic.

An arrival includes the clock-to-output of the start and every cell and routed wire on the
way, not the endpoint's setup time (zero for an ECP5 slice's data input, a fraction of a
nanosecond for block RAM and DSP inputs), so an endpoint at exactly the period may still fail.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ._cli import write_json
from .depth import analyze, family_of

__all__ = ["Arrival", "arrivals", "missing", "families", "deepest_paths", "main"]

#: A flip-flop cell's name as nextpnr-ecp5 / nextpnr-ice40 get it from Yosys: the register's
#: net, then the cell type and bit (``core.acc_TRELLIS_FF_Q_12``, ``core.acc_SB_DFFE_Q_3``).
_FF_SUFFIX = re.compile(r"_(TRELLIS_FF|SB_DFF\w*)_Q(_\d+)?$")


@dataclass(frozen=True)
class Arrival:
    """The latest arrival ``ns`` at input ``port`` of ``cell``; ``name`` the register (for a
    flip-flop, the net it drives) or ``cell.port``."""
    ns: float
    cell: str
    port: str
    name: str

    def as_dict(self) -> dict:
        return {"ns": round(self.ns, 3), "cell": self.cell, "port": self.port,
                "name": self.name}


def _name(cell: str, port: str) -> str:
    register = _FF_SUFFIX.sub("", cell)
    return register if register != cell else f"{cell}.{port}"


def arrivals(report: dict | str | Path) -> list[Arrival]:
    """The endpoints of nextpnr's ``--report`` JSON (a path or the loaded object), latest
    first. Raises ``ValueError`` if the report has no detailed net timings (nextpnr ran
    without ``--detailed-timing-report``)."""
    if not isinstance(report, dict):
        report = json.loads(Path(report).read_text())
    nets = report.get("detailed_net_timings")
    if nets is None:
        raise ValueError("the report has no 'detailed_net_timings' (run nextpnr with "
                         "--detailed-timing-report; board builds since this tool do)")
    found = {}
    for net in nets:
        for end in net.get("endpoints", []):
            delay = end["delay"]
            ns = float(max(delay) if isinstance(delay, list) else delay)
            key = (end["cell"], end["port"])
            if key not in found or ns > found[key].ns:
                found[key] = Arrival(ns, end["cell"], end["port"], _name(*key))
    return sorted(found.values(), key=lambda a: (-a.ns, a.name))


def missing(ends: list[Arrival], mhz: float) -> list[Arrival]:
    """The endpoints that ``mhz`` misses: arrival after the period."""
    period = 1000.0 / mhz
    return [a for a in ends if a.ns > period]


def families(ends: list[Arrival]) -> list[dict]:
    """``ends`` by register family (:func:`boards.depth.family_of`): ``family``, ``count``
    and the ``latest`` arrival, latest first."""
    by_family: dict[str, dict] = {}
    for a in ends:
        key = family_of(a.name)
        group = by_family.setdefault(key, {"family": key, "count": 0, "latest": a})
        group["count"] += 1
    return sorted(by_family.values(), key=lambda g: (-g["latest"].ns, g["family"]))


def deepest_paths(netlist) -> dict:
    """``{register or cell.port: deepest Endpoint}`` of :func:`boards.depth.analyze` on
    ``netlist`` (a Yosys JSON netlist, path or object), a register's bits taken together."""
    deepest = {}
    for ep in analyze(netlist).endpoints:
        key = re.sub(r"\[\d+\]$", "", ep.end)
        if key not in deepest or ep.ns > deepest[key].ns:
            deepest[key] = ep
    return deepest


def _clock(report: dict) -> tuple[float | None, float | None]:
    """The first clock's (constraint, achieved) MHz, or Nones."""
    for clock in report.get("fmax", {}).values():
        return float(clock["constraint"]), float(clock["achieved"])
    return None, None


def _path_fields(path) -> dict:
    return {} if path is None else {"deepest_logic": {"start": path.start,
                                                      "levels": path.levels,
                                                      "estimate_ns": round(path.ns, 3)}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m boards.slack",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="nextpnr's --report JSON "
                        "(<build>/<name>.report.json)")
    parser.add_argument("--mhz", default="", help="comma-separated clocks to count misses at "
                        "(default: the report's constraint); families are listed for the "
                        "first")
    parser.add_argument("--top", type=int, default=20, help="families to list (default 20)")
    parser.add_argument("--netlist", type=Path, help="the route's Yosys JSON netlist "
                        "(<build>/<name>.json): each family's deepest logic path, by "
                        "boards.depth")
    parser.add_argument("--json", type=Path, help="also write the counts and families here")
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error("--top must be at least 1")
    if not args.report.is_file():
        parser.error(f"{args.report}: no such file")
    try:
        report = json.loads(args.report.read_text())
        ends = arrivals(report)
    except (ValueError, KeyError, TypeError) as exc:
        parser.error(f"{args.report}: {exc}")
    constraint, achieved = _clock(report)
    paths = {}
    if args.netlist is not None:
        if not args.netlist.is_file():
            parser.error(f"{args.netlist}: no such file")
        try:
            paths = deepest_paths(args.netlist)
        except ValueError as exc:
            parser.error(f"{args.netlist}: {exc}")
    try:
        clocks = [float(f) for f in args.mhz.split(",") if f.strip()] or [constraint]
    except ValueError:
        parser.error(f"--mhz: not a list of numbers: {args.mhz!r}")
    if clocks == [None]:
        parser.error("the report names no clock: pass --mhz")
    if any(f <= 0 for f in clocks):
        parser.error("--mhz: clocks must be positive")
    latest = ends[0].ns if ends else 0.0
    print(f"{args.report}: {len(ends)} endpoints, the latest {latest:.2f} ns"
          + (f" (clock {constraint:g} MHz constraint, {achieved:.1f} achieved)"
             if constraint else ""))
    counts = {}
    for mhz in clocks:
        late = missing(ends, mhz)
        counts[mhz] = (late, families(late))
        print(f"  at {mhz:g} MHz ({1000 / mhz:.2f} ns): {len(late)} endpoints in "
              f"{len(counts[mhz][1])} families miss")
    late, groups = counts[clocks[0]]
    if groups:
        print(f"\nfamilies missing {clocks[0]:g} MHz, latest first:")
        print(f"{'ns':>6} {'count':>6}  family (its latest endpoint)")
        for g in groups[:args.top]:
            print(f"{g['latest'].ns:6.2f} {g['count']:6d}  {g['family']}  "
                  f"({g['latest'].cell}.{g['latest'].port})")
            path = paths.get(g["latest"].name)
            if path is not None:
                print(f"{'':14}  deepest logic: {path.levels} levels from {path.start} "
                      f"(est. {path.ns:.2f} ns)")
        if len(groups) > args.top:
            print(f"... {len(groups) - args.top} families more")
    if args.json:
        write_json(args.json, {
            "endpoints": len(ends), "latest_ns": round(latest, 3),
            "constraint_mhz": constraint, "achieved_mhz": achieved,
            "missing": [{"mhz": mhz, "endpoints": len(counts[mhz][0]),
                         "families": [{"family": g["family"], "count": g["count"],
                                       "latest": g["latest"].as_dict(),
                                       **_path_fields(paths.get(g["latest"].name))}
                                      for g in counts[mhz][1][:args.top]]}
                        for mhz in clocks]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
