"""Behavioural model of a UART peer (8N1) for Amaranth async testbenches.

:func:`uart_send` drives a serial line bit by bit; :func:`uart_receive` waits for a start bit
on a line and samples the byte in the middle of each bit. Both count in clock cycles of the
``sync`` domain (``divisor`` cycles per bit).
"""

from __future__ import annotations

__all__ = ["uart_send", "uart_receive"]


async def _ticks(ctx, n: int) -> None:
    # Plain ticks rather than ``ctx.tick().repeat(n)``: a background testbench left suspended
    # inside ``repeat`` when the simulator is dropped makes Python print an ``aclose()`` error.
    for _ in range(n):
        await ctx.tick()


async def uart_send(ctx, line, byte: int, divisor: int, *, stop_bit: int = 1,
                    bit_cycles=None) -> None:
    """Drive ``byte`` on ``line`` (start bit, 8 data bits LSB first, stop bit), then idle high.

    ``stop_bit=0`` sends a framing error. ``bit_cycles``, if given, is a list of 10 cycle counts
    used instead of ``divisor`` for each bit (to model a peer at another baud rate).
    """
    bits = [0] + [(byte >> i) & 1 for i in range(8)] + [stop_bit]
    for i, bit in enumerate(bits):
        ctx.set(line, bit)
        await _ticks(ctx, bit_cycles[i] if bit_cycles else divisor)
    ctx.set(line, 1)


async def uart_receive(ctx, line, divisor: int) -> tuple:
    """Wait for a start bit on ``line`` and return ``(byte, stop_bit)``.

    The line is sampled in the middle of each bit; the function returns in the middle of the
    stop bit, so a following start bit is not missed.
    """
    if ctx.get(line):
        await ctx.negedge(line)
    await _ticks(ctx, divisor // 2)
    byte = 0
    for i in range(8):
        await _ticks(ctx, divisor)
        byte |= ctx.get(line) << i
    await _ticks(ctx, divisor)
    return byte, ctx.get(line)
