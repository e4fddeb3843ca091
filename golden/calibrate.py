"""Calibration: from float weights and a sample input to every integer constant of the layer.

Scales are symmetric and set by the largest magnitude seen (docs/numerics.md, "Calibration"):
per output channel for weights, per head for Q, K and V, per tensor for X, the concatenated
head outputs and Y. Biases are stored at scale ``s_x * s_w[c]``. Every real requantization
factor becomes an integer multiplier and shift (:func:`golden.quant.quantize_multiplier`).
"""

from __future__ import annotations

import numpy as np

from .model import QuantizedMHA
from .quant import quantize, quantize_multiplier, symmetric_scale
from .reference import FloatMHA, mha_float
from .softmax import log_base_factor

__all__ = ["calibrate", "calibrate_ranges", "measure_ranges", "merge_ranges",
           "quantize_input", "dequantize_output"]


def _multipliers(reals, cfg):
    max_shift = (1 << cfg.shift_bits) - 1
    pairs = [quantize_multiplier(float(r), cfg.mult_bits, max_shift) for r in np.ravel(reals)]
    mult, shift = zip(*pairs, strict=False) if pairs else ((), ())
    return np.array(mult, dtype=np.int64), np.array(shift, dtype=np.int64)


def _per_head_max(t, h):
    seq_len, d_model = t.shape
    return np.abs(t.reshape(seq_len, h, d_model // h)).max(axis=(0, 2))


def measure_ranges(mha: FloatMHA, x, mask=None) -> dict:
    """The largest magnitudes calibration needs, measured on one sample ``x`` (``L x D``):
    ``x`` (scalar), ``q``, ``k``, ``v`` (per head, ``(H,)``), ``heads`` and ``y`` (scalars),
    from the float64 reference with ``mask``.

    Ranges of several samples combine by element-wise maximum (:func:`merge_ranges`), so
    calibrating on many sequences never needs them in one attention matrix.

    Raises
    ------
    ValueError
        If ``x`` does not match the layer or holds NaN/infinity.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != mha.d_model:
        raise ValueError(f"x must have shape (L, {mha.d_model}), not {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("x contains NaN or infinity")
    h = int(mha.num_heads)
    ref = mha_float(x, mha, mask)
    return dict(x=float(np.abs(x).max(initial=0)),
                **{n: _per_head_max(ref[n], h) for n in "qkv"},
                heads=float(np.abs(ref["heads"]).max(initial=0)),
                y=float(np.abs(ref["y"]).max(initial=0)))


def merge_ranges(ranges) -> dict:
    """Element-wise maximum of several :func:`measure_ranges` results (a non-empty list)."""
    ranges = list(ranges)
    if not ranges:
        raise ValueError("no calibration samples")
    return {key: np.maximum.reduce([r[key] for r in ranges]) if np.ndim(ranges[0][key])
            else max(float(r[key]) for r in ranges) for key in ranges[0]}


def calibrate(cfg, mha: FloatMHA, x_sample, mask=None) -> QuantizedMHA:
    """Quantize ``mha`` for ``cfg`` with activation ranges measured on ``x_sample`` (``L x D``).

    Raises
    ------
    ValueError
        If ``x_sample`` does not match the layer or holds NaN/infinity, or a requantization
        factor does not fit ``cfg.mult_bits``.
    """
    return calibrate_ranges(cfg, mha, measure_ranges(mha, x_sample, mask))


def calibrate_ranges(cfg, mha: FloatMHA, ranges: dict) -> QuantizedMHA:
    """Quantize ``mha`` for ``cfg`` with the activation ranges ``ranges``
    (:func:`measure_ranges`, or :func:`merge_ranges` of several samples).

    Raises
    ------
    ValueError
        If a requantization factor does not fit ``cfg.mult_bits``.
    """
    d, h = mha.d_model, int(mha.num_heads)

    s_x = float(symmetric_scale(ranges["x"], cfg.x_bits))
    w_in = np.asarray(mha.in_proj_weight, dtype=np.float64)
    s_w_in = symmetric_scale(np.abs(w_in).max(axis=1), cfg.w_bits)
    w_in_q = quantize(w_in, s_w_in[:, None], cfg.w_bits)
    b_in_q = quantize(mha.in_proj_bias, s_x * s_w_in, cfg.bias_bits)

    s_q, s_k, s_v = (symmetric_scale(np.asarray(ranges[n], dtype=np.float64), cfg.qkv_bits)
                     for n in "qkv")
    s_qkv_col = np.repeat(np.concatenate([s_q, s_k, s_v]), d // h)
    in_mult, in_shift = _multipliers(s_x * s_w_in / s_qkv_col, cfg)

    head_dim = d // h
    score_real = (s_q * s_k / np.sqrt(head_dim) * log_base_factor(cfg)
                  * (1 << cfg.score_frac_bits))
    score_mult, score_shift = _multipliers(score_real, cfg)

    s_o = float(symmetric_scale(ranges["heads"], cfg.head_bits))
    pv_mult, pv_shift = _multipliers(s_v / (cfg.prob_one * s_o), cfg)

    w_out = np.asarray(mha.out_proj_weight, dtype=np.float64)
    s_w_out = symmetric_scale(np.abs(w_out).max(axis=1), cfg.w_bits)
    w_out_q = quantize(w_out, s_w_out[:, None], cfg.w_bits)
    b_out_q = quantize(mha.out_proj_bias, s_o * s_w_out, cfg.bias_bits)
    s_y = float(symmetric_scale(ranges["y"], cfg.y_bits))
    out_mult, out_shift = _multipliers(s_o * s_w_out / s_y, cfg)

    return QuantizedMHA(
        num_heads=h, w_in=w_in_q, b_in=b_in_q, in_mult=in_mult, in_shift=in_shift,
        score_mult=score_mult, score_shift=score_shift, pv_mult=pv_mult, pv_shift=pv_shift,
        w_out=w_out_q, b_out=b_out_q, out_mult=out_mult, out_shift=out_shift,
        s_x=s_x, s_w_in=s_w_in, s_q=s_q, s_k=s_k, s_v=s_v, s_o=s_o, s_w_out=s_w_out, s_y=s_y)


def quantize_input(x, model: QuantizedMHA, cfg) -> np.ndarray:
    """Float input to the integer input of ``model`` (scale ``s_x``, saturating)."""
    return quantize(x, model.s_x, cfg.x_bits)


def dequantize_output(y_int, model: QuantizedMHA) -> np.ndarray:
    """Integer output to float: ``y_int * s_y``."""
    return np.asarray(y_int, dtype=np.float64) * model.s_y
