"""``attn import``: a PyTorch ``nn.MultiheadAttention`` state dict plus calibration inputs to a
quantized model file, with an accuracy report of the accelerator against float.

Calibration inputs (``.npz``): ``x`` of shape ``(N, L, D)`` (N sequences) or ``(L, D)``. The
activation ranges are measured over all N sequences at once (a block-diagonal mask keeps each
sequence attending to itself only).

The quantized model file (``.npz``, :data:`FORMAT` in ``format``) holds the configuration it
was made for (``config``, JSON), every integer constant and scale of
:class:`golden.QuantizedMHA` (``q.<field>``) and the float weights with PyTorch's key names (for
accuracy figures). ``attn run --model`` accepts it and then does not calibrate again.

The report compares the backend's output with the float layer — PyTorch's own
``nn.MultiheadAttention`` forward when torch is installed, else golden's float64 reference —
on every calibration sequence: relative (Frobenius) error, max absolute error, and the error of
the probabilities in LSBs of ``prob_bits``; ``accuracy.json``, ``accuracy.md`` and
``accuracy.png`` (histograms).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from golden import FloatMHA, QuantizedMHA, attention_int, calibrate, quantize_input

from .config import AttnConfig
from .modelio import MODEL_KEYS, InputError, _open_npz, save_npz_atomic

__all__ = ["FORMAT", "load_calibration", "quantize_model", "save_quantized", "load_quantized",
           "is_quantized", "float_reference", "accuracy", "write_accuracy_report"]

FORMAT = "attn-quantized-1"


def load_calibration(path, d_model: int) -> list:
    """The calibration sequences of ``path`` (a list of ``L x D`` float arrays)."""
    data = _open_npz(Path(path), "calibration")
    if "x" not in data:
        raise InputError(f"calibration file {path} has no 'x' (N x L x D or L x D)")
    x = np.asarray(data["x"])
    if x.dtype.kind not in "fiu":
        raise InputError(f"calibration file {path}: x must be numeric, not {x.dtype}")
    if x.ndim == 2:
        x = x[None]
    if x.ndim != 3 or x.shape[2] != d_model or x.shape[0] == 0 or x.shape[1] == 0:
        raise InputError(f"calibration file {path}: x must have shape (N, L, {d_model}) or "
                         f"(L, {d_model}), not {np.asarray(data['x']).shape}")
    if not np.all(np.isfinite(x)):
        raise InputError(f"calibration file {path}: x contains NaN or infinity")
    return [s.astype(np.float64) for s in x]


def quantize_model(cfg, mha: FloatMHA, xs) -> QuantizedMHA:
    """Calibrate ``mha`` for ``cfg`` on the sequences ``xs`` (each attending to itself)."""
    x = np.concatenate(xs)
    owner = np.concatenate([np.full(len(s), i) for i, s in enumerate(xs)])
    return calibrate(cfg, mha, x, owner[:, None] != owner[None, :])


def save_quantized(path, model: QuantizedMHA, cfg, mha: FloatMHA) -> None:
    """Write a quantized model file (see the module docstring)."""
    arrays = {"format": np.array(FORMAT), "config": np.array(json.dumps(cfg.to_dict())),
              "num_heads": np.int64(mha.num_heads),
              "in_proj_weight": mha.in_proj_weight, "in_proj_bias": mha.in_proj_bias,
              "out_proj.weight": mha.out_proj_weight, "out_proj.bias": mha.out_proj_bias}
    for f in dataclasses.fields(QuantizedMHA):
        arrays[f"q.{f.name}"] = np.asarray(getattr(model, f.name))
    save_npz_atomic(path, **arrays)


def is_quantized(path) -> bool:
    """Whether ``path`` is a quantized model file (an ``.npz`` with ``format``)."""
    path = Path(path)
    if path.suffix != ".npz" or not path.exists():
        return False
    try:
        with np.load(path, allow_pickle=False) as data:
            return "format" in data.files
    except (OSError, ValueError):
        return False


def load_quantized(path):
    """``(QuantizedMHA, AttnConfig, FloatMHA)`` from a quantized model file; every problem
    raises :class:`InputError` naming the file."""
    data = _open_npz(Path(path), "model")
    fmt = str(data.get("format", ""))
    if fmt != FORMAT:
        raise InputError(f"model file {path} has format {fmt!r}; this version reads {FORMAT!r}")
    try:
        cfg = AttnConfig.from_dict(json.loads(str(data["config"])))
        fields = {}
        for f in dataclasses.fields(QuantizedMHA):
            value = data[f"q.{f.name}"]
            fields[f.name] = value.item() if value.shape == () else value
        fields["num_heads"] = int(fields["num_heads"])
        model = QuantizedMHA(**fields)
        model.check(cfg)
        mha = FloatMHA(*(np.asarray(data[k], dtype=np.float64) for k in MODEL_KEYS),
                       num_heads=int(data["num_heads"]))
    except KeyError as exc:
        raise InputError(f"model file {path} is missing {exc}") from None
    except (ValueError, TypeError) as exc:
        raise InputError(f"model file {path}: {exc}") from None
    return model, cfg, mha


def float_reference(mha: FloatMHA, x) -> tuple:
    """Float output and per-head probabilities of the layer on ``x`` (``L x D``), and which
    implementation computed them."""
    try:
        import torch
    except ImportError:
        from golden import mha_float
        ref = mha_float(x, mha)
        return ref["y"], ref["probs"], "golden float64 reference"
    d, h = mha.d_model, int(mha.num_heads)
    layer = torch.nn.MultiheadAttention(d, h, dtype=torch.float64)
    with torch.no_grad():
        layer.in_proj_weight.copy_(torch.from_numpy(mha.in_proj_weight))
        layer.in_proj_bias.copy_(torch.from_numpy(mha.in_proj_bias))
        layer.out_proj.weight.copy_(torch.from_numpy(mha.out_proj_weight))
        layer.out_proj.bias.copy_(torch.from_numpy(mha.out_proj_bias))
        t = torch.from_numpy(np.asarray(x, dtype=np.float64))[:, None, :]   # (L, batch, D)
        y, attn = layer(t, t, t, need_weights=True, average_attn_weights=False)
    return y[:, 0].numpy(), attn[0].numpy(), f"PyTorch {torch.__version__} nn.MultiheadAttention"


def accuracy(cfg, model: QuantizedMHA, mha: FloatMHA, xs, backend: str = "golden",
             progress=None) -> dict:
    """Run every sequence of ``xs`` on ``backend`` and compare with the float layer."""
    from golden import dequantize_output

    from .backends import run_backend

    rel, max_abs, prob_err, out_err, exact = [], [], [], [], True
    source = None
    for n, x in enumerate(xs):
        x_int = quantize_input(x, model, cfg)
        result = run_backend(backend, cfg, model, x_int, None, progress=progress)
        golden = attention_int(cfg, model, x_int, None)
        exact &= bool(np.array_equal(result.y_int, golden.y))
        y = dequantize_output(result.y_int, model)
        y_ref, p_ref, source = float_reference(mha, x)
        err = y - y_ref
        rel.append(float(np.linalg.norm(err) / max(np.linalg.norm(y_ref), 1e-30)))
        max_abs.append(float(np.abs(err).max()))
        out_err.append(err.ravel())
        prob_err.append((golden.probs - p_ref * cfg.prob_one).ravel())
        if progress is not None:
            progress(f"sequence {n + 1}/{len(xs)}: relative error {rel[-1]:.3%}")
    prob_err = np.concatenate(prob_err)
    return {
        "backend": backend, "reference": source, "sequences": len(xs),
        "exact_vs_golden": exact, "config": cfg.to_dict(),
        "rel_error": float(np.mean(rel)), "rel_error_max": float(np.max(rel)),
        "max_abs_error": float(np.max(max_abs)),
        "prob_lsb_error_max": float(np.abs(prob_err).max()),
        "prob_lsb_error_mean": float(np.abs(prob_err).mean()),
        "_out_err": np.concatenate(out_err), "_prob_err": prob_err,
    }


def write_accuracy_report(stats, out_dir) -> dict:
    """``accuracy.json``, ``accuracy.md`` and ``accuracy.png`` in ``out_dir``; returns paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {k: out / f"accuracy.{k}" for k in ("json", "md", "png")}
    public = {k: v for k, v in stats.items() if not k.startswith("_")}
    paths["json"].write_text(json.dumps(public, indent=2) + "\n")
    cfg = stats["config"]
    paths["md"].write_text("\n".join([
        "# Accuracy of the accelerator against float", "",
        f"Backend `{stats['backend']}` (configuration `{cfg['name']}`) against "
        f"{stats['reference']}, over {stats['sequences']} calibration sequence(s); the "
        f"backend's integers {'equal' if stats['exact_vs_golden'] else 'DIFFER FROM'} "
        f"golden/'s.", "",
        "| figure | value |", "|---|---|",
        f"| relative error of the output (mean / max) | {stats['rel_error']:.3%} / "
        f"{stats['rel_error_max']:.3%} |",
        f"| max absolute error of the output | {stats['max_abs_error']:.4g} |",
        f"| probability error, LSB of {cfg['prob_bits']} bits (max / mean) | "
        f"{stats['prob_lsb_error_max']:.2f} / {stats['prob_lsb_error_mean']:.3f} |",
        "", "Histograms: accuracy.png", ""]))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    a.hist(stats["_out_err"], bins=60, color="tab:blue")
    a.set_title("output error (dequantized - float)", fontsize=9)
    a.set_xlabel("error")
    b.hist(stats["_prob_err"], bins=60, color="tab:orange")
    b.set_title(f"probability error, LSB of {cfg['prob_bits']} bits", fontsize=9)
    b.set_xlabel("LSB")
    for ax in (a, b):
        ax.set_ylabel("count")
        ax.grid(alpha=0.3)
    fig.suptitle(f"{stats['backend']} vs {stats['reference']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(paths["png"], dpi=110)
    plt.close(fig)
    return paths
