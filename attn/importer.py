"""``attn import``: a PyTorch ``nn.MultiheadAttention`` state dict plus calibration inputs to a
quantized model file, with an accuracy report of the accelerator against float.

CALIBRATION files (``.npz``) hold ``x`` of shape ``(N, L, D)`` (N sequences of length L) or
``(L, D)`` (one sequence), finite numbers. Activation ranges are measured on each sequence
alone (it attends to itself only) and combined by maximum
(:func:`golden.calibrate.merge_ranges`). ``holdout`` sequences at the end of ``x`` can be kept
out of the calibration and used only for the accuracy figures; by default the figures are
measured on the calibration sequences.

QUANTIZED MODEL files (``.npz``) hold ``format`` = :data:`FORMAT` (the marker and version that
``attn run`` looks for), ``config`` (the :class:`attn.AttnConfig` they were made for, JSON),
every field of :class:`golden.QuantizedMHA` as ``q.<field>`` (integer constants and the float
scales), and the float layer with PyTorch's key names (``in_proj_weight``, ``in_proj_bias``,
``out_proj.weight``, ``out_proj.bias``, ``num_heads``) for accuracy figures. ``attn run
--model`` runs them as they are, without calibrating again.

ACCURACY is measured against the float layer — PyTorch's own ``nn.MultiheadAttention`` forward
(float64) when torch is installed, else golden's float64 reference; the figures name which —
with the definitions of ``docs/numerics.md`` and ``bench/accuracy.py``: relative error is the
Frobenius norm of (dequantized output − float output) over that of the float output, per
sequence (mean and max over sequences); max absolute error of the dequantized output; the
probability error ``|probs − prob_one·p_float|`` in LSBs of ``prob_bits`` (max and mean over
every element). The probabilities are golden/'s on every backend: the core keeps its own on
chip (the simulation tests check them against golden/). A hardware backend's output integers
are compared with golden/'s on every sequence.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from golden import (
    FloatMHA,
    QuantizedMHA,
    attention_int,
    dequantize_output,
    mha_float,
    quantize_input,
)
from golden.calibrate import calibrate_ranges, measure_ranges, merge_ranges
from golden.quant import qmax

from .config import AttnConfig, preset
from .modelio import MODEL_KEYS, InputError, _open_npz, save_npz_atomic

__all__ = ["FORMAT", "load_calibration", "check_outputs", "import_config", "quantize_model",
           "save_quantized", "load_quantized", "is_quantized", "float_reference", "accuracy",
           "format_table", "write_accuracy_report", "ACCURACY_BOUNDS", "within_bounds"]

FORMAT = "attn-quantized-1"

#: docs/numerics.md, "Imported layers": at the default widths an imported layer is within these
#: bounds (strictly) of PyTorch's float output on the sequences it was calibrated on. Keys are
#: those of :func:`accuracy`'s result: relative error of the output (every sequence),
#: probability error in LSB of ``prob_bits`` (every element) and its mean.
ACCURACY_BOUNDS = {"rel_error_max": 0.03, "prob_lsb_error_max": 32, "prob_lsb_error_mean": 4}


def within_bounds(stats: dict) -> bool:
    """Whether the figures ``stats`` (keys of :data:`ACCURACY_BOUNDS`) are within the bounds."""
    return all(stats[key] < bound for key, bound in ACCURACY_BOUNDS.items())
_FORMAT_PREFIX = "attn-quantized-"
_INT_FIELDS = ("w_in", "b_in", "in_mult", "in_shift", "score_mult", "score_shift", "pv_mult",
               "pv_shift", "w_out", "b_out", "out_mult", "out_shift")


# -- inputs ---------------------------------------------------------------------------------

def load_calibration(path, d_model: int) -> list:
    """The calibration sequences of ``path``: a list of N float64 ``(L, D)`` arrays.

    Raises :class:`InputError` naming the file and the problem (no ``x``, not numeric, wrong
    shape, NaN or infinity)."""
    data = _open_npz(Path(path), "calibration")
    if "x" not in data:
        raise InputError(f"calibration file {path} has no key 'x' (N x L x D or L x D array)")
    raw = np.asarray(data["x"])
    if raw.dtype.kind not in "fiu":
        raise InputError(f"calibration file {path}: x must be numeric, not {raw.dtype}")
    x = raw[None] if raw.ndim == 2 else raw
    if x.ndim != 3 or x.shape[2] != d_model or 0 in x.shape:
        raise InputError(f"calibration file {path}: x must have shape (N, L, {d_model}) or "
                         f"(L, {d_model}) with N, L >= 1 (D of the model), not {raw.shape}")
    x = x.astype(np.float64)
    if not np.all(np.isfinite(x)):
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(raw))[0])
        raise InputError(f"calibration file {path}: x contains NaN or infinity (first at "
                         f"{bad})")
    return list(x)


def check_outputs(output, report_dir) -> None:
    """Raise :class:`InputError` before any work if the quantized model file or the report
    folder cannot be written where asked (so a failed import leaves nothing behind)."""
    output, report_dir = Path(output), Path(report_dir)
    if output.suffix != ".npz":
        raise InputError(f"output file {output} must end in .npz")
    if not output.parent.is_dir():
        raise InputError(f"output folder {output.parent} does not exist")
    if report_dir.exists() and not report_dir.is_dir():
        raise InputError(f"report folder {report_dir} exists and is not a folder")
    parent = next((p for p in report_dir.absolute().parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise InputError(f"report folder {report_dir}: {parent} is not a folder")


def import_config(mha: FloatMHA, xs, preset_name: str | None = None) -> AttnConfig:
    """The configuration to quantize for: ``preset_name`` (checked against the layer and the
    longest sequence), or with ``None`` the ``default`` preset fitted to them."""
    longest, d, h = max(len(x) for x in xs), mha.d_model, int(mha.num_heads)
    if preset_name is None:
        return preset("default").fitted(longest, d, h)
    cfg = preset(preset_name)
    cfg.check_shape(longest, d, h)
    return cfg


def quantize_model(cfg, mha: FloatMHA, xs) -> QuantizedMHA:
    """Calibrate ``mha`` for ``cfg`` on the sequences ``xs`` (ranges per sequence, combined by
    maximum)."""
    return calibrate_ranges(cfg, mha, merge_ranges(measure_ranges(mha, x) for x in xs))


# -- the quantized model file ---------------------------------------------------------------

def save_quantized(path, model: QuantizedMHA, cfg, mha: FloatMHA) -> None:
    """Write a quantized model file (see the module docstring); atomic: a failure leaves no
    file."""
    arrays = {"format": np.array(FORMAT), "config": np.array(json.dumps(cfg.to_dict())),
              "num_heads": np.int64(mha.num_heads),
              "in_proj_weight": mha.in_proj_weight, "in_proj_bias": mha.in_proj_bias,
              "out_proj.weight": mha.out_proj_weight, "out_proj.bias": mha.out_proj_bias}
    for f in dataclasses.fields(QuantizedMHA):
        arrays[f"q.{f.name}"] = np.asarray(getattr(model, f.name))
    save_npz_atomic(path, **arrays)


def is_quantized(path) -> bool:
    """Whether ``path`` is meant as a quantized model file: an ``.npz`` with a ``format`` key.
    (Its version and contents are checked by :func:`load_quantized`.)"""
    path = Path(path)
    if path.suffix != ".npz" or not path.is_file():
        return False
    try:
        with np.load(path, allow_pickle=False) as data:
            return "format" in data.files
    except (OSError, ValueError, EOFError):
        return False


def load_quantized(path):
    """``(QuantizedMHA, AttnConfig, FloatMHA)`` from a quantized model file.

    Raises :class:`InputError` naming the file and the problem: wrong or unknown format
    version, missing key, unreadable configuration, constants that do not fit the
    configuration, a float layer that does not match them."""
    data = _open_npz(Path(path), "model")
    fmt = np.asarray(data.get("format", ""))
    fmt = str(fmt) if fmt.shape == () and fmt.dtype.kind == "U" else repr(fmt)
    if fmt != FORMAT:
        hint = (" (written by another version of attn)" if fmt.startswith(_FORMAT_PREFIX)
                else "")
        raise InputError(f"model file {path} has format {fmt!r}{hint}; this version reads "
                         f"{FORMAT!r}")
    try:
        try:
            cfg = AttnConfig.from_dict(json.loads(str(data["config"])))
        except (ValueError, TypeError) as exc:
            raise InputError(f"model file {path}: bad config ({exc})") from None
        fields = {}
        for f in dataclasses.fields(QuantizedMHA):
            value = np.asarray(data[f"q.{f.name}"])
            if value.dtype.kind not in "fiu":
                raise InputError(f"model file {path}: q.{f.name} must be numeric, not "
                                 f"{value.dtype}")
            if f.name in _INT_FIELDS or f.name == "num_heads":
                if value.dtype.kind == "f":
                    raise InputError(f"model file {path}: q.{f.name} must hold integers")
                value = value.astype(np.int64)
            else:
                value = value.astype(np.float64)
                if not np.all(np.isfinite(value)) or np.any(value <= 0):
                    raise InputError(f"model file {path}: scale q.{f.name} must be positive "
                                     f"and finite")
            fields[f.name] = value.item() if value.shape == () else value
        model = QuantizedMHA(**fields)
        model.check(cfg)
        cfg.check_shape(1, model.d_model, int(model.num_heads))
        mha = FloatMHA(*(np.asarray(data[k], dtype=np.float64) for k in MODEL_KEYS),
                       num_heads=int(np.asarray(data["num_heads"])))
    except KeyError as exc:
        raise InputError(f"model file {path} is missing key {exc}") from None
    except (ValueError, TypeError) as exc:
        raise InputError(f"model file {path}: {exc}") from None
    if (mha.d_model, int(mha.num_heads)) != (model.d_model, int(model.num_heads)):
        raise InputError(f"model file {path}: the float layer (D = {mha.d_model}, H = "
                         f"{mha.num_heads}) does not match the quantized one (D = "
                         f"{model.d_model}, H = {model.num_heads})")
    return model, cfg, mha


# -- accuracy -------------------------------------------------------------------------------

def float_reference(mha: FloatMHA, x, use_torch: bool | None = None) -> tuple:
    """``(y, probs, source)``: float output (``L x D``) and per-head probabilities
    (``H x L x L``) of the layer on ``x``, and which implementation computed them: PyTorch's
    ``nn.MultiheadAttention`` in float64 (if installed, or ``use_torch=True``), else
    golden's float64 reference (``use_torch=False`` forces it)."""
    torch = None
    if use_torch is not False:
        try:
            import torch
        except ImportError:
            if use_torch:
                raise
    if torch is None:
        ref = mha_float(x, mha)
        return ref["y"], ref["probs"], "golden/ float64 reference (PyTorch not installed)"
    d, h = mha.d_model, int(mha.num_heads)
    layer = torch.nn.MultiheadAttention(d, h, dtype=torch.float64)
    with torch.no_grad():
        layer.in_proj_weight.copy_(torch.from_numpy(mha.in_proj_weight))
        layer.in_proj_bias.copy_(torch.from_numpy(mha.in_proj_bias))
        layer.out_proj.weight.copy_(torch.from_numpy(mha.out_proj_weight))
        layer.out_proj.bias.copy_(torch.from_numpy(mha.out_proj_bias))
        t = torch.from_numpy(np.asarray(x, dtype=np.float64))[:, None, :]   # (L, batch, D)
        y, attn = layer(t, t, t, need_weights=True, average_attn_weights=False)
    return (y[:, 0].numpy(), attn[0].numpy(),
            f"PyTorch {torch.__version__} nn.MultiheadAttention (float64)")


def accuracy(cfg, model: QuantizedMHA, mha: FloatMHA, xs, backend: str = "golden",
             progress=None, use_torch: bool | None = None, measured_on: str = "calibration",
             **options) -> dict:
    """Run every sequence of ``xs`` on ``backend`` (``options`` go to
    :func:`attn.backends.run_backend`: ``port``, ``baud`` of a board) and compare with the
    float layer (:func:`float_reference`); also compare the backend's integers with golden/'s.

    Returns a JSON-ready dict (figures as defined in the module docstring, per-sequence
    figures, ``exact_vs_golden`` and the indices of differing sequences in ``mismatches``)
    plus the raw errors ``_out_err`` and ``_prob_err`` for the histograms."""
    from .backends import run_backend

    per_seq, prob_err, out_err, mismatches, source = [], [], [], [], None
    for n, x in enumerate(xs):
        x_int = quantize_input(x, model, cfg)
        golden = attention_int(cfg, model, x_int, None)
        y_int = golden.y if backend == "golden" else run_backend(
            backend, cfg, model, x_int, None, progress=progress, **options).y_int
        if not np.array_equal(y_int, golden.y):
            mismatches.append(n)
        y = dequantize_output(y_int, model)
        y_ref, p_ref, source = float_reference(mha, x, use_torch)
        err = y - y_ref
        p_err = golden.probs - p_ref * cfg.prob_one
        per_seq.append(dict(
            seq_len=len(x),
            rel_error=float(np.linalg.norm(err) / max(np.linalg.norm(y_ref), 1e-300)),
            max_abs_error=float(np.abs(err).max()),
            prob_lsb_error_max=float(np.abs(p_err).max()),
            out_of_range=_out_of_range(cfg, model, mha, x)))
        out_err.append(err.ravel())
        prob_err.append(p_err.ravel())
        if progress is not None:
            progress(f"sequence {n + 1}/{len(xs)}: relative error "
                     f"{per_seq[-1]['rel_error']:.3%}")
    prob_err = np.concatenate(prob_err)
    rel = [s["rel_error"] for s in per_seq]
    return {
        "backend": backend, "reference": source, "sequences": len(xs),
        "measured_on": measured_on, "exact_vs_golden": not mismatches, "mismatches": mismatches,
        "config": cfg.to_dict(),
        "rel_error": float(np.mean(rel)), "rel_error_max": float(np.max(rel)),
        "max_abs_error": float(max(s["max_abs_error"] for s in per_seq)),
        "prob_lsb_error_max": float(np.abs(prob_err).max()),
        "prob_lsb_error_mean": float(np.abs(prob_err).mean()),
        "per_sequence": per_seq,    # seq_len, the figures, out_of_range per stage
        "_out_err": np.concatenate(out_err), "_prob_err": prob_err,
    }


def _out_of_range(cfg, model: QuantizedMHA, mha: FloatMHA, x) -> dict:
    """How many values of each stage's float64 counterpart lie beyond the range the
    calibration gave that stage (they saturate); zero on the calibration sequences."""
    ref = mha_float(x, mha)
    h, d = int(model.num_heads), model.d_model

    def beyond(values, scale, bits):
        return int(np.sum(np.abs(values) / scale > qmax(bits) + 0.5))

    per_head = {n: np.repeat(getattr(model, f"s_{n}"), d // h) for n in "qkv"}
    return {"x": beyond(x, model.s_x, cfg.x_bits),
            **{n: beyond(ref[n], per_head[n], cfg.qkv_bits) for n in "qkv"},
            "heads": beyond(ref["heads"], model.s_o, cfg.head_bits),
            "y": beyond(ref["y"], model.s_y, cfg.y_bits)}


def format_table(stats) -> str:
    """The figures of :func:`accuracy` as a Markdown table."""
    bits = stats["config"]["prob_bits"]
    rows = [("relative error of the output, mean / max over sequences",
             f"{stats['rel_error']:.3%} / {stats['rel_error_max']:.3%}"),
            ("max absolute error of the output", f"{stats['max_abs_error']:.4g}"),
            (f"probability error, LSB of {bits} bits, max / mean",
             f"{stats['prob_lsb_error_max']:.2f} / {stats['prob_lsb_error_mean']:.3f}")]
    if stats["backend"] != "golden":
        rows.append((f"{stats['backend']} output equals golden/",
                     "yes, integer for integer" if stats["exact_vs_golden"] else
                     f"NO (sequence(s) {', '.join(map(str, stats['mismatches']))})"))
    beyond = {stage: sum(s["out_of_range"][stage] for s in stats["per_sequence"])
              for stage in stats["per_sequence"][0]["out_of_range"]}
    if any(beyond.values()):
        rows.append(("values beyond the calibrated ranges (saturated)",
                     ", ".join(f"{stage} {n:,}" for stage, n in beyond.items() if n)))
    width = max(len(r[0]) for r in rows)
    value_width = max(len(r[1]) for r in rows)
    lines = [f"| {'figure'.ljust(width)} | {'value'.ljust(value_width)} |",
             f"|{'-' * (width + 2)}|{'-' * (value_width + 2)}|"]
    lines += [f"| {a.ljust(width)} | {b.ljust(value_width)} |" for a, b in rows]
    return "\n".join(lines)


def write_accuracy_report(stats, out_dir) -> dict:
    """``accuracy.json``, ``accuracy.md`` and ``accuracy.png`` (histograms of the output and
    probability errors) in ``out_dir``; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {k: out / f"accuracy.{k}" for k in ("json", "md", "png")}
    public = {k: v for k, v in stats.items() if not k.startswith("_")}
    cfg = stats["config"]
    paths["md"].write_text("\n".join([
        "# Accuracy of the accelerator against float", "",
        f"Backend `{stats['backend']}`, configuration `{cfg['name']}`, against "
        f"{stats['reference']}, over {stats['sequences']} {stats['measured_on']} "
        f"sequence(s).", "", format_table(stats), "",
        "Relative error: Frobenius norm of (dequantized output − float output) over that of "
        "the float output, per sequence. Probability error: |probs − prob_one · p_float| for "
        "golden/'s integer probabilities (the core's equal them; it keeps them on chip).", "",
        "![histograms](accuracy.png)", ""]))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    a.hist(stats["_out_err"], bins=60, color="tab:blue")
    a.set_title("output error (dequantized − float)", fontsize=9)
    a.set_xlabel("error")
    b.hist(stats["_prob_err"], bins=60, color="tab:orange")
    b.set_title(f"probability error, LSB of {cfg['prob_bits']} bits", fontsize=9)
    b.set_xlabel("LSB")
    for ax in (a, b):
        ax.set_ylabel("count")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    fig.suptitle(f"{stats['backend']} ({cfg['name']}) vs {stats['reference']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(paths["png"], dpi=110)
    plt.close(fig)
    paths["json"].write_text(json.dumps(public, indent=2) + "\n")
    return paths
