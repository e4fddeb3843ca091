"""Byte-wise CRC-16 of the host link, as a combinational Amaranth expression.

The polynomial and initial value come from :mod:`attn.protocol`, the one source of truth shared
with the host driver (:func:`attn.protocol.crc16` is the reference).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Value

from attn.protocol import CRC_INIT, CRC_POLY

__all__ = ["crc16_next", "CRC_INIT"]


def crc16_next(crc, byte) -> Value:
    """The CRC after shifting ``byte`` (8 bits, most significant bit first) into ``crc``.

    Non-reflected CRC-16 with polynomial :data:`attn.protocol.CRC_POLY`: eight unrolled steps
    of the linear feedback shift register, i.e. a 16-bit XOR network of depth about 4 LUTs.
    """
    crc = Value.cast(crc)
    byte = Value.cast(byte)
    if len(crc) != 16 or len(byte) != 8:
        raise ValueError(f"crc16_next needs a 16-bit crc and an 8-bit byte, not {len(crc)} and "
                         f"{len(byte)} bits")
    bits = [crc[i] for i in range(16)]
    for i in reversed(range(8)):
        feedback = bits[15] ^ byte[i]
        shifted = [Const(0, 1)] + bits[:15]
        bits = [shifted[k] ^ feedback if (CRC_POLY >> k) & 1 else shifted[k]
                for k in range(16)]
    return Cat(*bits)
