"""8N1 UART: receiver, transmitter and both together, at a fixed clocks-per-bit divisor.

The divisor is computed from the clock frequency and the baud rate by :func:`uart_divisor`
(e.g. 3 Mbaud at 48 MHz: 16 clocks per bit). The receiver synchronizes its input with two
flip-flops, samples each bit in its middle, and flags a framing error when the stop bit is 0.
Neither side can hold the serial line back: the receiver has a one-byte output register and
drops (and flags) a byte that finds it still full.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

from .target import one_hot_on_ecp5

__all__ = ["rx_layout", "uart_divisor", "UARTRx", "UARTTx", "UART", "MIN_DIVISOR"]

#: Smallest clocks-per-bit the receiver samples reliably (synchronizer + mid-bit sampling).
MIN_DIVISOR = 4

#: Payload of received bytes: the byte and whether its stop bit was 0 (framing error).
rx_layout = data.StructLayout({"data": 8, "error": 1})


def uart_divisor(clk_hz: float, baud: float, *, tolerance: float = 0.02) -> int:
    """Clocks per bit for ``baud`` at ``clk_hz``: the nearest integer.

    Raises
    ------
    ValueError
        If the divisor is below :data:`MIN_DIVISOR` or the resulting baud rate is off by more
        than ``tolerance`` (relative); the message names ``clk_hz`` and ``baud``.
    """
    for name, value in (("clk_hz", clk_hz), ("baud", baud)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name} must be a positive number, not {value!r}")
    divisor = round(clk_hz / baud)
    if divisor < MIN_DIVISOR:
        raise ValueError(f"baud {baud} at clk_hz {clk_hz} gives {clk_hz / baud:.2f} clocks per "
                         f"bit; the UART needs at least {MIN_DIVISOR}")
    error = abs(clk_hz / divisor - baud) / baud
    if error > tolerance:
        raise ValueError(f"baud {baud} at clk_hz {clk_hz}: nearest divisor {divisor} is off by "
                         f"{error:.1%} (more than {tolerance:.1%})")
    return divisor


def _check_divisor(divisor):
    if not isinstance(divisor, int) or isinstance(divisor, bool):
        raise TypeError(f"divisor must be an int, not {divisor!r}")
    if divisor < MIN_DIVISOR:
        raise ValueError(f"divisor must be at least {MIN_DIVISOR}, not {divisor!r}")


class UARTRx(wiring.Component):
    """8N1 receiver.

    Parameters
    ----------
    divisor : int
        Clocks per bit (at least :data:`MIN_DIVISOR`); see :func:`uart_divisor`.

    Members
    -------
    rx : In(1)
        The serial input (idle high); asynchronous, synchronized inside.
    o_stream : Out(stream.Signature(rx_layout))
        One beat per received byte; ``error`` is set if its stop bit was 0 (after such a byte
        the receiver waits for the line to go high again before looking for a start bit).
    overrun : Out(1)
        Pulses when a byte is dropped because the previous one was not yet taken.

    Raises
    ------
    TypeError, ValueError
        If ``divisor`` is not an int of at least :data:`MIN_DIVISOR`.
    """

    def __init__(self, *, divisor: int):
        _check_divisor(divisor)
        self.divisor = divisor
        super().__init__({"rx": In(1, init=1), "o_stream": Out(stream.Signature(rx_layout)),
                          "overrun": Out(1)})

    def elaborate(self, platform):
        m = Module()
        rx = Signal(init=1)
        m.submodules.sync = FFSynchronizer(self.rx, rx, init=1)

        timer = Signal(range(self.divisor))
        expire = Signal()
        bit = Signal(range(8))
        shreg = Signal(8)
        m.d.comb += expire.eq(timer == 0)
        m.d.sync += timer.eq(timer - 1)

        emit = Signal()
        with m.If(self.o_stream.ready):
            m.d.sync += self.o_stream.valid.eq(0)
        with m.If(emit):
            with m.If(self.o_stream.valid & ~self.o_stream.ready):
                m.d.comb += self.overrun.eq(1)
            with m.Else():
                m.d.sync += [self.o_stream.valid.eq(1),
                             self.o_stream.payload.data.eq(shreg),
                             self.o_stream.payload.error.eq(~rx)]

        with m.FSM() as fsm:
            with m.State("IDLE"):
                with m.If(~rx):
                    m.d.sync += timer.eq(self.divisor // 2 - 1)
                    m.next = "START"
            with m.State("START"):
                with m.If(expire):
                    m.d.sync += [timer.eq(self.divisor - 1), bit.eq(0)]
                    m.next = "DATA"
                    with m.If(rx):  # the line went back high: a glitch, not a start bit
                        m.next = "IDLE"
            with m.State("DATA"):
                with m.If(expire):
                    m.d.sync += [timer.eq(self.divisor - 1), shreg.eq(Cat(shreg[1:], rx)),
                                 bit.eq(bit + 1)]
                    with m.If(bit == 7):
                        m.next = "STOP"
            with m.State("STOP"):
                with m.If(expire):
                    m.d.comb += emit.eq(1)
                    m.next = "IDLE"
                    with m.If(~rx):
                        m.next = "BREAK"
            with m.State("BREAK"):
                with m.If(rx):
                    m.next = "IDLE"
        one_hot_on_ecp5(fsm, platform)
        return m


class UARTTx(wiring.Component):
    """8N1 transmitter.

    Parameters
    ----------
    divisor : int
        Clocks per bit (at least :data:`MIN_DIVISOR`).

    Members
    -------
    i_stream : In(stream.Signature(8))
        Bytes to send; a byte is taken when the previous stop bit has ended, so bytes offered
        back to back leave without gaps (10 bit times per byte).
    tx : Out(1)
        The serial output (idle high, registered).

    Raises
    ------
    TypeError, ValueError
        If ``divisor`` is not an int of at least :data:`MIN_DIVISOR`.
    """

    def __init__(self, *, divisor: int):
        _check_divisor(divisor)
        self.divisor = divisor
        super().__init__({"i_stream": In(stream.Signature(8)), "tx": Out(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        timer = Signal(range(self.divisor))
        remaining = Signal(range(11))   # bit periods left, the current one included
        shreg = Signal(9)
        with m.If(remaining == 0):
            m.d.comb += self.i_stream.ready.eq(1)
            with m.If(self.i_stream.valid):
                m.d.sync += [self.tx.eq(0), shreg.eq(Cat(self.i_stream.payload, Const(1, 1))),
                             remaining.eq(10), timer.eq(self.divisor - 1)]
        with m.Elif(timer == 0):
            m.d.sync += [timer.eq(self.divisor - 1), remaining.eq(remaining - 1)]
            with m.If(remaining != 1):
                m.d.sync += [self.tx.eq(shreg[0]), shreg.eq(shreg >> 1)]
        with m.Else():
            m.d.sync += timer.eq(timer - 1)
        return m


class UART(wiring.Component):
    """Receiver and transmitter at the same divisor.

    Parameters
    ----------
    divisor : int
        Clocks per bit (at least :data:`MIN_DIVISOR`).

    Members
    -------
    rx : In(1)
        Serial input.
    tx : Out(1)
        Serial output.
    o_stream : Out(stream.Signature(rx_layout))
        Received bytes (see :class:`UARTRx`).
    i_stream : In(stream.Signature(8))
        Bytes to send (see :class:`UARTTx`).
    overrun : Out(1)
        See :class:`UARTRx`.
    """

    def __init__(self, *, divisor: int):
        _check_divisor(divisor)
        self.divisor = divisor
        super().__init__({"rx": In(1, init=1), "tx": Out(1, init=1),
                          "o_stream": Out(stream.Signature(rx_layout)),
                          "i_stream": In(stream.Signature(8)), "overrun": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.receiver = receiver = UARTRx(divisor=self.divisor)
        m.submodules.transmitter = transmitter = UARTTx(divisor=self.divisor)
        m.d.comb += [receiver.rx.eq(self.rx), self.tx.eq(transmitter.tx),
                     self.overrun.eq(receiver.overrun)]
        wiring.connect(m, receiver.o_stream, wiring.flipped(self.o_stream))
        wiring.connect(m, wiring.flipped(self.i_stream), transmitter.i_stream)
        return m
