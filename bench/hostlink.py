"""Host link benchmark: the HostLink and the UART, out of context, on iCE40UP5K and ECP5-85F.

For each family it takes the board built on it (``boards.build.BOARDS``: iCEBreaker for
``ice40``, ULX3S for ``ecp5``) and builds with :func:`boards.synth.synthesize`:

- ``link_<preset>``: the :class:`hw.hostlink.HostLink` exactly as the board's device holds it,
  ``BoardTop(spec, preset(spec.preset)).device.link``: the regions of the board's preset
  (``hw.device.DeviceMap``), its run layout, the core's counters, the frame timeout at the
  board's PLL clock and the core's access to each region (so the read-only and write-only
  regions go to SPRAM on the iCE40UP5K as in the whole device);
- ``uart_div<N>``: the :class:`hw.uart.UART` at the board's divisor (PLL clock / baud).

Both are built as the board builds are (``dsp=True``, seed 1), at a clock constraint a little
above what they reach (:data:`LINK_MHZ`, :data:`UART_MHZ`); the report gives nextpnr's fmax.
The link's region ports, which the core drives in the device, are driven by the wrapper's
input chain and observed by its output tree: its counts include the wrapper's registers
(``LUT dut`` / ``FF dut`` subtract them). A build that does not fit or route is reported as
failed, not raised.

Usage::

    python -m bench.hostlink [--family ice40|ecp5|both] [--quick] [--seed N] [--build-dir DIR]

``--quick``: the UART only, on one family (``ice40`` unless ``--family`` says otherwise),
under a minute. Writes ``build/bench/hostlink.json``; the builds go to
``build/synth/<family>/<name>`` (or ``DIR/<family>/<name>``).
"""

from __future__ import annotations

import argparse
import sys
import time

import attn
from boards.toolchain import FAMILIES

from .common import write_json

#: Clock constraints (MHz): a little above what each design reaches.
LINK_MHZ = {"ice40": 30.0, "ecp5": 100.0}
UART_MHZ = {"ice40": 90.0, "ecp5": 300.0}


def board_of(family: str):
    """The board spec (``boards.top.BoardSpec``) built on ``family``."""
    from boards.build import BOARDS
    for spec in BOARDS.values():
        if spec.family == family:
            return spec
    raise ValueError(f"no board of family {family!r}")


def _silence(*elaboratables) -> None:
    # The board top, the device and its core are built only to take the link out of them:
    # they are never elaborated, which Amaranth would warn about.
    for item in elaboratables:
        item._MustUse__silence = True


def designs(family: str, quick: bool) -> list[dict]:
    """The designs to build on ``family``: ``{"name", "kind", "component", "clock_mhz", ...}``."""
    from boards.top import BoardTop
    from hw.uart import UART

    spec = board_of(family)
    cfg = attn.preset(spec.preset)
    top = BoardTop(spec, cfg)
    device = top.device
    _silence(top, device, device.core, *([device.link] if quick else []))
    context = {"board": spec.name, "preset": cfg.name, "pll_mhz": top.pll.f_out_mhz,
               "baud": top.baud, "divisor": top.divisor}
    out = []
    if not quick:
        link = device.link
        regions = [{"name": r.name, "width": r.width, "depth": r.depth,
                    "kbit": round(r.width * r.depth / 1024, 2),
                    "core_access": link.access[r.name]} for r in link.regions]
        out.append({"name": f"link_{cfg.name}", "kind": "HostLink", "component": link,
                    "clock_mhz": LINK_MHZ[family], **context, "regions": regions,
                    "region_kbit": round(device.map.region_bits() / 1024, 1),
                    "counters": link.n_counters, "timeout_cycles": link.timeout_cycles,
                    "max_payload": link.max_payload, "run_bits": link.run_bits})
    out.append({"name": f"uart_div{top.divisor}", "kind": "UART",
                "component": UART(divisor=top.divisor), "clock_mhz": UART_MHZ[family],
                **context})
    return out


def run(families, *, quick: bool, seed: int = 1, build_dir=None) -> list[dict]:
    """Build every design of ``families`` one after the other; the JSON rows."""
    from pathlib import Path

    from boards.synth import synthesize

    rows = []
    for family in families:
        for design in designs(family, quick):
            component = design.pop("component")
            where = None if build_dir is None else Path(build_dir) / family / design["name"]
            report = synthesize(component, family=family, name=design["name"],
                                clock_mhz=design["clock_mhz"], build_dir=where, seed=seed,
                                dsp=True, check=False)
            print(report, flush=True)
            if design["kind"] == "HostLink":
                # set by the elaboration the build just made
                design["spram_regions"] = sorted(getattr(component, "spram_regions", ()))
            rows.append({**design, "family": family, "report": report})
    return rows


def main(argv=None) -> int:
    from boards.synth import format_table
    from boards.toolchain import ToolchainError

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", choices=(*FAMILIES, "both"), default=None,
                        help="which FPGA family (default: both; ice40 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="the UART only, on one family (under a minute)")
    parser.add_argument("--seed", type=int, default=1, help="nextpnr placement seed")
    parser.add_argument("--build-dir", default=None,
                        help="build in DIR/<family>/<name> instead of build/synth")
    args = parser.parse_args(argv)
    family = args.family or ("ice40" if args.quick else "both")
    families = FAMILIES if family == "both" else (family,)

    start = time.monotonic()
    try:
        rows = run(families, quick=args.quick, seed=args.seed, build_dir=args.build_dir)
    except ToolchainError as exc:
        print(f"cannot build: {exc}", file=sys.stderr)
        return 1
    seconds = time.monotonic() - start

    print()
    print(format_table([r["report"] for r in rows]))
    for r in rows:
        if r["kind"] == "HostLink":
            parts = ", ".join(f"{g['name']} {g['width']}x{g['depth']} ({g['core_access']})"
                              for g in r["regions"])
            print(f"{r['name']} ({r['board']}): regions {parts}: {r['region_kbit']} kbit; "
                  f"SPRAM: {', '.join(r['spram_regions']) or 'none'}")
    print(f"total {seconds:.0f} s")

    write_json("hostlink", {"families": list(families), "quick": args.quick,
                            "seed": args.seed, "seconds": round(seconds, 1),
                            "designs": [{**{k: v for k, v in r.items() if k != "report"},
                                         "report": r["report"].as_dict()} for r in rows]})
    return 0 if all(r["report"].routed for r in rows) else 2


if __name__ == "__main__":
    sys.exit(main())
