"""Board tops, `attn build` reports and `attn program`: the top elaborates for every board, a
real iCEBreaker bitstream is built and its report checked (the ULX3S one with --runslow), and
programming fails clearly."""
import json
import stat

import pytest

from attn import preset
from attn.cli import main
from boards.build import (
    BOARDS,
    board_spec,
    build_board,
    constraint_warning,
    program_board,
    report_markdown,
)
from boards.toolchain import ToolchainError, use_yowasp
from boards.top import BoardTop

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_top_elaborates(name):
    """The whole chip (PLL primitive, UART pins, LEDs) converts to the toolchain's input."""
    spec = board_spec(name)
    top = BoardTop(spec, preset("tiny"))
    plan = spec.platform().prepare(top, "attn")
    rtlil = plan.files["attn.il"]
    assert ("SB_PLL40_PAD" if spec.family == "ice40" else "EHXPLLL") in rtlil
    # on ECP5 the board's reset and the core's reach their flip-flops on global networks
    buffers = {"ecp5": ["sync_rst_dcca", "core_rst_dcca"], "ice40": []}[spec.family]
    assert rtlil.count("cell \\DCCA ") == len(buffers)
    assert all(f"cell \\DCCA \\{name}\n" in rtlil for name in buffers)
    assert abs(top.clock_hz / top.divisor - spec.baud) < 0.02 * spec.baud


@pytest.mark.parametrize("name, file, line", [
    ("ulx3s", "attn.lpf", 'FREQUENCY NET "pll_clk" 90000000.0 HZ;'),
    ("icebreaker", "attn.pcf", "set_frequency pll_clk 90.0"),
])
def test_timing_target(name, file, line):
    """nextpnr is told the design clock runs at the target; the PLL still makes the clock. The
    constrained wire is kept through synthesis (Yosys drops the name of a merged wire, and
    nextpnr ignores a constraint on a net it cannot find; the bitstream builds check that
    nextpnr applied it)."""
    spec = board_spec(name)
    top = BoardTop(spec, preset("tiny"), target_mhz=90)
    plan = spec.platform().prepare(top, "attn")
    assert line in plan.files[file].splitlines()
    assert "attribute \\keep 1\n  wire width 1 \\pll_clk\n" in plan.files["attn.il"]
    assert top.pll.f_out_mhz == pytest.approx(spec.clock_mhz, rel=0.01)
    default = spec.platform().prepare(BoardTop(spec, preset("tiny")), "attn").files[file]
    assert line not in default.splitlines()


def test_unknown_board_and_bad_clock():
    with pytest.raises(ValueError, match="unknown board 'nexys'"):
        board_spec("nexys")
    with pytest.raises(ValueError, match="cannot make"):
        BoardTop(board_spec("icebreaker"), preset("tiny"), clock_mhz=5000)
    with pytest.raises(ValueError, match=r"timing target must be a frequency of at least the "
                       r"clock \(65 MHz\), not 50"):
        BoardTop(board_spec("ulx3s"), preset("tiny"), target_mhz=50)
    with pytest.raises(ValueError, match="router must be one of router1, router2, not 'r3'"):
        build_board(board_spec("ulx3s"), preset("tiny"), router="r3", log=None)
    with pytest.raises(ValueError, match="placer must be one of heap, sa, static, not 'x'"):
        build_board(board_spec("ulx3s"), preset("tiny"), placer="x", log=None)


def _tools_missing(family):
    try:
        use_yowasp(family, bitstream=True, log=None)
    except ToolchainError as exc:
        return str(exc)
    return None


def test_build_icebreaker_bitstream(tmp_path):
    """CI's real bitstream: the iCEBreaker with the preset that fits it (about 2 minutes). The
    link's largest regions go to SPRAM, the design meets the board's clock, and nextpnr times
    that clock at the target asked for (not at the PLL's frequency, which it derives when it
    does not find the constrained net)."""
    reason = _tools_missing("ice40")
    if reason:
        pytest.skip(reason)
    spec = board_spec("icebreaker")
    cfg = preset(spec.preset)
    report = build_board(spec, cfg, target_mhz=20, out_dir=tmp_path, log=None)
    assert report["routed"] and report["timing_met"], report["error"]
    assert report["target_mhz"] == 20 and report["constraint_mhz"] == pytest.approx(20, rel=1e-3)
    # the PLL's nearest frequency to the board's clock (15.9375 MHz for 16)
    assert report["fmax_mhz"] >= report["clock_mhz"] == pytest.approx(spec.clock_mhz, rel=0.01)
    for name in ("logic", "bram", "dsp", "spram"):
        used, total = report["resources"][name]
        assert 0 < used <= total, (name, used, total)
    bitstream = tmp_path / "attn.bin"
    assert bitstream.stat().st_size == report["bitstream_bytes"] > 100_000
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["config"] == cfg.to_dict()
    assert "timing met" in (tmp_path / "report.md").read_text()


@pytest.mark.slow
def test_build_ulx3s_bitstream(tmp_path):
    """The tiny preset's shape with the ULX3S presets' registered DSPs (Yosys 0.70's ABC9
    fails on tiny's inferred ECP5 multipliers), nextpnr's static placer and router2 (a few
    minutes; --runslow)."""
    reason = _tools_missing("ecp5")
    if reason:
        pytest.skip(reason)
    spec = board_spec("ulx3s")
    cfg = preset("tiny").replace(dsp="ecp5_registered")
    report = build_board(spec, cfg, placer="static", router="router2",
                         target_mhz=spec.clock_mhz + 5, out_dir=tmp_path, log=None)
    assert report["routed"] and report["timing_met"]
    assert report["constraint_mhz"] == pytest.approx(spec.clock_mhz + 5, rel=1e-3)
    assert (report["placer"], report["router"]) == ("static", "router2")
    log = (tmp_path / "work" / "attn.tim").read_text()
    assert "Router2" in log and "static placer" in log.lower()
    assert report["fmax_mhz"] >= report["clock_mhz"] == spec.clock_mhz
    used, total = report["resources"]["logic"]
    assert 0 < used < total and report["resources"]["dsp"][0] > 0
    bitstream = tmp_path / "attn.bit"
    assert bitstream.stat().st_size == report["bitstream_bytes"] > 100_000
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["config"] == cfg.to_dict()
    assert "timing met" in (tmp_path / "report.md").read_text()


def _report(**changes):
    report = {"board": "ulx3s", "description": "ULX3S", "device": "LFE5U-85F-6BG381",
              "family": "ecp5", "config": preset("tiny").to_dict(), "clock_mhz": 50.0,
              "pll": {"CLKI_DIV": 1}, "baud": 1_000_000, "uart_divisor": 50,
              "region_kbit": 9.5, "resources": {"logic": [8727, 83640], "ff": [4169, 83640],
                                                "dsp": [9, 156], "bram": [8, 208],
                                                "spram": None},
              "fmax_mhz": 73.5, "timing_met": True, "routed": True, "seconds": 75.0,
              "synth_seconds": 13.1, "pnr_seconds": 58.7, "seed": 1,
              "bitstream": "build/boards/ulx3s/attn.bit", "bitstream_bytes": 1_000_000,
              "critical_path": None, "error": None}
    report.update(changes)
    return report


def test_report_markdown():
    text = report_markdown(_report())
    assert "| logic | 8,727 | 83,640 | 10 |" in text and "spram" not in text
    assert "fmax 73.5 MHz: timing met" in text
    assert "fmax 73.5 MHz (nextpnr's target 90 MHz): timing met" in report_markdown(
        _report(target_mhz=90.0))
    # reports from before the placer and router were recorded name nextpnr's defaults
    assert "seed 1, heap placer, router1." in text
    assert "seed 1, static placer, router2." in report_markdown(
        _report(placer="static", router="router2"))
    assert "seed 1, static placer, router2 with timing-driven rip-up." in report_markdown(
        _report(placer="static", router="router2", timing_ripup=True))
    failed = report_markdown(_report(timing_met=False, routed=False, fmax_mhz=None,
                                     bitstream=None, bitstream_bytes=None,
                                     error="ERROR: Unable to place cell"))
    assert "not routed" in failed and "Unable to place cell" in failed


def _fake_programmer(tmp_path, exit_code, output):
    script = tmp_path / "fakeprog"
    script.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/args\necho '{output}'\n"
                      f"exit {exit_code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_program(tmp_path, monkeypatch):
    spec = board_spec("ulx3s")
    bit = tmp_path / "attn.bit"
    with pytest.raises(ValueError, match="no bitstream"):
        program_board(spec, bit)
    bit.write_bytes(b"\xff\x00bitstream")
    monkeypatch.setenv("OPENFPGALOADER", "no-such-programmer-here")
    with pytest.raises(FileNotFoundError, match="apt-get install openfpgaloader"):
        program_board(spec, bit)
    monkeypatch.setenv("OPENFPGALOADER", _fake_programmer(tmp_path, 1, "unable to open ftdi"))
    with pytest.raises(RuntimeError, match="unable to open ftdi"):
        program_board(spec, bit, log=None)
    monkeypatch.setenv("OPENFPGALOADER", _fake_programmer(tmp_path, 0, "done"))
    program_board(spec, bit, log=None)
    assert (tmp_path / "args").read_text().split() == ["-b", "ulx3s", "-m", str(bit)]


def test_cli_errors(tmp_path, capsys, monkeypatch):
    assert main(["program", "--board", "icebreaker", "--bitstream",
                 str(tmp_path / "none.bin")]) == 2
    assert "no bitstream" in capsys.readouterr().err
    monkeypatch.setenv("ICEPROG", "no-such-iceprog")
    (tmp_path / "a.bin").write_bytes(b"\x00")
    assert main(["program", "--board", "icebreaker", "--bitstream",
                 str(tmp_path / "a.bin")]) == 1
    assert "not installed" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["build", "--board", "nexys"])
    assert main(["build", "--board", "ulx3s", "--set", "rows=3"]) == 2
    assert "power of two" in capsys.readouterr().err
    assert main(["build", "--board", "ulx3s", "--target", "50"]) == 2
    assert "timing target must be a frequency of at least the clock" in capsys.readouterr().err


def test_build_cli_passes_placer_and_router(monkeypatch, capsys, tmp_path):
    """`attn build --placer/--router/--target` reach nextpnr's options and the top; unknown
    names are refused."""
    seen = {}

    def fake_build(spec, cfg, **kwargs):
        seen.update(kwargs)
        return {"resources": {"logic": [1, 2]}, "timing_met": True, "fmax_mhz": 70.0,
                "clock_mhz": 65, "bitstream": "b", "seconds": 1}

    monkeypatch.setattr("boards.build.build_board", fake_build)
    assert main(["build", "--board", "ulx3s", "--placer", "static", "--router", "router2",
                 "--out", str(tmp_path)]) == 0
    assert (seen["placer"], seen["router"], seen["target_mhz"]) == ("static", "router2", None)
    assert main(["build", "--board", "ulx3s", "--target", "90", "--out", str(tmp_path)]) == 0
    assert (seen["placer"], seen["router"], seen["target_mhz"]) == (None, None, 90.0)
    assert seen["timing_ripup"] is False
    assert main(["build", "--board", "ulx3s", "--target", "90", "--tmg-ripup", "--out",
                 str(tmp_path)]) == 0
    assert (seen["target_mhz"], seen["timing_ripup"]) == (90.0, True)
    with pytest.raises(SystemExit):
        main(["build", "--board", "ulx3s", "--placer", "annealing"])
    assert "invalid choice: 'annealing'" in capsys.readouterr().err


def test_nextpnr_options():
    """The placer, the router and timing-driven rip-up as nextpnr's options."""
    from boards.build import nextpnr_options

    assert nextpnr_options() == ""
    assert nextpnr_options("static", "router2") == "--placer static --router router2"
    assert nextpnr_options(router="router2", timing_ripup=True) == "--router router2 --tmg-ripup"
    with pytest.raises(ValueError, match="router must be one of router1, router2, not 'r3'"):
        nextpnr_options(router="r3")
    with pytest.raises(TypeError, match="timing_ripup must be a bool, not 'yes'"):
        nextpnr_options(timing_ripup="yes")


def test_constraint_warning():
    """The warning for a constraint nextpnr did not apply: none when it agrees (to 0.1 %) or
    when there is no timing figure."""
    assert constraint_warning(90.0, 90.0) is None
    assert constraint_warning(89.95, 90.0) is None
    assert constraint_warning(None, 90.0) is None
    assert constraint_warning(65.0, 90.0) == ("nextpnr timed the clock at 65 MHz, not at the "
                                              "target 90 MHz (it did not find the constrained "
                                              "net)")
