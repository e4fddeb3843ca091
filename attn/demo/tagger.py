"""The demo's tagger: word embedding + learned position embedding, one multi-head
self-attention layer (PyTorch ``nn.MultiheadAttention`` weights), and a linear classifier on
``x + attention(x)``.

Without the position embedding the two "saw"s of "I saw a saw" would be the same vector and
get the same attention output; with it, each head can look at the neighbours, and the
attention output carries the context that tells the verb from the noun.

Inference needs NumPy only. The attention layer is quantized for the accelerator once, on a
calibration corpus drawn from the grammar (:meth:`Tagger.quantized`), and run on any backend
of :mod:`attn.backends`; embedding and classifier run on the host in float.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from golden import FloatMHA, calibrate, dequantize_output, mha_float, quantize_input

from . import grammar

__all__ = ["Tagger", "TagResult", "WEIGHTS", "UnknownWords", "run_attention"]

#: The committed weights (written by ``python -m attn.demo.train``).
WEIGHTS = Path(__file__).with_name("tagger.npz")
#: Sentences of the calibration corpus and its seed (not the training seed).
CALIB_SENTENCES, CALIB_SEED = 200, 12345


class UnknownWords(ValueError):
    """Words the tagger has no embedding for."""


@dataclass
class TagResult:
    """One sentence through the tagger: the tags from the accelerator's attention output and
    from the float model, the integer output and probabilities, cycles and the error."""

    words: list
    tags: list
    float_tags: list
    y_int: np.ndarray
    probs: np.ndarray
    probs_from_hardware: bool
    cycles: int | None
    rel_error: float
    max_error: float
    golden_equal: bool


class Tagger:
    """The trained tagger in ``path`` (default: the committed weights)."""

    def __init__(self, path=WEIGHTS):
        with np.load(path, allow_pickle=False) as f:
            self.vocab = [str(w) for w in f["vocab"]]
            self.tags = [str(t) for t in f["tags"]]
            self.embed = f["embed"].astype(np.float64)
            self.pos = f["pos"].astype(np.float64)
            self.cls_weight = f["cls_weight"].astype(np.float64)
            self.cls_bias = f["cls_bias"].astype(np.float64)
            self.mha = FloatMHA(f["in_proj_weight"].astype(np.float64),
                                f["in_proj_bias"].astype(np.float64),
                                f["out_proj.weight"].astype(np.float64),
                                f["out_proj.bias"].astype(np.float64), int(f["num_heads"]))
        self.index = {w.lower(): i for i, w in enumerate(self.vocab)}
        self.max_words = self.pos.shape[0]
        self._quantized = {}

    # -- float parts -------------------------------------------------------------------------

    def words_of(self, sentence) -> list:
        """Split a sentence (a string or a list of words) and check every word is known."""
        words = sentence.split() if isinstance(sentence, str) else list(sentence)
        if not words:
            raise ValueError("give at least one word")
        unknown = [w for w in words if w.lower() not in self.index]
        if unknown:
            raise UnknownWords(
                f"unknown word(s) {', '.join(repr(w) for w in unknown)}; the tagger knows "
                f"{len(self.vocab)} words, e.g. {', '.join(self.vocab[:6])}, "
                f"{', '.join(grammar.AMBIGUOUS[:4])} (list them with --vocabulary)")
        if len(words) > self.max_words:
            raise ValueError(f"{len(words)} words is too long: the tagger takes at most "
                             f"{self.max_words}")
        return words

    def embed_words(self, words) -> np.ndarray:
        """``x`` (``L x D``): word plus position embedding."""
        ids = [self.index[w.lower()] for w in words]
        return self.embed[ids] + self.pos[:len(ids)]

    def classify(self, x, y) -> list:
        """Tags from the embedding ``x`` and the attention output ``y``."""
        logits = (x + y) @ self.cls_weight.T + self.cls_bias
        return [self.tags[i] for i in logits.argmax(axis=1)]

    # -- the accelerator -----------------------------------------------------------------------

    def quantized(self, cfg):
        """The attention layer quantized for ``cfg``, calibrated on :data:`CALIB_SENTENCES`
        grammar sentences (block-diagonal mask: each sentence attends to itself)."""
        key = tuple(sorted(cfg.to_dict().items()))
        if key not in self._quantized:
            sentences = grammar.corpus(CALIB_SENTENCES, CALIB_SEED)
            xs = [self.embed_words(words) for words, _ in sentences]
            x = np.concatenate(xs)
            owner = np.concatenate([np.full(len(s), i) for i, s in enumerate(xs)])
            mask = owner[:, None] != owner[None, :]
            self._quantized[key] = calibrate(cfg, self.mha, x, mask)
        return self._quantized[key]

    def tag(self, sentence, cfg, backend: str = "amaranth", *, progress=None,
            **options) -> TagResult:
        """Tag ``sentence`` with the attention layer on ``backend``."""
        from golden import attention_int

        words = self.words_of(sentence)
        cfg.check_shape(len(words), self.mha.d_model, int(self.mha.num_heads))
        x = self.embed_words(words)
        model = self.quantized(cfg)
        x_int = quantize_input(x, model, cfg)
        golden = attention_int(cfg, model, x_int, None)
        y_int, probs, cycles = run_attention(cfg, model, x_int, backend, progress=progress,
                                             **options)
        from_hw = probs is not None
        if probs is None:
            probs = golden.probs
        y = dequantize_output(y_int, model)
        y_float = mha_float(x, self.mha)["y"]
        err = y - y_float
        return TagResult(
            words=words, tags=self.classify(x, y), float_tags=self.classify(x, y_float),
            y_int=y_int, probs=probs, probs_from_hardware=from_hw, cycles=cycles,
            rel_error=float(np.linalg.norm(err) / max(np.linalg.norm(y_float), 1e-30)),
            max_error=float(np.abs(err).max()),
            golden_equal=bool(np.array_equal(y_int, golden.y)
                              and np.array_equal(probs, golden.probs)))


def run_attention(cfg, model, x_int, backend: str, port=None, *, progress=None, **options):
    """Run the quantized layer ``model`` on ``x_int`` on ``backend``; return ``(y_int, probs,
    cycles)``. ``probs`` are the softmax units' outputs as the core computed them (Amaranth
    simulation only), else ``None``; ``cycles`` is ``None`` where the backend has none. Every
    other backend (icarus, verilator, cosim, board) goes through
    :func:`attn.backends.run_backend`."""
    if backend == "amaranth":
        from sim.core_sim import simulate_core
        run = simulate_core(cfg, model, x_int, name="demo", record_probs=True)
        return run.y, run.probs, run.cycles
    from ..backends import run_backend
    if port is not None:
        options["port"] = port
    result = run_backend(backend, cfg, model, x_int, None, progress=progress, **options)
    return result.y_int, None, result.cycles
