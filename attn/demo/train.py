"""Train the demo tagger on the grammar's corpus and write its weights (needs PyTorch, the
project's ``torch`` extra)::

    python -m attn.demo.train                  # rewrites attn/demo/tagger.npz
    python -m attn.demo.train --out /tmp/t.npz --epochs 2

Seeded end to end (corpus, initialization, batch order, single-threaded CPU), so the same
command gives the same weights. The model: word embedding + learned position embedding
(``D = 16``), one ``nn.MultiheadAttention`` (2 heads), a linear classifier on
``x + attention(x)``. It reports the accuracy on a held-out corpus, overall and on the
ambiguous words.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from . import grammar
from .tagger import WEIGHTS

D_MODEL, HEADS = 16, 2
#: The defaults that wrote the committed ``tagger.npz`` (its ``epochs`` and ``seed`` record them).
EPOCHS, SENTENCES, SEED = 20, 4000, 0


def _batches(sentences, vocab, tags, max_words):
    index = {w: i for i, w in enumerate(vocab)}
    ids = np.zeros((len(sentences), max_words), dtype=np.int64)
    labels = np.full((len(sentences), max_words), -100, dtype=np.int64)
    pad = np.ones((len(sentences), max_words), dtype=bool)
    for n, (words, t) in enumerate(sentences):
        ids[n, :len(words)] = [index[w] for w in words]
        labels[n, :len(words)] = [tags.index(x) for x in t]
        pad[n, :len(words)] = False
    return ids, labels, pad


def train(*, epochs: int = EPOCHS, sentences: int = SENTENCES, seed: int = SEED, log=print) -> dict:
    """Train; return the arrays of the weights file."""
    try:
        import torch
    except ImportError:
        raise SystemExit("training needs PyTorch: pip install -e '.[torch]'") from None
    from torch import nn

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    vocab, tags = grammar.vocabulary(), list(grammar.TAGS)
    max_words = grammar.MAX_WORDS
    train_set = grammar.corpus(sentences, seed)
    test_set = grammar.corpus(1000, seed + 1)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(len(vocab), D_MODEL)
            self.pos = nn.Parameter(torch.randn(max_words, D_MODEL) * 0.5)
            self.attn = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True)
            self.cls = nn.Linear(D_MODEL, len(tags))

        def forward(self, ids, pad):
            x = self.embed(ids) + self.pos[:ids.shape[1]]
            y, _ = self.attn(x, x, x, key_padding_mask=pad, need_weights=False)
            return self.cls(x + y)

    model = Model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ids, labels, pad = (torch.tensor(a) for a in _batches(train_set, vocab, tags, max_words))
    gen = torch.Generator().manual_seed(seed)
    for epoch in range(epochs):
        order = torch.randperm(len(ids), generator=gen)
        total = 0.0
        for start in range(0, len(ids), 64):
            b = order[start:start + 64]
            logits = model(ids[b], pad[b])
            loss = nn.functional.cross_entropy(logits.reshape(-1, len(tags)),
                                               labels[b].reshape(-1), ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(b)
        if log and ((epoch + 1) % 10 == 0 or epoch + 1 == epochs):
            log(f"epoch {epoch + 1}: loss {total / len(ids):.4f}")

    model.eval()
    t_ids, t_labels, t_pad = (torch.tensor(a) for a in _batches(test_set, vocab, tags,
                                                                max_words))
    with torch.no_grad():
        pred = model(t_ids, t_pad).argmax(-1)
    valid = t_labels != -100
    amb = torch.tensor([[w in grammar.AMBIGUOUS for w in words] + [False] * (max_words - len(words))
                        for words, _ in test_set])
    acc = float((pred == t_labels)[valid].float().mean())
    acc_amb = float((pred == t_labels)[amb].float().mean())
    if log:
        log(f"held-out accuracy {acc:.2%}, on ambiguous words {acc_amb:.2%}")
    state = model.attn.state_dict()
    return {
        "vocab": np.array(vocab), "tags": np.array(tags),
        "embed": model.embed.weight.detach().numpy().astype(np.float32),
        "pos": model.pos.detach().numpy().astype(np.float32),
        "in_proj_weight": state["in_proj_weight"].numpy().astype(np.float32),
        "in_proj_bias": state["in_proj_bias"].numpy().astype(np.float32),
        "out_proj.weight": state["out_proj.weight"].numpy().astype(np.float32),
        "out_proj.bias": state["out_proj.bias"].numpy().astype(np.float32),
        "num_heads": np.int64(HEADS),
        "cls_weight": model.cls.weight.detach().numpy().astype(np.float32),
        "cls_bias": model.cls.bias.detach().numpy().astype(np.float32),
        "accuracy": np.float64(acc), "accuracy_ambiguous": np.float64(acc_amb),
        "seed": np.int64(seed), "epochs": np.int64(epochs),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Train the demo tagger.")
    parser.add_argument("--out", default=str(WEIGHTS), help=f"weights file (default {WEIGHTS})")
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--sentences", type=int, default=SENTENCES)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    arrays = train(epochs=args.epochs, sentences=args.sentences, seed=args.seed)
    out = Path(args.out)
    tmp = out.with_name(f".{out.stem}.tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
