"""One output-stationary multiply-accumulate processing element of the systolic array.

A PE registers the operands arriving from its left (``a``) and top (``b``) neighbours and
passes them on unchanged one enabled cycle later. It multiplies its registered operands with a
:class:`hw.dsp.Multiplier` of latency ``Lm`` and accumulates the product in place. The control
flags ``ctl = {valid, first, last}`` arrive already delayed by ``Lm`` relative to the operands
(the array does that once per row), so the flags in the PE's own ``ctl`` register always
describe the product currently at the multiplier output::

    a_in ──► [a] ──────────────────────────► a_out      sum  = run + p
               │                                        run    <= 0 if next step is first
    b_in ──► [b] ──► b_out                                        else sum (valid steps)
               └──► Multiplier (Lm) ──► p ──► (+) ─►[run]  result <= sum if last else 0
    ctl_in ─► [ctl] ──────────────────────► ctl_out    done   <= last

The running sum is cleared one cycle *ahead*, when the next step (``ctl_in``) is a valid
``first``: the clear is a synchronous reset of the ``run`` register, so no flag sits in the
accumulate loop (register, carry chain, register). A separate ``result`` register takes the
finished sum and is zero in every other cycle, so the array drains a column by OR-ing its PEs.
It has no reset (only ``drop``, "not finishing", drives its flip-flops' reset input): in the
cycle after a reset it may still hold a result, but ``done`` is low then and no other PE of its
column can finish, so nothing reads it.

In the enabled cycle after the ``last`` product of a tile, ``done`` is high for exactly one
enabled cycle and ``acc`` holds the finished dot product (``acc`` is 0 whenever ``done`` is
low, except in the cycle after a reset); the next tile's ``first`` product may arrive in that
same cycle, so tiles follow back to back.

On ECP5 the flag registers (``ctl``, ``done``, ``drop``) are :data:`hw.target.KEEP_COPY`: the
PEs of one anti-diagonal hold the same flags in the same cycle, and Yosys merged them into one
register per anti-diagonal, whose fanout crossed the die's three DSP rows (on the 16x8 ULX3S
device 76 accumulator enables, 12.2 ns). Each PE keeps its own, next to its neighbour's.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .dsp import DSP_LATENCY, Multiplier, check_bits, check_site
from .target import keep_copy_on_ecp5

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
        Keep the running sum as two halves with a registered carry between them (the
        accumulate loop's carry chain is half as long: iCE40 timing); ``acc`` adds the pending
        carry back, so the result is the same.
    dsp_site : str or None
        Site of the multiplier's DSP block (:class:`hw.dsp.Multiplier`'s ``site``).

    Members
    -------
    en : In(1)
        Enable: nothing changes while it is low (the array ties it high).
    a_in, b_in : In(signed(a_bits)), In(signed(b_bits))
    ctl_in : In(CONTROL)
        Flags of the product that reaches the accumulator ``latency + 1`` enabled cycles later.
        Every tile starts with a ``first`` step and ends with a ``last`` step; ``first`` and
        ``last`` are set only on ``valid`` steps.
    a_out, b_out, ctl_out : Out
        The registered inputs, for the right and bottom neighbours.
    acc : Out(signed(acc_bits))
        The finished tile result while ``done`` is high, 0 otherwise.
    done : Out(1)
        High for one enabled cycle when ``acc`` holds a finished tile result.
    """

    def __init__(self, *, a_bits: int, b_bits: int, acc_bits: int, dsp: str = "infer",
                 split_acc: bool = True, dsp_site: str | None = None):
        check_bits("a_bits", a_bits, 2)
        check_bits("b_bits", b_bits, 2)
        check_bits("acc_bits", acc_bits, a_bits + b_bits)
        if dsp not in DSP_LATENCY:
            raise ValueError(f"dsp must be one of {', '.join(DSP_LATENCY)}, not {dsp!r}")
        if not isinstance(split_acc, bool):
            raise TypeError(f"split_acc must be a bool, not {split_acc!r}")
        self.a_bits, self.b_bits, self.acc_bits, self.dsp = a_bits, b_bits, acc_bits, dsp
        self.split_acc = split_acc
        self.dsp_site = check_site("dsp_site", dsp_site)
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
                                              style=self.dsp, site=self.dsp_site)
        a_reg = Signal(signed(self.a_bits), reset_less=True)
        b_reg = Signal(signed(self.b_bits), reset_less=True)
        keep = keep_copy_on_ecp5(platform)
        ctl = Signal(CONTROL, attrs=keep)
        done = Signal(attrs=keep)
        with m.If(self.en):
            m.d.sync += [a_reg.eq(self.a_in), b_reg.eq(self.b_in), ctl.eq(self.ctl_in),
                         done.eq(ctl.last)]
        product = Signal(signed(self.acc_bits))
        m.d.comb += product.eq(mult.p)
        # Flags straight from registers to flip-flop controls: ``clear`` (the next step
        # starts a tile) is the synchronous reset of the running sum, ``drop`` (the product
        # now at the multiplier does not end a tile: ``~ctl.last`` in a register of its own,
        # so no inverter sits between it and the result register's reset input) clears the
        # result register.
        clear = self.ctl_in.first
        drop = Signal(reset_less=True, attrs=keep)
        with m.If(self.en):
            m.d.sync += drop.eq(~self.ctl_in.last)
        finish = ~drop

        if self.split_acc:
            # Two halves with the carry between them registered: the loop's carry chain is
            # half as long. The pending carry is added back on the way out.
            low_bits = self.acc_bits // 2
            high_shape = signed(self.acc_bits - low_bits)
            low = Signal(low_bits, reset_less=True)
            high = Signal(high_shape, reset_less=True)
            carry = Signal(reset_less=True)
            low_sum = Signal(low_bits + 1)
            high_sum = Signal(high_shape)
            m.d.comb += [low_sum.eq(low + product[:low_bits]),
                         high_sum.eq(high + product[low_bits:].as_signed() + carry)]
            r_low = Signal(low_bits, reset_less=True)
            r_high = Signal(high_shape, reset_less=True)
            r_carry = Signal(reset_less=True)
            with m.If(self.en):
                with m.If(clear):
                    m.d.sync += [low.eq(0), high.eq(0), carry.eq(0)]
                with m.Elif(ctl.valid):
                    m.d.sync += [low.eq(low_sum[:low_bits]), carry.eq(low_sum[low_bits]),
                                 high.eq(high_sum)]
                m.d.sync += [r_low.eq(Mux(finish, low_sum[:low_bits], 0)),
                             r_carry.eq(finish & low_sum[low_bits]),
                             r_high.eq(Mux(finish, high_sum, 0))]
            m.d.comb += self.acc.eq(Cat(r_low, r_high + r_carry))
        else:
            run = Signal(signed(self.acc_bits), reset_less=True)
            total = Signal(signed(self.acc_bits))
            result = Signal(signed(self.acc_bits), reset_less=True)
            m.d.comb += total.eq(run + product)
            with m.If(self.en):
                with m.If(clear):
                    m.d.sync += run.eq(0)
                with m.Elif(ctl.valid):
                    m.d.sync += run.eq(total)
                m.d.sync += result.eq(Mux(finish, total, 0))
            m.d.comb += self.acc.eq(result)

        m.d.comb += [
            mult.en.eq(self.en), mult.a.eq(a_reg), mult.b.eq(b_reg),
            self.a_out.eq(a_reg), self.b_out.eq(b_reg), self.ctl_out.eq(ctl),
            self.done.eq(done),
        ]
        return m
