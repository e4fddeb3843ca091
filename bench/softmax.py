"""Softmax unit benchmark: sustained throughput in simulation, and resources / fmax on FPGAs.

Throughput: ``rows`` rows of one length, streamed with no idle cycles and no backpressure
through the unit's Verilog on Verilator (cocotb, ``tests/hw/cocotb_softmax.py::throughput``;
every output is also checked against golden). Elements per cycle are counted at the output
from its first to its last beat; latency is the cycle of the first output after the first
input was offered.

``--synth``: out-of-context builds (``boards.synth.synthesize``) of the unit and of its divider
alone, on iCE40UP5K (icebreaker preset) and ECP5-85F (ulx3s preset).

Usage::

    python -m bench.softmax [--quick] [--synth] [--sim verilator|icarus]

Writes ``build/bench/softmax.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import attn
from hw.divider import Divider
from hw.softmax import Softmax
from sim.cocotb_runner import BUILD, run_cocotb, simulator_missing, write_verilog

# Array targets from the project plan: the softmax must not limit the core's clock.
TARGET_MHZ = {"ice40": 48.0, "ecp5": 125.0}
PRESET_OF = {"ice40": "icebreaker", "ecp5": "ulx3s"}


def _table(rows: list[dict]) -> str:
    cols = list(rows[0])
    width = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    lines = ["  ".join(c.rjust(width[c]) for c in cols),
             "  ".join("-" * width[c] for c in cols)]
    lines += ["  ".join(str(r[c]).rjust(width[c]) for c in cols) for r in rows]
    return "\n".join(lines)


def throughput(preset: str, lengths, rows: int, sim: str) -> list[dict]:
    cfg = attn.preset(preset)
    dut = Softmax(cfg=cfg)
    path = write_verilog(dut, BUILD / "verilog" / f"softmax_{preset}.v", name="softmax")
    out = BUILD / "bench" / f"softmax_{preset}_throughput.json"
    results = []
    for length in lengths:
        start = time.monotonic()
        run_cocotb(sim=sim, verilog_file=path, toplevel="softmax",
                   test_module="tests.hw.cocotb_softmax", build_name=f"softmax_{preset}",
                   testcase="throughput",
                   params={"cfg": cfg.to_dict(), "seed": 1, "length": length, "rows": rows,
                           "out": str(out)})
        figures = json.loads(out.read_text())
        results.append({"preset": preset, "max_seq_len": cfg.max_seq_len, "length": length,
                        "rows": rows, "elements": figures["elements"],
                        "elements_per_cycle": round(figures["elements_per_cycle"], 4),
                        "first_output_cycle": figures["first_output_cycle"],
                        "buffer_depth": dut.buffer_depth, "queue_depth": dut.queue_depth,
                        "simulator": sim, "seconds": round(time.monotonic() - start, 1)})
    return results


def synth_runs(quick: bool) -> list:
    from boards.synth import format_table, synthesize

    reports = []
    for family in ("ice40", "ecp5"):
        cfg = attn.preset(PRESET_OF[family])
        clock = TARGET_MHZ[family] * 1.25        # ask for more than the target
        units = [(f"softmax_{cfg.name}", Softmax(cfg=cfg))]
        if not quick:
            units.append((f"divider_{cfg.name}",
                          Divider(dividend_bits=cfg.sum_bits + cfg.prob_bits,
                                  divisor_bits=cfg.sum_bits, quotient_bits=cfg.prob_bits,
                                  tag_bits=1)))
        for name, unit in units:
            reports.append(synthesize(unit, family=family, name=name, clock_mhz=clock))
            print(reports[-1], flush=True)
    print()
    print(format_table(reports))
    return reports


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="100 rows, default preset only, no divider-only builds")
    parser.add_argument("--synth", action="store_true",
                        help="also build on iCE40UP5K and ECP5-85F (a few minutes)")
    parser.add_argument("--sim", choices=("verilator", "icarus"), default="verilator")
    args = parser.parse_args(argv)

    reason = simulator_missing(args.sim)
    if reason:
        print(f"cannot simulate on {args.sim}: {reason}", file=sys.stderr)
        return 1
    rows = 100 if args.quick else 1000
    presets = ["default"] if args.quick else ["default", "ulx3s"]
    results = {"throughput": []}
    for preset in presets:
        lmax = attn.preset(preset).max_seq_len
        lengths = sorted({1, 8, 64, lmax})
        results["throughput"] += throughput(preset, lengths, rows, args.sim)
    print(f"Softmax throughput ({args.sim} via cocotb, no stalls; elements per cycle at the "
          f"output)")
    print(_table([{k: r[k] for k in ("preset", "max_seq_len", "length", "rows",
                                     "elements_per_cycle", "first_output_cycle", "seconds")}
                  for r in results["throughput"]]))
    print()

    if args.synth:
        reports = synth_runs(args.quick)
        results["synth"] = [r.as_dict() for r in reports]
        for r in reports:
            target = TARGET_MHZ[r.family]
            verdict = "meets" if r.fmax_mhz and r.fmax_mhz >= target else "MISSES"
            print(f"{r.name}: fmax {r.fmax_mhz:.1f} MHz {verdict} the {target:g} MHz array "
                  f"target on {r.family}")

    path = BUILD / "bench" / "softmax.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
