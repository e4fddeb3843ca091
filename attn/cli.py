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
    if args.backend == "board" and not args.port:
        raise InputError("--backend board needs the board's serial port: --port PORT "
                         "(e.g. /dev/ttyUSB1)")
    if args.preset is None and args.backend == "board":
        from .remote import board_config
        cfg = board_config(args.port, baud=args.baud)       # the bitstream's configuration
        cfg.check_shape(seq_len, d_model, heads)
        return cfg
    if args.preset is None:
        return preset("default").fitted(seq_len, d_model, heads)
    cfg = preset(args.preset)
    cfg.check_shape(seq_len, d_model, heads)
    return cfg


def cmd_run(args) -> int:
    from golden import calibrate, dequantize_output, mha_float, quantize_input

    from .importer import is_quantized, load_quantized

    if is_quantized(args.model):                # made by attn import: no new calibration
        model, cfg, mha = load_quantized(args.model)
        if args.heads is not None and args.heads != mha.num_heads:
            raise InputError(f"{args.model} was quantized with {mha.num_heads} heads, not "
                             f"--heads {args.heads}")
        x, mask = load_input(args.input, mha.d_model)
        if args.preset is not None and preset(args.preset).to_dict() | {"name": cfg.name} \
                != cfg.to_dict():
            raise InputError(f"{args.model} was quantized for configuration {cfg.name!r}, "
                             f"not --preset {args.preset}")
        cfg.check_shape(x.shape[0], mha.d_model, int(mha.num_heads))
    else:
        mha = load_model(args.model, heads=args.heads)
        x, mask = load_input(args.input, mha.d_model)
        cfg = _config_for(args, x.shape[0], mha.d_model, int(mha.num_heads))
        model = calibrate(cfg, mha, x, mask)
    x_int = quantize_input(x, model, cfg)
    start = time.perf_counter()

    def progress(done, ideal=None):
        if isinstance(done, str):
            print(f"attn run: {done}", file=sys.stderr)
        else:
            print(f"\rattn run: {done:,} cycles simulated (ideal run: {ideal:,})", end="",
                  file=sys.stderr, flush=True)

    options = {"port": args.port, "baud": args.baud} if args.backend == "board" else {}
    result = run_backend(args.backend, cfg, model, x_int, mask,
                         progress=None if args.quiet else progress, **options)
    if args.backend == "amaranth" and not args.quiet:
        print(file=sys.stderr)
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


def _parse_overrides(cfg, items):
    changes = {}
    fields = cfg.to_dict()
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in fields or name == "name":
            raise InputError(f"--set takes FIELD=VALUE with FIELD one of "
                             f"{', '.join(f for f in fields if f != 'name')}; got {item!r}")
        current = fields[name]
        if isinstance(current, bool):
            if value.lower() not in ("0", "1", "true", "false"):
                raise InputError(f"--set {name} takes true or false, not {value!r}")
            changes[name] = value.lower() in ("1", "true")
        elif isinstance(current, int):
            try:
                changes[name] = int(value)
            except ValueError:
                raise InputError(f"--set {name} takes an integer, not {value!r}") from None
        else:
            changes[name] = value
    return cfg.replace(**changes) if changes else cfg


def cmd_verilog(args) -> int:
    from pathlib import Path

    from amaranth.back import verilog as amaranth_verilog

    from hw.core import AttentionCore
    from sim.cocotb_runner import component_ports

    cfg = _parse_overrides(preset(args.preset), args.set)
    out = Path(args.output)
    if not out.parent.is_dir():
        raise InputError(f"output folder {out.parent} does not exist")
    core = AttentionCore(cfg)
    text = amaranth_verilog.convert(core, name="attention_core", ports=component_ports(core))
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(text)
    tmp.replace(out)
    print(f"attn verilog: wrote {out} ({len(text.splitlines()):,} lines; config "
          f"{cfg.name!r}: {cfg.rows}x{cfg.cols} array, Lmax={cfg.max_seq_len}, "
          f"Dmax={cfg.max_d_model}, Hmax={cfg.max_heads})")
    return 0


def cmd_presets(args) -> int:
    if args.json:
        print(json.dumps({name: cfg.to_dict() for name, cfg in PRESETS.items()}, indent=2))
        return 0
    width = max(len("preset"), *map(len, PRESETS))
    print(f"{'preset':<{width}} {'Lmax':>5} {'Dmax':>5} {'Hmax':>5} {'array':>7} "
          f"{'softmax':>7} {'x/w/qkv':>9} {'acc':>4} {'prob':>5} {'exp':>6}")
    for name, cfg in PRESETS.items():
        print(f"{name:<{width}} {cfg.max_seq_len:>5} {cfg.max_d_model:>5} {cfg.max_heads:>5} "
              f"{cfg.rows:>3}x{cfg.cols:<3} {cfg.softmax_unit_count:>7} "
              f"{f'{cfg.x_bits}/{cfg.w_bits}/{cfg.qkv_bits}':>9} "
              f"{cfg.acc_bits:>4} {cfg.prob_bits:>5} {cfg.exp_mode:>6}")
    return 0


def cmd_build(args) -> int:
    from boards.build import BuildFailed, board_spec, build_board

    spec = board_spec(args.board)
    cfg = _parse_overrides(preset(args.preset or spec.preset), args.set)
    try:
        report = build_board(spec, cfg, clock_mhz=args.clock, baud=args.baud,
                             target_mhz=args.target, seed=args.seed,
                             placer=args.placer, router=args.router,
                             timing_ripup=args.tmg_ripup, out_dir=args.out,
                             allow_timing_fail=args.allow_timing_fail)
    except BuildFailed as exc:
        print(f"attn build: FAILED: {exc}", file=sys.stderr)
        return 1
    res = ", ".join(f"{k} {v[0]:,}/{v[1]:,}" for k, v in report["resources"].items() if v)
    met = "met" if report["timing_met"] else "NOT met (accepted)"
    print(f"attn build: {report['bitstream']}: {res}; fmax {report['fmax_mhz']:.1f} MHz at "
          f"{report['clock_mhz']:g} MHz ({met}); {report['seconds']:.0f} s")
    return 0


def cmd_program(args) -> int:
    from boards.build import board_spec, program_board

    program_board(board_spec(args.board), args.bitstream)
    print(f"attn program: {args.board} programmed")
    return 0


def cmd_sweep(args) -> int:
    from pathlib import Path

    from boards.build import board_spec, nextpnr_options

    from .sweep import DEFAULT_ARRAYS, parse_arrays, parse_seeds, parse_vary, sweep, write_sweep

    spec = board_spec(args.board)
    cfg = _parse_overrides(preset(args.preset or spec.preset), args.set)
    arrays = parse_arrays(args.arrays or ",".join(DEFAULT_ARRAYS[spec.family]))
    variants = parse_vary(args.vary, cfg)
    layer = _parse_layer(args.layer)
    out = Path(args.out or f"build/sweep/{spec.name}")
    points = sweep(spec, cfg, arrays, layer, variants=variants, jobs=args.jobs, sim=args.sim,
                   out_dir=out, seeds=parse_seeds(args.seeds),
                   nextpnr_opts=nextpnr_options(args.placer, args.router,
                                                timing_ripup=args.tmg_ripup),
                   target_mhz=args.target)
    paths = write_sweep(points, out, board=spec.name, layer=layer)
    print(paths["md"].read_text())
    print(f"attn sweep: wrote {paths['md']}, {paths['json']} and {paths['png']}")
    return 0


def _parse_layer(text):
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise InputError(f"--layer takes LxDxH (e.g. 64x64x4), not {text!r}")
    return tuple(int(p) for p in parts)


def cmd_import(args) -> int:
    from pathlib import Path

    from .importer import (
        accuracy,
        check_outputs,
        format_table,
        import_config,
        load_calibration,
        quantize_model,
        save_quantized,
        write_accuracy_report,
    )

    report_dir = Path(args.report_dir or Path(args.output).with_suffix("").as_posix()
                      + "_report")
    check_outputs(args.output, report_dir)
    if args.backend == "board" and not args.port:
        raise InputError("--backend board needs the board's serial port: --port PORT")
    mha = load_model(args.model, heads=args.heads)
    xs = load_calibration(args.calib, mha.d_model)
    if not 0 <= args.holdout < len(xs):
        raise InputError(f"--holdout must be in 0..{len(xs) - 1} for the {len(xs)} "
                         f"sequence(s) of {args.calib}, not {args.holdout}")
    calib, held = (xs[:len(xs) - args.holdout], xs[len(xs) - args.holdout:]) \
        if args.holdout else (xs, xs)
    if args.backend == "board" and args.preset is None:
        from .remote import board_config
        cfg = board_config(args.port, baud=args.baud)       # the bitstream's configuration
        cfg.check_shape(max(len(x) for x in xs), mha.d_model, int(mha.num_heads))
    else:
        cfg = import_config(mha, xs, args.preset)
    model = quantize_model(cfg, mha, calib)

    counting = []                        # a cycle count line is open on stderr

    def progress(done, ideal=None):
        if args.quiet:
            return
        if isinstance(done, str):
            print(("\n" if counting else "") + f"attn import: {done}", file=sys.stderr)
            counting.clear()
        else:
            print(f"\rattn import: {done:,} cycles simulated (ideal run: {ideal:,})", end="",
                  file=sys.stderr, flush=True)
            counting.append(True)

    options = {"port": args.port, "baud": args.baud} if args.backend == "board" else {}
    stats = accuracy(cfg, model, mha, held, args.backend, progress=progress,
                     measured_on="held-out" if args.holdout else "calibration", **options)
    paths = write_accuracy_report(stats, report_dir)
    if not stats["exact_vs_golden"]:
        print(f"attn import: error: the {args.backend} output differs from golden/ on "
              f"sequence(s) {stats['mismatches']}; report {paths['md']}", file=sys.stderr)
        return 1
    save_quantized(args.output, model, cfg, mha)
    print(f"attn import: wrote {args.output} (configuration {cfg.name!r}, calibrated on "
          f"{len(calib)} sequence(s))\naccuracy of {args.backend} on {stats['sequences']} "
          f"{stats['measured_on']} sequence(s), against {stats['reference']}:\n")
    print(format_table(stats))
    print(f"\nattn import: report {paths['md']}, {paths['json']}, {paths['png']}")
    return 0


def cmd_report(args) -> int:
    from .report import make_report

    path = make_report(args.build, args.out, bench_dir=args.bench_dir)
    print(f"attn report: wrote {path}")
    return 0


def cmd_demo(args) -> int:
    from .demo.run import main as demo_main
    return demo_main(args)


def _board_arguments(parser) -> None:
    """--port and --baud of the backends that talk to a board."""
    from .remote import BOARD_BAUD
    parser.add_argument("--port", default=None, metavar="PORT",
                        help="serial port of the board for --backend board (e.g. /dev/ttyUSB1)")
    parser.add_argument("--baud", type=int, default=BOARD_BAUD,
                        help=f"baud rate of the board's UART (default {BOARD_BAUD})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attn", description="FPGA accelerator for transformer self-attention.")
    parser.add_argument("--version", action="version", version=f"attn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help='tag "I saw a saw" with attention on the accelerator',
                          description="Tag sentences with a tiny self-attention tagger whose "
                          "attention layer runs on the simulated accelerator (bit-exact with "
                          "golden/); print tags, cycles and error against float; draw each "
                          "head's attention matrix as PNG.")
    demo.add_argument("words", nargs="*", metavar="WORD",
                      help='a sentence (default: "I saw a saw" and a few others)')
    demo.add_argument("--backend", default="amaranth", choices=sorted(BACKENDS),
                      help="where the attention layer runs (default: amaranth simulation)")
    demo.add_argument("--preset", default="tiny", choices=sorted(PRESETS),
                      help="configuration (default tiny; a board's bitstream must match)")
    demo.add_argument("--out", default="build/demo", metavar="DIR",
                      help="folder for the attention PNGs (default build/demo)")
    demo.add_argument("--vocabulary", action="store_true", help="list the known words")
    demo.add_argument("--quiet", action="store_true", help="no progress output")
    _board_arguments(demo)
    demo.set_defaults(func=cmd_demo)

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
    run.add_argument("--quiet", action="store_true", help="no progress output")
    _board_arguments(run)
    run.set_defaults(func=cmd_run)

    imp = sub.add_parser("import", help="quantize a PyTorch layer, report its accuracy",
                         description="Quantize an nn.MultiheadAttention state dict on "
                         "calibration inputs, write the quantized model (attn run --model "
                         "takes it) and report the accelerator's accuracy against float "
                         "(PyTorch's forward when torch is installed).")
    imp.add_argument("--model", required=True, metavar="MODEL",
                     help="state dict: .pt or .npz with PyTorch's key names")
    imp.add_argument("--calib", required=True, metavar="CALIB",
                     help=".npz with x: N x L x D (N sequences) or L x D")
    imp.add_argument("--output", required=True, metavar="OUT.npz",
                     help="quantized model file to write")
    imp.add_argument("--heads", type=int, default=None,
                     help="number of heads (overrides num_heads in the model file)")
    imp.add_argument("--preset", choices=sorted(PRESETS), default=None,
                     help="configuration (default: one fitted to the model)")
    imp.add_argument("--backend", default="golden", choices=sorted(BACKENDS),
                     help="where the accuracy runs execute (default golden)")
    imp.add_argument("--report-dir", default=None, metavar="DIR",
                     help="accuracy.md/json/png folder (default: OUT_report)")
    imp.add_argument("--holdout", type=int, default=0, metavar="K",
                     help="keep the last K sequences out of the calibration and measure the "
                     "accuracy on them (default 0: measure on the calibration sequences)")
    imp.add_argument("--quiet", action="store_true", help="no progress output")
    _board_arguments(imp)
    imp.set_defaults(func=cmd_import)

    verilog = sub.add_parser("verilog", help="write synthesizable Verilog of the core",
                             description="Write the attention core of a configuration as one "
                             "Verilog module (top 'attention_core').")
    verilog.add_argument("--preset", choices=sorted(PRESETS), default="default",
                         help="configuration preset (default: default)")
    verilog.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                         help="override a configuration field, e.g. --set rows=8 (repeatable)")
    verilog.add_argument("-o", "--output", required=True, metavar="FILE.v")
    verilog.set_defaults(func=cmd_verilog)

    from boards.build import BOARDS, PLACERS, ROUTERS
    build = sub.add_parser("build", help="build a board's bitstream and its report",
                           description="Synthesize, place and route the accelerator for a "
                           "board with YoWASP (or native) Yosys and nextpnr; write the "
                           "bitstream and report.json / report.md into build/boards/BOARD. "
                           "Fails (exit 1) if the design does not fit or misses timing.")
    build.add_argument("--board", required=True, choices=sorted(BOARDS))
    build.add_argument("--preset", choices=sorted(PRESETS), default=None,
                       help="configuration preset (default: the board's)")
    build.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                       help="override a configuration field (repeatable)")
    build.add_argument("--clock", type=float, default=None, metavar="MHZ",
                       help="design clock made by the PLL (default: the board's)")
    build.add_argument("--baud", type=int, default=None,
                       help="UART baud rate (default: the board's)")
    build.add_argument("--target", type=float, default=None, metavar="MHZ",
                       help="nextpnr's timing target for the design clock, at least --clock "
                       "(default: the clock): higher makes its placement and routing work "
                       "harder for the same bitstream clock (--target 90 for --preset "
                       "ulx3s_16x8)")
    build.add_argument("--seed", type=int, default=1, help="nextpnr placement seed")
    build.add_argument("--placer", choices=PLACERS, default=None,
                       help="nextpnr's placer (default heap; static for the large ECP5 "
                            "designs, such as --preset ulx3s_16x8)")
    build.add_argument("--router", choices=ROUTERS, default=None,
                       help="nextpnr's router (default router1; router2 for congested designs "
                            "such as --preset ulx3s_16x8)")
    build.add_argument("--tmg-ripup", action="store_true",
                       help="nextpnr's router also reroutes the paths that miss the timing "
                       "target (use with --target just above the expected fmax; twice the "
                       "routing time, and it may not converge at every seed)")
    build.add_argument("--out", default=None, metavar="DIR",
                       help="output folder (default: build/boards/BOARD)")
    build.add_argument("--allow-timing-fail", action="store_true",
                       help="write the bitstream and exit 0 even if fmax < clock")
    build.set_defaults(func=cmd_build)

    program = sub.add_parser("program", help="flash a built bitstream onto a board",
                             description="Flash with the board's programmer (iceprog for "
                             "the iCEBreaker, openFPGALoader for the ULX3S).")
    program.add_argument("--board", required=True, choices=sorted(BOARDS))
    program.add_argument("--bitstream", default=None,
                         help="bitstream file (default: the last 'attn build' of the board)")
    program.set_defaults(func=cmd_program)

    sweep = sub.add_parser("sweep", help="explore array sizes and widths for a board",
                           description="Build the core with several array sizes for a board "
                           "(in parallel), simulate a layer on each, and write sweep.md, "
                           "sweep.json and sweep.png (throughput against logic).")
    sweep.add_argument("--board", required=True, choices=sorted(BOARDS))
    sweep.add_argument("--arrays", default=None, metavar="RxC,...",
                       help="array sizes (default: 2x2,2x4,4x4,4x8,8x8 on ECP5; "
                       "1x2,2x2,2x4 on iCE40)")
    sweep.add_argument("--preset", choices=sorted(PRESETS), default=None,
                       help="base configuration (default: the board's preset)")
    sweep.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                       help="override a configuration field (repeatable), e.g. --set w_bits=6")
    sweep.add_argument("--vary", action="append", default=[], metavar="FIELD=V1,V2",
                       help="also sweep a width (repeatable; every combination), "
                       "e.g. --vary w_bits=6,8")
    sweep.add_argument("--layer", default="64x64x4", metavar="LxDxH",
                       help="layer shape simulated on each point (default 64x64x4)")
    sweep.add_argument("--seeds", default="1", metavar="S1,S2,...",
                       help="nextpnr placement seeds: each point is built once per seed and "
                       "its fmax is their median (default 1)")
    sweep.add_argument("--placer", choices=PLACERS, default=None,
                       help="nextpnr's placer (default heap)")
    sweep.add_argument("--router", choices=ROUTERS, default=None,
                       help="nextpnr's router (default router1)")
    sweep.add_argument("--target", type=float, default=None, metavar="MHZ",
                       help="nextpnr's timing target for the design clock (default: the "
                       "board's clock; see attn build --target)")
    sweep.add_argument("--tmg-ripup", action="store_true",
                       help="nextpnr's timing-driven rip-up (see attn build --tmg-ripup)")
    sweep.add_argument("--jobs", type=int, default=None,
                       help="parallel builds (default: the number of cores)")
    sweep.add_argument("--sim", default="verilator", choices=("verilator", "amaranth"),
                       help="simulator for the cycle counts (default verilator)")
    sweep.add_argument("--out", default=None, metavar="DIR",
                       help="output folder (default build/sweep/BOARD)")
    sweep.set_defaults(func=cmd_sweep)

    report = sub.add_parser("report", help="the measured figures as Markdown with plots",
                            description="Gather the benchmark, build and sweep results in "
                            "build/ into report.md with PNG plots.")
    report.add_argument("--build", default="build", metavar="DIR",
                        help="where the results are (default build)")
    report.add_argument("--bench-dir", default=None, metavar="DIR",
                        help="benchmark JSON folder (default BUILD/bench)")
    report.add_argument("--out", default="build/report", metavar="DIR",
                        help="output folder (default build/report)")
    report.set_defaults(func=cmd_report)

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
    except OSError as exc:                 # serial ports, the host link, tools
        print(f"attn {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
