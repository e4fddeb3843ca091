"""Accuracy of the integer softmax's table design against float softmax.

The reference is the float softmax of the *same integer scores* (``p = softmax(t / 2**F /
log_base_factor)``), so the figures are the unit's own error: exponent table (size, word width,
exp2 split or direct), truncating shifts, rounding of the division. Score quantization is a
separate, upstream error; the score-scale table also shows the error against the unquantized
logits for reference.

Scores: rows of ``--length`` natural-log logits drawn from N(0, spread), quantized to
``score_bits`` with ``score_frac_bits`` fraction bits (in log2 units in exp2 mode, natural units
in direct mode), exactly as the requantization ahead of the unit produces them.

Figures per cell: max |p_int - prob_one * p_float| over every element, in LSBs of the output
format (the target is <= 1 LSB at prob_bits = 8), the mean of the same, and argmax agreement:
a row agrees when the float argmax is among the integer row's maxima; "strict" requires the
integer row to have a single maximum, at the float argmax.

Usage::

    python -m bench.softmax_accuracy [--quick] [--rows N] [--length L]

Writes ``build/bench/softmax_accuracy.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import numpy as np

import attn
from golden.softmax import log_base_factor, softmax_int
from sim.cocotb_runner import BUILD

SPREADS = (1.0, 3.0, 8.0)


def quantize_scores(logits, cfg):
    """Integer scores of natural-log ``logits`` in the configuration's score format."""
    scale = log_base_factor(cfg) * (1 << cfg.score_frac_bits)
    lo, hi = -(1 << (cfg.score_bits - 1)), (1 << (cfg.score_bits - 1)) - 1
    return np.clip(np.rint(logits * scale), lo, hi).astype(np.int64)


def float_softmax(x):
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def measure(cfg, logits) -> dict:
    """Error figures of ``cfg``'s integer softmax on rows of ``logits``."""
    t = quantize_scores(logits, cfg)
    p_int = softmax_int(t, cfg).probs
    real = t / ((1 << cfg.score_frac_bits) * log_base_factor(cfg))   # the scores' value
    p_same = float_softmax(real) * cfg.prob_one
    p_true = float_softmax(logits) * cfg.prob_one
    err = np.abs(p_int - p_same)
    f_arg = np.argmax(real, axis=-1)
    rows = np.arange(len(t))
    int_max = p_int.max(axis=-1)
    agree = p_int[rows, f_arg] == int_max
    strict = agree & ((p_int == int_max[:, None]).sum(axis=-1) == 1)
    return {
        "max_err_lsb": float(err.max()),
        "mean_err_lsb": float(err.mean()),
        "max_err_vs_logits_lsb": float(np.abs(p_int - p_true).max()),
        "argmax_agree": float(agree.mean()),
        "argmax_strict": float(strict.mean()),
        "row_sum_max_dev_lsb": int(np.abs(p_int.sum(axis=-1) - cfg.prob_one).max()),
    }


def sweep(base, rows: int, length: int, seed: int):
    rng = np.random.default_rng(seed)
    logits = {s: rng.normal(0.0, s, size=(rows, length)) for s in SPREADS}
    cells = []

    def cell(**changes):
        try:
            cfg = base.replace(**changes)
        except ValueError:
            return None                      # e.g. exp2 with lut_addr_bits > score_frac_bits
        spread = changes.pop("spread", None)
        out = []
        for s in ([spread] if spread else SPREADS):
            row = {**changes, "spread": s, **measure(cfg, logits[s])}
            row.setdefault("exp_mode", cfg.exp_mode)
            cells.append(row)
            out.append(row)
        return out

    # 1. table size x word width, both modes, default score scale
    for mode in ("exp2", "direct"):
        for lab in (4, 6, 8, 10):
            for eb in (8, 12, 16, 20):
                cell(exp_mode=mode, lut_addr_bits=lab, exp_bits=eb, prob_bits=8)
    # 2. score scale: fraction bits x spread, default table, both modes
    for mode in ("exp2", "direct"):
        for sfb in (4, 6, 8, 10, 12):
            cell(exp_mode=mode, score_frac_bits=sfb, prob_bits=8)
    # 3. the default configuration at its own 12-bit probabilities
    cell(prob_bits=base.prob_bits)
    return cells


def _table(rows, cols) -> str:
    width = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    lines = ["  ".join(c.rjust(width[c]) for c in cols),
             "  ".join("-" * width[c] for c in cols)]
    lines += ["  ".join(str(r[c]).rjust(width[c]) for c in cols) for r in rows]
    return "\n".join(lines)


def _fmt(cell):
    return {**cell,
            "max err": f"{cell['max_err_lsb']:.3f}",
            "mean err": f"{cell['mean_err_lsb']:.4f}",
            "vs logits": f"{cell['max_err_vs_logits_lsb']:.2f}",
            "argmax %": f"{100 * cell['argmax_agree']:.3f}",
            "strict %": f"{100 * cell['argmax_strict']:.3f}"}


def report(base, cells, rows, length) -> str:
    out = []
    d = base
    grid = {}
    for c in cells:
        if "lut_addr_bits" in c:
            grid.setdefault((c["exp_mode"], c["lut_addr_bits"], c["exp_bits"]), []).append(c)
    part = []
    for (mode, lab, eb), group in grid.items():
        part.append({"mode": mode, "entries": 1 << lab, "word bits": eb,
                     "max err": f"{max(c['max_err_lsb'] for c in group):.3f}",
                     **{f"mean err s={c['spread']:g}": f"{c['mean_err_lsb']:.4f}"
                        for c in group},
                     "argmax %": f"{100 * min(c['argmax_agree'] for c in group):.3f}",
                     "strict %": f"{100 * min(c['argmax_strict'] for c in group):.3f}"})
    out.append(f"Table size x word width (score_frac_bits={d.score_frac_bits}, prob_bits=8); "
               f"errors in 8-bit LSBs; max and argmax are the worst over logit spreads sigma = "
               f"{', '.join(f'{s:g}' for s in SPREADS)}")
    out.append(_table(part, list(part[0])))
    out.append("")
    scale = [_fmt(c) for c in cells if "score_frac_bits" in c]
    out.append(f"Score scale (table {d.lut_size}x{d.exp_bits}b, prob_bits=8); 'vs logits' also "
               f"counts score quantization")
    out.append(_table(scale, ["exp_mode", "score_frac_bits", "spread", "max err", "mean err",
                              "vs logits", "argmax %", "strict %"]))
    out.append("")
    default = [_fmt(c) for c in cells if set(c) >= {"prob_bits"} and "lut_addr_bits" not in c
               and "score_frac_bits" not in c]
    out.append(f"Default configuration at prob_bits={d.prob_bits}; errors in "
               f"{d.prob_bits}-bit LSBs")
    out.append(_table(default, ["spread", "max err", "mean err", "argmax %", "strict %"]))
    out.append(f"({rows} rows of {length} per cell)")
    return "\n".join(out)


def verdict(base, cells) -> str:
    at8 = [c for c in cells if c.get("lut_addr_bits") == base.lut_addr_bits
           and c.get("exp_bits") == base.exp_bits and c["exp_mode"] == base.exp_mode]
    worst = max(c["max_err_lsb"] for c in at8)
    agree = min(c["argmax_agree"] for c in at8)
    strict = min(c["argmax_strict"] for c in at8)
    ok = worst <= 1.0 and agree >= 0.999
    return (f"Default table ({base.exp_mode}, {base.lut_size} entries x {base.exp_bits} bit, "
            f"score_frac_bits={base.score_frac_bits}) at prob_bits=8: max error "
            f"{worst:.3f} LSB, argmax agreement >= {100 * agree:.3f} % (strict "
            f">= {100 * strict:.3f} %) over all spreads: target (<= 1 LSB, >= 99.9 %) "
            f"{'met' if ok else 'NOT met'}.")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2,000 rows per cell")
    parser.add_argument("--rows", type=int, default=None, help="rows per cell (20,000)")
    parser.add_argument("--length", type=int, default=64, help="row length (64)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rows = args.rows or (2000 if args.quick else 20000)
    base = attn.preset("default")
    if not 1 <= args.length <= base.max_seq_len:
        parser.error(f"--length must be in 1..{base.max_seq_len}, not {args.length}")
    start = time.monotonic()
    cells = sweep(base, rows, args.length, args.seed)
    print(report(base, cells, rows, args.length))
    print()
    print(verdict(base, cells))
    path = BUILD / "bench" / "softmax_accuracy.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rows": rows, "length": args.length, "base": base.to_dict(),
                                "cells": cells,
                                "seconds": round(time.monotonic() - start, 1)}, indent=1))
    print(f"wrote {path} ({math.ceil(time.monotonic() - start)} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
