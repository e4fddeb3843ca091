"""One output-stationary multiply-accumulate processing element of the systolic array.

A PE registers the operands arriving from its left (``a``) and top (``b``) neighbours and
passes them on unchanged one enabled cycle later. It multiplies its registered operands with a
:class:`hw.dsp.Multiplier` of latency ``Lm`` and accumulates the product in place. The control
flags ``ctl = {valid, first, last}`` arrive already delayed by ``Lm`` relative to the operands
(the array does that once per row), so the flags in the PE's own ``ctl`` register always
describe the product currently at the multiplier output::

    a_in ──► [a] ──────────────────────────► a_out        acc <= first ? p : acc + p
               │                                          (only when en & valid)
    b_in ──► [b] ──► b_out                                done <= valid & last
               └──► Multiplier (Lm) ──► p ──► [acc]
    ctl_in ─► [ctl] ──────────────────────► ctl_out

In the enabled cycle after the ``last`` product of a tile, ``done`` is high for exactly one
enabled cycle and ``acc`` holds the finished dot product; the next tile's ``first`` product may
arrive in that same cycle (it overwrites ``acc`` at its end), so tiles follow back to back.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .dsp import DSP_LATENCY, Multiplier, check_bits

__all__ = ["CONTROL", "ProcessingElement"]

#: Flags that travel with every reduction step: a valid step, and the tile's first/last step.
CONTROL = data.StructLayout({"valid": 1, "first": 1, "last": 1})


class ProcessingElement(wiring.Component):
    """Output-stationary multiply-accumulate element (see the module docstring).

    Parameters
    ----------
    a_bits, b_bits : int
        Signed operand widths (``>= 2``).
    acc_bits : int
        Signed accumulator width (``>= a_bits + b_bits``); sums that exceed it wrap.
    dsp : str
        Multiplier style of :class:`hw.dsp.Multiplier`: ``"infer"`` or ``"ecp5_registered"``.
    split_acc : bool
        Keep the accumulator as two halves with a registered carry between them (the
        accumulate loop's carry chain is half as long: iCE40 timing); ``acc`` adds the pending
        carry back, so the result is the same.

    Members
    -------
    en : In(1)
        Global enable: nothing changes while it is low.
    a_in, b_in : In(signed(a_bits)), In(signed(b_bits))
    ctl_in : In(CONTROL)
        Flags of the product that reaches the accumulator ``latency + 1`` enabled cycles later.
    a_out, b_out, ctl_out : Out
        The registered inputs, for the right and bottom neighbours.
    acc : Out(signed(acc_bits))
        The accumulated value.
    done : Out(1)
        High for one enabled cycle when ``acc`` holds a finished tile result.
    """

    def __init__(self, *, a_bits: int, b_bits: int, acc_bits: int, dsp: str = "infer",
                 split_acc: bool = True):
        check_bits("a_bits", a_bits, 2)
        check_bits("b_bits", b_bits, 2)
        check_bits("acc_bits", acc_bits, a_bits + b_bits)
        if dsp not in DSP_LATENCY:
            raise ValueError(f"dsp must be one of {', '.join(DSP_LATENCY)}, not {dsp!r}")
        if not isinstance(split_acc, bool):
            raise TypeError(f"split_acc must be a bool, not {split_acc!r}")
        self.a_bits, self.b_bits, self.acc_bits, self.dsp = a_bits, b_bits, acc_bits, dsp
        self.split_acc = split_acc
        super().__init__({
            "en": In(1),
            "a_in": In(signed(a_bits)),
            "b_in": In(signed(b_bits)),
            "ctl_in": In(CONTROL),
            "a_out": Out(signed(a_bits)),
            "b_out": Out(signed(b_bits)),
            "ctl_out": Out(CONTROL),
            "acc": Out(signed(acc_bits)),
            "done": Out(1),
        })

    @property
    def latency(self) -> int:
        """Latency of the multiplier, in enabled cycles."""
        return DSP_LATENCY[self.dsp]

    def elaborate(self, platform):
        m = Module()
        m.submodules.mult = mult = Multiplier(a_bits=self.a_bits, b_bits=self.b_bits,
                                              style=self.dsp)
        a_reg = Signal(signed(self.a_bits), reset_less=True)
        b_reg = Signal(signed(self.b_bits), reset_less=True)
        ctl = Signal(CONTROL)
        done = Signal()
        with m.If(self.en):
            m.d.sync += [a_reg.eq(self.a_in), b_reg.eq(self.b_in), ctl.eq(self.ctl_in),
                         done.eq(ctl.valid & ctl.last)]
        product = Signal(signed(self.acc_bits))
        m.d.comb += product.eq(mult.p)
        accumulate = self.en & ctl.valid

        if self.split_acc:
            # Two halves with the carry between them registered: the loop's carry chain is
            # half as long. The pending carry is added back on the way out.
            low_bits = self.acc_bits // 2
            low = Signal(low_bits, reset_less=True)
            high = Signal(signed(self.acc_bits - low_bits), reset_less=True)
            carry = Signal(reset_less=True)
            low_sum = Signal(low_bits + 1)
            m.d.comb += low_sum.eq(Mux(ctl.first, 0, low) + product[:low_bits])
            with m.If(accumulate):
                m.d.sync += [low.eq(low_sum[:low_bits]), carry.eq(low_sum[low_bits])]
                with m.If(ctl.first):
                    m.d.sync += high.eq(product[low_bits:].as_signed())
                with m.Else():
                    m.d.sync += high.eq(high + product[low_bits:].as_signed() + carry)
            m.d.comb += self.acc.eq(Cat(low, high + carry))
        else:
            acc = Signal(signed(self.acc_bits), reset_less=True)
            with m.If(accumulate):
                m.d.sync += acc.eq(Mux(ctl.first, 0, acc) + product)
            m.d.comb += self.acc.eq(acc)

        m.d.comb += [
            mult.en.eq(self.en), mult.a.eq(a_reg), mult.b.eq(b_reg),
            self.a_out.eq(a_reg), self.b_out.eq(b_reg), self.ctl_out.eq(ctl),
            self.done.eq(done),
        ]
        return m
