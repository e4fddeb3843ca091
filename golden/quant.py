"""Integer quantization primitives: saturation, rounding shifts and requantization.

These functions are the arithmetic contract shared by every stage (docs/numerics.md, section
"Requantization"). They work on NumPy ``int64`` arrays; callers guarantee that products fit,
which :class:`attn.AttnConfig` checks (``acc_bits + mult_bits <= 62``).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["qmax", "qmin", "saturate", "round_shift", "requantize", "quantize_multiplier",
           "symmetric_scale", "quantize", "matmul_exact"]


def qmax(bits: int) -> int:
    """Largest value of a signed ``bits``-bit integer."""
    return (1 << (bits - 1)) - 1


def qmin(bits: int) -> int:
    """Smallest value of a signed ``bits``-bit integer."""
    return -(1 << (bits - 1))


def saturate(x, bits: int) -> np.ndarray:
    """Clamp to the signed ``bits``-bit range ``[-2**(bits-1), 2**(bits-1) - 1]``."""
    return np.clip(np.asarray(x, dtype=np.int64), qmin(bits), qmax(bits))


def round_shift(x, shift, rounding: str) -> np.ndarray:
    """``x / 2**shift`` rounded to an integer; ``shift >= 0`` (scalar or broadcastable array).

    ``"half_up"`` rounds ties towards +infinity: ``(x + 2**(shift-1)) >> shift``.
    ``"half_even"`` rounds ties to the even neighbour. ``shift == 0`` returns ``x``.
    """
    x = np.asarray(x, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    if np.any(shift < 0):
        raise ValueError(f"shift must be non-negative, not {shift.min()}")
    positive = shift > 0
    half = np.where(positive, np.left_shift(1, np.maximum(shift - 1, 0)), 0)
    if rounding == "half_up":
        return np.right_shift(x + half, shift)
    if rounding == "half_even":
        q = np.right_shift(x, shift)
        r = x - np.left_shift(q, shift)
        up = positive & ((r > half) | ((r == half) & (q & 1 == 1)))
        return q + up
    raise ValueError(f"rounding must be 'half_up' or 'half_even', not {rounding!r}")


def requantize(acc, multiplier, shift, bits: int, rounding: str) -> np.ndarray:
    """``saturate(round_shift(acc * multiplier, shift), bits)``: the requantization rule.

    ``multiplier`` and ``shift`` broadcast against ``acc`` (per output channel on the last
    axis, or per head on the first).
    """
    prod = np.asarray(acc, dtype=np.int64) * np.asarray(multiplier, dtype=np.int64)
    return saturate(round_shift(prod, shift, rounding), bits)


def quantize_multiplier(real: float, mult_bits: int, max_shift: int) -> tuple[int, int]:
    """Integer ``(M, S)`` with ``M / 2**S`` nearest to ``real`` and ``M`` of ``mult_bits`` bits.

    ``M`` is normalized to ``[2**(mult_bits-1), 2**mult_bits)`` unless that needs a shift above
    ``max_shift``, in which case ``S = max_shift`` and ``M`` is smaller (possibly 0).

    Raises
    ------
    ValueError
        If ``real`` is negative or not finite, or too large for a non-negative shift.
    """
    if not math.isfinite(real) or real < 0:
        raise ValueError(f"requantization multiplier must be finite and >= 0, not {real!r}")
    if real == 0:
        return 0, 0
    shift = mult_bits - 1 - math.floor(math.log2(real))
    if shift > max_shift:
        shift = max_shift
    mult = round(real * 2.0 ** shift)
    if mult >= 1 << mult_bits:
        mult, shift = round(real * 2.0 ** (shift - 1)), shift - 1
    if shift < 0:
        raise ValueError(f"requantization multiplier {real!r} is too large for "
                         f"{mult_bits}-bit multipliers")
    return int(mult), int(shift)


def symmetric_scale(max_abs, bits: int) -> np.ndarray:
    """Scale that maps ``[-max_abs, max_abs]`` onto ``[-qmax, qmax]``; zero ranges get 1.0."""
    max_abs = np.asarray(max_abs, dtype=np.float64)
    return np.where(max_abs > 0, max_abs / qmax(bits), 1.0)


def quantize(x, scale, bits: int) -> np.ndarray:
    """``saturate(rint(x / scale), bits)``: float to signed integer, ties to even."""
    return saturate(np.rint(np.asarray(x, dtype=np.float64) / scale), bits)


def matmul_exact(a, b) -> np.ndarray:
    """Exact integer ``a @ b`` as ``int64``.

    Uses float64 BLAS when every partial sum is an integer below ``2**53`` in magnitude (then
    any summation order is exact), else NumPy's integer matmul.
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    bound = int(np.abs(a).max(initial=0)) * int(np.abs(b).max(initial=0)) * a.shape[-1]
    if bound < 1 << 53:
        return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.int64)
    return np.matmul(a, b)
