"""attn/importer.py and `attn import`: a random PyTorch nn.MultiheadAttention through the
accelerator lands within the documented accuracy of PyTorch's own output; quantized model files
round-trip and are run by `attn run` without new calibration; bad files and arguments are named,
exit 2 and leave nothing behind."""
import dataclasses
import json
import re
import sys

import numpy as np
import pytest

from attn import preset
from attn.cli import main
from attn.importer import (
    ACCURACY_BOUNDS,
    FORMAT,
    accuracy,
    float_reference,
    format_table,
    import_config,
    is_quantized,
    load_calibration,
    load_quantized,
    quantize_model,
    save_quantized,
    within_bounds,
)
from attn.modelio import InputError, load_model
from golden import attention_int, calibrate, quantize_input

torch = pytest.importorskip("torch", reason="the import round trip needs PyTorch")

REL_BOUND = ACCURACY_BOUNDS["rel_error_max"]


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
    cfg = preset("tiny")
    model = quantize_model(cfg, mha, xs)
    runs = xs[:1] if backend == "amaranth" else xs       # the simulator takes ~1 s a run
    stats = accuracy(cfg, model, mha, runs, backend)
    assert stats["exact_vs_golden"] and stats["mismatches"] == []
    assert stats["reference"].startswith("PyTorch")
    assert within_bounds(stats), format_table(stats)
    # the reference really is PyTorch's forward of this very layer
    with torch.no_grad():
        t = torch.from_numpy(x[0]).float()[:, None]
        y_torch = layer(t, t, t)[0][:, 0].double().numpy()
    y_ref, _, _ = float_reference(mha, x[0])
    assert np.allclose(y_ref, y_torch, atol=1e-5)


def test_bounds_can_fail(tmp_path):
    """A corrupted weight row, or a layer quantized for other inputs, breaks the bound."""
    _files(tmp_path)
    mha = load_model(tmp_path / "mha.pt", heads=2)
    xs = load_calibration(tmp_path / "calib.npz", 8)
    cfg = preset("tiny")
    model = quantize_model(cfg, mha, xs)
    w_in = model.w_in.copy()
    w_in[0] = -w_in[0]                    # a query channel with its sign flipped
    w_in[17] = 127                        # a value channel saturated
    broken = dataclasses.replace(model, w_in=w_in)
    assert not within_bounds(accuracy(cfg, broken, mha, xs))
    small = quantize_model(cfg, mha, [x / 20 for x in xs])   # calibrated on the wrong range
    stats = accuracy(cfg, small, mha, xs)
    assert not within_bounds(stats) and stats["per_sequence"][0]["out_of_range"]["x"] > 0


def test_hardware_mismatch_is_reported(tmp_path, monkeypatch):
    _files(tmp_path)
    mha = load_model(tmp_path / "mha.pt", heads=2)
    xs = load_calibration(tmp_path / "calib.npz", 8)
    cfg = preset("tiny")
    model = quantize_model(cfg, mha, xs)
    from attn import backends

    def off_by_one(cfg, model, x_int, mask, progress=None):
        return backends.Result(y_int=attention_int(cfg, model, x_int, mask).y + 1,
                               probs=None, cycles=1)
    monkeypatch.setitem(backends.BACKENDS, "icarus", off_by_one)
    stats = accuracy(cfg, model, mha, xs, "icarus")
    assert not stats["exact_vs_golden"] and stats["mismatches"] == [0, 1, 2]
    assert "NO (sequence(s) 0, 1, 2)" in format_table(stats)
    assert main(["import", "--model", str(tmp_path / "mha.pt"), "--heads", "2", "--calib",
                 str(tmp_path / "calib.npz"), "--output", str(tmp_path / "q.npz"),
                 "--backend", "icarus", "--quiet"]) == 1
    assert not (tmp_path / "q.npz").exists()


def test_float_reference_without_torch(monkeypatch):
    rng = np.random.default_rng(3)
    from bench.accuracy import random_layer
    mha = random_layer(rng, 16, 4)
    x = rng.normal(0, 1, (5, 16))
    y_t, p_t, source_t = float_reference(mha, x)
    monkeypatch.setitem(sys.modules, "torch", None)          # import torch now fails
    y_g, p_g, source_g = float_reference(mha, x)
    assert "PyTorch" in source_t and "golden" in source_g
    assert np.allclose(y_t, y_g, rtol=0, atol=1e-12) and np.allclose(p_t, p_g, atol=1e-12)


def test_calibration_over_sequences():
    """Ranges per sequence combined by maximum: the same constants as calibrating on all
    sequences at once with each attending to itself (a block-diagonal mask)."""
    rng = np.random.default_rng(4)
    from bench.accuracy import random_layer
    mha = random_layer(rng, 16, 2)
    xs = [rng.normal(0, s, (6, 16)) for s in (1, 3, 0.5)]
    cfg = preset("default").fitted(18, 16, 2)
    owner = np.repeat(np.arange(3), 6)
    whole = calibrate(cfg, mha, np.concatenate(xs), owner[:, None] != owner[None, :])
    merged = quantize_model(cfg, mha, xs)
    for f in dataclasses.fields(whole):
        assert np.allclose(getattr(whole, f.name), getattr(merged, f.name), rtol=1e-12), f.name
    assert merged.s_x == pytest.approx(np.abs(xs[1]).max() / 32767)


def test_cli_import_then_run(tmp_path, capsys):
    _files(tmp_path)
    assert main(["import", "--model", str(tmp_path / "mha.pt"), "--heads", "2", "--calib",
                 str(tmp_path / "calib.npz"), "--output", str(tmp_path / "q.npz"),
                 "--preset", "tiny", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "| relative error of the output" in out and "PyTorch" in out
    report = tmp_path / "q_report"
    assert (report / "accuracy.png").read_bytes().startswith(b"\x89PNG")
    assert "relative error of the output" in (report / "accuracy.md").read_text()
    figures = json.loads((report / "accuracy.json").read_text())
    assert figures["sequences"] == 3 and figures["config"]["name"] == "tiny"
    assert figures["rel_error_max"] < REL_BOUND
    assert is_quantized(tmp_path / "q.npz") and not is_quantized(tmp_path / "calib.npz")
    model, cfg, mha = load_quantized(tmp_path / "q.npz")
    assert cfg == preset("tiny") and mha.d_model == 8
    x = np.load(tmp_path / "input.npz")["x"]
    expected = attention_int(cfg, model, quantize_input(x, model, cfg)).y
    # attn run takes the quantized file as it is (no new calibration): the same integers on
    # golden and on the core; a fresh calibration on this one input would give others
    for backend in ("golden", "amaranth"):
        assert main(["run", "--model", str(tmp_path / "q.npz"), "--input",
                     str(tmp_path / "input.npz"), "--output", str(tmp_path / f"{backend}.npz"),
                     "--backend", backend, "--quiet"]) == 0
        with np.load(tmp_path / f"{backend}.npz") as result:
            assert np.array_equal(result["y_int"], expected)
    fresh = calibrate(cfg, mha, x)
    assert not np.array_equal(attention_int(cfg, fresh, quantize_input(x, fresh, cfg)).y,
                              expected)
    assert main(["run", "--model", str(tmp_path / "q.npz"), "--input",
                 str(tmp_path / "input.npz"), "--output", str(tmp_path / "o.npz"),
                 "--preset", "default"]) == 2
    assert "quantized for configuration 'tiny'" in capsys.readouterr().err


def test_cli_holdout_and_fitted_config(tmp_path, capsys):
    _files(tmp_path, d_model=16, heads=4, seq_len=10, n=4)
    assert main(["import", "--model", str(tmp_path / "mha.pt"), "--heads", "4", "--calib",
                 str(tmp_path / "calib.npz"), "--output", str(tmp_path / "q.npz"),
                 "--holdout", "1", "--report-dir", str(tmp_path / "rep"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "calibrated on 3 sequence(s)" in out and "1 held-out sequence(s)" in out
    figures = json.loads((tmp_path / "rep" / "accuracy.json").read_text())
    assert figures["measured_on"] == "held-out" and figures["sequences"] == 1
    _, cfg, _ = load_quantized(tmp_path / "q.npz")
    assert (cfg.name, cfg.max_seq_len, cfg.max_d_model, cfg.max_heads) == ("fitted", 10, 16, 4)


def _bad_model(tmp_path, **changes):
    torch.manual_seed(0)
    state = {k: v.numpy() for k, v in torch.nn.MultiheadAttention(8, 2).state_dict().items()}
    state["num_heads"] = np.int64(2)
    state.update(changes)
    state = {k: v for k, v in state.items() if v is not None}
    np.savez(tmp_path / "bad.npz", **state)
    return ["--model", str(tmp_path / "bad.npz")]


@pytest.mark.parametrize("case,message", [
    ("missing key", "missing key(s) out_proj.bias"),
    ("wrong shape", "in_proj_bias must have shape (24,)"),
    ("heads", "D = 8 is not divisible by num_heads = 3"),
    ("NaN weight", "out_proj_weight contains NaN"),
    ("calib NaN", "x contains NaN or infinity (first at (1, 2, 3))"),
    ("calib shape", "x must have shape (N, L, 8) or (L, 8)"),
    ("calib key", "has no key 'x'"),
    ("beyond preset", "sequence length L = 9 is outside 1..8 of config 'tiny'"),
    ("output suffix", "must end in .npz"),
    ("output folder", "does not exist"),
    ("holdout", "--holdout must be in 0..2"),
])
def test_cli_errors(tmp_path, capsys, case, message):
    _files(tmp_path)
    calib = np.random.default_rng(0).normal(0, 1, (3, 6, 8))
    model = ["--model", str(tmp_path / "mha.pt"), "--heads", "2"]
    extra, output = [], tmp_path / "q.npz"
    if case == "missing key":
        model = _bad_model(tmp_path, **{"out_proj.bias": None})
    elif case == "wrong shape":
        model = _bad_model(tmp_path, in_proj_bias=np.zeros(23, np.float32))
    elif case == "heads":
        model = _bad_model(tmp_path, num_heads=np.int64(3))
    elif case == "NaN weight":
        model = _bad_model(tmp_path, **{"out_proj.weight": np.full((8, 8), np.nan)})
    elif case == "calib NaN":
        calib[1, 2, 3] = np.inf
    elif case == "calib shape":
        calib = calib[..., :7]
    elif case == "beyond preset":
        calib = np.zeros((2, 9, 8))
        extra = ["--preset", "tiny"]
    elif case == "output suffix":
        output = tmp_path / "q.pt"
    elif case == "output folder":
        output = tmp_path / "nowhere" / "q.npz"
    elif case == "holdout":
        extra = ["--holdout", "3"]
    np.savez(tmp_path / "c.npz", **({"y": calib} if case == "calib key" else {"x": calib}))
    before = set(tmp_path.iterdir())
    assert main(["import", *model, "--calib", str(tmp_path / "c.npz"), "--output",
                 str(output), "--quiet", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.count("\n") == 0 and err.startswith("attn import: error:")
    assert set(tmp_path.iterdir()) == before                  # nothing written


def test_bad_quantized_files(tmp_path, capsys):
    _files(tmp_path)
    mha = load_model(tmp_path / "mha.pt", heads=2)
    cfg = preset("tiny")
    xs = load_calibration(tmp_path / "calib.npz", 8)
    save_quantized(tmp_path / "q.npz", quantize_model(cfg, mha, xs), cfg, mha)
    with np.load(tmp_path / "q.npz") as f:
        data = {k: f[k] for k in f.files}
    assert str(data["format"]) == FORMAT

    def broken(name, **changes):
        np.savez(tmp_path / name, **{k: v for k, v in {**data, **changes}.items()
                                     if v is not None})
        return tmp_path / name

    cases = [
        (broken("v2.npz", format=np.array("attn-quantized-99")),
         "(written by another version of attn); this version reads 'attn-quantized-1'"),
        (broken("other.npz", format=np.array("zip")), "has format 'zip'"),
        (broken("missing.npz", **{"q.w_out": None}), "missing key 'q.w_out'"),
        (broken("range.npz", **{"q.w_in": data["q.w_in"] * 1000}), "w_in has values outside"),
        (broken("config.npz", config=np.array("{not json")), "bad config"),
        (broken("field.npz", config=np.array('{"rows": "four"}')), "bad config"),
        (broken("float.npz", **{"q.w_in": data["q.w_in"] + 0.5}), "q.w_in must hold integers"),
        (broken("scale.npz", **{"q.s_y": np.float64(np.nan)}), "scale q.s_y must be positive"),
        (broken("heads.npz", num_heads=np.int64(4)), "does not match the quantized one"),
    ]
    for path, message in cases:
        with pytest.raises(InputError, match=re.escape(message)):
            load_quantized(path)
    # through the command line: one line, exit 2, no output file
    assert main(["run", "--model", str(cases[0][0]), "--input", str(tmp_path / "input.npz"),
                 "--output", str(tmp_path / "out.npz")]) == 2
    assert "this version reads" in capsys.readouterr().err
    assert not (tmp_path / "out.npz").exists()


def test_import_config():
    from bench.accuracy import random_layer
    mha = random_layer(np.random.default_rng(0), 16, 2)
    xs = [np.zeros((5, 16)), np.zeros((7, 16))]
    fitted = import_config(mha, xs)
    assert (fitted.name, fitted.max_seq_len, fitted.max_d_model) == ("fitted", 7, 16)
    assert import_config(mha, xs, "default") == preset("default")
    wide = random_layer(np.random.default_rng(0), 32, 2)
    with pytest.raises(ValueError, match="model width D = 32 is outside 1..16 of config"):
        import_config(wide, [np.zeros((5, 32))], "tiny")
