"""The ``attn`` command line."""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from . import __version__
from .backends import BACKENDS, run_backend
from .config import PRESETS, preset
from .modelio import InputError, load_input, load_model, save_npz_atomic

__all__ = ["main"]


def _config_for(args, seq_len, d_model, heads):
    if args.preset is None:
        return preset("default").fitted(seq_len, d_model, heads)
    cfg = preset(args.preset)
    cfg.check_shape(seq_len, d_model, heads)
    return cfg


def cmd_run(args) -> int:
    from golden import calibrate, dequantize_output, mha_float, quantize_input

    mha = load_model(args.model, heads=args.heads)
    x, mask = load_input(args.input, mha.d_model)
    cfg = _config_for(args, x.shape[0], mha.d_model, int(mha.num_heads))
    model = calibrate(cfg, mha, x, mask)
    x_int = quantize_input(x, model, cfg)
    start = time.perf_counter()
    result = run_backend(args.backend, cfg, model, x_int, mask)
    seconds = time.perf_counter() - start
    y = dequantize_output(result.y_int, model)
    ref = mha_float(x, mha, mask)["y"]
    rel = float(np.linalg.norm(y - ref) / max(np.linalg.norm(ref), 1e-30))
    arrays = dict(y=y.astype(np.float32), y_int=result.y_int.astype(np.int64),
                  attn=(result.probs / cfg.prob_one).astype(np.float32))
    if result.cycles is not None:
        arrays["cycles"] = np.int64(result.cycles)
    save_npz_atomic(args.output, **arrays)
    seq_len, d_model = x.shape
    cycles = f", {result.cycles} cycles" if result.cycles is not None else ""
    print(f"attn run: L={seq_len} D={d_model} H={mha.num_heads} on {args.backend} "
          f"(config {cfg.name!r}){cycles}, {seconds:.2f} s; relative error vs float64 "
          f"{rel:.3%}; wrote {args.output}")
    return 0


def cmd_presets(args) -> int:
    if args.json:
        print(json.dumps({name: cfg.to_dict() for name, cfg in PRESETS.items()}, indent=2))
        return 0
    print(f"{'preset':<12} {'Lmax':>5} {'Dmax':>5} {'Hmax':>5} {'array':>7} {'x/w/qkv':>9} "
          f"{'acc':>4} {'prob':>5} {'exp':>6}")
    for name, cfg in PRESETS.items():
        print(f"{name:<12} {cfg.max_seq_len:>5} {cfg.max_d_model:>5} {cfg.max_heads:>5} "
              f"{cfg.rows:>3}x{cfg.cols:<3} {cfg.x_bits:>3}/{cfg.w_bits}/{cfg.qkv_bits:<2} "
              f"{cfg.acc_bits:>4} {cfg.prob_bits:>5} {cfg.exp_mode:>6}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attn", description="FPGA accelerator for transformer self-attention.")
    parser.add_argument("--version", action="version", version=f"attn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run an nn.MultiheadAttention layer on a backend",
                         description="Quantize a PyTorch nn.MultiheadAttention layer "
                         "(calibrated on the input), run it and write the outputs.")
    run.add_argument("--model", required=True, metavar="MODEL",
                     help="state dict: .npz (in_proj_weight, in_proj_bias, out_proj.weight, "
                     "out_proj.bias, num_heads) or .pt")
    run.add_argument("--input", required=True, metavar="INPUT",
                     help=".npz with x (L x D) and optionally mask, key_padding_mask, causal")
    run.add_argument("--output", required=True, metavar="OUT",
                     help=".npz to write: y, y_int, attn (and cycles on hardware backends)")
    run.add_argument("--backend", default="golden", choices=sorted(BACKENDS),
                     help="where to run (default: golden)")
    run.add_argument("--preset", choices=sorted(PRESETS), default=None,
                     help="configuration preset (default: one fitted to the model and input)")
    run.add_argument("--heads", type=int, default=None,
                     help="number of heads (overrides num_heads in the model file)")
    run.set_defaults(func=cmd_run)

    presets = sub.add_parser("presets", help="list the configuration presets")
    presets.add_argument("--json", action="store_true", help="every field, as JSON")
    presets.set_defaults(func=cmd_presets)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (InputError, ValueError, TypeError) as exc:
        print(f"attn {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
