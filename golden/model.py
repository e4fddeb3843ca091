"""The bit-exact integer model of multi-head self-attention: the contract hardware must meet.

:func:`attention_int` computes, for integer input ``x`` (``L x D``, ``x_bits`` signed):

1. ``acc_qkv = x @ w_in.T + b_in``; ``qkv = requantize(acc_qkv, in_mult, in_shift, qkv_bits)``
   per output channel; ``q, k, v`` are its thirds, split into ``H`` heads of ``d = D / H``;
2. per head: ``acc_s = q_h @ k_h.T``; ``scores = requantize(acc_s, score_mult[h],
   score_shift[h], score_bits)`` (the scale, ``1/sqrt(d)`` and ``log2(e)`` are folded in);
3. ``softmax_int(scores, mask)`` (golden/softmax.py) gives ``exp``, ``row_sum``, ``probs``;
4. ``acc_h = probs @ v_h``; ``heads = requantize(acc_h, pv_mult[h], pv_shift[h], head_bits)``;
5. ``concat`` joins the heads; ``acc_y = concat @ w_out.T + b_out``;
   ``y = requantize(acc_y, out_mult, out_shift, y_bits)`` per output channel.

Every intermediate is returned in an :class:`AttentionTrace`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .quant import matmul_exact, requantize, saturate
from .softmax import softmax_int

__all__ = ["QuantizedMHA", "AttentionTrace", "attention_int"]

_INT_FIELDS = ("w_in", "b_in", "in_mult", "in_shift", "score_mult", "score_shift", "pv_mult",
               "pv_shift", "w_out", "b_out", "out_mult", "out_shift")
_FLOAT_FIELDS = ("s_x", "s_w_in", "s_q", "s_k", "s_v", "s_o", "s_w_out", "s_y")


@dataclass(frozen=True)
class QuantizedMHA:
    """Integer weights and requantization constants of one layer, plus the float scales they
    came from (for dequantization and reports only).

    Shapes (``D`` model width, ``H`` heads): ``w_in (3D, D)``, ``b_in (3D,)``, ``in_mult``/
    ``in_shift (3D,)``, ``score_*``/``pv_* (H,)``, ``w_out (D, D)``, ``b_out``/``out_* (D,)``.
    Scales: ``s_x``, ``s_o``, ``s_y`` scalars; ``s_w_in (3D,)``; ``s_q``, ``s_k``, ``s_v (H,)``;
    ``s_w_out (D,)``.
    """

    num_heads: int
    w_in: np.ndarray
    b_in: np.ndarray
    in_mult: np.ndarray
    in_shift: np.ndarray
    score_mult: np.ndarray
    score_shift: np.ndarray
    pv_mult: np.ndarray
    pv_shift: np.ndarray
    w_out: np.ndarray
    b_out: np.ndarray
    out_mult: np.ndarray
    out_shift: np.ndarray
    s_x: float
    s_w_in: np.ndarray
    s_q: np.ndarray
    s_k: np.ndarray
    s_v: np.ndarray
    s_o: float
    s_w_out: np.ndarray
    s_y: float

    @property
    def d_model(self) -> int:
        return int(self.w_in.shape[1])

    def check(self, cfg) -> None:
        """Raise :class:`ValueError` naming the first array whose shape or range does not fit
        ``cfg``."""
        d, h = self.d_model, int(self.num_heads)
        if d % h:
            raise ValueError(f"D = {d} is not divisible by num_heads = {h}")
        shapes = dict(w_in=(3 * d, d), b_in=(3 * d,), in_mult=(3 * d,), in_shift=(3 * d,),
                      score_mult=(h,), score_shift=(h,), pv_mult=(h,), pv_shift=(h,),
                      w_out=(d, d), b_out=(d,), out_mult=(d,), out_shift=(d,))
        ranges = dict(w=(-(1 << cfg.w_bits - 1), (1 << cfg.w_bits - 1) - 1),
                      b=(-(1 << cfg.bias_bits - 1), (1 << cfg.bias_bits - 1) - 1),
                      mult=(0, (1 << cfg.mult_bits) - 1), shift=(0, (1 << cfg.shift_bits) - 1))
        for name, shape in shapes.items():
            arr = np.asarray(getattr(self, name))
            if arr.shape != shape:
                raise ValueError(f"{name} must have shape {shape}, not {arr.shape}")
            kind = name.split("_")[-1] if name.endswith(("mult", "shift")) else name[0]
            lo, hi = ranges[kind]
            if arr.size and (arr.min() < lo or arr.max() > hi):
                raise ValueError(f"{name} has values outside [{lo}, {hi}] for config "
                                 f"{cfg.name!r}: [{arr.min()}, {arr.max()}]")

    def save(self, path) -> None:
        """Write all fields to an ``.npz`` file."""
        np.savez(path, **{f.name: np.asarray(getattr(self, f.name))
                          for f in dataclasses.fields(self)})

    @classmethod
    def load(cls, path) -> QuantizedMHA:
        """Read an ``.npz`` file written by :meth:`save`."""
        with np.load(path) as data:
            missing = [f.name for f in dataclasses.fields(cls) if f.name not in data]
            if missing:
                raise ValueError(f"{path}: missing key(s) {', '.join(missing)}")
            values = {f.name: data[f.name] for f in dataclasses.fields(cls)}
        values["num_heads"] = int(values["num_heads"])
        for name in _INT_FIELDS:
            values[name] = values[name].astype(np.int64)
        for name in _FLOAT_FIELDS:
            values[name] = values[name].astype(np.float64)
            if values[name].ndim == 0:
                values[name] = float(values[name])
        return cls(**values)


@dataclass
class AttentionTrace:
    """Every intermediate of :func:`attention_int` (integers, ``int64``).

    ``(L, D)``: ``x``, ``q``, ``k``, ``v``, ``concat``, ``y`` and ``acc_y``; ``(L, 3D)``:
    ``acc_qkv``; ``(H, L, L)``: ``acc_scores``, ``scores``, ``exp``, ``probs``; ``(H, L)``:
    ``row_max``, ``row_sum``; ``(H, L, d)``: ``acc_heads``, ``heads``; ``(L, L)``: ``mask``.
    """

    x: np.ndarray
    acc_qkv: np.ndarray
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask: np.ndarray
    acc_scores: np.ndarray
    scores: np.ndarray
    row_max: np.ndarray
    exp: np.ndarray
    row_sum: np.ndarray
    probs: np.ndarray
    acc_heads: np.ndarray
    heads: np.ndarray
    concat: np.ndarray
    acc_y: np.ndarray
    y: np.ndarray


def _heads(t, h):
    seq_len, d_model = t.shape
    return t.reshape(seq_len, h, d_model // h).transpose(1, 0, 2)


def attention_int(cfg, model: QuantizedMHA, x, mask=None) -> AttentionTrace:
    """Integer multi-head attention of ``x`` (``L x D`` signed ``x_bits`` integers).

    ``mask`` is ``None`` or an ``(L, L)`` boolean array, ``True`` = masked.

    Raises
    ------
    ValueError
        If the shape is outside ``cfg`` (:meth:`attn.AttnConfig.check_shape`), ``x`` is out of
        range, or the model does not fit ``cfg``.
    """
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"x must be a 2-D (L, D) array, not shape {x.shape}")
    seq_len, d = x.shape
    h = int(model.num_heads)
    if d != model.d_model:
        raise ValueError(f"x has D = {d} features but the model has D = {model.d_model}")
    cfg.check_shape(seq_len, d, h)
    model.check(cfg)
    x = x.astype(np.int64)
    if x.size and not np.array_equal(x, saturate(x, cfg.x_bits)):
        raise ValueError(f"x must hold {cfg.x_bits}-bit signed integers, "
                         f"got range [{x.min()}, {x.max()}]")
    if mask is None:
        mask = np.zeros((seq_len, seq_len), dtype=bool)
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != (seq_len, seq_len):
        raise ValueError(f"mask must have shape {(seq_len, seq_len)}, not {mask.shape}")
    rnd = cfg.rounding

    acc_qkv = matmul_exact(x, model.w_in.T) + model.b_in
    qkv = requantize(acc_qkv, model.in_mult, model.in_shift, cfg.qkv_bits, rnd)
    q, k, v = qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:]
    qh, kh, vh = _heads(q, h), _heads(k, h), _heads(v, h)

    acc_scores = matmul_exact(qh, kh.transpose(0, 2, 1))
    scores = requantize(acc_scores, model.score_mult[:, None, None],
                        model.score_shift[:, None, None], cfg.score_bits, rnd)
    sm = softmax_int(scores, cfg, mask[None])

    acc_heads = matmul_exact(sm.probs, vh)
    heads = requantize(acc_heads, model.pv_mult[:, None, None], model.pv_shift[:, None, None],
                       cfg.head_bits, rnd)
    concat = heads.transpose(1, 0, 2).reshape(seq_len, d)

    acc_y = matmul_exact(concat, model.w_out.T) + model.b_out
    y = requantize(acc_y, model.out_mult, model.out_shift, cfg.y_bits, rnd)
    return AttentionTrace(x=x, acc_qkv=acc_qkv, q=q, k=k, v=v, mask=mask,
                          acc_scores=acc_scores, scores=scores, row_max=sm.row_max,
                          exp=sm.exp, row_sum=sm.row_sum, probs=sm.probs,
                          acc_heads=acc_heads, heads=heads, concat=concat, acc_y=acc_y, y=y)
