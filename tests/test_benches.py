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
