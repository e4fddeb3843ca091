"""The attn command line: run on the golden backend, and clear errors for bad input."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attn import PRESETS, preset
from attn.cli import main
from golden import attention_int, calibrate, make_mask, quantize_input
from tests.golden.test_model import random_layer

REPO = Path(__file__).resolve().parent.parent


def write_model(path, d_model=16, heads=2, seed=0, **override):
    mha = random_layer(d_model, heads, seed)
    data = {"in_proj_weight": mha.in_proj_weight, "in_proj_bias": mha.in_proj_bias,
            "out_proj.weight": mha.out_proj_weight, "out_proj.bias": mha.out_proj_bias,
            "num_heads": np.int64(heads)}
    data.update(override)
    np.savez(path, **{k: v for k, v in data.items() if v is not None})
    return mha


def write_input(path, seq_len=6, d_model=16, seed=1, **extra):
    x = np.random.default_rng(seed).normal(0, 1, (seq_len, d_model)).astype(np.float32)
    np.savez(path, x=x, **extra)
    return x


def run(tmp_path, *extra, model="m.npz", inp="i.npz", out="o.npz"):
    return main(["run", "--model", str(tmp_path / model), "--input", str(tmp_path / inp),
                 "--output", str(tmp_path / out), *extra])


def test_run_writes_the_contracted_outputs(tmp_path, capsys):
    mha = write_model(tmp_path / "m.npz")
    x = write_input(tmp_path / "i.npz", causal=np.bool_(True))
    assert run(tmp_path, "--preset", "tiny") == 0
    assert "relative error vs float64" in capsys.readouterr().out
    with np.load(tmp_path / "o.npz") as out:
        assert out["y"].shape == (6, 16) and out["y"].dtype == np.float32
        assert out["attn"].shape == (2, 6, 6)
        cfg = preset("tiny")
        mask = make_mask(6, causal=True)
        qm = calibrate(cfg, mha, x.astype(np.float64), mask)
        expected = attention_int(cfg, qm, quantize_input(x, qm, cfg), mask)
        assert np.array_equal(out["y_int"], expected.y)
        assert np.allclose(out["attn"], expected.probs / cfg.prob_one)
        assert np.all(out["attn"][:, 0, 1:] == 0)   # causal
        assert "cycles" not in out.files


def test_amaranth_backend_equals_golden(tmp_path, capsys):
    write_model(tmp_path / "m.npz", d_model=8, heads=2)
    write_input(tmp_path / "i.npz", seq_len=5, d_model=8, causal=np.bool_(True))
    assert run(tmp_path, "--preset", "tiny", "--quiet", out="golden.npz") == 0
    assert run(tmp_path, "--preset", "tiny", "--backend", "amaranth", out="hw.npz") == 0
    assert "cycles" in capsys.readouterr().out
    with np.load(tmp_path / "golden.npz") as g, np.load(tmp_path / "hw.npz") as h:
        assert np.array_equal(g["y_int"], h["y_int"])
        assert int(h["cycles"]) > 0


def test_cosim_backend_equals_golden(tmp_path, capsys):
    """The whole device, UART included, through the host driver."""
    write_model(tmp_path / "m.npz", d_model=8, heads=2)
    write_input(tmp_path / "i.npz", seq_len=3, d_model=8, key_padding_mask=np.array(
        [False, False, True]))
    assert run(tmp_path, "--preset", "tiny", "--quiet", out="golden.npz") == 0
    assert run(tmp_path, "--preset", "tiny", "--backend", "cosim", out="hw.npz") == 0
    captured = capsys.readouterr()
    assert "writing" in captured.err and "cycles" in captured.out
    with np.load(tmp_path / "golden.npz") as g, np.load(tmp_path / "hw.npz") as h:
        assert np.array_equal(g["y_int"], h["y_int"])


def test_board_backend_needs_a_port(tmp_path, capsys):
    write_model(tmp_path / "m.npz", d_model=8, heads=2)
    write_input(tmp_path / "i.npz", seq_len=3, d_model=8)
    assert run(tmp_path, "--backend", "board") == 2
    assert "--port" in capsys.readouterr().err
    assert run(tmp_path, "--backend", "board", "--port", str(tmp_path / "ttyNONE")) == 1
    assert "cannot open serial port" in capsys.readouterr().err
    assert not (tmp_path / "o.npz").exists()


def test_hardware_backends_refuse_other_masks(tmp_path, capsys):
    write_model(tmp_path / "m.npz", d_model=8, heads=2)
    mask = np.zeros((4, 4), bool)
    mask[2, 1] = True
    write_input(tmp_path / "i.npz", seq_len=4, d_model=8, mask=mask)
    assert run(tmp_path, "--preset", "tiny", "--backend", "amaranth") == 2
    assert "causal and key-padding masks only" in capsys.readouterr().err


def test_verilog_command(tmp_path, capsys):
    assert main(["verilog", "--preset", "tiny", "--set", "max_seq_len=4", "-o",
                 str(tmp_path / "core.v")]) == 0
    text = (tmp_path / "core.v").read_text()
    assert "module attention_core" in text and "o_stream__payload" in text
    assert main(["verilog", "--set", "cols=3", "-o", str(tmp_path / "bad.v")]) == 2
    assert "cols must be a power of two" in capsys.readouterr().err
    assert main(["verilog", "--set", "rows", "-o", str(tmp_path / "bad.v")]) == 2
    assert "--set takes FIELD=VALUE" in capsys.readouterr().err
    assert not (tmp_path / "bad.v").exists()


def test_run_derives_a_config_for_large_models(tmp_path):
    write_model(tmp_path / "m.npz", d_model=384, heads=12)
    write_input(tmp_path / "i.npz", seq_len=6, d_model=384)
    assert run(tmp_path) == 0
    with np.load(tmp_path / "o.npz") as out:
        assert out["y"].shape == (6, 384) and out["attn"].shape == (12, 6, 6)


@pytest.mark.parametrize("setup,message", [
    (lambda p: write_model(p / "m.npz", **{"out_proj.bias": None}),
     "is missing key(s) out_proj.bias"),
    (lambda p: write_model(p / "m.npz", in_proj_bias=np.zeros(5)),
     "in_proj_bias must have shape (48,) for D = 16, not (5,)"),
    (lambda p: write_model(p / "m.npz", num_heads=np.int64(3)),
     "D = 16 is not divisible by num_heads = 3"),
    (lambda p: write_model(p / "m.npz", num_heads=None), "has no num_heads; pass --heads"),
    (lambda p: (p / "m.npz").write_text("not a zip"), "is not a readable .npz file"),
])
def test_bad_models_are_named(tmp_path, capsys, setup, message):
    setup(tmp_path)
    write_input(tmp_path / "i.npz")
    assert run(tmp_path) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "o.npz").exists()


@pytest.mark.parametrize("extra,message", [
    (dict(x=np.zeros((4, 15))), "x must have shape (L, 16) with L >= 1, not (4, 15)"),
    (dict(x=np.array([[np.nan] * 16])), "x contains NaN or infinity (first at (0, 0))"),
    (dict(x=np.zeros((9, 16))), "sequence length L = 9 is outside 1..8 of config 'tiny'"),
    (dict(x=np.zeros((4, 16)), mask=np.zeros((4, 3), bool)), "mask must be a boolean (4, 4)"),
    (dict(x=np.zeros((4, 16)), key_padding_mask=np.full(4, 0.5)),
     "key_padding_mask must be a boolean (4,)"),
    (dict(y=np.zeros((4, 16))), "has no key 'x'"),
])
def test_bad_inputs_are_named(tmp_path, capsys, extra, message):
    write_model(tmp_path / "m.npz")
    np.savez(tmp_path / "i.npz", **extra)
    assert run(tmp_path, "--preset", "tiny") == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o.npz").exists()
    assert {p.name for p in tmp_path.iterdir()} == {"m.npz", "i.npz"}


def test_bad_output_paths(tmp_path, capsys):
    write_model(tmp_path / "m.npz")
    write_input(tmp_path / "i.npz")
    assert run(tmp_path, out="missing/o.npz") == 2
    assert "output folder" in capsys.readouterr().err
    assert run(tmp_path, out="o.txt") == 2
    assert "must end in .npz" in capsys.readouterr().err
    assert run(tmp_path, inp="nope.npz") == 2
    err = capsys.readouterr().err
    assert "input file" in err and "does not exist" in err


def test_bad_arguments_exit_nonzero(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["run", "--model", "m.npz"])
    assert info.value.code == 2
    with pytest.raises(SystemExit):
        main(["run", "--model", "m", "--input", "i", "--output", "o", "--preset", "huge"])
    assert "invalid choice: 'huge'" in capsys.readouterr().err


def test_pt_state_dict_is_accepted(tmp_path):
    torch = pytest.importorskip("torch")
    layer = torch.nn.MultiheadAttention(16, 4)
    torch.save(layer.state_dict(), tmp_path / "m.pt")
    write_input(tmp_path / "i.npz")
    assert run(tmp_path, "--heads", "4", model="m.pt") == 0
    with np.load(tmp_path / "o.npz") as out:
        assert out["attn"].shape == (4, 6, 6)


def test_console_script_on_the_bundled_example(tmp_path):
    out = tmp_path / "out.npz"
    proc = subprocess.run([sys.executable, "-m", "attn.cli", "run", "--model",
                           str(REPO / "examples/model.npz"), "--input",
                           str(REPO / "examples/input.npz"), "--output", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as data:
        assert data["y"].shape == (16, 64)


def test_presets_command(capsys):
    assert main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:]] == list(PRESETS)
    # a table: every column lines up, however long a preset's name
    assert len({len(line) for line in lines}) == 1, lines
    assert lines[1 + list(PRESETS).index("ulx3s_8x4")].split()[5] == "2"   # softmax units
