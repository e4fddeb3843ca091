"""``attn build`` and ``attn program``: a board's bitstream with a report, and flashing it.

:func:`build_board` elaborates :class:`boards.top.BoardTop` for a board and a configuration,
runs Yosys, nextpnr and the packer (YoWASP unless native tools are set up, see
:mod:`boards.toolchain`) in ``build/boards/<board>/``, and writes ``report.json`` and
``report.md`` there: resources used and available, fmax against the PLL clock, build time,
the configuration and the UART settings. :class:`BuildFailed` (with the report written) if
the design does not fit or does not meet timing, unless asked to accept a timing failure.

:func:`program_board` flashes a built bitstream with the programmer amaranth-boards uses
(``iceprog`` for the iCEBreaker, ``openFPGALoader -b ulx3s`` for the ULX3S).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

from .synth import build_top

__all__ = ["BOARDS", "board_spec", "build_board", "program_board", "BuildFailed",
           "report_markdown", "nextpnr_options", "constraint_warning", "BUILD", "PLACERS",
           "ROUTERS"]

BUILD = Path("build") / "boards"
#: nextpnr's placers (``--placer``), its default first.
PLACERS = ("heap", "sa", "static")
#: nextpnr's routers (``--router``), its default first.
ROUTERS = ("router1", "router2")
#: The nextpnr options ``build_board`` passes through, with their choices.
_NEXTPNR_CHOICES = {"placer": PLACERS, "router": ROUTERS}

#: Programmer package hints per command.
_INSTALL = {"iceprog": "apt-get install fpga-icestorm",
            "openFPGALoader": "apt-get install openfpgaloader"}


def _specs() -> dict:
    from . import icebreaker, ulx3s
    return {spec.name: spec for spec in (icebreaker.SPEC, ulx3s.SPEC)}


BOARDS = _specs()


class BuildFailed(RuntimeError):
    """The bitstream does not fit or does not meet timing; ``report`` holds what was
    measured."""

    def __init__(self, message, report):
        super().__init__(message)
        self.report = report


def board_spec(name: str):
    """The :class:`boards.top.BoardSpec` called ``name``; unknown names raise ``ValueError``."""
    try:
        return BOARDS[name]
    except KeyError:
        raise ValueError(f"unknown board {name!r}; choose one of {', '.join(BOARDS)}") \
            from None


def _bitstream_name(spec) -> str:
    return "attn.bin" if spec.family == "ice40" else "attn.bit"


def nextpnr_options(placer: str | None = None, router: str | None = None,
                    timing_ripup: bool = False) -> str:
    """nextpnr's options choosing ``placer`` (one of :data:`PLACERS`) and ``router`` (one of
    :data:`ROUTERS`); ``None`` leaves nextpnr's default. Other names raise ``ValueError``.
    ``timing_ripup`` adds ``--tmg-ripup``: the router also rips up and reroutes the nets of
    paths that miss the clock's constraint (so it matters only when some do, e.g. with a
    timing target above what the design reaches)."""
    chosen = {"placer": placer, "router": router}
    for what, value in chosen.items():
        choices = _NEXTPNR_CHOICES[what]
        if value is not None and value not in choices:
            raise ValueError(f"{what} must be one of {', '.join(choices)}, not {value!r}")
    if not isinstance(timing_ripup, bool):
        raise TypeError(f"timing_ripup must be a bool, not {timing_ripup!r}")
    return " ".join([f"--{what} {value}" for what, value in chosen.items() if value]
                    + ["--tmg-ripup"] * timing_ripup)


def constraint_warning(applied_mhz: float | None, target_mhz: float) -> str | None:
    """The warning for a build whose clock nextpnr timed at ``applied_mhz`` (its report's
    constraint; ``None``: no timing figure) when it was asked for ``target_mhz``, or ``None``
    when they agree: nextpnr ignores, with a mere warning of its own, a constraint on a net it
    cannot find and times the clock at the PLL's frequency instead."""
    if applied_mhz is None or math.isclose(applied_mhz, target_mhz, rel_tol=1e-3):
        return None
    return (f"nextpnr timed the clock at {applied_mhz:g} MHz, not at the target "
            f"{target_mhz:g} MHz (it did not find the constrained net)")


def build_board(spec, cfg, *, clock_mhz: float | None = None, baud: int | None = None,
                target_mhz: float | None = None, seed: int = 1, placer: str | None = None,
                router: str | None = None, timing_ripup: bool = False, out_dir=None,
                allow_timing_fail: bool = False, log=print) -> dict:
    """Build the bitstream of ``spec`` with configuration ``cfg``; return the report dict.

    The bitstream is ``<out_dir>/attn.bin`` (iCE40) or ``attn.bit`` (ECP5); the tool logs are in
    ``<out_dir>/work``. Raises :class:`BuildFailed` if nextpnr cannot place and route the design
    or if the achieved fmax is below the PLL clock (``allow_timing_fail`` accepts the latter).
    ``target_mhz`` (default: the clock) is nextpnr's timing target (:class:`BoardTop`); timing
    is met when fmax reaches the clock, whatever the target.
    ``placer`` and ``router`` pick nextpnr's placer (one of :data:`PLACERS`; ``None``:
    nextpnr's default, heap) and router (one of :data:`ROUTERS`; ``None``: router1). router2
    routes congested designs that router1 takes hours over; the static placer placed the
    16x8 ULX3S device in 14 minutes with a third less wire than heap's 33. ``timing_ripup``
    (:func:`nextpnr_options`) aiming at 90 MHz routed that device at 86.5 / 88.5 MHz at seeds
    1 / 2 instead of 81.2 / 74.8, in twice the routing time; seed 3 did not converge.
    """
    chosen = {"placer": placer, "router": router}
    nextpnr_opts = nextpnr_options(**chosen, timing_ripup=timing_ripup)
    from boards.top import BoardTop
    from hw.device import DeviceMap

    out = Path(out_dir) if out_dir is not None else BUILD / spec.name
    out.mkdir(parents=True, exist_ok=True)
    top = BoardTop(spec, cfg, clock_mhz=clock_mhz, baud=baud, target_mhz=target_mhz)
    say = log or (lambda line: None)
    say(f"attn build: {spec.description}; configuration {cfg.name!r} ({cfg.rows}x{cfg.cols} "
        f"array, Lmax={cfg.max_seq_len}, Dmax={cfg.max_d_model}, Hmax={cfg.max_heads}); "
        f"clock {top.pll.f_out_mhz:g} MHz"
        + (f" (nextpnr's target {top.target_mhz:g} MHz)"
           if top.target_mhz != top.pll.f_out_mhz else "")
        + f", UART {top.baud} baud")
    say("attn build: Yosys, nextpnr and the packer run now (a few minutes for the small "
        "designs, much longer for large ECP5 ones)")
    synth = build_top(top, family=spec.family, name="attn", build_dir=out / "work",
                      seed=seed,
                      nextpnr_opts=nextpnr_opts,
                      dsp=True, bitstream=True, check=False,
                      platform=spec.platform(), log=log)
    bitstream = None
    if synth.routed and synth.logs.get("bitstream"):
        bitstream = out / _bitstream_name(spec)
        shutil.copyfile(synth.logs["bitstream"], bitstream)
    report = {
        "board": spec.name, "description": spec.description, "device": synth.device,
        "family": spec.family, "config": cfg.to_dict(),
        "clock_mhz": top.pll.f_out_mhz, "target_mhz": top.target_mhz, "pll": top.pll.params,
        "baud": top.baud,
        "uart_divisor": top.divisor, "region_kbit": round(DeviceMap(cfg).region_bits() / 1024,
                                                          1),
        "resources": {
            "logic": [synth.lut, synth.lut_total], "ff": [synth.ff, synth.ff_total],
            "dsp": [synth.dsp, synth.dsp_total], "bram": [synth.bram, synth.bram_total],
            "spram": [synth.spram, synth.spram_total] if synth.spram_total else None},
        "fmax_mhz": synth.fmax_mhz,
        # what nextpnr timed the design clock against: the target, if it took the constraint
        "constraint_mhz": synth.constraint_mhz,
        "timing_met": bool(synth.routed and synth.fmax_mhz is not None
                           and synth.fmax_mhz >= top.pll.f_out_mhz),
        "routed": synth.routed, "seconds": round(synth.seconds, 1),
        "synth_seconds": round(synth.synth_seconds, 1),
        "pnr_seconds": round(synth.pnr_seconds, 1), "seed": seed,
        **{what: value or _NEXTPNR_CHOICES[what][0] for what, value in chosen.items()},
        "timing_ripup": timing_ripup,
        "bitstream": str(bitstream) if bitstream else None,
        "bitstream_bytes": bitstream.stat().st_size if bitstream else None,
        "critical_path": synth.critical_path, "error": synth.error,
    }
    warning = constraint_warning(report["constraint_mhz"], top.target_mhz)
    if warning:
        say(f"attn build: warning: {warning}")
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.md").write_text(report_markdown(report))
    say(f"attn build: wrote {out / 'report.json'} and {out / 'report.md'}")
    if not synth.routed:
        lines = (synth.error or "").strip().splitlines()
        raise BuildFailed(f"{spec.name}: the design does not fit or does not route on "
                          f"{synth.device}: {_resource_line(report)}; nextpnr: "
                          f"{lines[-1] if lines else 'failed'}", report)
    if not report["timing_met"] and not allow_timing_fail:
        raise BuildFailed(f"{spec.name}: timing not met: fmax {synth.fmax_mhz:.1f} MHz < "
                          f"{top.pll.f_out_mhz:g} MHz (bitstream written but not safe to "
                          f"use; lower --clock or accept with --allow-timing-fail)", report)
    return report


def _resource_line(report) -> str:
    parts = []
    for name, pair in report["resources"].items():
        if pair:
            parts.append(f"{name} {pair[0]:,}/{pair[1]:,}")
    return ", ".join(parts)


def report_markdown(report) -> str:
    """The Markdown form of a :func:`build_board` report."""
    cfg = report["config"]
    fmax = report["fmax_mhz"]
    lines = [
        f"# {report['board']} build",
        "",
        f"{report['description']}; device {report['device']}.",
        "",
        f"Configuration `{cfg['name']}`: {cfg['rows']}x{cfg['cols']} array, "
        f"Lmax {cfg['max_seq_len']}, Dmax {cfg['max_d_model']}, Hmax {cfg['max_heads']}; "
        f"host-link regions {report['region_kbit']} Kbit; UART {report['baud']:,} baud "
        f"(divisor {report['uart_divisor']}).",
        "",
        "| resource | used | available | % |",
        "|---|---|---|---|",
    ]
    for name, pair in report["resources"].items():
        if pair:
            used, total = pair
            lines.append(f"| {name} | {used:,} | {total:,} | {100 * used / total:.0f} |")
    status = ("met" if report["timing_met"] else
              "NOT MET" if report["routed"] else "not routed")
    fmax_text = f"{fmax:.1f} MHz" if fmax else "n/a"
    target = report.get("target_mhz", report["clock_mhz"])
    if target != report["clock_mhz"]:
        fmax_text += f" (nextpnr's target {target:g} MHz)"
    lines += [
        "",
        f"Clock: {report['clock_mhz']:g} MHz from the PLL ({report['pll']}); nextpnr fmax "
        f"{fmax_text}: timing {status}.",
        "",
        f"Build time {report['seconds']} s (Yosys {report['synth_seconds']} s, nextpnr "
        f"{report['pnr_seconds']} s), seed {report['seed']}, "
        f"{report.get('placer', PLACERS[0])} placer, {report.get('router', ROUTERS[0])}"
        + (" with timing-driven rip-up" if report.get("timing_ripup") else "") + ".",
        "",
        f"Bitstream: {report['bitstream'] or 'none'}"
        + (f" ({report['bitstream_bytes']:,} bytes)" if report["bitstream_bytes"] else ""),
    ]
    if report.get("error"):
        lines += ["", "```", report["error"].strip()[-2000:], "```"]
    return "\n".join(lines) + "\n"


def program_board(spec, bitstream=None, *, log=print) -> None:
    """Flash ``bitstream`` (default: the last build's) onto the board of ``spec``.

    Raises ``ValueError`` if there is no bitstream, ``FileNotFoundError`` if the programmer is
    not installed, ``RuntimeError`` if it fails (no board connected, permissions).
    """
    path = Path(bitstream) if bitstream else BUILD / spec.name / _bitstream_name(spec)
    if not path.is_file():
        raise ValueError(f"no bitstream at {path}; run 'attn build --board {spec.name}' first")
    env = {"iceprog": "ICEPROG", "openFPGALoader": "OPENFPGALOADER"}[spec.programmer]
    tool = os.environ.get(env, spec.programmer)
    if shutil.which(tool) is None:
        raise FileNotFoundError(f"the programmer {tool!r} is not installed "
                                f"({_INSTALL[spec.programmer]}; or set {env})")
    argv = [tool, str(path)] if spec.programmer == "iceprog" else \
        [tool, "-b", "ulx3s", "-m", str(path)]
    (log or (lambda line: None))(f"attn program: {' '.join(argv)}")
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
        raise RuntimeError(f"{tool} failed with exit code {proc.returncode} (is the "
                           f"{spec.name} connected and accessible?):\n{tail}")
