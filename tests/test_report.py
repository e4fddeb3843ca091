"""attn report: tables and plots from bench/build JSON, notes for missing or malformed files."""
import json

from attn.cli import main
from attn.report import make_report


def _write(path, payload):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))


def test_report_from_results(tmp_path):
    build = tmp_path / "build"
    _write(build / "bench" / "core.json", {"rows": [
        dict(preset="default", array="4x4", layer="reference", shape="64x64x4", util=0.992,
             cycles=99055, softmax_wait=0.0036, latency_us=None),
        dict(preset="ulx3s", array="16x8", layer="minilm", shape="16x384x12", util=0.94,
             cycles=123456, softmax_wait=0.002, latency_us=987.6)]})
    _write(build / "bench" / "accuracy.json", {"rows": [
        dict(config="default (x16 w8 qkv16 p12)", inputs="random", rel_mean=0.0125,
             rel_max=0.02, p_err_lsb=3.0, argmax=0.99)]})
    _write(build / "boards" / "ulx3s" / "report.json", {
        "board": "ulx3s", "config": {"name": "default"}, "routed": True, "fmax_mhz": 55.2,
        "clock_mhz": 50, "resources": {"logic": [17535, 83640], "ff": [7108, 83640],
                                       "dsp": [32, 156], "bram": [56, 208], "spram": None}})
    _write(build / "boards" / "broken" / "report.json", "{not json")
    out = tmp_path / "report"
    report = make_report(build, out).read_text()
    assert "| default | 4x4 | reference 64x64x4 | 99,055 | 99.2% |" in report
    assert "| default (x16 w8 qkv16 p12) | random | 1.250% / 2.000% |" in report
    assert "| ulx3s | default | 17,535/83,640 | 32/156 | 56/208 | 55.2 / 50 | yes |" in report
    assert "skipped" in report and "broken" in report
    assert "bench.board" in report                     # missing board.json is named
    for png in ("utilization.png", "accuracy.png", "resources.png"):
        assert (out / png).read_bytes().startswith(b"\x89PNG")


def test_report_with_nothing_measured(tmp_path, capsys):
    assert main(["report", "--build", str(tmp_path / "empty"), "--out",
                 str(tmp_path / "r")]) == 0
    text = (tmp_path / "r" / "report.md").read_text()
    assert text.count("Not measured.") == 3 and "python -m bench.core" in text
    _write(tmp_path / "bad" / "bench" / "core.json", {"rows": [{"preset": "x"}]})
    make_report(tmp_path / "bad", tmp_path / "r2")
    assert "rows lack" in (tmp_path / "r2" / "report.md").read_text()
