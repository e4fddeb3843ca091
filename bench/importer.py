"""Accuracy of ``attn import``: random PyTorch layers through the import path vs PyTorch.

For each layer shape of :data:`SHAPES` (L x D x H) and each seed, a PyTorch
``nn.MultiheadAttention(D, H)`` with PyTorch's default initialization (``torch.manual_seed``
of the seed) is saved as a state dict and :data:`SEQUENCES` calibration sequences of N(0, 1)
inputs as a calibration file, the way ``tests/test_importer.py`` builds them; both go through
``attn import``'s own path (:func:`attn.modelio.load_model`,
:func:`attn.importer.load_calibration`, :func:`~attn.importer.import_config` — the ``default``
preset fitted to the layer — and :func:`~attn.importer.quantize_model`), and
:func:`attn.importer.accuracy` measures the golden model on the calibration sequences against
PyTorch's own float64 forward pass (golden's float64 reference if PyTorch is not installed;
the random layer then follows PyTorch's default initialization in NumPy). golden/ is bit-exact
with the hardware by contract (the simulation tests hold the core to it integer for integer),
so its figures are the accelerator's; ``--backend`` checks that on one layer per shape (the
first seed, every sequence) on a simulated core.

Per shape it reports (definitions of ``docs/numerics.md`` and ``attn/importer.py``):

- ``rel``: relative Frobenius error of the dequantized output per sequence, mean and range
  over every sequence, and ``layer_max``, the largest mean of one layer;
- ``p_max``: the largest probability error of any element, in LSBs of ``prob_bits``;
- ``p_mean``: the largest per-layer mean probability error (the bound is on a layer's mean);
- ``sat``: values of the float stages beyond their calibrated ranges (saturated);
- ``hw``: with ``--backend``, whether the core's output integers equal golden/'s.

A ``held-out`` row calibrates one shape on 3 sequences and measures on 2 others: inputs beyond
the calibrated ranges saturate (``docs/numerics.md``); it is not held to the bounds. The
summary compares the worst calibration case with the bounds of ``docs/numerics.md``
("Imported layers"): exit code 1 if one is exceeded (or the backend differs from golden/).

    python -m bench.importer [--quick] [--seeds N] [--backend amaranth|icarus|verilator]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from attn.importer import (
    ACCURACY_BOUNDS,
    accuracy,
    import_config,
    load_calibration,
    quantize_model,
)
from attn.modelio import load_model

from .common import print_table, write_json

# L x D x H: from 4 x 8 x 1 to 32 x 64 x 4, and 16 x 64 x 8 (head widths d = D/H from 2 to 16)
SHAPES = [(4, 8, 1), (6, 8, 2), (8, 8, 4), (8, 16, 2), (12, 16, 4), (16, 32, 2), (16, 32, 4),
          (32, 64, 4), (16, 64, 8)]
QUICK_SHAPES = [(4, 8, 1), (12, 16, 4), (16, 64, 8)]
SEEDS, QUICK_SEEDS = 12, 2
SEQUENCES = 3                       # calibration sequences per layer, measured on
HOLDOUT_SHAPE, HOLDOUT = (12, 16, 4), 2   # 3 calibration + 2 held-out sequences of 12 tokens

def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def write_layer(folder: Path, shape, seed: int, sequences: int):
    """A random layer and its calibration sequences as ``attn import`` files in ``folder``:
    ``(model path, calibration path)``."""
    seq_len, d_model, heads = shape
    calib = folder / "calib.npz"
    np.savez(calib, x=np.random.default_rng(seed).normal(0, 1, (sequences, seq_len, d_model)))
    torch = _torch()
    if torch is not None:
        torch.manual_seed(seed)
        path = folder / "mha.pt"
        torch.save(torch.nn.MultiheadAttention(d_model, heads).state_dict(), path)
        return path, calib
    # PyTorch's default initialization of nn.MultiheadAttention, in NumPy: xavier_uniform_
    # input projection, out_proj as nn.Linear (kaiming_uniform_, a = sqrt(5)), zero biases
    rng = np.random.default_rng([seed, 1])
    bound_in, bound_out = np.sqrt(6 / (4 * d_model)), 1 / np.sqrt(d_model)
    path = folder / "mha.npz"
    np.savez(path, **{"in_proj_weight": rng.uniform(-bound_in, bound_in, (3 * d_model, d_model)),
                      "in_proj_bias": np.zeros(3 * d_model),
                      "out_proj.weight": rng.uniform(-bound_out, bound_out, (d_model, d_model)),
                      "out_proj.bias": np.zeros(d_model), "num_heads": np.int64(heads)})
    return path, calib


def import_layer(folder: Path, shape, seed: int, sequences: int = SEQUENCES, holdout: int = 0,
                 backend: str = "golden") -> dict:
    """Import one random layer as ``attn import`` does and measure it on ``backend``: on the
    calibration sequences, or with ``holdout`` on that many further ones kept out of it."""
    model_path, calib_path = write_layer(folder, shape, seed, sequences + holdout)
    mha = load_model(model_path, heads=shape[2])
    xs = load_calibration(calib_path, mha.d_model)
    calib, measured = (xs[:sequences], xs[sequences:]) if holdout else (xs, xs)
    cfg = import_config(mha, xs)
    model = quantize_model(cfg, mha, calib)
    return accuracy(cfg, model, mha, measured, backend,
                    measured_on="held-out" if holdout else "calibration")


def shape_row(folder: Path, shape, seeds, holdout: int = 0) -> dict:
    """The figures of one shape over ``seeds`` (golden backend)."""
    seq_len, d_model, heads = shape
    stats = [import_layer(folder, shape, seed, holdout=holdout) for seed in seeds]
    rel = [s["rel_error"] for s in stats]
    per_seq = [q for s in stats for q in s["per_sequence"]]
    seq_rel = [q["rel_error"] for q in per_seq]
    saturated = {stage: sum(q["out_of_range"][stage] for q in per_seq)
                 for stage in per_seq[0]["out_of_range"]}
    return dict(
        shape=f"{seq_len}×{d_model}×{heads}", seq_len=seq_len, d_model=d_model, heads=heads,
        head_dim=d_model // heads, layers=len(stats), sequences=len(per_seq),
        measured_on=stats[0]["measured_on"], reference=stats[0]["reference"],
        prob_bits=stats[0]["config"]["prob_bits"],
        rel_error_mean=float(np.mean(seq_rel)), rel_error_min=float(np.min(seq_rel)),
        rel_error_max=float(np.max(seq_rel)), rel_error_layer_mean_max=float(np.max(rel)),
        prob_lsb_error_max=float(max(s["prob_lsb_error_max"] for s in stats)),
        prob_lsb_error_mean=float(np.mean([s["prob_lsb_error_mean"] for s in stats])),
        prob_lsb_error_layer_mean_max=float(max(s["prob_lsb_error_mean"] for s in stats)),
        saturated=saturated)


def backend_check(folder: Path, shape, seed: int, backend: str) -> dict:
    """One layer of ``shape`` on ``backend``: whether its output integers equal golden/'s."""
    start = time.perf_counter()
    stats = import_layer(folder, shape, seed, backend=backend)
    return dict(backend=backend, seed=seed, sequences=stats["sequences"],
                exact_vs_golden=stats["exact_vs_golden"], mismatches=stats["mismatches"],
                seconds=time.perf_counter() - start)


def _table_row(r: dict) -> dict:
    sat = ", ".join(f"{k} {n}" for k, n in r["saturated"].items() if n) or "0"
    hw = r.get("hw")
    return dict(shape=r["shape"], d=r["head_dim"], measured=r["measured_on"],
                layers=r["layers"], rel=f"{r['rel_error_mean']:.2%}",
                rel_range=f"{r['rel_error_min']:.2%}–{r['rel_error_max']:.2%}",
                layer_max=f"{r['rel_error_layer_mean_max']:.2%}",
                p_max=f"{r['prob_lsb_error_max']:.1f}",
                p_mean=f"{r['prob_lsb_error_layer_mean_max']:.2f}", sat=sat,
                hw="—" if hw is None else ("= golden" if hw["exact_vs_golden"] else
                                           f"DIFFERS {hw['mismatches']}"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_SEEDS} seeds and {len(QUICK_SHAPES)} shapes")
    parser.add_argument("--seeds", type=int, default=None,
                        help=f"seeds per shape (default {SEEDS}, --quick {QUICK_SEEDS})")
    parser.add_argument("--backend", choices=["amaranth", "icarus", "verilator"], default=None,
                        help="also run one layer per shape on this simulated core")
    args = parser.parse_args(argv)
    if args.seeds is not None and args.seeds < 1:
        parser.error("--seeds must be at least 1")
    n_seeds = args.seeds or (QUICK_SEEDS if args.quick else SEEDS)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    seeds = range(n_seeds)
    torch = _torch()
    if torch is None:
        print("(PyTorch not installed: golden's float64 reference and a NumPy copy of "
              "PyTorch's default initialization)")
    else:
        torch.set_num_threads(1)      # tiny layers: threads only add overhead
    start = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_importer_") as tmp:
        folder = Path(tmp)
        for shape in shapes:
            print(f"bench.importer: {shape}, {n_seeds} seed(s)", file=sys.stderr, flush=True)
            row = shape_row(folder, shape, seeds)
            if args.backend:
                try:
                    row["hw"] = backend_check(folder, shape, seeds[0], args.backend)
                except ValueError as exc:       # e.g. the simulator is not installed
                    print(f"bench.importer: error: {exc}", file=sys.stderr)
                    return 2
            rows.append(row)
        held = shape_row(folder, HOLDOUT_SHAPE, seeds, holdout=HOLDOUT)
    seconds = time.perf_counter() - start

    print_table([_table_row(r) for r in [*rows, held]],
                ["shape", "d", "measured", "layers", "rel", "rel_range", "layer_max", "p_max",
                 "p_mean", "sat", "hw"],
                f"attn import vs {rows[0]['reference']}: default widths "
                f"(LSB of {rows[0]['prob_bits']}-bit probabilities)")
    worst = {"rel_error_max": max(r["rel_error_max"] for r in rows),
             "prob_lsb_error_max": max(r["prob_lsb_error_max"] for r in rows),
             "prob_lsb_error_mean": max(r["prob_lsb_error_layer_mean_max"] for r in rows)}
    exceeded = [k for k, bound in ACCURACY_BOUNDS.items() if not worst[k] < bound]
    layers = sum(r["layers"] for r in rows)
    bounds = ACCURACY_BOUNDS
    print(f"\nworst of {layers} layers ({len(rows)} shapes x {n_seeds} seeds, {SEQUENCES} "
          f"calibration sequences each) against the bounds of docs/numerics.md: relative "
          f"error {worst['rel_error_max']:.2%} (bound {bounds['rel_error_max']:.0%}), "
          f"probability error {worst['prob_lsb_error_max']:.1f} LSB (bound "
          f"{bounds['prob_lsb_error_max']}), mean {worst['prob_lsb_error_mean']:.2f} LSB "
          f"(bound {bounds['prob_lsb_error_mean']}): "
          + (f"EXCEEDED ({', '.join(exceeded)})" if exceeded else "within"))
    print(f"held-out ({HOLDOUT_SHAPE[0]}×{HOLDOUT_SHAPE[1]}×{HOLDOUT_SHAPE[2]}, "
          f"{SEQUENCES} calibration + {HOLDOUT} held-out sequences): relative error up to "
          f"{held['rel_error_max']:.2%} (not held to the bounds)")
    differs = [r["shape"] for r in rows if "hw" in r and not r["hw"]["exact_vs_golden"]]
    if args.backend:
        hw_seconds = sum(r["hw"]["seconds"] for r in rows)
        print(f"{args.backend} ({hw_seconds:.0f} s): one layer per shape, "
              + (f"output DIFFERS from golden/ for {', '.join(differs)}" if differs else
                 "output equals golden/ integer for integer on every shape"))
    print(f"wall time {seconds:.1f} s" + (" (with the backend runs)" if args.backend else ""))
    write_json("importer", dict(rows=rows, holdout=held, bounds=ACCURACY_BOUNDS, worst=worst,
                                within_bounds=not exceeded, seeds=n_seeds,
                                sequences=SEQUENCES, backend=args.backend, seconds=seconds))
    return 1 if exceeded or differs else 0


if __name__ == "__main__":
    sys.exit(main())
