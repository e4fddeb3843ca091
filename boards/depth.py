"""Logic depth before every flip-flop of a synthesized netlist, ranked: where fmax is lost.

nextpnr reports one critical path per clock after a route that takes half an hour on the
16×8; the paths behind it, often dozens of the same depth, show up one route at a time. This
module reads the netlist Yosys writes before place and route (``<name>.json`` in the build
directory, written a few minutes into a build) and estimates, for every timing endpoint, the
deepest path that reaches it: the number of logic levels and a delay in nanoseconds from a
fixed model. It ranks every family of paths in seconds, not the one nextpnr happened to route
last::

    python -m boards.depth build/synth/ecp5/attn/attn.json --top 20
    python -m boards.depth attn.json --group --top 20    # by (start, end) register families

The model (:class:`Delays`, per family) is deliberately rough: a register's clock-to-output,
then per level one routed net and one cell, then the endpoint's setup. Placement is unknown, so
every net costs the same; connections inside a slice (a LUT into its ``PFUMX``, a carry into
the next carry cell) cost no net. It ranks paths well and misses absolute delays by the routing
it cannot see: on the ULX3S 16×8 (``--placer static``) the routed critical path of 3dee96b, 6
levels, took 11.3 ns where the estimate of its endpoint was 10.9, and long nets across the die
(that one had a wire of 3.1 ns) are what it underestimates. Compare families within one
netlist: ABC maps the same logic a level deeper or shallower from one netlist to the next (the
16×8's host link, unchanged, came out at 6 levels in one synthesis and 7 in another), so a
change is judged by whole families and by the route.

Cells it knows: ECP5 (``LUT4``, ``PFUMX``, ``L6MUX21``, ``CCU2C``, ``TRELLIS_FF``,
``TRELLIS_DPR16X4``, ``MULT18X18D``, ``ALU54B``, ``DP16KD``) and iCE40 (``SB_LUT4``, ``SB_CARRY``,
``SB_DFF*``, ``SB_RAM40_4K``, ``SB_MAC16``, ``SB_SPRAM256KA``). Any other cell cuts paths (its
outputs start paths, its inputs end them) and is listed in :attr:`DepthReport.unknown_cells`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ._cli import write_json

__all__ = ["Delays", "DELAYS", "Endpoint", "DepthReport", "analyze", "format_endpoints",
           "format_groups", "main"]


@dataclass(frozen=True)
class Delays:
    """The delay model of one family, in nanoseconds.

    ``net`` is one routed connection, ``lut`` one LUT4, ``mux`` one wide-function multiplexer
    (``PFUMX``/``L6MUX21``) after its LUTs, ``carry`` one carry cell along a chain, ``clk_q``
    a register's clock to output, ``setup`` its setup, ``ram_q`` a block RAM's or registered
    DSP's clock to output, ``dsp`` an unregistered multiplier's input to output.
    """

    net: float
    lut: float
    mux: float
    carry: float
    clk_q: float
    setup: float
    ram_q: float
    dsp: float


#: The models per family. ECP5's is calibrated on routed paths of the ULX3S 16×8 (speed 6).
DELAYS = {
    "ecp5": Delays(net=1.2, lut=0.25, mux=0.3, carry=0.1, clk_q=0.5, setup=0.2, ram_q=3.5,
                   dsp=4.0),
    "ice40": Delays(net=1.5, lut=0.45, mux=0.45, carry=0.13, clk_q=0.8, setup=0.2, ram_q=2.2,
                    dsp=6.0),
}

# Per cell type: the combinational arcs {output: (inputs, kind)}, where kind names the Delays
# field the arc costs; inputs listed in ``_DEDICATED`` reach the cell without a routed net.
_LUT4 = {"Z": (("A", "B", "C", "D"), "lut")}
_CCU2C = {
    "S0": (("A0", "B0", "C0", "D0", "CIN"), "lut"),
    "S1": (("A1", "B1", "C1", "D1", "CIN"), "lut"),
    "COUT": (("A0", "B0", "C0", "D0", "A1", "B1", "C1", "D1", "CIN"), "carry"),
}
_COMB = {
    "LUT4": _LUT4,
    "PFUMX": {"Z": (("ALUT", "BLUT", "C0"), "mux")},
    "L6MUX21": {"Z": (("D0", "D1", "SD"), "mux")},
    "CCU2C": _CCU2C,
    "SB_LUT4": {"O": (("I0", "I1", "I2", "I3"), "lut")},
    "SB_CARRY": {"CO": (("CI", "I0", "I1"), "carry")},
}
# (cell type, input port) pairs wired inside a slice: no routed net before them.
_DEDICATED = {("PFUMX", "ALUT"), ("PFUMX", "BLUT"), ("L6MUX21", "D0"), ("L6MUX21", "D1"),
              ("CCU2C", "CIN"), ("SB_CARRY", "CI")}
# Data inputs of a carry cell other than the chain reach the carry through the cell's LUT.
_CARRY_DATA_KIND = "lut"
_CLOCKS = {"CLK", "CLKA", "CLKB", "CLKW", "CLKR", "RCLK", "WCLK", "WCK", "C", "CLOCK",
           "CLK0", "CLK1", "CLK2", "CLK3", "CE0", "CE1", "CE2", "CE3", "RST0", "RST1", "RST2",
           "RST3"}
_REGISTER_TYPES = re.compile(r"^(TRELLIS_FF|SB_DFF\w*)$")
_RAM_TYPES = {"DP16KD", "PDPW16KD", "SB_RAM40_4K", "SB_SPRAM256KA"}
_DSP_TYPES = {"MULT18X18D", "ALU54B", "SB_MAC16"}
_IGNORED = re.compile(r"^(\$scopeinfo|TRELLIS_IO|SB_IO\w*|DCCA|DCSC|EHXPLLL|SB_PLL40\w*|"
                      r"SB_GB\w*|GSR|SGSR|USRMCLK|VHI|VLO|SB_HFOSC|SB_LFOSC|SB_RGBA_DRV)$")


@dataclass(frozen=True)
class Endpoint:
    """The deepest estimated path into one endpoint (a register or memory/DSP input bit).

    ``levels`` counts the cells entered through a routed net (a carry chain or a LUT's
    multiplexer in its slice adds none), ``ns`` is the modelled delay, ``path`` the nets along
    it from the start (a register output or an input port) to the endpoint's input net.
    """

    ns: float
    levels: int
    start: str
    end: str
    end_cell: str
    path: tuple[str, ...]

    def as_dict(self) -> dict:
        return {"ns": round(self.ns, 3), "levels": self.levels, "start": self.start,
                "end": self.end, "end_cell": self.end_cell, "path": list(self.path)}


@dataclass
class DepthReport:
    """Every endpoint's deepest path, deepest first, and what the analysis did not model."""

    family: str
    top: str
    endpoints: list[Endpoint]
    unknown_cells: dict[str, int] = field(default_factory=dict)
    loops: int = 0

    def groups(self) -> list[dict]:
        """Endpoints by (start family, end family): their count and deepest path, deepest
        first. A family is a signal name with its indices and numbers replaced by ``#``."""
        by_key: dict[tuple[str, str], dict] = {}
        for ep in self.endpoints:
            key = (family_of(ep.start), family_of(ep.end))
            group = by_key.get(key)
            if group is None:
                by_key[key] = {"start": key[0], "end": key[1], "count": 1, "deepest": ep}
            else:
                group["count"] += 1
        return sorted(by_key.values(), key=lambda g: -g["deepest"].ns)

    def as_dict(self, top: int = 100) -> dict:
        return {"family": self.family, "top": self.top, "endpoints": len(self.endpoints),
                "unknown_cells": self.unknown_cells, "loops": self.loops,
                "deepest": [ep.as_dict() for ep in self.endpoints[:top]],
                "groups": [{"start": g["start"], "end": g["end"], "count": g["count"],
                            **{k: v for k, v in g["deepest"].as_dict().items()
                               if k in ("ns", "levels")}}
                           for g in self.groups()[:top]]}


def family_of(name: str) -> str:
    """``core.unit_3.acc[12]`` → ``core.unit_#.acc``: a name without its bit index and
    numbers, so that the bits and the copies of one register group together. An anonymous
    signal's source line (``core.$signal$528<core.py:1730>``) is kept."""
    name = re.sub(r"\[\d+\]$", "", name)
    base, src = (name.split("<", 1) + [""])[:2] if name.endswith(">") else (name, "")
    return re.sub(r"\d+", "#", base) + (f"<{src}" if src else "")


def _top_module(netlist: dict, top: str | None) -> tuple[str, dict]:
    modules = netlist.get("modules")
    if not isinstance(modules, dict) or not modules:
        raise ValueError("not a Yosys JSON netlist: no 'modules'")
    if top is not None:
        if top not in modules:
            raise ValueError(f"module {top!r} not in the netlist (it has {sorted(modules)})")
        return top, modules[top]
    tops = [n for n, m in modules.items()
            if str(m.get("attributes", {}).get("top", "0")).strip("0") != ""]
    if len(tops) != 1:
        # A flattened netlist of one module has it as its top.
        with_cells = [n for n, m in modules.items() if m.get("cells")]
        if len(with_cells) == 1:
            return with_cells[0], modules[with_cells[0]]
        raise ValueError(f"cannot tell the top module among {sorted(modules)}: pass top=")
    return tops[0], modules[tops[0]]


def _bit_names(module: dict) -> dict[int, str]:
    """Each net bit's most readable name: a public name over a generated one, then the
    shortest."""
    best: dict[int, tuple[int, int, str]] = {}
    for name, net in module.get("netnames", {}).items():
        bits = net.get("bits", [])
        hidden = int(net.get("hide_name", 0)) or name.startswith("$")
        src = str(net.get("attributes", {}).get("src", "")).split("|")[0]
        if "$signal" in name.rsplit(".", 1)[-1] and src:
            # an anonymous Amaranth signal (``a, b = Signal(), Signal()``): its source line
            name = f"{name}<{Path(src).name}>"
        for i, bit in enumerate(bits):
            if not isinstance(bit, int):
                continue
            label = name if len(bits) == 1 else f"{name}[{i}]"
            rank = (int(bool(hidden)), len(label), label)
            if bit not in best or rank < best[bit]:
                best[bit] = rank
    return {bit: rank[2] for bit, rank in best.items()}


def _family(cell_types: set[str]) -> str:
    if any(t.startswith("SB_") for t in cell_types):
        return "ice40"
    return "ecp5"


def _registered_dsp(cell: dict) -> tuple[bool, bool]:
    """(inputs registered, output registered) of a DSP cell from its parameters."""
    params = cell.get("parameters", {})
    if cell["type"] == "SB_MAC16":
        def on(name):
            value = str(params.get(name, "0"))
            return value.strip("0") != ""
        return (on("A_REG") and on("B_REG"),
                on("TOP_8x8_MULT_REG") or on("BOT_8x8_MULT_REG") or on("PIPELINE_16x16_MULT_REG1")
                or on("PIPELINE_16x16_MULT_REG2") or on("TOPOUTPUT_SELECT")
                or on("BOTOUTPUT_SELECT"))
    def clocked(name):
        return str(params.get(name, "NONE")).strip() not in ("NONE", "")
    return (clocked("REG_INPUTA_CLK") and clocked("REG_INPUTB_CLK"),
            clocked("REG_OUTPUT_CLK") or clocked("REG_PIPELINE_CLK")
            or clocked("REG_OUTPUT0_CLK") or clocked("REG_OUTPUT1_CLK"))


def analyze(netlist: dict | str | Path, *, top: str | None = None,
            family: str | None = None) -> DepthReport:
    """Estimate the deepest path into every endpoint of a flattened, technology-mapped Yosys
    netlist (a dict, or the path of its JSON file). ``family`` (``"ecp5"``/``"ice40"``) picks
    the delay model; by default it follows the cell types."""
    if not isinstance(netlist, dict):
        path = Path(netlist)
        try:
            netlist = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not JSON ({exc})") from None
    top_name, module = _top_module(netlist, top)
    cells = module.get("cells", {})
    family = family or _family({c.get("type", "") for c in cells.values()})
    if family not in DELAYS:
        raise ValueError(f"unknown family {family!r}: one of {sorted(DELAYS)}")
    d = DELAYS[family]
    names = _bit_names(module)

    # Each net bit's driver: (cell name, output port) or None for a module input.
    driver: dict[int, tuple[str, str]] = {}
    # Start arrivals: nets driven by a register, memory, registered DSP or input port.
    start_at: dict[int, float] = {}
    # Endpoints: (input net bit, cell name, input port).
    ends: list[tuple[int, str, str]] = []
    # Combinational arcs: (cell, output port) → [(input net bit, delay, through a routed net)].
    comb_out: dict[tuple[str, str], list[tuple[int, float, bool]]] = {}
    unknown: dict[str, int] = defaultdict(int)

    for port in module.get("ports", {}).values():
        if port.get("direction") in ("input", "inout"):
            for bit in port.get("bits", []):
                if isinstance(bit, int):
                    start_at[bit] = 0.0

    def bits(cell, port):
        return [b for b in cell.get("connections", {}).get(port, []) if isinstance(b, int)]

    for cname, cell in cells.items():
        ctype = cell.get("type", "")
        dirs = cell.get("port_directions", {})
        conns = cell.get("connections", {})
        if _IGNORED.match(ctype):
            continue
        outputs = [p for p in conns if dirs.get(p) == "output"]
        inputs = [p for p in conns if dirs.get(p) == "input" and p not in _CLOCKS]
        if ctype in _COMB:
            arcs = _COMB[ctype]
            for out, (ins, kind) in arcs.items():
                for ob in bits(cell, out):
                    driver[ob] = (cname, out)
                    feeds = comb_out.setdefault((cname, out), [])
                    for ip in ins:
                        for ib in bits(cell, ip):
                            dedicated = (ctype, ip) in _DEDICATED
                            arc_kind = kind
                            if kind == "carry" and ip != "CIN" and ip != "CI":
                                arc_kind = _CARRY_DATA_KIND
                            feeds.append((ib, getattr(d, arc_kind), not dedicated))
            continue
        if ctype in _DSP_TYPES:
            reg_in, reg_out = _registered_dsp(cell)
            if not reg_in and not reg_out:
                # Combinational multiplier: every input reaches every output.
                in_bits = [b for p in inputs for b in bits(cell, p)]
                for out in outputs:
                    for ob in bits(cell, out):
                        driver[ob] = (cname, out)
                        comb_out[(cname, out)] = [(ib, d.dsp, True) for ib in in_bits]
                continue
            for out in outputs:
                for ob in bits(cell, out):
                    driver[ob] = (cname, out)
                    start_at[ob] = d.ram_q if reg_out else d.dsp
            for ip in inputs:
                for ib in bits(cell, ip):
                    ends.append((ib, cname, ip))
            continue
        if ctype == "TRELLIS_DPR16X4":
            # Distributed RAM: the read is combinational from the read address; the write
            # side (data, write address, write enable) ends paths.
            rad = [b for b in bits(cell, "RAD")]
            for ob in bits(cell, "DO"):
                driver[ob] = (cname, "DO")
                comb_out[(cname, "DO")] = [(ib, d.lut, True) for ib in rad]
            for ip in inputs:
                if ip != "RAD":
                    for ib in bits(cell, ip):
                        ends.append((ib, cname, ip))
            continue
        if _REGISTER_TYPES.match(ctype) or ctype in _RAM_TYPES:
            q = d.clk_q if _REGISTER_TYPES.match(ctype) else d.ram_q
            for out in outputs:
                for ob in bits(cell, out):
                    driver[ob] = (cname, out)
                    start_at[ob] = q
            for ip in inputs:
                for ib in bits(cell, ip):
                    ends.append((ib, cname, ip))
            continue
        unknown[ctype] += 1
        for out in outputs:
            for ob in bits(cell, out):
                driver[ob] = (cname, out)
                start_at[ob] = d.clk_q
        for ip in inputs:
            for ib in bits(cell, ip):
                ends.append((ib, cname, ip))

    # Arrival at each net, computed without recursion; a combinational loop is cut and counted.
    arrival: dict[int, float] = {}
    levels: dict[int, int] = {}
    prev: dict[int, int | None] = {}
    loops = 0
    DONE, ACTIVE = 1, 2
    state: dict[int, int] = {}

    def resolve(bit: int) -> None:
        nonlocal loops
        stack = [(bit, False)]
        while stack:
            b, expanded = stack.pop()
            if state.get(b) == DONE:
                continue
            drv = driver.get(b)
            arcs = comb_out.get(drv) if drv is not None else None
            if b in start_at or arcs is None:
                arrival[b], levels[b], prev[b] = start_at.get(b, 0.0), 0, None
                state[b] = DONE
                continue
            if not expanded:
                if state.get(b) == ACTIVE:
                    continue
                state[b] = ACTIVE
                stack.append((b, True))
                for ib, _, _ in arcs:
                    if state.get(ib) == ACTIVE:
                        loops += 1
                    elif state.get(ib) != DONE:
                        stack.append((ib, False))
                continue
            best, best_lv, best_prev = 0.0, 0, None
            for ib, delay, routed in arcs:
                if state.get(ib) != DONE:
                    continue  # on a loop: cut here
                t = arrival[ib] + delay + (d.net if routed else 0.0)
                if t > best or best_prev is None:
                    best, best_prev, best_lv = t, ib, levels[ib] + int(routed)
            arrival[b], levels[b], prev[b] = best, best_lv, best_prev
            state[b] = DONE

    endpoints = []
    for ib, cname, port in ends:
        resolve(ib)
        ns = arrival[ib] + d.net + d.setup
        path = []
        b: int | None = ib
        while b is not None:
            path.append(names.get(b, f"${b}"))
            b = prev.get(b)
        path.reverse()
        end_name = _end_name(cells[cname], cname, port, names)
        endpoints.append(Endpoint(ns=ns, levels=levels[ib], start=path[0], end=end_name,
                                  end_cell=cells[cname].get("type", ""), path=tuple(path)))
    endpoints.sort(key=lambda e: (-e.ns, -e.levels, e.end))
    return DepthReport(family=family, top=top_name, endpoints=endpoints,
                       unknown_cells=dict(unknown), loops=loops)


def _end_name(cell: dict, cname: str, port: str, names: dict[int, str]) -> str:
    """A register endpoint by the net it drives (``Q``/``O``), else ``cell.port``."""
    conns = cell.get("connections", {})
    for out in ("Q", "O"):
        if out in conns and conns[out] and isinstance(conns[out][0], int):
            return names.get(conns[out][0], cname)
    return f"{cname}.{port}"


def format_endpoints(report: DepthReport, top: int = 20) -> str:
    lines = [f"{'ns':>6} {'lv':>3}  start → end", f"{'-' * 6} {'-' * 3}  {'-' * 40}"]
    for ep in report.endpoints[:top]:
        lines.append(f"{ep.ns:6.2f} {ep.levels:3d}  {ep.start} → {ep.end}")
    return "\n".join(lines)


def format_groups(report: DepthReport, top: int = 20) -> str:
    lines = [f"{'ns':>6} {'lv':>3} {'count':>6}  start family → end family",
             f"{'-' * 6} {'-' * 3} {'-' * 6}  {'-' * 40}"]
    for g in report.groups()[:top]:
        ep = g["deepest"]
        lines.append(f"{ep.ns:6.2f} {ep.levels:3d} {g['count']:6d}  {g['start']} → {g['end']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m boards.depth", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("netlist", type=Path, help="Yosys JSON netlist (<build>/<name>.json)")
    parser.add_argument("--top", type=int, default=20, help="rows to print (default 20)")
    parser.add_argument("--group", action="store_true",
                        help="rank (start, end) families instead of single endpoints")
    parser.add_argument("--path", action="store_true", help="print the deepest path's nets")
    parser.add_argument("--module", help="top module (default: the netlist's top)")
    parser.add_argument("--family", choices=sorted(DELAYS), help="delay model (default: "
                        "from the cell types)")
    parser.add_argument("--json", type=Path, help="also write the report as JSON here")
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error("--top must be at least 1")
    if not args.netlist.is_file():
        parser.error(f"{args.netlist}: no such file")
    try:
        report = analyze(args.netlist, top=args.module, family=args.family)
    except ValueError as exc:
        parser.error(str(exc))
    print(f"{args.netlist}: {len(report.endpoints)} endpoints, {report.family} model"
          + (f", {report.loops} combinational loop arcs cut" if report.loops else "")
          + (f", cells not modelled (cut): {report.unknown_cells}" if report.unknown_cells
             else ""))
    print(format_groups(report, args.top) if args.group else format_endpoints(report, args.top))
    if args.path and report.endpoints:
        print("\ndeepest path:\n  " + "\n  ".join(report.endpoints[0].path))
    if args.json:
        write_json(args.json, report.as_dict(args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
