"""Backends that execute a quantized layer: the golden model now, the simulated and real
hardware as they land. Each takes the configuration, the quantized model, the integer input
and the mask, and returns a :class:`Result`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from golden import attention_int

__all__ = ["Result", "BACKENDS", "run_backend"]


@dataclass
class Result:
    """Integer output ``y_int`` (L x D), probabilities ``probs`` (H x L x L integers) and the
    cycle count (``None`` for the golden model)."""

    y_int: np.ndarray
    probs: np.ndarray
    cycles: int | None = None


def _golden(cfg, model, x_int, mask, progress=None) -> Result:
    trace = attention_int(cfg, model, x_int, mask)
    return Result(y_int=trace.y, probs=trace.probs)


BACKENDS = {"golden": _golden}


def run_backend(name: str, cfg, model, x_int, mask, progress=None) -> Result:
    """Run ``model`` on backend ``name``; unknown names raise :class:`ValueError`."""
    try:
        backend = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}") \
            from None
    return backend(cfg, model, x_int, mask, progress=progress)
