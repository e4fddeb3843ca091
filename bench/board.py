"""Boards: resources, fmax and build time of each board's bitstream, and the end-to-end time
of the reference layer (L = 64, D = 64, H = 4; on a preset too small for it, the preset's
largest layer) split into transfer and compute.

    python -m bench.board [--build] [--sim verilator|amaranth]

Resources, fmax and build time come from the board's ``attn build`` report
(``build/boards/<board>/report.json``; ``--build`` runs the builds first). Compute is the
core's cycle count for the reference layer, simulated on the board's preset (bit-exact with
golden/), at the PLL clock. Transfer is the exact byte count the host driver exchanges for the
run (:func:`attn.remote.link_traffic`, checked against the co-simulated UART by the tests) at
the board's baud rate, 10 bits a byte; each request/reply round trip also waits for the USB
adapter, about 1 ms on an FTDI part at its default latency timer, given separately.
"""

from __future__ import annotations

import argparse
import json

from attn import preset
from attn.remote import link_traffic
from boards.build import BOARDS, BUILD, BuildFailed, build_board

from .common import print_table, write_json
from .core import LAYERS, make_layer

USB_ROUND_TRIP_S = 1e-3


def board_layer(cfg) -> tuple:
    """(L, D, H) measured on ``cfg``: the reference layer, or ``cfg``'s largest if it cannot
    hold that."""
    try:
        cfg.check_shape(*LAYERS["reference"])
        return LAYERS["reference"]
    except ValueError:
        return cfg.max_seq_len, cfg.max_d_model, cfg.max_heads


def reference_cycles(cfg, sim: str) -> int:
    """Cycles of :func:`board_layer` on ``cfg``'s core (checked exact against golden)."""
    import numpy as np

    shape = board_layer(cfg)
    qm, xi, expected = make_layer(cfg, *shape)
    if sim == "amaranth":
        from sim.core_sim import simulate_core
        run = simulate_core(cfg, qm, xi, causal=True, name=f"bench_board_{cfg.name}")
        y, cycles = run.y, run.cycles
    else:
        from sim.core_cocotb import run_core_hdl
        y, info = run_core_hdl(sim, cfg, qm, xi, causal=True,
                               build_name=f"bench_board_{cfg.name}")
        cycles = info["cycles"]
    if not np.array_equal(y, expected.y):
        raise AssertionError(f"{cfg.name}: the core's reference output differs from golden")
    return cycles


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="store_true", help="run attn build for each board")
    parser.add_argument("--sim", default="verilator", choices=("verilator", "amaranth"))
    args = parser.parse_args(argv)

    rows = []
    for name, spec in BOARDS.items():
        cfg = preset(spec.preset)
        path = BUILD / name / "report.json"
        if args.build:
            try:
                build_board(spec, cfg)
            except BuildFailed as exc:
                print(f"{name}: {exc}")
        report = json.loads(path.read_text()) if path.exists() else None
        if report is not None and report["config"] != cfg.to_dict():
            print(f"{name}: {path} is a build of another configuration; ignored")
            report = None
        seq_len, d_model, heads = board_layer(cfg)
        traffic = link_traffic(cfg, seq_len, d_model, heads)
        cycles = reference_cycles(cfg, args.sim)
        clock = report["clock_mhz"] if report else spec.clock_mhz
        routed = bool(report and report["routed"])
        baud = report["baud"] if report else spec.baud
        bytes_total = traffic["to_device"] + traffic["from_device"]
        row = dict(
            board=name, preset=cfg.name, array=f"{cfg.rows}x{cfg.cols}",
            layer=f"{seq_len}x{d_model}x{heads}",
            built="yes" if routed else ("does not fit/route" if report else "not built"),
            logic=f"{report['resources']['logic'][0]:,}/{report['resources']['logic'][1]:,}"
            if report else "", dsp=f"{report['resources']['dsp'][0]}" if report else "",
            bram=f"{report['resources']['bram'][0]}" if report else "",
            fmax=f"{report['fmax_mhz']:.1f}" if report and report["fmax_mhz"] else "",
            clock=f"{clock:g}", build_s=f"{report['seconds']:.0f}" if report else "",
            cycles=f"{cycles:,}", compute_ms=f"{cycles / clock / 1e3:.2f}",
            transfer_kb=f"{bytes_total / 1024:.1f}",
            transfer_ms=f"{bytes_total * 10 / baud * 1e3:.0f}",
            usb_ms=f"{traffic['round_trips'] * USB_ROUND_TRIP_S * 1e3:.0f}",
            total_ms=f"{(bytes_total * 10 / baud + traffic['round_trips'] * USB_ROUND_TRIP_S + cycles / clock / 1e6) * 1e3:.0f}",  # noqa: E501
        )
        row["_data"] = dict(report=report, traffic=traffic, cycles=cycles, clock_mhz=clock,
                            baud=baud)
        rows.append(row)
    columns = ["board", "preset", "array", "layer", "built", "logic", "dsp", "bram", "fmax",
               "clock", "build_s", "cycles", "compute_ms", "transfer_kb", "transfer_ms", "usb_ms",
               "total_ms"]
    print_table(rows, columns, "Boards: a layer end to end (L x D x H)")
    write_json("board", {"rows": [{k: v for k, v in r.items() if k != "_data"} | r["_data"]
                                  for r in rows]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
