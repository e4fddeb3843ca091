"""attn/report.py and `attn report`: tables and plots from bench/build JSON (synthetic fixtures
in the benchmarks' formats, and a real benchmark run), notes for missing or malformed files."""
import json

from attn.cli import main
from attn.report import make_report
from boards.synth import SynthReport

PNG = b"\x89PNG"


def _write(path, payload):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))


def _synth(name, family, lut, lut_total, dsp, dsp_total, fmax, routed=True):
    """An out-of-context build as the benchmarks store it (SynthReport.as_dict)."""
    return SynthReport(
        name=name, family=family, device="LFE5U-85F-6BG381", lut=lut, lut_total=lut_total,
        ff=lut // 2, ff_total=lut_total, dsp=dsp, dsp_total=dsp_total, bram=0, bram_total=208,
        spram=0, spram_total=0, clock_mhz=125.0, fmax_mhz=fmax, timing_met=bool(fmax),
        routed=routed, seconds=1.0, synth_seconds=0.5, pnr_seconds=0.5, pack_seconds=0.0,
        wrapper_in_bits=8, wrapper_out_bits=8, wrapper_ffs=20, wrapper_luts=10).as_dict()


def _results(build):
    bench = build / "bench"
    _write(bench / "core.json", {"rows": [
        dict(preset="default", array="4x4", layer="reference", shape="64x64x4", util=0.992,
             util_masked=0.871, cycles=99055, softmax_wait=0.0036, latency_us=None, exact=True),
        dict(preset="ulx3s", array="16x8", layer="minilm", shape="16x384x12", util=0.94,
             cycles=123456, softmax_wait=0.002, latency_us=987.6, exact=True)],
        "fmax": {"ulx3s": 61.5}})
    _write(bench / "systolic.json", {
        "utilization": [dict(rows=8, cols=8, dsp="infer", K=k, tiles=8, utilization=u,
                             steady_utilization=1.0, latency=12)
                        for k, u in ((8, 0.771), (64, 0.964))],
        "synthesis": [dict(name="ecp5_array_8x8_infer", family="ecp5", lut=9081, lut_dut=9000,
                           lut_total=83640, ff=7863, dsp=64, dsp_total=156, bram=0,
                           fmax_mhz=75.2, clock_mhz=120, routed=True, seconds=300,
                           error=None)]})
    _write(bench / "softmax.json", {
        "throughput": [dict(preset="default", max_seq_len=64, length=64, rows=100,
                            elements=6400, elements_per_cycle=0.9846, first_output_cycle=70)],
        "synth": [_synth("softmax_ulx3s", "ecp5", 2500, 83640, 2, 156, 141.3),
                  _synth("softmax_big", "ecp5", 99000, 83640, 2, 156, None, routed=False)]})
    _write(bench / "accuracy.json", {"rows": [
        dict(config="default (x16 w8 qkv16 p12)", inputs="random", layers=2, rel_mean=0.0125,
             rel_max=0.02, p_err_lsb=3.0, argmax=0.99)]})
    _write(bench / "board.json", {"rows": [
        dict(board="ulx3s", compute_ms="1.98", transfer_ms="374", usb_ms="117",
             total_ms="493")]})
    _write(build / "boards" / "ulx3s" / "report.json", {
        "board": "ulx3s", "config": {"name": "default"}, "routed": True, "fmax_mhz": 55.2,
        "clock_mhz": 50, "resources": {"logic": [17535, 83640], "ff": [7108, 83640],
                                       "dsp": [32, 156], "bram": [56, 208], "spram": None}})
    _write(build / "sweep" / "ulx3s" / "sweep.json", {"board": "ulx3s", "points": [
        dict(array="4x4", pes=16, logic=17000, logic_total=83640, dsp=32, dsp_total=156,
             bram=56, bram_total=208, fits=True, fmax_mhz=55.0, cycles=99055,
             utilization=0.99, latency_us=1800.0, layers_per_s=555.0, pareto=True),
        dict(array="16x8", pes=128, logic=43497, logic_total=83640, dsp=152, dsp_total=156,
             bram=147, bram_total=208, fits=True, fmax_mhz=69.1, fmax_min_mhz=52.8,
             fmax_max_mhz=70.6, seeds=[1, 2, 3], fmax_by_seed={"1": 70.6, "2": 69.1,
                                                                "3": 52.8},
             cycles=11699, utilization=1.05, latency_us=169.3, layers_per_s=5906.0,
             pareto=True)]})


def test_report_from_results(tmp_path):
    build = tmp_path / "build"
    _results(build)
    out = tmp_path / "report"
    report = make_report(build, out).read_text()
    assert "| default | 4x4 | reference 64x64x4 | 99,055 | 99.2% | 87.1% | 0.36% | yes | — |" \
        in report
    assert "| ulx3s | 16x8 | minilm 16x384x12 | 123,456 | 94.0% | — | 0.20% | yes | 987.6 |" \
        in report            # (a core.json from before the unmasked column)
    assert "| 8x8 | infer | 8 | 8 | 77.1% | 100.0% | 12 |" in report
    assert "| default | 64 | 100 | 0.985 | 70 |" in report
    assert "| default (x16 w8 qkv16 p12) | random | 2 | 1.250% / 2.000% | 3.0 | 99.00% |" \
        in report
    assert ("| ulx3s | default | 17,535/83,640 | 7,108/83,640 | 32/156 | 56/208 | 55.2 / 50 "
            "| yes |") in report
    assert "| ulx3s | 1.98 | 374 | 117 | 493 |" in report
    # synthesis per family: ECP5 from both benchmarks, iCE40 not measured
    ice40, ecp5 = report.split("### iCE40UP5K")[1].split("### ECP5-85F")
    assert "Not measured" in ice40 and "bench.systolic --synth" in ice40
    assert "| ecp5_array_8x8_infer | bench.systolic | 9,081/83,640 | 9,000 | 7,863 | " \
        "64/156 | 0 | 75.2 / 120 | yes |" in ecp5
    assert "| softmax_ulx3s | bench.softmax | 2,500/83,640 | 2,490 |" in ecp5
    assert "| softmax_big | bench.softmax | 99,000/83,640 |" in ecp5 and "| **no** |" in ecp5
    assert "ulx3s 61.5 MHz" in report
    assert "| 16x8 | 43,497/83,640 | 152/156 | yes | 69.1 (52.8–70.6, 3/3 seeds) | 11,699 |" \
        in report
    assert "| 4x4 | 17,000/83,640 | 32/156 | yes | 55.0 | 99,055 | 99.0% | 555 | **yes** |" \
        in report
    assert "## Notes" not in report                # everything was there and well formed
    for png in ("utilization", "systolic", "accuracy", "resources", "families"):
        assert (out / f"{png}.png").read_bytes().startswith(PNG), png
        assert f"]({png}.png)" in report


def test_report_with_nothing_measured(tmp_path, capsys):
    out = tmp_path / "r"
    (out).mkdir()
    (out / "accuracy.png").write_bytes(b"stale")       # a picture of an earlier report
    (out / "mine.png").write_bytes(b"not ours")
    assert main(["report", "--build", str(tmp_path / "empty"), "--out", str(out)]) == 0
    assert "report.md" in capsys.readouterr().out
    text = (out / "report.md").read_text()
    assert text.count("Not measured") == 6          # core, systolic, accuracy, boards, 2 families
    for how in ("python -m bench.core", "python -m bench.accuracy", "attn build --board"):
        assert how in text
    assert not (out / "accuracy.png").exists() and (out / "mine.png").exists()


def test_report_skips_malformed_files(tmp_path):
    build = tmp_path / "build"
    _results(build)
    bench = build / "bench"
    _write(bench / "core.json", {"rows": [
        {"preset": "x"},                                             # fields missing
        dict(preset="default", array="4x4", layer="reference", shape="64x64x4", util="high",
             cycles=1),                                              # wrong type
        dict(preset="tiny", array="2x2", layer="small", shape="8x16x2", util=0.5, cycles=10)]})
    _write(bench / "accuracy.json", "{not json")
    _write(bench / "systolic.json", [1, 2, 3])                       # not an object
    _write(bench / "softmax.json", {"throughput": "fast", "synth": [{"name": "x"}]})
    _write(bench / "board.json", {"rows": [dict(board="ulx3s", compute_ms=float("nan"),
                                                 transfer_ms=1)]})
    _write(build / "boards" / "broken" / "report.json", {"board": "broken", "config": {},
                                                           "routed": True, "clock_mhz": 1,
                                                           "resources": {}})
    _write(build / "boards" / "odd" / "report.json", {
        "board": "odd", "config": {"name": "x"}, "routed": True, "clock_mhz": 1,
        "resources": {"logic": [1, 0]}})
    _write(build / "sweep" / "ulx3s" / "sweep.json", {"board": "ulx3s", "points": None})
    report = make_report(build, tmp_path / "r").read_text()
    notes = report.split("## Notes")[1]
    for expected in ("skipped row 0 of", "no field 'array'",
                     "field 'util' is 'high', not a num",
                     "accuracy.json`: not readable JSON",
                     "systolic.json` (utilization): not a list of rows",
                     "softmax.json` (throughput): not a list of rows",
                     "softmax.json` (synth): no field 'family'",
                     "board.json` (rows): field 'compute_ms' is nan",
                     "broken/report.json`: not an attn build report (config has no name)",
                     "odd/report.json`: not an attn build report (resources ['logic']",
                     "sweep.json` (points): not a list of rows"):
        assert expected in notes, expected
    assert "| tiny | 2x2 | small 8x16x2 | 10 | 50.0% |" in report    # the good row stays
    assert "| ulx3s | default | 17,535/83,640 |" in report
    assert "section" not in notes                                   # no unforeseen failure


def test_report_from_real_bench_output(tmp_path, monkeypatch, capsys):
    """The accuracy benchmark's own JSON (a real, quick run) goes into the report."""
    import bench.accuracy
    import bench.common

    monkeypatch.setattr(bench.common, "BENCH_DIR", tmp_path / "bench")
    monkeypatch.setattr(bench.accuracy, "golden_speed", lambda: 0.0)
    bench.accuracy.main(["--quick"])
    rows = json.loads((tmp_path / "bench" / "accuracy.json").read_text())["rows"]
    assert main(["report", "--build", str(tmp_path / "nothing"), "--bench-dir",
                 str(tmp_path / "bench"), "--out", str(tmp_path / "r")]) == 0
    report = (tmp_path / "r" / "report.md").read_text()
    for r in rows:
        assert (f"| {r['config']} | {r['inputs']} | {r['layers']} | {r['rel_mean']:.3%} / "
                f"{r['rel_max']:.3%} | {r['p_err_lsb']:.1f} |") in report
    assert "accuracy.json" not in report.split("## Notes")[1]
    assert (tmp_path / "r" / "accuracy.png").read_bytes().startswith(PNG)
