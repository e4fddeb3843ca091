"""Out-of-context synthesis of one component on iCE40UP5K or ECP5-85F: resources and fmax.

:func:`synthesize` places any :class:`amaranth.lib.wiring.Component` in a small wrapper on the
board of its family, runs Yosys and nextpnr (no bitstream unless asked), and returns a
:class:`SynthReport` with the resources used, the device totals, nextpnr's achieved fmax, and
the build time::

    from boards.synth import synthesize
    report = synthesize(MyArray(cfg), family="ice40", name="array4x4", clock_mhz=40, dsp=True)
    print(report)                # one paragraph; report.as_dict() is JSON-ready
    print(format_table([report, ...]))

==========  ==============================  =========================================
family      board / device                  resource columns (``lut`` / ``dsp`` / ...)
==========  ==============================  =========================================
``ice40``   iCEBreaker, iCE40UP5K-SG48      ICESTORM_LC, SB_MAC16, EBR (4 Kb), SPRAM
``ecp5``    ULX3S-85F, LFE5U-85F-6BG381     TRELLIS_COMB (LUT4 slots), MULT18X18D, DP16KD
==========  ==============================  =========================================

The wrapper (:class:`OutOfContext`) keeps the measurement about the component:

* every input port bit comes from its own flip-flop in a chain fed by one input pin (each
  bit the XOR of the two before it, so that no flip-flop of the chain equals a delayed copy
  that the component's pipeline registers hold: Yosys would merge them), so no input is
  constant and every input path starts at a register (constant ports, such as the ``ready``
  of an ``always_ready`` stream, are not ports and are left alone);
* every output port bit is captured in a flip-flop, and the captured bits are XOR-reduced by a
  pipelined tree (4 bits per LUT4, one register level each) into one output pin, so nothing is
  optimized away and every output path ends at a register after no added logic;
* the component's ``sync`` domain runs on the board clock pin and its reset comes from a second
  registered pin; the wrapper's own registers are reset-less.

What the numbers mean:

* ``lut``/``ff`` include the wrapper: about one flip-flop and one LUT per input bit and ``4/3``
  flip-flops per output bit (on iCE40 each takes a logic cell). :attr:`SynthReport.lut_dut`
  and ``ff_dut`` subtract the wrapper's share (:attr:`SynthReport.wrapper_luts`,
  ``wrapper_ffs``). With ``capture_outputs=False`` the XOR tree reads the outputs directly:
  one flip-flop per output bit less, one LUT more on each output path (for output-heavy
  blocks on the small iCE40).
* Registers that Yosys pulls into a DSP block (SB_MAC16 input/output registers) are not in
  ``ff``. ``ff`` on iCE40 counts Yosys's ``SB_DFF*`` cells; on ECP5 nextpnr's ``TRELLIS_FF``.
* The clock pin is constrained at ``clock_mhz`` instead of its crystal frequency, so nextpnr
  optimizes for that target and reports the achieved fmax of the design clock; the report says
  whether it met the target. Ask for a little more than you expect. fmax varies about ±5 % with
  ``seed``.
* The wrapper's own paths (register, at most one LUT4, register) reach about 165–200 MHz on
  iCE40UP5K and 410–490 MHz on ECP5-85F (measured with a register-only component of 16 and 256
  bits): a component reported near those figures is faster than this harness can tell.
  :attr:`SynthReport.critical_path` names the start and end cells of the limiting path.

:func:`build_top` builds a whole-chip top (its own pins, PLL and clock constraints) the same
way, optionally with a bitstream. Builds go to ``build/synth/<family>/<name>``: give concurrent
builds distinct names. Tools come from :func:`boards.toolchain.use_yowasp` (native tools on
PATH, else YoWASP). ``python -m boards.synth --demo`` builds an 8-bit counter and an 8×8
multiplier on both families and prints their reports.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import json
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from amaranth.build import Attrs, Clock, Pins, Resource
from amaranth.hdl import (
    Cat,
    ClockDomain,
    ClockSignal,
    Elaboratable,
    Module,
    ResetSignal,
    Signal,
    Value,
)
from amaranth.lib import io, wiring
from amaranth.lib.wiring import In, Out

from hw.target import keep_copies_script

from .toolchain import FAMILIES, env_var, find_tool, use_yowasp

__all__ = ["FAMILIES", "BOARDS", "Board", "SynthReport", "SynthError", "OutOfContext",
           "make_platform", "synthesize", "build_top", "parse_nextpnr_report",
           "parse_nextpnr_log", "parse_yosys_stat", "mark_wrapper_cells", "resource_counts",
           "format_table", "DemoCounter", "DemoMultiplier", "main"]

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build" / "synth"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Board:
    """Where one family is built: the platform and the pins the wrapper uses.

    Attributes
    ----------
    family : str
        ``"ice40"`` or ``"ecp5"``.
    platform : type
        The amaranth-boards platform class.
    clock : str
        Resource name of the board clock (constrained at ``clock_mhz`` for a build).
    data_pin, reset_pin, out_pin : tuple of (str, int)
        Resources (name, number) for the input shift register, the reset, and the XOR output.
    lut_bel, ff_bel, dsp_bel, bram_bel, spram_bel : str or None
        nextpnr's utilization names for each resource column (``None``: the device has none).
    ff_cells : tuple of str
        Prefixes of Yosys cell types that are flip-flops.
    """

    family: str
    platform: type
    clock: str
    data_pin: tuple
    reset_pin: tuple
    out_pin: tuple
    lut_bel: str
    ff_bel: str | None
    dsp_bel: str
    bram_bel: str
    spram_bel: str | None
    ff_cells: tuple
    extra_resources: tuple = ()

    @property
    def device(self) -> str:
        """Device and package as nextpnr sees them (``"iCE40UP5K-SG48"``)."""
        p = self.platform
        speed = f"-{p.speed}" if self.family == "ecp5" else "-"
        return f"{p.device}{speed}{p.package}"


def _boards() -> dict[str, Board]:
    from amaranth_boards.icebreaker import ICEBreakerPlatform
    from amaranth_boards.ulx3s import ULX3S_85F_Platform
    return {
        "ice40": Board("ice40", ICEBreakerPlatform, "clk12", ("button", 0), ("ooc_reset", 0),
                       ("led", 0), lut_bel="ICESTORM_LC", ff_bel=None, dsp_bel="ICESTORM_DSP",
                       bram_bel="ICESTORM_RAM", spram_bel="ICESTORM_SPRAM",
                       ff_cells=("SB_DFF",),
                       extra_resources=(Resource("ooc_reset", 0,
                                                 Pins("1", dir="i", conn=("pmod", 0)),
                                                 Attrs(IO_STANDARD="SB_LVCMOS")),)),
        "ecp5": Board("ecp5", ULX3S_85F_Platform, "clk25", ("button", 1), ("button", 2),
                      ("led", 0), lut_bel="TRELLIS_COMB", ff_bel="TRELLIS_FF",
                      dsp_bel="MULT18X18D", bram_bel="DP16KD", spram_bel=None,
                      ff_cells=("TRELLIS_FF",)),
    }


BOARDS = _boards()


class SynthError(RuntimeError):
    """A synthesis or place-and-route step failed; the message quotes the tool's error lines."""


@dataclass
class SynthReport:
    """Result of one out-of-context build (all counts after place and route).

    Attributes
    ----------
    name, family, device : str
        Design name, ``"ice40"``/``"ecp5"``, and the device (``"iCE40UP5K-SG48"``).
    lut, lut_total : int
        Logic cells used / on the device: iCE40 ``ICESTORM_LC`` (one LUT4 + carry + FF each),
        ECP5 ``TRELLIS_COMB`` (LUT4 slots; a CCU2C carry takes two).
    ff, ff_total : int
        Flip-flops used (from nextpnr on ECP5, from the Yosys netlist on iCE40, where every
        flip-flop sits in a logic cell, so ``ff_total`` is the LC count).
    dsp, dsp_total : int
        ``SB_MAC16`` / ``MULT18X18D`` used / on the device.
    bram, bram_total : int
        Block RAMs (iCE40 EBR 4 Kb, ECP5 DP16KD 18 Kb) used / on the device.
    spram, spram_total : int
        iCE40UP SPRAM (256 Kb) used / on the device; 0 / 0 on ECP5.
    clock_mhz : float
        Constraint of the design clock as nextpnr applied it (the requested ``clock_mhz``).
    fmax_mhz : float or None
        nextpnr's achieved fmax of the design clock after routing (``None`` if not routed).
    timing_met : bool
        ``fmax_mhz >= clock_mhz``.
    routed : bool
        Place and route finished. ``False`` only with ``check=False`` (e.g. too many DSPs);
        then the counts come from nextpnr's log and ``error`` holds its error lines.
    seconds, synth_seconds, pnr_seconds, pack_seconds : float
        Wall time of the whole build and of Yosys, nextpnr and the bitstream packer.
    wrapper_in_bits, wrapper_out_bits, wrapper_ffs, wrapper_luts : int
        Port bits of the component driven / observed by the wrapper, and the flip-flops and
        logic (estimate, see :class:`OutOfContext`) the wrapper adds; both are included in
        ``ff`` and ``lut``. All 0 for :func:`build_top` of a design without the wrapper.
    clocks : dict
        Every clock nextpnr timed: name to ``{"achieved": MHz, "constraint": MHz}``.
    critical_path : dict or None
        The design clock's critical path from :func:`parse_nextpnr_report`: start and end
        cell, total / logic / routing delay in ns, logic levels. Cell names come from the
        netlist: the wrapper's registers are named ``ooc_*`` (the input shift register may
        take the names of the component ports it drives, the last XOR stage the name ``o``);
        ``start_wrapper`` / ``end_wrapper`` say whether the path starts / ends at a wrapper
        register (from the cells' source locations, see :func:`mark_wrapper_cells`).
    wrapper_limited : bool
        The critical path runs from a wrapper register to a wrapper register (typically one
        hop of the input shift register across the die): the component itself is faster than
        ``fmax_mhz``, which is then a lower bound.
    utilization : dict
        nextpnr's full table: bel type to ``{"used": n, "available": n}``.
    cells : dict
        Yosys cell counts after synthesis (``SB_LUT4``, ``SB_CARRY``, ``CCU2C``, ...).
    seed : int
        nextpnr placement seed.
    synth_opts, nextpnr_opts : str
        Options the tools got (beyond the defaults).
    build_dir : str
        Folder with every input and product.
    logs : dict
        ``"yosys"`` and ``"nextpnr"``: the tools' full logs (``<name>.rpt``, ``<name>.tim``);
        ``"report"``: nextpnr's JSON report; ``"stat"``: Yosys's JSON cell statistics;
        ``"pack"`` and ``"bitstream"`` when a bitstream was made. The console output of each
        step is in ``<name>.<step>.console.log`` beside them.
    error : str or None
        Error lines of a failed place-and-route (``check=False``).
    """

    name: str
    family: str
    device: str
    lut: int
    lut_total: int
    ff: int
    ff_total: int
    dsp: int
    dsp_total: int
    bram: int
    bram_total: int
    spram: int
    spram_total: int
    clock_mhz: float
    fmax_mhz: float | None
    timing_met: bool
    routed: bool
    seconds: float
    synth_seconds: float
    pnr_seconds: float
    pack_seconds: float
    wrapper_in_bits: int
    wrapper_out_bits: int
    wrapper_ffs: int
    wrapper_luts: int
    clocks: dict = field(default_factory=dict)
    critical_path: dict | None = None
    wrapper_limited: bool = False
    utilization: dict = field(default_factory=dict)
    cells: dict = field(default_factory=dict)
    seed: int = 1
    synth_opts: str = ""
    nextpnr_opts: str = ""
    build_dir: str = ""
    logs: dict = field(default_factory=dict)
    error: str | None = None

    @property
    def lut_dut(self) -> int:
        """``lut`` without the wrapper's share: the component's own logic (estimate)."""
        return max(0, self.lut - self.wrapper_luts)

    @property
    def ff_dut(self) -> int:
        """``ff`` without the wrapper's flip-flops."""
        return max(0, self.ff - self.wrapper_ffs)

    @property
    def constraint_mhz(self) -> float | None:
        """The frequency nextpnr timed the design clock against (``clock_mhz``), ``None``
        without a timing figure."""
        return self.clock_mhz if self.fmax_mhz is not None else None

    def as_dict(self) -> dict:
        """All fields, plus ``lut_dut``, ``ff_dut`` and ``constraint_mhz``, as plain
        JSON-ready values."""
        return {**asdict(self), "lut_dut": self.lut_dut, "ff_dut": self.ff_dut,
                "constraint_mhz": self.constraint_mhz}

    def row(self) -> dict:
        """The columns of :func:`format_table` for this report."""
        def frac(used, total):
            return f"{used}/{total}" if total else "-"
        fmax = ("failed" if not self.routed else "-" if self.fmax_mhz is None
                else f"{'>' if self.wrapper_limited else ''}{self.fmax_mhz:.1f}")
        return {"design": self.name, "family": self.family,
                "LUT": frac(self.lut, self.lut_total),
                "LUT %": f"{100 * self.lut / self.lut_total:.0f}" if self.lut_total else "-",
                "LUT dut": str(self.lut_dut) if self.lut_total else "-",
                "FF": str(self.ff), "FF dut": str(self.ff_dut),
                "DSP": frac(self.dsp, self.dsp_total),
                "BRAM": frac(self.bram, self.bram_total),
                "SPRAM": frac(self.spram, self.spram_total),
                "fmax MHz": fmax, "target": f"{self.clock_mhz:g}",
                "met": "yes" if self.timing_met else "no",
                "build s": f"{self.seconds:.0f}"}

    def __str__(self) -> str:
        r = self.row()
        text = (f"{self.name} on {self.device}: {r['LUT']} {_lut_word(self.family)} "
                f"({r['LUT %']} %), {self.ff} FF, {r['DSP']} DSP, {r['BRAM']} BRAM")
        if self.spram_total:
            text += f", {r['SPRAM']} SPRAM"
        if self.routed and self.fmax_mhz is None:
            text += f"; no fmax for the design clock among {sorted(self.clocks)}"
        elif self.routed:
            text += (f"; fmax {self.fmax_mhz:.1f} MHz for {self.clock_mhz:g} MHz "
                     f"({'met' if self.timing_met else 'NOT met'})")
            if self.wrapper_limited:
                text += " limited by the wrapper (the component is faster)"
        else:
            text += f"; place and route failed: {self.error}"
        text += (f"; built in {self.seconds:.1f} s (yosys {self.synth_seconds:.1f} s, "
                 f"nextpnr {self.pnr_seconds:.1f} s); wrapper ~{self.wrapper_luts} "
                 f"{_lut_word(self.family)}, {self.wrapper_ffs} FF; "
                 f"{self.build_dir}")
        return text


def _lut_word(family: str) -> str:
    return "LC" if family == "ice40" else "LUT4"


def format_table(reports) -> str:
    """A fixed-width text table of :meth:`SynthReport.row` for several reports."""
    rows = [report.row() for report in reports]
    if not rows:
        return ""
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}
    lines = ["  ".join(c.ljust(widths[c]) for c in cols),
             "  ".join("-" * widths[c] for c in cols)]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in cols) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


# --- the out-of-context wrapper ---------------------------------------------------------------

def _port_signals(component) -> tuple[list, list]:
    """(inputs, outputs): the component's signal ports by flow; constant ports are skipped."""
    inputs, outputs = [], []
    for _path, member, value in component.signature.flatten(component):
        value = Value.cast(value)
        if not isinstance(value, Signal):
            continue  # e.g. the constant ready of an always_ready stream
        (inputs if member.flow == In else outputs).append(value)
    return inputs, outputs


class OutOfContext(Elaboratable):
    """Wrap ``component`` so that only registers and three pins surround it (see module doc).

    Parameters
    ----------
    component : wiring.Component
        The design under measurement; it must have at least one output port bit and use only
        the ``sync`` clock domain (which this wrapper creates from the board clock; its reset
        comes from a registered pin).
    family : str
        ``"ice40"`` or ``"ecp5"``: which :data:`BOARDS` entry gives the pins.
    capture_outputs : bool
        ``True`` (default): every output bit is first captured in its own flip-flop, so the
        wrapper adds no logic after the component's outputs. ``False``: the first XOR level
        (one LUT4 per 4 output bits) reads the outputs directly, which saves one flip-flop (on
        iCE40 one logic cell) per output bit at the cost of one LUT on the output paths; for
        output-heavy blocks on the small iCE40.

    Attributes
    ----------
    in_bits, out_bits : int
        Port bits driven / observed.
    wrapper_ffs : int
        Flip-flops the wrapper adds.
    wrapper_luts : int
        Logic the wrapper adds, in the unit of :attr:`SynthReport.lut`: on iCE40 one logic cell
        per wrapper flip-flop (an estimate: nextpnr may pack a capture flip-flop with the
        component's last LUT), on ECP5 the input chain's and the XOR tree's LUT4s.
    """

    def __init__(self, component, *, family: str, capture_outputs: bool = True):
        if not isinstance(component, wiring.Component):
            raise TypeError(f"component must be an amaranth.lib.wiring.Component, "
                            f"not {component!r}")
        if not isinstance(capture_outputs, bool):
            raise TypeError(f"capture_outputs must be a bool, not {capture_outputs!r}")
        self.component = component
        self.board = _board(family)
        self.capture_outputs = capture_outputs
        self._inputs, self._outputs = _port_signals(component)
        self.in_bits = sum(len(s) for s in self._inputs)
        self.out_bits = sum(len(s) for s in self._outputs)
        if self.out_bits == 0:
            raise ValueError(f"component {component!r} has no output port bits: nothing would "
                             f"survive synthesis")
        # Widths of the registered XOR levels, 4 bits into 1 per level.
        self._levels = []
        width = self.out_bits
        while width > 1 or (not capture_outputs and not self._levels):
            width = math.ceil(width / 4)
            self._levels.append(width)
        capture = self.out_bits if capture_outputs else 0
        # data pin and reset pin registers, input chain, output capture, XOR tree.
        self.wrapper_ffs = 2 + self.in_bits + capture + sum(self._levels)
        self.wrapper_luts = (self.wrapper_ffs if self.board.family == "ice40"
                             else sum(self._levels) + max(0, self.in_bits - 1))

    def elaborate(self, platform):
        m = Module()
        board = self.board

        clk_pin = platform.request(board.clock, 0, dir="-")
        m.submodules.clk_buf = clk_buf = io.Buffer("i", clk_pin)
        m.domains.sync = ClockDomain("sync")
        m.domains.ooc = ClockDomain("ooc", reset_less=True)
        m.d.comb += [ClockSignal("sync").eq(clk_buf.i), ClockSignal("ooc").eq(clk_buf.i)]

        data_pin = platform.request(*board.data_pin, dir="-")
        reset_pin = platform.request(*board.reset_pin, dir="-")
        out_pin = platform.request(*board.out_pin, dir="-")
        m.submodules.data_buf = data_buf = io.Buffer("i", data_pin)
        m.submodules.reset_buf = reset_buf = io.Buffer("i", reset_pin)
        m.submodules.out_buf = out_buf = io.Buffer("o", out_pin)

        m.submodules.dut = self.component

        data_in = Signal(name="ooc_data_in")
        reset_in = Signal(name="ooc_reset_in")
        m.d.ooc += [data_in.eq(data_buf.i), reset_in.eq(reset_buf.i)]
        m.d.comb += ResetSignal("sync").eq(reset_in)

        if self.in_bits:
            # Each bit is the XOR of the two before it, not a plain delay of its neighbour:
            # Yosys merges identical flip-flops, and a shift register holds every delayed copy
            # of an input bit that the component's own pipeline registers hold, so it would
            # take over those registers (and their placement) from the component.
            chain = Signal(self.in_bits, name="ooc_in_chain")
            m.d.ooc += chain.eq(Cat(data_in, chain[:-1] ^ Cat(data_in, chain[:-2])))
            offset = 0
            for port in self._inputs:
                m.d.comb += port.eq(chain[offset:offset + len(port)])
                offset += len(port)

        if self.capture_outputs:
            level = Signal(self.out_bits, name="ooc_out_capture")
            m.d.ooc += level.eq(Cat(*self._outputs))
        else:
            level = Cat(*self._outputs)
        for depth, width in enumerate(self._levels, start=1):
            reduced = Signal(width, name=f"ooc_xor{depth}")
            m.d.ooc += reduced.eq(Cat(*(level[i:i + 4].xor() for i in range(0, len(level), 4))))
            level = reduced
        m.d.comb += out_buf.o.eq(level[0])
        return m


# --- platforms and tool runs ------------------------------------------------------------------

def make_platform(family: str, clock_mhz: float | None = None):
    """An instance of the board platform of ``family`` whose clock resource is constrained at
    ``clock_mhz`` (``None``: the board's crystal frequency)."""
    board = _board(family)
    base = board.platform
    if clock_mhz is None:
        platform = base()
        platform.add_resources(list(board.extra_resources))
        return platform
    resources = []
    for resource in base.resources:
        if resource.name == board.clock and resource.number == 0:
            resource = copy.copy(resource)
            resource.clock = Clock(float(clock_mhz) * 1e6)
        resources.append(resource)
    cls = type(f"{base.__name__}_at_{clock_mhz:g}MHz".replace(".", "_"), (base,),
               {"resources": resources})
    platform = cls()
    platform.add_resources(list(board.extra_resources))
    return platform


def _board(family) -> Board:
    if family not in BOARDS:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, not {family!r}")
    return BOARDS[family]


def _run_step(step: str, argv: list, cwd: Path, log: Path) -> float:
    tool = argv[0]
    exe = os.environ.get(env_var(tool)) or find_tool(tool) or tool
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.run([exe, *argv[1:]], cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise SynthError(f"{step} ({tool}) failed with exit code {proc.returncode}; log {log}:\n"
                         + _error_lines(log))
    return seconds


def _error_lines(log: Path, context: int = 30) -> str:
    if not log.exists():
        return "(no log)"
    lines = log.read_text(errors="replace").splitlines()
    errors = [line for line in lines if "ERROR" in line or "Error" in line]
    return "\n".join(errors[:10] if errors else lines[-context:])


# --- parsing ----------------------------------------------------------------------------------

def parse_nextpnr_report(path_or_dict) -> dict:
    """Read nextpnr's ``--report`` JSON (a path or the loaded object).

    Returns
    -------
    dict
        ``{"utilization": {bel: {"used": n, "available": n}},
        "clocks": {clock: {"achieved": MHz, "constraint": MHz}},
        "critical_paths": [{"from": "posedge clk", "to": "posedge clk", "start": cell,
        "end": cell, "delay_ns": t, "logic_ns": t, "routing_ns": t, "logic_levels": n}]}``
        (one critical path per clock pair nextpnr timed, I/O paths included as ``<async>``).
    """
    if isinstance(path_or_dict, dict):
        data = path_or_dict
    else:
        data = json.loads(Path(path_or_dict).read_text())
    util = {bel: {"used": int(v["used"]), "available": int(v["available"])}
            for bel, v in data.get("utilization", {}).items()}
    clocks = {clk: {"achieved": float(v["achieved"]), "constraint": float(v["constraint"])}
              for clk, v in data.get("fmax", {}).items()}
    paths = []
    for entry in data.get("critical_paths", []):
        steps = entry.get("path", [])
        if not steps:
            continue
        delay = {kind: sum(s["delay"] for s in steps if s["type"] == kind)
                 for kind in ("logic", "routing")}
        paths.append({"from": entry["from"], "to": entry["to"],
                      "start": steps[0]["from"]["cell"], "end": steps[-1]["to"]["cell"],
                      "delay_ns": round(sum(s["delay"] for s in steps), 3),
                      "logic_ns": round(delay["logic"], 3),
                      "routing_ns": round(delay["routing"], 3),
                      "logic_levels": sum(1 for s in steps if s["type"] == "logic")})
    return {"utilization": util, "clocks": clocks, "critical_paths": paths}


_UTIL_LINE = re.compile(r"^\s*(?:Info:\s*)?\s*([A-Z][A-Z0-9_]+):\s*(\d+)\s*/\s*(\d+)\s+\d+%")


def parse_nextpnr_log(path_or_text) -> dict:
    """Utilization from the text log of nextpnr (its "Device utilisation" lines).

    Used when place and route fails, which leaves no JSON report. Same shape as
    :func:`parse_nextpnr_report`, with ``"clocks"`` and ``"critical_paths"`` empty.
    """
    text = path_or_text if "\n" in str(path_or_text) else Path(path_or_text).read_text(
        errors="replace")
    util = {}
    for line in text.splitlines():
        match = _UTIL_LINE.match(line)
        if match:
            util[match[1]] = {"used": int(match[2]), "available": int(match[3])}
    return {"utilization": util, "clocks": {}, "critical_paths": []}


def parse_yosys_stat(path_or_dict, top: str | None = None) -> dict:
    """Cell counts of the top module from Yosys's ``stat -json`` output (without Yosys's
    internal ``$...`` bookkeeping cells)."""
    if isinstance(path_or_dict, dict):
        data = path_or_dict
    else:
        data = json.loads(Path(path_or_dict).read_text())
    if "design" in data:
        cells = data["design"].get("num_cells_by_type", {})
    else:
        modules = data.get("modules", {})
        key = next((k for k in modules if k.lstrip("\\") == top), None) if top else None
        key = key or next(iter(modules), None)
        cells = modules[key].get("num_cells_by_type", {}) if key else {}
    return {k: int(v) for k, v in cells.items() if not k.startswith("$")}


def _wrapper_lines() -> tuple[str, range]:
    lines, first = inspect.getsourcelines(OutOfContext.elaborate)
    return str(Path(__file__).resolve()), range(first, first + len(lines))


def _is_wrapper_src(src: str | None, wrapper: tuple[str, range]) -> bool:
    """Whether Yosys's ``src`` attribute puts a cell only in :meth:`OutOfContext.elaborate`."""
    path, lines = wrapper
    found = False
    for entry in (src or "").split("|"):
        file, _, where = entry.rpartition(":")
        if not file.endswith(".py"):
            continue  # techmap library locations
        line = int(re.match(r"\d+", where)[0]) if re.match(r"\d+", where) else -1
        if Path(file).resolve() != Path(path) or line not in lines:
            return False
        found = True
    return found


def mark_wrapper_cells(parsed: dict, netlist, top: str) -> None:
    """Add ``start_wrapper`` / ``end_wrapper`` to each of ``parsed["critical_paths"]``: whether
    the path starts / ends at a register of the :class:`OutOfContext` wrapper.

    The cells are looked up in the Yosys netlist ``netlist`` (``<name>.json``, module ``top``)
    by the names nextpnr gives them (packed logic cells add ``_LC`` or ``_DFFLC`` and may be
    named after the LUT in front of the flip-flop), and their ``src`` attribute tells where
    they were described. Cells that cannot be traced count as not wrapper, so the flag errs
    towards "the component limits fmax".
    """
    paths = parsed.get("critical_paths", [])
    if not paths or not Path(netlist).exists():
        return
    modules = json.loads(Path(netlist).read_text()).get("modules", {})
    cells = modules.get(top, {}).get("cells", {})
    wrapper = _wrapper_lines()

    def in_wrapper(name):
        base = re.sub(r"_(?:DFF)?LC$", "", name)
        # A LUT packed with its flip-flop is named after the LUT, whose name starts with the
        # flip-flop's D net; mapped LUTs carry no Python source, the flip-flop does.
        ff = re.match(r"^(.*_(?:SB_DFF[A-Z]*|TRELLIS_FF)_Q(?:_\d+)?)_DI?_", base)
        for candidate in (name, base, ff[1] if ff else None):
            src = cells.get(candidate, {}).get("attributes", {}).get("src", "")
            if ".py:" in src:
                return _is_wrapper_src(src, wrapper)
        return False

    for path in paths:
        path["start_wrapper"] = in_wrapper(path["start"])
        path["end_wrapper"] = in_wrapper(path["end"])


def resource_counts(family: str, parsed: dict, cells: dict, clock_mhz: float,
                    design_clock: str | None = None) -> dict:
    """The resource and timing fields of :class:`SynthReport` from parsed tool output.

    Parameters
    ----------
    family : str
        ``"ice40"`` or ``"ecp5"``.
    parsed : dict
        :func:`parse_nextpnr_report` or :func:`parse_nextpnr_log` output.
    cells : dict
        :func:`parse_yosys_stat` output (flip-flop count on iCE40).
    clock_mhz : float
        The requested constraint; picks the design clock when nextpnr timed several.
    design_clock : str, optional
        Part of the name of the clock to report instead (e.g. a PLL output net); if no clock
        matches, ``fmax_mhz`` is ``None``.

    Returns
    -------
    dict
        ``lut``, ``lut_total``, ``ff``, ``ff_total``, ``dsp``, ``dsp_total``, ``bram``,
        ``bram_total``, ``spram``, ``spram_total``, ``clock_mhz``, ``fmax_mhz``,
        ``timing_met``, ``clocks``, ``critical_path``, ``wrapper_limited``, ``utilization``.
    """
    board = _board(family)
    util, clocks = parsed["utilization"], parsed["clocks"]

    def used(bel):
        return util.get(bel, {}).get("used", 0) if bel else 0

    def total(bel):
        return util.get(bel, {}).get("available", 0) if bel else 0

    if board.ff_bel and board.ff_bel in util:
        ff, ff_total = used(board.ff_bel), total(board.ff_bel)
    else:
        ff = sum(n for cell, n in cells.items() if cell.startswith(board.ff_cells))
        ff_total = total(board.lut_bel)
    if design_clock is None:
        clock = _design_clock(clocks, float(clock_mhz))
    else:
        clock = next((c for c in clocks if design_clock in c), None)
    fmax = clocks[clock]["achieved"] if clock else None
    if clock and not math.isclose(clocks[clock]["constraint"], clock_mhz, rel_tol=1e-3):
        clock_mhz = clocks[clock]["constraint"]  # e.g. a PLL output (nextpnr keeps ps periods)
    critical = next((p for p in parsed["critical_paths"]
                     if p["from"] == p["to"] == f"posedge {clock}"), None)
    return {"lut": used(board.lut_bel), "lut_total": total(board.lut_bel),
            "ff": ff, "ff_total": ff_total,
            "dsp": used(board.dsp_bel), "dsp_total": total(board.dsp_bel),
            "bram": used(board.bram_bel), "bram_total": total(board.bram_bel),
            "spram": used(board.spram_bel), "spram_total": total(board.spram_bel),
            "clock_mhz": float(clock_mhz), "fmax_mhz": fmax,
            "timing_met": fmax is not None and fmax >= float(clock_mhz),
            "clocks": clocks, "critical_path": critical,
            "wrapper_limited": bool(critical and critical.get("start_wrapper")
                                    and critical.get("end_wrapper")),
            "utilization": util}


def _design_clock(clocks: dict, clock_mhz: float) -> str | None:
    """The clock to report: the slowest of those constrained at ``clock_mhz``, else the slowest
    of all."""
    if not clocks:
        return None
    near = [c for c, v in clocks.items() if abs(v["constraint"] - clock_mhz) < 1e-3 * clock_mhz]
    pool = near or list(clocks)
    return min(pool, key=lambda c: clocks[c]["achieved"])


_SAID: set = set()


def _once(log):
    """``log`` that passes each distinct line only once per process (``None`` stays silent)."""
    if log is None:
        return None

    def say(line):
        if line not in _SAID:
            _SAID.add(line)
            log(line)
    return say


# --- the builds -------------------------------------------------------------------------------

def _check_common(family, name, clock_mhz, synth_opts, nextpnr_opts, seed, dsp):
    _board(family)
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"name must be an identifier of letters, digits and '_', not {name!r}")
    if isinstance(clock_mhz, bool) or not isinstance(clock_mhz, (int, float)) \
            or not math.isfinite(clock_mhz) or clock_mhz <= 0:
        raise ValueError(f"clock_mhz must be a positive number, not {clock_mhz!r}")
    for label, value in (("synth_opts", synth_opts), ("nextpnr_opts", nextpnr_opts)):
        if not isinstance(value, str):
            raise TypeError(f"{label} must be a string, not {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, not {seed!r}")
    if dsp not in (None, True, False):
        raise TypeError(f"dsp must be None, True or False, not {dsp!r}")


def _dsp_opts(family: str, dsp: bool | None, synth_opts: str) -> str:
    opts = synth_opts.split()
    if family == "ice40" and dsp and "-dsp" not in opts:
        opts.append("-dsp")
    if family == "ecp5" and dsp is False and "-nodsp" not in opts:
        opts.append("-nodsp")
    return " ".join(opts)


def build_top(top, *, family: str, name: str, clock_mhz: float | None = None,
              synth_opts: str = "", nextpnr_opts: str = "", build_dir=None, seed: int = 1,
              dsp: bool | None = None, bitstream: bool = False, check: bool = True,
              platform=None, design_clock: str | None = None, log=print) -> SynthReport:
    """Build a whole-chip elaboratable ``top`` (it requests its own pins) and report.

    :func:`synthesize` is this function applied to the :class:`OutOfContext` wrapper. For a
    full-board top, leave ``clock_mhz=None`` (the board clock keeps its crystal frequency, 12 MHz
    on the iCEBreaker, 25 MHz on the ULX3S), let the top constrain its PLL output
    (``platform.add_clock_constraint``; nextpnr-ice40 also derives it from the PLL settings)
    and name that clock with ``design_clock`` so that the report's fmax is the design's.

    Parameters
    ----------
    top : Elaboratable
        The whole chip.
    clock_mhz : float or None
        Constraint of the board clock pin; ``None``: the crystal frequency.
    bitstream : bool
        Also run ``icepack`` / ``ecppack`` (``logs["bitstream"]`` names the file).
    platform : Platform, optional
        An instance to use instead of :func:`make_platform` ``(family, clock_mhz)``.
    design_clock : str, optional
        Part of nextpnr's name of the clock whose fmax to report (see :func:`resource_counts`).
    others
        As for :func:`synthesize`.
    """
    board = _board(family)
    if clock_mhz is None:
        clock_mhz = board.platform().default_clk_frequency / 1e6
    _check_common(family, name, clock_mhz, synth_opts, nextpnr_opts, seed, dsp)
    if design_clock is not None and not isinstance(design_clock, str):
        raise TypeError(f"design_clock must be a string or None, not {design_clock!r}")
    use_yowasp(family, bitstream=bitstream, log=_once(log))
    platform = platform if platform is not None else make_platform(family, clock_mhz)
    build_dir = Path(build_dir) if build_dir is not None else BUILD / family / name
    build_dir.mkdir(parents=True, exist_ok=True)
    for stale in (f"{name}.report.json", f"{name}.stat.json"):
        (build_dir / stale).unlink(missing_ok=True)

    synth = _dsp_opts(family, dsp, synth_opts)
    # (--detailed-timing-report: the report also holds every timing endpoint's latest
    # arrival, which boards.slack ranks)
    pnr = (f"--seed {seed} --timing-allow-fail --report {name}.report.json "
           f"--detailed-timing-report {nextpnr_opts}").strip()
    start = time.monotonic()
    plan = platform.prepare(top, name, synth_opts=synth, nextpnr_opts=pnr,
                            script_after_read=keep_copies_script(),
                            script_after_synth=f"tee -q -o {name}.stat.json stat -json")
    plan.extract(build_dir)
    commands = json.loads((build_dir / f"build_{name}.json").read_text())["commands"]
    steps = dict(zip(("yosys", "nextpnr", "pack"), commands, strict=True))
    console = {step: build_dir / f"{name}.{step}.console.log" for step in steps}
    logs = {"yosys": str(build_dir / f"{name}.rpt"), "nextpnr": str(build_dir / f"{name}.tim"),
            "report": str(build_dir / f"{name}.report.json"),
            "stat": str(build_dir / f"{name}.stat.json")}

    synth_s = _run_step("yosys", steps["yosys"], build_dir, console["yosys"])
    cells = parse_yosys_stat(logs["stat"], top=name) if Path(logs["stat"]).exists() else {}
    error = None
    pnr_start = time.monotonic()
    try:
        _run_step("nextpnr", steps["nextpnr"], build_dir, console["nextpnr"])
        parsed = parse_nextpnr_report(logs["report"])
        mark_wrapper_cells(parsed, build_dir / f"{name}.json", name)
    except SynthError:
        if check:
            raise
        error = _error_lines(console["nextpnr"])
        parsed = parse_nextpnr_log(Path(logs["nextpnr"]))
    pnr_s = time.monotonic() - pnr_start
    pack_s = 0.0
    if bitstream and error is None:
        pack_s = _run_step("pack", steps["pack"], build_dir, console["pack"])
        logs["pack"] = str(console["pack"])
        logs["bitstream"] = str(build_dir / f"{name}.{'bin' if family == 'ice40' else 'bit'}")
    seconds = time.monotonic() - start

    wrapper = top if isinstance(top, OutOfContext) else None
    return SynthReport(
        name=name, family=family, device=board.device,
        **resource_counts(family, parsed, cells, clock_mhz, design_clock), routed=error is None,
        seconds=seconds, synth_seconds=synth_s, pnr_seconds=pnr_s, pack_seconds=pack_s,
        wrapper_in_bits=wrapper.in_bits if wrapper else 0,
        wrapper_out_bits=wrapper.out_bits if wrapper else 0,
        wrapper_ffs=wrapper.wrapper_ffs if wrapper else 0,
        wrapper_luts=wrapper.wrapper_luts if wrapper else 0,
        cells=cells, seed=seed, synth_opts=synth, nextpnr_opts=nextpnr_opts,
        build_dir=str(build_dir), logs=logs, error=error)


def synthesize(component, *, family: str, name: str, clock_mhz: float, synth_opts: str = "",
               nextpnr_opts: str = "", build_dir=None, seed: int = 1, dsp: bool | None = None,
               capture_outputs: bool = True, check: bool = True, log=print) -> SynthReport:
    """Synthesize, place and route ``component`` out of context; report resources and fmax.

    Parameters
    ----------
    component : wiring.Component
        Any component with signal ports (streams included) in the ``sync`` domain. It is
        elaborated inside :class:`OutOfContext`.
    family : str
        ``"ice40"`` (iCEBreaker, iCE40UP5K-SG48) or ``"ecp5"`` (ULX3S, LFE5U-85F).
    name : str
        Design name (letters, digits, ``_``); the build goes to ``build/synth/<family>/<name>``
        unless ``build_dir`` is given. Concurrent builds need distinct names.
    clock_mhz : float
        Clock constraint; nextpnr optimizes for it and reports the achieved fmax. Ask for a
        little more than you expect to get: the result is "timing met" or not against it.
    synth_opts : str
        Extra options of ``synth_ice40`` / ``synth_ecp5`` (e.g. ``"-abc9"``).
    nextpnr_opts : str
        Extra options of nextpnr.
    build_dir : path-like, optional
        Where to build.
    seed : int
        nextpnr placement seed (fmax varies about ±5 % with it).
    dsp : bool or None
        ``True``: map multipliers to DSP blocks (adds ``-dsp`` on iCE40, the ECP5 default);
        ``False``: keep them in logic (adds ``-nodsp`` on ECP5, the iCE40 default);
        ``None``: the tool's default, or whatever ``synth_opts`` says.
    capture_outputs : bool
        See :class:`OutOfContext` (``False`` saves a flip-flop per output bit).
    check : bool
        ``True``: a failed place and route raises :class:`SynthError`. ``False``: it returns a
        report with ``routed=False``, the counts from nextpnr's log (e.g. 16/8 DSP), and
        ``error``. A failed Yosys run always raises.
    log : callable or None
        Receives the tool-selection lines of :func:`boards.toolchain.use_yowasp` (each line
        once per process), including the warning that a cold YoWASP cache makes the first
        build minutes slower. ``None``: silent.

    Returns
    -------
    SynthReport

    Raises
    ------
    TypeError
        If ``component`` is not a ``wiring.Component`` or an option is not a string.
    ValueError
        If ``family``, ``name``, ``clock_mhz`` or ``seed`` is invalid, or the component has no
        output port bits.
    SynthError
        If a tool fails.
    boards.toolchain.ToolchainError
        If a tool is missing.
    """
    _check_common(family, name, clock_mhz, synth_opts, nextpnr_opts, seed, dsp)
    wrapper = OutOfContext(component, family=family, capture_outputs=capture_outputs)
    return build_top(wrapper, family=family, name=name, clock_mhz=clock_mhz,
                     synth_opts=synth_opts, nextpnr_opts=nextpnr_opts, build_dir=build_dir,
                     seed=seed, dsp=dsp, check=check, log=log)


# --- demo -------------------------------------------------------------------------------------

class DemoCounter(wiring.Component):
    """A free-running ``width``-bit counter with an enable (smoke-test design)."""

    def __init__(self, *, width: int = 8):
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise ValueError(f"width must be a positive integer, not {width!r}")
        self.width = width
        super().__init__({"en": In(1), "count": Out(width)})

    def elaborate(self, platform):
        m = Module()
        with m.If(self.en):
            m.d.sync += self.count.eq(self.count + 1)
        return m


class DemoMultiplier(wiring.Component):
    """A registered signed ``width``×``width`` multiplier (smoke-test design for DSPs)."""

    def __init__(self, *, width: int = 8):
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise ValueError(f"width must be a positive integer, not {width!r}")
        self.width = width
        super().__init__({"a": In(width), "b": In(width), "p": Out(2 * width)})

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.p.eq(self.a.as_signed() * self.b.as_signed())
        return m


def main(argv=None) -> int:
    """``python -m boards.synth --demo [--family ice40|ecp5|both] [--clock-mhz F]``."""
    parser = argparse.ArgumentParser(prog="python -m boards.synth", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--demo", action="store_true",
                        help="build an 8-bit counter and an 8x8 multiplier and print reports")
    parser.add_argument("--family", choices=(*FAMILIES, "both"), default="both")
    parser.add_argument("--clock-mhz", type=float, default=None,
                        help="constraint (default: 100 on ice40, 200 on ecp5)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, default=REPO / "build" / "bench" / "synth_demo.json",
                        help="where to write the reports as JSON")
    args = parser.parse_args(argv)
    if not args.demo:
        parser.print_help()
        return 2
    families = FAMILIES if args.family == "both" else (args.family,)
    reports = []
    for family in families:
        clock = args.clock_mhz or {"ice40": 100.0, "ecp5": 200.0}[family]
        for design, dsp in ((DemoCounter(width=8), None), (DemoMultiplier(width=8), True)):
            label = f"demo_{type(design).__name__[4:].lower()}8"
            report = synthesize(design, family=family, name=label, clock_mhz=clock, seed=args.seed,
                                dsp=dsp, log=print)
            print(report)
            reports.append(report)
    print()
    print(format_table(reports))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps([r.as_dict() for r in reports], indent=2))
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
