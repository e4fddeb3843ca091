"""Backends that execute a quantized layer: the golden model, the core in three simulators, the
whole device co-simulated through its UART, and a flashed board. Each takes the configuration,
the quantized model, the integer input and the mask, and returns a :class:`Result`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from golden import attention_int

__all__ = ["Result", "BACKENDS", "run_backend"]


@dataclass
class Result:
    """Integer output ``y_int`` (L x D), probabilities ``probs`` (H x L x L integers) and the
    cycle count (``None`` for the golden model). The hardware backends return the core's
    output; their probabilities are golden's (the core keeps them on chip)."""

    y_int: np.ndarray
    probs: np.ndarray
    cycles: int | None = None


def _golden(cfg, model, x_int, mask, progress=None) -> Result:
    trace = attention_int(cfg, model, x_int, mask)
    return Result(y_int=trace.y, probs=trace.probs)


def _causal_and_padding(mask, seq_len):
    """The core implements causal and key-padding masks: recover (causal, valid_len) from a
    boolean mask, or raise if the mask is of another kind."""
    from golden import make_mask

    if mask is None:
        return False, None
    mask = np.asarray(mask, dtype=bool)
    for causal in (False, True):
        for valid_len in range(seq_len, -1, -1):
            if np.array_equal(mask, make_mask(seq_len, causal=causal, valid_len=valid_len)):
                return causal, (None if valid_len == seq_len else valid_len)
    raise ValueError("the hardware backends support causal and key-padding masks only; "
                     "this mask is neither")


def _amaranth(cfg, model, x_int, mask, progress=None) -> Result:
    from golden import attention_int
    from sim.core_sim import simulate_core

    causal, valid_len = _causal_and_padding(mask, x_int.shape[0])
    run = simulate_core(cfg, model, x_int, causal=causal, valid_len=valid_len,
                        name="attn_run", progress=progress)
    probs = attention_int(cfg, model, x_int, mask).probs
    return Result(y_int=run.y, probs=probs, cycles=run.cycles)


def _hdl(sim):
    def run(cfg, model, x_int, mask, progress=None) -> Result:
        from golden import attention_int
        from sim.cocotb_runner import simulator_missing
        from sim.core_cocotb import run_core_hdl

        reason = simulator_missing(sim)
        if reason:
            raise ValueError(f"backend {sim!r} is unavailable: {reason}")
        causal, valid_len = _causal_and_padding(mask, x_int.shape[0])
        if progress is not None:
            progress(f"building and simulating the core on {sim}")
        y, info = run_core_hdl(sim, cfg, model, x_int, causal=causal, valid_len=valid_len)
        probs = attention_int(cfg, model, x_int, mask).probs
        return Result(y_int=y, probs=probs, cycles=info["cycles"])
    return run


def _link(open_device):
    def run(cfg, model, x_int, mask, progress=None, **options) -> Result:
        from golden import attention_int

        from .remote import run_on_device

        causal, valid_len = _causal_and_padding(mask, x_int.shape[0])
        with open_device(cfg, **options) as device:
            run = run_on_device(device, cfg, model, x_int, causal=causal,
                                valid_len=valid_len, progress=progress)
        probs = attention_int(cfg, model, x_int, mask).probs
        return Result(y_int=run.y, probs=probs, cycles=run.cycles)
    return run


def _open_cosim(cfg, **options):
    from .remote import open_cosim
    return open_cosim(cfg)


def _open_board(cfg, *, port=None, baud=None, **options):
    from .remote import BOARD_BAUD, open_board
    if not port:
        raise ValueError("backend 'board' needs the board's serial port (--port, e.g. "
                         "/dev/ttyUSB1)")
    return open_board(port, cfg, baud=baud or BOARD_BAUD)


BACKENDS = {"golden": _golden, "amaranth": _amaranth, "icarus": _hdl("icarus"),
            "verilator": _hdl("verilator"), "cosim": _link(_open_cosim),
            "board": _link(_open_board)}


def run_backend(name: str, cfg, model, x_int, mask, progress=None, **options) -> Result:
    """Run ``model`` on backend ``name``; unknown names raise :class:`ValueError`.

    ``cosim`` runs the whole device (UART, host link, core) in the Amaranth simulator through
    the host driver; ``board`` talks to a flashed board and takes ``port=`` (and ``baud=``).
    """
    try:
        backend = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}") \
            from None
    if name in ("cosim", "board"):
        return backend(cfg, model, x_int, mask, progress=progress, **options)
    return backend(cfg, model, x_int, mask, progress=progress)
