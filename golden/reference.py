"""Float64 reference of multi-head self-attention, laid out as PyTorch's nn.MultiheadAttention.

Used for calibration and for accuracy figures only; hardware is compared with the integer model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["FloatMHA", "mha_float", "make_mask"]


@dataclass(frozen=True)
class FloatMHA:
    """Float weights of one attention layer in PyTorch's layout.

    ``in_proj_weight`` is ``(3D, D)`` (rows of W_q, then W_k, then W_v), ``in_proj_bias`` is
    ``(3D,)``, ``out_proj_weight`` is ``(D, D)``, ``out_proj_bias`` is ``(D,)``.
    """

    in_proj_weight: np.ndarray
    in_proj_bias: np.ndarray
    out_proj_weight: np.ndarray
    out_proj_bias: np.ndarray
    num_heads: int

    def __post_init__(self):
        w = np.asarray(self.in_proj_weight)
        if w.ndim != 2 or w.shape[0] != 3 * w.shape[1]:
            raise ValueError(f"in_proj_weight must have shape (3D, D), not {w.shape}")
        d = w.shape[1]
        for name, shape in (("in_proj_bias", (3 * d,)), ("out_proj_weight", (d, d)),
                            ("out_proj_bias", (d,))):
            got = np.shape(getattr(self, name))
            if got != shape:
                raise ValueError(f"{name} must have shape {shape} for D = {d}, not {got}")
        for name in ("in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias"):
            if not np.all(np.isfinite(getattr(self, name))):
                raise ValueError(f"{name} contains NaN or infinity")
        h = self.num_heads
        if not isinstance(h, (int, np.integer)) or isinstance(h, bool) or h < 1:
            raise ValueError(f"num_heads must be a positive integer, not {h!r}")
        if d % h:
            raise ValueError(f"D = {d} is not divisible by num_heads = {h}")

    @property
    def d_model(self) -> int:
        return int(np.shape(self.in_proj_weight)[1])

    @property
    def head_dim(self) -> int:
        return self.d_model // int(self.num_heads)


def make_mask(seq_len: int, causal: bool = False, valid_len: int | None = None) -> np.ndarray:
    """``(L, L)`` boolean mask, ``True`` = masked: causal (key after query) and/or key padding
    (keys at positions ``>= valid_len``)."""
    j = np.arange(seq_len)
    mask = np.zeros((seq_len, seq_len), dtype=bool)
    if causal:
        mask |= j[None, :] > j[:, None]
    if valid_len is not None:
        if not 0 <= valid_len <= seq_len:
            raise ValueError(f"valid_len must be in 0..{seq_len}, not {valid_len}")
        mask |= j[None, :] >= valid_len
    return mask


def _split_heads(t, h):
    seq_len, d_model = t.shape
    return t.reshape(seq_len, h, d_model // h).transpose(1, 0, 2)


def mha_float(x, mha: FloatMHA, mask=None) -> dict:
    """Float64 attention of ``x`` (``L x D``). Returns ``q, k, v`` (``L x D``), ``scores`` and
    ``probs`` (``H x L x L``), ``heads`` (``H x L x d``), ``concat`` and ``y`` (``L x D``).

    Masked scores are minus infinity; a fully masked row has all-zero probabilities (where
    PyTorch would give NaN), as in the integer model.
    """
    x = np.asarray(x, dtype=np.float64)
    d, h = mha.d_model, int(mha.num_heads)
    w = np.asarray(mha.in_proj_weight, dtype=np.float64)
    b = np.asarray(mha.in_proj_bias, dtype=np.float64)
    qkv = x @ w.T + b
    q, k, v = qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:]
    qh, kh, vh = (_split_heads(t, h) for t in (q, k, v))
    scores = qh @ kh.transpose(0, 2, 1) / np.sqrt(d // h)
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)
    row_max = scores.max(axis=-1, keepdims=True)
    finite = np.isfinite(row_max)
    ex = np.exp(scores - np.where(finite, row_max, 0))
    ex = np.where(finite, ex, 0.0)
    total = ex.sum(axis=-1, keepdims=True)
    probs = np.where(total > 0, ex / np.where(total > 0, total, 1), 0.0)
    heads = probs @ vh
    concat = heads.transpose(1, 0, 2).reshape(x.shape[0], d)
    y = concat @ np.asarray(mha.out_proj_weight, np.float64).T + mha.out_proj_bias
    return dict(q=q, k=k, v=v, scores=scores, probs=probs, heads=heads, concat=concat, y=y)
