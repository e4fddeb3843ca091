"""attn sweep: array parsing, the Pareto front, the report files, CLI errors, and (with
--runslow) a real two-point sweep."""
import json

import pytest

from attn import preset
from attn.cli import main
from attn.sweep import pareto_front, parse_arrays, parse_vary, sweep, write_sweep

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


@pytest.mark.slow
def test_real_sweep(tmp_path):
    from boards.build import board_spec
    points = sweep(board_spec("ulx3s"), preset("tiny"), [(2, 2), (2, 4)], (8, 16, 2),
                   sim="amaranth", out_dir=tmp_path, log=None)
    assert [p["array"] for p in points] == ["2x2", "2x4"]
    assert all(p["fits"] and p["fmax_mhz"] > 0 and p["cycles"] > 0 for p in points)
    assert points[1]["dsp"] > points[0]["dsp"]
