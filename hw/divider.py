"""Pipelined unsigned integer divider: one quotient per cycle, saturating on overflow.

The divider is a chain of ``quotient_bits`` restoring-division steps, one quotient bit per step,
with a register after every ``bits_per_stage`` steps, followed by a one-entry skid buffer. Every
stage holds its own copy of the divisor, so consecutive beats may use different divisors.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Divider", "divider_input_layout", "divider_output_layout"]

_MAX_BITS = 64


def _check_bits(name: str, value, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not {value!r}")
    if not minimum <= value <= _MAX_BITS:
        raise ValueError(f"{name} must be between {minimum} and {_MAX_BITS}, not {value!r}")
    return value


def divider_input_layout(dividend_bits: int, divisor_bits: int, tag_bits: int = 0):
    """Payload of :attr:`Divider.i_stream`: ``dividend``, ``divisor`` and a pass-through ``tag``."""
    return data.StructLayout({"dividend": unsigned(dividend_bits),
                              "divisor": unsigned(divisor_bits),
                              "tag": unsigned(tag_bits)})


def divider_output_layout(quotient_bits: int, tag_bits: int = 0):
    """Payload of :attr:`Divider.o_stream`: ``quotient`` and the ``tag`` given with the operands."""
    return data.StructLayout({"quotient": unsigned(quotient_bits), "tag": unsigned(tag_bits)})


class Divider(wiring.Component):
    """Pipelined unsigned divider, ``quotient = min(dividend // divisor, 2**quotient_bits - 1)``.

    One division enters and one leaves per cycle while the consumer is ready. A divisor of 0
    gives ``2**quotient_bits - 1`` (the saturated quotient), like any other overflow. The
    ``tag`` travels with its operands unchanged (for instance a ``last`` bit).

    Parameters
    ----------
    dividend_bits : int
        Unsigned width of the dividend, 1..64.
    divisor_bits : int
        Unsigned width of the divisor, 1..64.
    quotient_bits : int
        Unsigned width of the quotient, 1..64.
    tag_bits : int
        Width of the pass-through tag, 0..64 (default 0).
    bits_per_stage : int
        Quotient bits (restoring steps) per pipeline stage, 1..4 (default 1): the pipeline has
        ``ceil(quotient_bits / bits_per_stage)`` stages. More bits per stage take fewer
        flip-flops (an iCE40 spends a logic cell on each) and a longer combinational path.

    Members
    -------
    i_stream : In(stream.Signature(divider_input_layout(...)))
        Operands ``{dividend, divisor, tag}``.
    o_stream : Out(stream.Signature(divider_output_layout(...)))
        Results ``{quotient, tag}``, in the order the operands came.

    Attributes
    ----------
    latency : int
        Cycles from the cycle an operand beat is accepted to the cycle its result is first
        valid, when the consumer does not stall: the number of stages,
        ``ceil(quotient_bits / bits_per_stage)``.

    Notes
    -----
    ``i_stream.ready`` is a register output (the skid buffer is empty); it does not depend
    combinationally on ``o_stream.ready``.

    Raises
    ------
    TypeError
        If a parameter is not an int; the message names it and the value given.
    ValueError
        If a parameter is out of range; the message names it and the value given.
    """

    def __init__(self, *, dividend_bits: int, divisor_bits: int, quotient_bits: int,
                 tag_bits: int = 0, bits_per_stage: int = 1):
        self.dividend_bits = _check_bits("dividend_bits", dividend_bits, 1)
        self.divisor_bits = _check_bits("divisor_bits", divisor_bits, 1)
        self.quotient_bits = _check_bits("quotient_bits", quotient_bits, 1)
        self.tag_bits = _check_bits("tag_bits", tag_bits, 0)
        if not isinstance(bits_per_stage, int) or isinstance(bits_per_stage, bool):
            raise TypeError(f"bits_per_stage must be an int, not {bits_per_stage!r}")
        if not 1 <= bits_per_stage <= 4:
            raise ValueError(f"bits_per_stage must be between 1 and 4, not {bits_per_stage!r}")
        self.bits_per_stage = bits_per_stage
        super().__init__({
            "i_stream": In(stream.Signature(
                divider_input_layout(dividend_bits, divisor_bits, tag_bits))),
            "o_stream": Out(stream.Signature(divider_output_layout(quotient_bits, tag_bits))),
        })

    @property
    def latency(self) -> int:
        return -(-self.quotient_bits // self.bits_per_stage)

    def elaborate(self, platform):
        m = Module()
        nb, db, qb, tb = self.dividend_bits, self.divisor_bits, self.quotient_bits, self.tag_bits

        # The whole pipeline moves when the skid buffer is empty (a register: no combinational
        # path from o_stream.ready to i_stream.ready).
        skid_valid = Signal()
        advance = Signal()
        m.d.comb += [advance.eq(~skid_valid), self.i_stream.ready.eq(advance)]

        dividend = self.i_stream.payload.dividend
        divisor = self.i_stream.payload.divisor

        # Overflow (or division by zero): dividend >= divisor * 2**qb  <=>  dividend >> qb >=
        # divisor. Without overflow the partial remainder before the stage of quotient bit i is
        # below divisor * 2**(i + 1), so it fits in divisor_bits + i + 1 bits.
        overflow = Signal()
        m.d.comb += overflow.eq((dividend >> qb) >= divisor)

        rem = Signal(min(nb, db + qb), name="rem_in")
        m.d.comb += rem.eq(dividend)
        div = divisor
        quo = Const(0, 0)
        valid = self.i_stream.valid
        ovf = overflow
        tag = self.i_stream.payload.tag
        step = self.bits_per_stage
        for i in reversed(range(qb)):
            # Quotient bit i: compare rem >> i with the divisor (rem >> i < 2 * divisor).
            high = Signal(db + 1, name=f"high{i}")
            m.d.comb += high.eq(rem >> i)
            diff = Signal(db + 2, name=f"diff{i}")
            m.d.comb += diff.eq(high - div)
            bit = Signal(name=f"bit{i}")
            m.d.comb += bit.eq(~diff[-1])
            kept = Signal(db + 1, name=f"kept{i}")
            m.d.comb += kept.eq(Mux(bit, diff[:db + 1], high))

            if i % step:
                # no register after this step: the next step works on its results directly
                rem, quo = Cat(rem[:i], kept), Cat(bit, quo)
                continue
            # Stage registers (datapath without reset; only the valid bit is reset).
            s_rem = Signal(min(nb, db + i), name=f"s{i}_rem", reset_less=True)
            s_div = Signal(db, name=f"s{i}_div", reset_less=True)
            s_quo = Signal(qb - i, name=f"s{i}_quo", reset_less=True)
            s_ovf = Signal(name=f"s{i}_ovf", reset_less=True)
            s_tag = Signal(tb, name=f"s{i}_tag", reset_less=True)
            s_valid = Signal(name=f"s{i}_valid")
            with m.If(advance):
                m.d.sync += [
                    s_rem.eq(Cat(rem[:i], kept)),
                    s_div.eq(div),
                    s_quo.eq(Cat(bit, quo)),
                    s_ovf.eq(ovf),
                    s_tag.eq(tag),
                    s_valid.eq(valid),
                ]
            rem, div, quo, ovf, tag, valid = s_rem, s_div, s_quo, s_ovf, s_tag, s_valid

        result = Signal(qb)
        m.d.comb += result.eq(Mux(ovf, (1 << qb) - 1, quo))

        skid_quo = Signal(qb, reset_less=True)
        skid_tag = Signal(tb, reset_less=True)
        # Plain expressions (no comb If): Icarus evaluates the Verilog ``assign``s at time 0.
        m.d.comb += [
            self.o_stream.valid.eq(skid_valid | valid),
            self.o_stream.payload.quotient.eq(Mux(skid_valid, skid_quo, result)),
            self.o_stream.payload.tag.eq(Mux(skid_valid, skid_tag, tag)),
        ]
        with m.If(skid_valid):
            with m.If(self.o_stream.ready):
                m.d.sync += skid_valid.eq(0)
        # The pipeline moves this cycle: park an output the consumer did not take.
        with m.Elif(valid & ~self.o_stream.ready):
            m.d.sync += [skid_valid.eq(1), skid_quo.eq(result), skid_tag.eq(tag)]
        return m
