"""attn import: a random PyTorch nn.MultiheadAttention through the accelerator lands within the
documented accuracy of PyTorch's own output; quantized files round-trip; bad files are named."""
import numpy as np
import pytest

from attn.cli import main
from attn.importer import (
    accuracy,
    is_quantized,
    load_calibration,
    load_quantized,
    quantize_model,
    save_quantized,
)
from attn.modelio import InputError, load_model

torch = pytest.importorskip("torch")

#: docs/numerics.md: an imported layer at the default widths is within 3 % of PyTorch's output.
REL_BOUND = 0.03


def _files(tmp_path, d_model=8, heads=2, seq_len=6, n=3, seed=0):
    torch.manual_seed(seed)
    layer = torch.nn.MultiheadAttention(d_model, heads)
    torch.save(layer.state_dict(), tmp_path / "mha.pt")
    x = np.random.default_rng(seed).normal(0, 1, (n, seq_len, d_model))
    np.savez(tmp_path / "calib.npz", x=x)
    np.savez(tmp_path / "input.npz", x=x[0])
    return layer, x


@pytest.mark.parametrize("backend", ["golden", "amaranth"])
def test_import_round_trip(tmp_path, backend):
    layer, x = _files(tmp_path)
    mha = load_model(tmp_path / "mha.pt", heads=2)
    xs = load_calibration(tmp_path / "calib.npz", 8)
    from attn import preset
    cfg = preset("tiny")
    model = quantize_model(cfg, mha, xs)
    stats = accuracy(cfg, model, mha, xs[:1] if backend == "amaranth" else xs, backend)
    assert stats["exact_vs_golden"] and stats["reference"].startswith("PyTorch")
    assert stats["rel_error_max"] < REL_BOUND
    assert stats["prob_lsb_error_max"] < 16
    # the bound can fail: a corrupted weight row is far outside it
    model.w_in[0] = -model.w_in[0]
    model.w_in[9] = 127
    assert accuracy(cfg, model, mha, xs, "golden")["rel_error_max"] > REL_BOUND


def test_cli_import_then_run(tmp_path, capsys):
    _files(tmp_path)
    assert main(["import", "--model", str(tmp_path / "mha.pt"), "--heads", "2", "--calib",
                 str(tmp_path / "calib.npz"), "--output", str(tmp_path / "q.npz"),
                 "--preset", "tiny", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "relative error" in out and "LSB" in out
    report = tmp_path / "q_report"
    assert (report / "accuracy.png").read_bytes().startswith(b"\x89PNG")
    assert "relative error of the output" in (report / "accuracy.md").read_text()
    assert is_quantized(tmp_path / "q.npz") and not is_quantized(tmp_path / "calib.npz")
    model, cfg, mha = load_quantized(tmp_path / "q.npz")
    assert cfg.name == "tiny" and mha.d_model == 8
    # attn run takes the quantized file as it is: the same integers on golden and the core
    for backend in ("golden", "amaranth"):
        assert main(["run", "--model", str(tmp_path / "q.npz"), "--input",
                     str(tmp_path / "input.npz"), "--output", str(tmp_path / f"{backend}.npz"),
                     "--backend", backend, "--quiet"]) == 0
    with np.load(tmp_path / "golden.npz") as g, np.load(tmp_path / "amaranth.npz") as h:
        assert np.array_equal(g["y_int"], h["y_int"])
    assert main(["run", "--model", str(tmp_path / "q.npz"), "--input",
                 str(tmp_path / "input.npz"), "--output", str(tmp_path / "o.npz"),
                 "--preset", "default"]) == 2
    assert "quantized for configuration 'tiny'" in capsys.readouterr().err


@pytest.mark.parametrize("calib,message", [
    ({"y": np.zeros((2, 8))}, "has no 'x'"),
    ({"x": np.zeros((2, 3, 7))}, "must have shape"),
    ({"x": np.full((3, 8), np.nan)}, "NaN"),
])
def test_bad_calibration(tmp_path, calib, message):
    np.savez(tmp_path / "c.npz", **calib)
    with pytest.raises(InputError, match=message):
        load_calibration(tmp_path / "c.npz", 8)


def test_bad_quantized_files(tmp_path):
    _files(tmp_path)
    mha = load_model(tmp_path / "mha.pt", heads=2)
    from attn import preset
    cfg = preset("tiny")
    model = quantize_model(cfg, mha, load_calibration(tmp_path / "calib.npz", 8))
    save_quantized(tmp_path / "q.npz", model, cfg, mha)
    with np.load(tmp_path / "q.npz") as f:
        data = {k: f[k] for k in f.files}
    np.savez(tmp_path / "v2.npz", **{**data, "format": np.array("attn-quantized-99")})
    with pytest.raises(InputError, match="this version reads"):
        load_quantized(tmp_path / "v2.npz")
    np.savez(tmp_path / "missing.npz", **{k: v for k, v in data.items() if k != "q.w_out"})
    with pytest.raises(InputError, match="missing 'q.w_out'"):
        load_quantized(tmp_path / "missing.npz")
    bad = dict(data)
    bad["q.w_in"] = data["q.w_in"] * 1000
    np.savez(tmp_path / "range.npz", **bad)
    with pytest.raises(InputError, match="w_in has values outside"):
        load_quantized(tmp_path / "range.npz")
