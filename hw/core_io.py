"""What the attention core consumes and produces, in the order it does: the host-side half of
the core's stream contract (:class:`hw.core.AttentionCore`).

A run of the core on a layer of shape ``L x D`` with ``H`` heads (head size ``d = D / H``,
array ``R x C``, ``WPH = ceil(d / C)`` words per head, ``WPD = ceil(D / C)`` words per token):

- ``start``: one beat of :func:`run_args_layout` (``seq_len``, ``d_model``, ``heads``,
  ``head_dim``, ``causal``, ``valid_len``).
- ``p_stream`` (:func:`param_layout`: ``C`` lanes of ``bias``/``mult``/``shift``): one beat per
  *projection tile* — first the Q, K, V tiles in order ``matrix (q, k, v) -> head -> block of C
  channels within the head``, lane ``c`` holding the constants of channel ``jb*C + c`` of that
  head (zeros past ``d``); then one beat per *output tile* (output channels ``cb*C + c``); then
  two beats per head, score then P·V constants, in lane 0 (bias 0).
- ``x_stream`` (``C`` lanes of ``x_bits``): token by token, ``WPD`` beats per token, lane ``c``
  of beat ``w`` = ``x[i, w*C + c]``.
- ``w_stream`` (``C`` lanes of ``w_bits``): for each projection tile, ``D`` beats (beat ``k``,
  lane ``c`` = the weight of the tile's lane-``c`` channel at input feature ``k``); then for each
  output tile, ``D`` beats over the concatenated head channels in order ``(head, j)``.
- ``o_stream`` (``C`` lanes of ``y_bits``, ``last`` on the final beat): for each output tile
  ``cb``, for each token ``i < L``: ``y[i, cb*C : cb*C + C]`` (lanes past ``D`` are 0).
"""

from __future__ import annotations

import numpy as np
from amaranth import signed, unsigned
from amaranth.lib import data

from golden.reference import make_mask

from . import requant

__all__ = ["run_args_layout", "param_layout", "lanes_layout", "CoreShape", "core_streams",
           "collect_output"]


def _ceil_div(a, b):
    return -(-a // b)


def run_args_layout(cfg) -> data.StructLayout:
    """Arguments of one run (one beat on :attr:`AttentionCore.start`)."""
    return data.StructLayout({
        "seq_len": unsigned(cfg.len_bits),
        "d_model": unsigned(cfg.max_d_model.bit_length()),
        "heads": unsigned(cfg.max_heads.bit_length()),
        "head_dim": unsigned(cfg.max_d_model.bit_length()),
        "causal": unsigned(1),
        "valid_len": unsigned(cfg.len_bits),
    })


def param_layout(cfg) -> data.StructLayout:
    """``C`` lanes of requantization constants (``mult``, ``shift``, ``bias`` arrays), as
    :class:`hw.requant.Requantizer` takes them."""
    return requant.param_layout(cfg.cols, cfg.mult_bits, cfg.shift_bits, cfg.bias_bits)


def lanes_layout(cfg, bits: int) -> data.ArrayLayout:
    """``C`` signed lanes of ``bits`` bits."""
    return data.ArrayLayout(signed(bits), cfg.cols)


class CoreShape:
    """Derived counts of one run (mirrors the hardware controller's loop bounds)."""

    def __init__(self, cfg, seq_len: int, d_model: int, heads: int):
        cfg.check_shape(seq_len, d_model, heads)
        self.cfg = cfg
        self.seq_len, self.d_model, self.heads = seq_len, d_model, heads
        self.head_dim = d_model // heads
        self.wph = _ceil_div(self.head_dim, cfg.cols)
        self.wpd = _ceil_div(d_model, cfg.cols)
        self.row_blocks = _ceil_div(seq_len, cfg.rows)
        self.key_blocks = _ceil_div(seq_len, cfg.cols)
        self.proj_tiles = 3 * heads * self.wph
        self.out_tiles = self.wpd

    def proj_channels(self, tile: int) -> np.ndarray:
        """Row of W_in for each lane of projection tile ``tile`` (-1 = unused lane)."""
        matrix, rest = divmod(tile, self.heads * self.wph)
        head, block = divmod(rest, self.wph)
        j = block * self.cfg.cols + np.arange(self.cfg.cols)
        return np.where(j < self.head_dim, matrix * self.d_model + head * self.head_dim + j, -1)

    def out_channels(self, tile: int) -> np.ndarray:
        c = tile * self.cfg.cols + np.arange(self.cfg.cols)
        return np.where(c < self.d_model, c, -1)

    def macs(self) -> int:
        """Multiply-accumulates of the layer without masks (the dense work)."""
        seq_len, d_model = self.seq_len, self.d_model
        return 4 * seq_len * d_model * d_model + 2 * seq_len * seq_len * d_model

    def masked_macs(self, causal: bool = False, valid_len: int | None = None) -> int:
        """Multiply-accumulates the masks leave: the projections, and the scores and
        probability-weighted values of the (query, key) pairs a mask does not hide."""
        mask = make_mask(self.seq_len, causal=causal, valid_len=valid_len)
        return (4 * self.seq_len * self.d_model * self.d_model
                + 2 * self.d_model * int(np.count_nonzero(~mask)))

    def key_bound(self, row_block: int, causal: bool = False,
                  valid_len: int | None = None) -> int:
        """Keys row block ``row_block`` computes scores for, runs through the softmax and
        reduces over in P.V. Without ``cfg.masks`` all ``L``. With them the keys a padding
        mask leaves, ``min(L, valid_len)`` (``L`` for ``None``; at least one: a row whose
        every key is masked has probabilities 0 whatever its length), and with a causal
        mask only the first ``(row_block + 1) * R`` of those, the keys up to its last query:
        every later key is masked for all its queries."""
        if not self.cfg.masks:
            return self.seq_len
        keys = self.seq_len if valid_len is None else max(1, min(self.seq_len, valid_len))
        if causal:
            return min(keys, (row_block + 1) * self.cfg.rows)
        return keys

    def array_beats(self, causal: bool = False, valid_len: int | None = None) -> int:
        """Beats the controller issues to the array for one run: ``K`` per tile; a score op
        has one tile per block of ``C`` keys below its row block's key bound, a P.V tile
        reduces over those keys."""
        cols = self.cfg.cols
        dense = (self.proj_tiles + self.out_tiles) * self.row_blocks * self.d_model
        bounds = [self.key_bound(rb, causal, valid_len) for rb in range(self.row_blocks)]
        attention = sum(_ceil_div(b, cols) * self.head_dim + self.wph * b for b in bounds)
        return dense + self.heads * attention

    def softmax_beats(self, causal: bool = False, valid_len: int | None = None) -> int:
        """Scores the softmax units take for one run: ``R`` rows per block of each head (rows
        past L too), each as long as its block's key bound."""
        return self.heads * self.cfg.rows * sum(
            self.key_bound(rb, causal, valid_len) for rb in range(self.row_blocks))


def _take(values, channels, fill=0):
    values = np.asarray(values)
    out = np.full(channels.shape + values.shape[1:], fill, dtype=np.int64)
    ok = channels >= 0
    out[ok] = values[channels[ok]]
    return out


def core_streams(cfg, model, x_int, causal: bool = False, valid_len: int | None = None):
    """Everything the core consumes for one run of ``model`` on integer input ``x_int``.

    Returns a dict: ``args`` (dict for :func:`run_args_layout`), and ``p``, ``x``, ``w``: lists
    of beats (dicts / lists of lane values in the layouts above). ``valid_len`` defaults to L
    (no key padding).
    """
    x_int = np.asarray(x_int, dtype=np.int64)
    seq_len, d_model = x_int.shape
    s = CoreShape(cfg, seq_len, d_model, int(model.num_heads))
    valid_len = seq_len if valid_len is None else valid_len
    args = dict(seq_len=seq_len, d_model=d_model, heads=s.heads, head_dim=s.head_dim,
                causal=int(causal), valid_len=valid_len)

    def lanes(bias, mult, shift):
        return dict(bias=[int(v) for v in bias], mult=[int(v) for v in mult],
                    shift=[int(v) for v in shift])

    p, w = [], []
    for t in range(s.proj_tiles):
        ch = s.proj_channels(t)
        p.append(lanes(_take(model.b_in, ch), _take(model.in_mult, ch),
                       _take(model.in_shift, ch)))
        w.extend(_take(model.w_in, ch).T.tolist())           # D beats of C lanes
    for t in range(s.out_tiles):
        ch = s.out_channels(t)
        p.append(lanes(_take(model.b_out, ch), _take(model.out_mult, ch),
                       _take(model.out_shift, ch)))
        w.extend(_take(model.w_out, ch).T.tolist())
    zeros = [0] * (cfg.cols - 1)
    for h in range(s.heads):
        p.append(lanes([0] * cfg.cols, [int(model.score_mult[h])] + zeros,
                       [int(model.score_shift[h])] + zeros))
        p.append(lanes([0] * cfg.cols, [int(model.pv_mult[h])] + zeros,
                       [int(model.pv_shift[h])] + zeros))
    padded = np.zeros((seq_len, s.wpd * cfg.cols), dtype=np.int64)
    padded[:, :d_model] = x_int
    x = padded.reshape(seq_len * s.wpd, cfg.cols).tolist()
    return dict(args=args, p=p, x=x, w=w, shape=s)


def collect_output(cfg, beats, seq_len: int, d_model: int) -> np.ndarray:
    """Reassemble ``y`` (``L x D``) from the lane lists of the output beats."""
    wpd = _ceil_div(d_model, cfg.cols)
    beats = np.asarray(beats, dtype=np.int64)
    if beats.shape != (wpd * seq_len, cfg.cols):
        raise ValueError(f"expected {wpd * seq_len} output beats of {cfg.cols} lanes, "
                         f"got {beats.shape}")
    y = beats.reshape(wpd, seq_len, cfg.cols).transpose(1, 0, 2).reshape(seq_len, -1)
    return y[:, :d_model]
