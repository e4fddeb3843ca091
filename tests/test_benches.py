"""The quick runs of the accuracy benches work end to end and hold their bounds (the full
runs' figures are in BENCHMARKS.md)."""

import json

import pytest

import bench.common


@pytest.fixture
def bench_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(bench.common, "BENCH_DIR", tmp_path)
    return tmp_path


def test_importer_quick(bench_dir, capsys):
    from bench import importer
    assert importer.main(["--quick"]) == 0
    data = json.loads((bench_dir / "importer.json").read_text())
    assert len(data["rows"]) == len(importer.QUICK_SHAPES)
    for key, bound in data["bounds"].items():
        assert 0 < data["worst"][key] < bound, key
    assert "within" in capsys.readouterr().out


def test_demo_quick(bench_dir):
    from bench import demo
    assert demo.main(["--quick"]) == 0
    data = json.loads((bench_dir / "demo.json").read_text())
    runs = data["demo"]
    assert runs and all(r["golden_equal"] for r in runs)
    assert runs[0]["tags"] == ["PRON", "VERB", "DET", "NOUN"]


def test_hostlink_quick(bench_dir, tmp_path):
    """The UART out of context on iCE40UP5K (a few seconds): routed, with an fmax and logic."""
    from boards.toolchain import ToolchainError, use_yowasp
    try:
        use_yowasp("ice40", bitstream=False, log=None)
    except ToolchainError as exc:
        pytest.skip(str(exc))
    from bench import hostlink
    assert hostlink.main(["--quick", "--build-dir", str(tmp_path / "synth")]) == 0
    data = json.loads((bench_dir / "hostlink.json").read_text())
    assert data["families"] == ["ice40"] and data["quick"]
    assert [d["kind"] for d in data["designs"]] == ["UART"]
    for design in data["designs"]:
        report = design["report"]
        assert report["routed"] and report["error"] is None
        assert report["fmax_mhz"] > 0
        assert report["lut_dut"] > 0 and report["ff_dut"] > 0
        assert design["divisor"] == 16 and report["family"] == "ice40"


def test_core_run_selection(bench_dir, capsys):
    """``bench.core --run PRESET[:LAYER]`` picks runs; a wrong preset or layer is an argument
    error naming the choices, before anything is simulated."""
    from bench import core
    for bad in ("nope:reference", "tiny:huge"):
        with pytest.raises(SystemExit) as info:
            core.main(["--run", bad])
        assert info.value.code == 2
        assert f"--run {bad}: choose a preset of" in capsys.readouterr().err
    assert not (bench_dir / "core.json").exists()
