"""Out-of-context synthesis: report parsing on captured tool output, parameter checks, the
wrapper, and real builds (one small iCE40 build by default; ECP5 with --runslow)."""

import json
import math
from pathlib import Path

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import data, io, stream, wiring
from amaranth.lib.wiring import In, Out

from boards.synth import (
    BOARDS,
    DemoCounter,
    DemoMultiplier,
    OutOfContext,
    SynthError,
    SynthReport,
    _design_clock,
    _dsp_opts,
    build_top,
    format_table,
    main,
    make_platform,
    parse_nextpnr_log,
    parse_nextpnr_report,
    parse_yosys_stat,
    resource_counts,
    synthesize,
)
from boards.toolchain import ToolchainError, use_yowasp

DATA = Path(__file__).parent / "data"

# Parameter-check tests build components that are rejected before elaboration.
pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


def _tools_missing(family: str) -> str | None:
    try:
        use_yowasp(family, bitstream=False, log=None)
    except ToolchainError as exc:
        return str(exc)
    return None


class StreamAdder(wiring.Component):
    """An always-ready input stream (its ready is a constant, not a port) and a stream output."""

    i: In(stream.Signature(data.StructLayout({"x": 8, "last": 1}), always_ready=True))
    o: Out(stream.Signature(9))

    def elaborate(self, platform):
        m = Module()
        with m.If(self.i.valid):
            m.d.sync += [self.o.payload.eq(self.i.payload.x + 1), self.o.valid.eq(1)]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        return m


class NoOutputs(wiring.Component):
    a: In(4)

    def elaborate(self, platform):
        return Module()


class ManyMultipliers(wiring.Component):
    def __init__(self, *, count):
        self.count = count
        super().__init__({"a": In(8 * count), "b": In(8 * count), "p": Out(16 * count)})

    def elaborate(self, platform):
        m = Module()
        for k in range(self.count):
            m.d.sync += self.p[16 * k:16 * k + 16].eq(
                self.a[8 * k:8 * k + 8].as_signed() * self.b[8 * k:8 * k + 8].as_signed())
        return m


# --- parsing captured output (tests/boards/data/ comes from real builds of DemoMultiplier) -----

# family: (clock name, achieved MHz, LUT bel used/available, DSP bel used/available, FF cells)
CAPTURED = {
    "ice40": ("clk", 193.5733642578125, ("ICESTORM_LC", 58, 5280), ("ICESTORM_DSP", 1, 8),
              {"SB_DFF": 39, "SB_DFFSR": 16}),
    "ecp5": ("$glbnet$clk", 144.30014038085938, ("TRELLIS_COMB", 7, 83640),
             ("MULT18X18D", 1, 156), {"TRELLIS_FF": 55}),
}


@pytest.mark.parametrize("family", sorted(CAPTURED))
def test_parse_nextpnr_report(family):
    clock, fmax, (lut_bel, lut, lut_total), (dsp_bel, dsp, dsp_total), _ = CAPTURED[family]
    raw = json.loads((DATA / f"{family}_mul8.report.json").read_text())
    parsed = parse_nextpnr_report(DATA / f"{family}_mul8.report.json")
    assert parse_nextpnr_report(raw) == parsed
    assert parsed["clocks"] == {clock: {"achieved": fmax, "constraint": 100.0 if family == "ice40"
                                        else 200.0}}
    assert parsed["utilization"][lut_bel] == {"used": lut, "available": lut_total}
    assert parsed["utilization"][dsp_bel] == {"used": dsp, "available": dsp_total}
    reg = next(p for p in parsed["critical_paths"] if p["from"] == p["to"] == f"posedge {clock}")
    steps = next(p for p in raw["critical_paths"] if p["from"] == p["to"])["path"]
    assert reg["start"] == steps[0]["from"]["cell"]
    assert reg["end"] == steps[-1]["to"]["cell"]
    assert reg["delay_ns"] == pytest.approx(sum(s["delay"] for s in steps), abs=1e-3)
    assert reg["logic_ns"] + reg["routing_ns"] <= reg["delay_ns"] + 1e-6
    # The period of the critical path is what nextpnr reports as fmax.
    assert 1000 / reg["delay_ns"] == pytest.approx(fmax, rel=0.01)


@pytest.mark.parametrize("family", sorted(CAPTURED))
def test_parse_yosys_stat(family):
    ff_cells = CAPTURED[family][4]
    cells = parse_yosys_stat(DATA / f"{family}_mul8.stat.json", top="demo_multiplier8")
    assert {k: cells[k] for k in ff_cells} == ff_cells
    assert cells["SB_MAC16" if family == "ice40" else "MULT18X18D"] == 1
    assert not any(k.startswith("$") for k in cells)
    raw = json.loads((DATA / f"{family}_mul8.stat.json").read_text())
    del raw["design"]
    assert parse_yosys_stat(raw, top="demo_multiplier8") == cells


@pytest.mark.parametrize("family", sorted(CAPTURED))
def test_resource_counts(family):
    clock, fmax, (_, lut, lut_total), (_, dsp, dsp_total), ff_cells = CAPTURED[family]
    parsed = parse_nextpnr_report(DATA / f"{family}_mul8.report.json")
    cells = parse_yosys_stat(DATA / f"{family}_mul8.stat.json")
    target = 100.0 if family == "ice40" else 200.0
    counts = resource_counts(family, parsed, cells, target)
    assert (counts["lut"], counts["lut_total"]) == (lut, lut_total)
    assert (counts["dsp"], counts["dsp_total"]) == (dsp, dsp_total)
    assert counts["ff"] == sum(ff_cells.values()) == 55
    assert counts["ff_total"] == lut_total  # iCE40: FFs live in LCs; ECP5: one FF per LUT4
    assert (counts["bram"], counts["bram_total"]) == (0, 30 if family == "ice40" else 208)
    assert (counts["spram"], counts["spram_total"]) == ((0, 4) if family == "ice40" else (0, 0))
    assert counts["fmax_mhz"] == fmax
    assert counts["timing_met"] is (fmax >= target)
    assert counts["critical_path"]["from"] == f"posedge {clock}"


def test_mark_wrapper_cells(tmp_path):
    """Critical-path endpoints are traced to the wrapper through the cells' source lines."""
    import inspect

    import boards.synth
    lines, first = inspect.getsourcelines(OutOfContext.elaborate)
    here = Path(boards.synth.__file__).resolve()
    inside, outside = f"{here}:{first + len(lines) - 3}", f"{here}:{first - 5}"
    techmap = "/share/ice40/ff_map.v:2.51-2.90"
    netlist = {"modules": {"top": {"cells": {
        "ooc_xor1_SB_DFF_Q": {"attributes": {"src": f"{inside}|{techmap}"}},
        "ooc_xor1_SB_DFF_Q_D_SB_LUT4_O": {"attributes": {"src": "/share/cells_map.v:26.33"}},
        "a_SB_DFF_Q_3": {"attributes": {"src": f"{inside}.5-7.20"}},
        "dut.p_TRELLIS_FF_Q_7": {"attributes": {"src": f"/elsewhere/design.py:12|{techmap}"}},
        "mixed": {"attributes": {"src": f"{inside}|/elsewhere/design.py:3"}},
        "before": {"attributes": {"src": outside}},
    }}}}
    path = tmp_path / "top.json"
    path.write_text(json.dumps(netlist))
    cases = [("ooc_xor1_SB_DFF_Q_D_SB_LUT4_O_LC", "a_SB_DFF_Q_3_DFFLC", True, True),
             ("a_SB_DFF_Q_3", "dut.p_TRELLIS_FF_Q_7", True, False),
             ("mixed", "before", False, False),
             ("unknown_cell", "ooc_xor1_SB_DFF_Q", False, True)]
    parsed = {"critical_paths": [{"start": a, "end": b} for a, b, _, _ in cases]}
    boards.synth.mark_wrapper_cells(parsed, path, "top")
    for (_, _, start, end), result in zip(cases, parsed["critical_paths"], strict=True):
        assert (result["start_wrapper"], result["end_wrapper"]) == (start, end), result
    both = {"utilization": {}, "clocks": {"clk": {"achieved": 150.0, "constraint": 50.0}},
            "critical_paths": [dict(parsed["critical_paths"][0], **{"from": "posedge clk",
                                                                    "to": "posedge clk"})]}
    assert resource_counts("ice40", both, {}, 50.0)["wrapper_limited"] is True
    both["critical_paths"][0]["end_wrapper"] = False
    assert resource_counts("ice40", both, {}, 50.0)["wrapper_limited"] is False


def test_parse_nextpnr_log_of_failed_placement():
    parsed = parse_nextpnr_log(DATA / "ice40_dsp_overflow.tim")
    assert parsed["utilization"]["ICESTORM_DSP"] == {"used": 9, "available": 8}
    assert parsed["utilization"]["ICESTORM_LC"] == {"used": 486, "available": 5280}
    assert len(parsed["utilization"]) == 15
    assert parsed["clocks"] == {} and parsed["critical_paths"] == []
    counts = resource_counts("ice40", parsed, {"SB_DFF": 3}, 50)
    assert (counts["dsp"], counts["fmax_mhz"], counts["timing_met"]) == (9, None, False)


def test_named_design_clock():
    parsed = {"utilization": {}, "critical_paths": [],
              "clocks": {"clk12_0__io": {"achieved": 200.0, "constraint": 12.0},
                         "pll.clk_out": {"achieved": 55.0, "constraint": 60.0}}}
    counts = resource_counts("ice40", parsed, {}, 12.0, design_clock="pll")
    assert (counts["fmax_mhz"], counts["clock_mhz"], counts["timing_met"]) == (55.0, 60.0, False)
    counts = resource_counts("ice40", parsed, {}, 12.0)
    assert (counts["fmax_mhz"], counts["clock_mhz"], counts["timing_met"]) == (200.0, 12.0, True)
    counts = resource_counts("ice40", parsed, {}, 12.0, design_clock="nope")
    assert (counts["fmax_mhz"], counts["timing_met"]) == (None, False)


def test_design_clock_choice():
    clocks = {"pll_fast": {"achieved": 90.0, "constraint": 100.0},
              "clk": {"achieved": 300.0, "constraint": 25.0},
              "other": {"achieved": 80.0, "constraint": 50.0}}
    assert _design_clock(clocks, 100) == "pll_fast"
    assert _design_clock(clocks, 25) == "clk"
    assert _design_clock(clocks, 33) == "other"  # none matches: the slowest
    assert _design_clock({}, 33) is None


@pytest.mark.parametrize(("family", "dsp", "opts", "expected"), [
    ("ice40", None, "", ""),
    ("ice40", True, "", "-dsp"),
    ("ice40", True, "-abc9 -dsp", "-abc9 -dsp"),
    ("ice40", False, "-abc9", "-abc9"),
    ("ecp5", None, "", ""),
    ("ecp5", True, "", ""),
    ("ecp5", False, "-abc9", "-abc9 -nodsp"),
])
def test_dsp_option(family, dsp, opts, expected):
    assert _dsp_opts(family, dsp, opts) == expected


def _report(**changes):
    parsed = parse_nextpnr_report(DATA / "ice40_mul8.report.json")
    fields = dict(name="mul8", family="ice40", device=BOARDS["ice40"].device,
                  **resource_counts("ice40", parsed, {"SB_DFF": 55}, 100), routed=True,
                  seconds=4.2, synth_seconds=1.5, pnr_seconds=2.5, pack_seconds=0.0,
                  wrapper_in_bits=16, wrapper_out_bits=16, wrapper_ffs=39, wrapper_luts=39)
    fields.update(changes)
    return SynthReport(**fields)


def test_report_text_table_and_json():
    report = _report()
    assert (report.lut_dut, report.ff_dut) == (58 - 39, 55 - 39)
    text = str(report)
    assert text.startswith("mul8 on iCE40UP5K-SG48: 58/5280 LC (1 %), 55 FF, 1/8 DSP, 0/30 BRAM, "
                           "0/4 SPRAM; fmax 193.6 MHz for 100 MHz (met)")
    table = format_table([report, _report(name="other", routed=False, fmax_mhz=None,
                                          timing_met=False, error="ERROR: no fit")]).splitlines()
    assert table[0].split() == ["design", "family", "LUT", "LUT", "%", "LUT", "dut", "FF", "FF",
                                "dut", "DSP", "BRAM", "SPRAM", "fmax", "MHz", "target", "met",
                                "build", "s"]
    assert table[2].split()[:5] == ["mul8", "ice40", "58/5280", "1", "19"]
    assert table[3].split()[-4:] == ["failed", "100", "no", "4"]
    assert "place and route failed: ERROR: no fit" in str(_report(routed=False, error="ERROR: "
                                                                  "no fit"))
    assert json.loads(json.dumps(report.as_dict()))["lut_dut"] == 19
    assert format_table([]) == ""


# --- parameters -----------------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"family": "xilinx"}, ValueError, r"family must be one of ice40, ecp5, not 'xilinx'"),
    ({"name": "bad-name"}, ValueError, r"name must be an identifier .*, not 'bad-name'"),
    ({"name": ""}, ValueError, r"name must be an identifier .*, not ''"),
    ({"clock_mhz": 0}, ValueError, r"clock_mhz must be a positive number, not 0"),
    ({"clock_mhz": "100"}, ValueError, r"clock_mhz must be a positive number, not '100'"),
    ({"clock_mhz": math.nan}, ValueError, r"clock_mhz must be a positive number, not nan"),
    ({"synth_opts": ["-dsp"]}, TypeError, r"synth_opts must be a string, not \['-dsp'\]"),
    ({"nextpnr_opts": None}, TypeError, r"nextpnr_opts must be a string, not None"),
    ({"seed": -1}, ValueError, r"seed must be a non-negative integer, not -1"),
    ({"dsp": "yes"}, TypeError, r"dsp must be None, True or False, not 'yes'"),
    ({"capture_outputs": 1}, TypeError, r"capture_outputs must be a bool, not 1"),
])
def test_invalid_parameters(kwargs, error, message):
    args = {"family": "ice40", "name": "bad", "clock_mhz": 50.0, **kwargs}
    with pytest.raises(error, match=message):
        synthesize(DemoCounter(width=4), **args)


def test_invalid_components():
    with pytest.raises(TypeError, match=r"component must be an amaranth.lib.wiring.Component, "
                                         r"not <amaranth.hdl._dsl.Module"):
        synthesize(Module(), family="ice40", name="bad", clock_mhz=50)
    with pytest.raises(ValueError, match=r"has no output port bits: nothing would survive"):
        synthesize(NoOutputs(), family="ecp5", name="bad", clock_mhz=50)
    with pytest.raises(ValueError, match=r"width must be a positive integer, not 0"):
        DemoMultiplier(width=0)


# --- the wrapper ----------------------------------------------------------------------------

@pytest.mark.parametrize("family", sorted(BOARDS))
@pytest.mark.parametrize(("make", "in_bits", "out_bits"), [
    (StreamAdder, 1 + 9 + 1, 1 + 9),         # i.valid, i.payload, o.ready / o.valid, o.payload
    (lambda: DemoMultiplier(width=8), 16, 16),
    (lambda: DemoCounter(width=1), 1, 1),
], ids=["stream", "mul8", "counter1"])
@pytest.mark.parametrize("capture_outputs", [True, False])
def test_wrapper_counts_and_elaborates(family, make, in_bits, out_bits, capture_outputs):
    wrapper = OutOfContext(make(), family=family, capture_outputs=capture_outputs)
    assert (wrapper.in_bits, wrapper.out_bits) == (in_bits, out_bits)
    levels, width = [], out_bits
    while width > 1 or (not capture_outputs and not levels):
        width = -(-width // 4)
        levels.append(width)
    expected_ffs = 2 + in_bits + (out_bits if capture_outputs else 0) + sum(levels)
    assert wrapper.wrapper_ffs == expected_ffs
    assert wrapper.wrapper_luts == (expected_ffs if family == "ice40"
                                    else sum(levels) + in_bits - 1)
    # The build plan (no tools run): RTLIL of the whole chip and the clock constraint.
    plan = make_platform(family, 87.5).prepare(wrapper, "wrapped")
    files = plan.files
    constraint = files["wrapped.pcf" if family == "ice40" else "wrapped.lpf"]
    if family == "ice40":
        assert "set_frequency clk12_0__io 87.5" in constraint
    else:
        assert 'FREQUENCY PORT "clk25_0__io" 87500000.0 HZ;' in constraint
    assert constraint.count("set_frequency") + constraint.count("FREQUENCY") == 1
    rtlil = files["wrapped.il"]
    assert "ooc_in_chain" in rtlil and "ooc_reset_in" in rtlil
    assert ("ooc_out_capture" in rtlil) is capture_outputs


def test_board_clock_unchanged_without_clock_mhz():
    assert make_platform("ice40").default_clk_frequency == 12e6
    assert make_platform("ecp5", 150).default_clk_frequency == 150e6
    assert make_platform("ecp5").default_clk_frequency == 25e6


# --- real builds ------------------------------------------------------------------------------

def _build_or_skip(family, component, **kwargs):
    reason = _tools_missing(family)
    if reason:
        pytest.skip(reason)
    return synthesize(component, family=family, log=None, **kwargs)


@pytest.mark.parametrize("family", [
    "ice40", pytest.param("ecp5", marks=pytest.mark.slow)])
def test_real_build_of_a_multiplier(family, tmp_path):
    """The CI smoke build: one 8x8 multiplier, which must land on one DSP block."""
    report = _build_or_skip(family, DemoMultiplier(width=8), name=f"test_mul8_{family}",
                            clock_mhz=40.0, dsp=True, build_dir=tmp_path)
    assert report.routed and report.error is None
    assert (report.dsp, report.dsp_total) == ((1, 8) if family == "ice40" else (1, 156))
    assert report.lut_total == (5280 if family == "ice40" else 83640)
    assert 0 < report.lut < 200
    assert (report.wrapper_in_bits, report.wrapper_out_bits) == (16, 16)
    assert report.ff >= report.wrapper_ffs == 2 + 16 + 16 + 4 + 1
    assert report.clock_mhz == 40.0
    assert report.clocks[next(iter(report.clocks))]["constraint"] == 40.0
    assert report.fmax_mhz > 40.0 and report.timing_met
    assert report.critical_path is not None and report.critical_path["delay_ns"] > 0
    assert report.wrapper_limited is (report.critical_path["start_wrapper"]
                                      and report.critical_path["end_wrapper"])
    assert report.seconds >= report.synth_seconds + report.pnr_seconds > 0
    for key in ("yosys", "nextpnr", "report", "stat"):
        assert Path(report.logs[key]).is_file(), key
    assert Path(report.build_dir) == tmp_path
    json.dumps(report.as_dict())


class DelayLine(wiring.Component):
    """``o`` is ``i`` delayed by ``stages`` cycles: a pipeline of plain registers."""

    def __init__(self, width=8, stages=3):
        self.stages = stages
        super().__init__({"i": In(width), "o": Out(width)})

    def elaborate(self, platform):
        m = Module()
        value = self.i
        for n in range(self.stages):
            reg = Signal.like(self.i, name=f"stage{n}", reset_less=True)
            m.d.sync += reg.eq(value)
            value = reg
        m.d.comb += self.o.eq(value)
        return m


def test_real_build_keeps_the_components_pipeline_registers(tmp_path):
    """Yosys merges identical flip-flops: a plain shift register in the wrapper would hold
    every delayed copy of an input bit and take over the component's pipeline registers."""
    report = _build_or_skip("ice40", DelayLine(), name="test_delay_line", clock_mhz=40.0,
                            build_dir=tmp_path)
    assert report.routed and report.error is None
    # all 24 of the component's flip-flops; the wrapper's reset register goes unused (the
    # delay line has no reset)
    assert report.ff == report.wrapper_ffs - 1 + 3 * 8, report


class Blinky(wiring.Component):
    """A whole-chip top: the platform's own clock domain, a counter, an LED."""

    def __init__(self):
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.led = led = io.Buffer("o", platform.request("led", 0, dir="-"))
        count = Signal(20)
        m.d.sync += count.eq(count + 1)
        m.d.comb += led.o.eq(count[-1])
        return m


def test_real_build_of_a_board_top(tmp_path):
    """build_top with the crystal clock and a bitstream, as later full-board builds use it."""
    if _tools_missing("ice40"):
        pytest.skip(_tools_missing("ice40"))
    report = build_top(Blinky(), family="ice40", name="test_blinky", build_dir=tmp_path,
                       bitstream=True, log=None)
    assert report.routed and report.clock_mhz == 12.0 and report.timing_met
    assert report.wrapper_ffs == report.wrapper_luts == 0
    assert report.ff >= 20
    assert Path(report.logs["bitstream"]).stat().st_size > 100_000
    assert report.pack_seconds > 0


def test_real_build_too_many_dsps(tmp_path):
    """9 multipliers on 8 SB_MAC16: nextpnr fails; check=False reports the overflow."""
    component = ManyMultipliers(count=9)
    report = _build_or_skip("ice40", component, name="test_dsp9", clock_mhz=30.0, dsp=True,
                            build_dir=tmp_path, check=False)
    assert not report.routed and not report.timing_met and report.fmax_mhz is None
    assert (report.dsp, report.dsp_total) == (9, 8)
    assert "ICESTORM_DSP" in report.error
    with pytest.raises(SynthError,
                       match=r"(?s)nextpnr \(nextpnr-ice40\) failed .*ICESTORM_DSP"):
        synthesize(component, family="ice40", name="test_dsp9", clock_mhz=30.0, dsp=True,
                   build_dir=tmp_path, log=None)


def test_real_build_yosys_error(tmp_path):
    if _tools_missing("ice40"):
        pytest.skip(_tools_missing("ice40"))
    with pytest.raises(SynthError, match=r"yosys \(yosys\) failed with exit code \d+; log .*"
                                         r"yosys.console.log"):
        synthesize(DemoCounter(width=4), family="ice40", name="test_bad_opt", clock_mhz=30.0,
                   synth_opts="-no-such-option", build_dir=tmp_path, log=None)


def test_demo_command(tmp_path, capsys):
    if _tools_missing("ice40"):
        pytest.skip(_tools_missing("ice40"))
    assert main(["--demo", "--family", "ice40", "--json", str(tmp_path / "demo.json")]) == 0
    out = capsys.readouterr().out
    assert "demo_counter8" in out and "demo_multiplier8" in out
    reports = json.loads((tmp_path / "demo.json").read_text())
    assert [r["name"] for r in reports] == ["demo_counter8", "demo_multiplier8"]
    assert reports[1]["dsp"] == 1


def test_demo_command_needs_demo_flag(capsys):
    assert main([]) == 2
    assert "--demo" in capsys.readouterr().out
