"""Integer softmax: row maximum, differences, exponent table, row sum and division.

The contract (docs/numerics.md, section "Softmax"), for one row of scores ``t`` with mask ``m``
(``True`` = masked) and configuration ``cfg``:

1. ``mx = max(t[~m])`` (0 for a fully masked row);
2. ``diff = mx - t``, a non-negative ``score_bits``-bit integer for every unmasked element;
3. ``e = exp_lookup(diff)`` (:func:`exp_lookup`), and ``e = 0`` where masked;
4. ``s = sum(e)``, ``sum_bits`` wide;
5. ``p = (e * (2**prob_bits - 1) + s // 2) // s``, or 0 where ``s == 0``.

``p`` stands for ``p / (2**prob_bits - 1)``; a row's probabilities sum to
``2**prob_bits - 1`` within ``ceil(n / 2)`` where ``n`` is the number of unmasked elements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["exp_table", "exp_lookup", "softmax_int", "SoftmaxTrace", "log_base_factor"]


def log_base_factor(cfg) -> float:
    """Factor from a natural-log score to the score unit: ``log2(e)`` in exp2 mode, else 1."""
    return 1.0 / math.log(2.0) if cfg.exp_mode == "exp2" else 1.0


def exp_table(cfg) -> np.ndarray:
    """Contents of the exponent table, ``cfg.lut_size`` unsigned ``exp_bits``-bit entries.

    ``exp2`` mode: entry ``i`` is ``rint(exp_max * 2**-f_i)`` where ``f_i`` is the mean of the
    score fractions that address it (the table is addressed by the top ``lut_addr_bits`` of the
    ``score_frac_bits``-bit fraction). ``direct`` mode: entry ``i`` is
    ``rint(exp_max * exp(-i / 2**score_frac_bits))``.
    """
    i = np.arange(cfg.lut_size, dtype=np.float64)
    frac_scale = 1 << cfg.score_frac_bits
    if cfg.exp_mode == "exp2":
        per_entry = 1 << (cfg.score_frac_bits - cfg.lut_addr_bits)
        frac = (i * per_entry + (per_entry - 1) / 2) / frac_scale
        values = cfg.exp_max * np.exp2(-frac)
    else:
        values = cfg.exp_max * np.exp(-i / frac_scale)
    return np.rint(values).astype(np.int64)


def exp_lookup(diff, cfg, table=None) -> np.ndarray:
    """Exponent of non-negative score differences, as the hardware computes it.

    ``exp2``: ``table[(diff & frac_mask) >> (score_frac_bits - lut_addr_bits)] >>
    (diff >> score_frac_bits)``, 0 once the shift reaches ``exp_bits``.
    ``direct``: ``table[diff]`` for ``diff < lut_size``, else 0.
    """
    table = exp_table(cfg) if table is None else table
    diff = np.asarray(diff, dtype=np.int64)
    if cfg.exp_mode == "exp2":
        frac = diff & ((1 << cfg.score_frac_bits) - 1)
        addr = frac >> (cfg.score_frac_bits - cfg.lut_addr_bits)
        whole = np.minimum(diff >> cfg.score_frac_bits, cfg.exp_bits)
        return table[addr] >> whole
    inside = diff < cfg.lut_size
    return np.where(inside, table[np.where(inside, diff, 0)], 0)


@dataclass
class SoftmaxTrace:
    """Every intermediate of :func:`softmax_int`; arrays have the scores' leading shape."""

    row_max: np.ndarray   # (..., ) maximum of the unmasked scores, 0 if none
    diff: np.ndarray      # (..., L) mx - t, 0 where masked
    exp: np.ndarray       # (..., L) exponent values, 0 where masked
    row_sum: np.ndarray   # (..., ) sum of exp
    probs: np.ndarray     # (..., L) probabilities, 2**prob_bits - 1 stands for 1.0


def softmax_int(scores, cfg, mask=None) -> SoftmaxTrace:
    """Integer softmax over the last axis of ``scores`` (``score_bits``-bit signed integers).

    ``mask`` broadcasts against ``scores``; ``True`` masks an element out (score -infinity).
    """
    t = np.asarray(scores, dtype=np.int64)
    lo, hi = -(1 << (cfg.score_bits - 1)), (1 << (cfg.score_bits - 1)) - 1
    if t.size and (t.min() < lo or t.max() > hi):
        raise ValueError(f"scores must be {cfg.score_bits}-bit signed integers, "
                         f"got range [{t.min()}, {t.max()}]")
    m = np.zeros(t.shape, dtype=bool) if mask is None else np.broadcast_to(mask, t.shape)
    masked_t = np.where(m, lo, t)
    any_valid = ~np.all(m, axis=-1)
    row_max = np.where(any_valid, masked_t.max(axis=-1, initial=lo), 0)
    diff = np.where(m, 0, row_max[..., None] - t)
    exp = np.where(m, 0, exp_lookup(diff, cfg))
    row_sum = exp.sum(axis=-1)
    safe = np.maximum(row_sum, 1)[..., None]
    probs = np.where(row_sum[..., None] > 0, (exp * cfg.prob_one + safe // 2) // safe, 0)
    return SoftmaxTrace(row_max=row_max, diff=diff, exp=exp, row_sum=row_sum, probs=probs)
