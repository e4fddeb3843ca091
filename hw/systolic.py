"""Output-stationary systolic array computing tiles of ``A · Bᵀ``, streamed back to back.

Dataflow
--------
A tile is an ``R x K`` block ``A`` and a ``C x K`` block ``B``; the result is the ``R x C``
block ``A · Bᵀ`` (so ``Q · Kᵀ`` needs no transpose and ``X · Wᵀ`` takes weight rows as they are
stored). The reduction length ``K >= 1`` may change from tile to tile. One input beat carries
one reduction step ``k``: column ``k`` of ``A`` (``R`` values), column ``k`` of ``B`` (``C``
values) and flags ``first``/``last`` marking the tile's first and last step.

Each PE ``(r, c)`` keeps the dot product of row ``r`` of ``A`` with row ``c`` of ``B`` in its
accumulator (output-stationary). Row ``r`` of the input is delayed by ``r`` cycles and column
``c`` by ``c`` cycles (the skew), so step ``k`` meets in PE ``(r, c)`` at cycle ``k + r + c``::

          b0   b1   b2           (b_c delayed c cycles, flowing down)
          │    │    │
    a0 ──►PE──►PE──►PE           (a_r and the flags delayed r (+ Lm) cycles, flowing right)
          │    │    │
    a1 ─►[d]►PE──►PE──►PE
          │    │    │
          ▼    ▼    ▼            each column: one-hot select of the PE whose tile just finished
        [sel][sel][sel]          (done) -> column register
        [d d][d]  │              column c delayed C-1-c more cycles: one aligned row per cycle
          └────┴───┴──► output FIFO ──► o_stream (one row of C results per beat)

A PE's accumulator holds a finished result for exactly one cycle, the cycle after its ``last``
product (the next tile's ``first`` product overwrites it at the end of that cycle). Finished
results of row ``r`` appear in column ``c`` at cycle ``T + r + c`` (``T`` when the last step was
accepted): each column sees at most one finished PE per cycle, and the rows of one tile leave
the array one per cycle, in order ``0 .. R-1``, with no extra result registers.

Throughput
----------
Tiles need no fill or drain gap: the next tile accumulates while the previous one leaves. For
``K >= R`` the array accepts one step per cycle forever. Two tiles whose ``last`` steps are
fewer than ``R`` cycles apart would finish two rows of one column in the same cycle, so the
input holds a ``last`` beat until ``R`` cycles have passed since the previous one; tiles with
``K < R`` therefore take ``R`` cycles each (utilization ``K / R``).

Backpressure
------------
One global enable ``en`` freezes every register of the array (and the registered multipliers)
when the output FIFO could overflow. ``en`` is a register computed from the FIFO occupancy, so
neither ``o_stream.ready`` nor the FIFO level reaches the array's clock enables through logic.
Input bubbles (``i_stream.valid`` low) enter the array as invalid steps and do not stop it, so
finished tiles always drain.

Latency
-------
From the cycle a ``last`` beat is accepted to the cycle row 0 of its result is first valid on
``o_stream`` (no stalls): ``C + Lm + 4`` cycles, row ``r`` ``r`` cycles later (:attr:`latency`),
``Lm`` being the multiplier latency (0 inferred, 4 registered ECP5 DSP).
"""

from __future__ import annotations

import numpy as np
from amaranth import Module, Mux, Signal, signed
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from .dsp import DSP_LATENCY, check_bits
from .pe import CONTROL, ProcessingElement

__all__ = ["SystolicArray", "input_layout", "output_layout"]


def input_layout(rows: int, cols: int, a_bits: int, b_bits: int) -> data.StructLayout:
    """Payload of one reduction step: ``a`` (column of A), ``b`` (column of B), flags."""
    return data.StructLayout({
        "a": data.ArrayLayout(signed(a_bits), rows),
        "b": data.ArrayLayout(signed(b_bits), cols),
        "first": 1,
        "last": 1,
    })


def output_layout(cols: int, acc_bits: int) -> data.StructLayout:
    """Payload of one result row: ``acc`` (``C`` values) and ``last`` on the tile's last row."""
    return data.StructLayout({"acc": data.ArrayLayout(signed(acc_bits), cols), "last": 1})


def _delay(m, value, stages: int, en, name: str, shape, reset_less: bool = True):
    """``value`` delayed by ``stages`` enabled cycles through a chain of registers."""
    for i in range(stages):
        reg = Signal(shape, name=f"{name}_d{i}", reset_less=reset_less)
        with m.If(en):
            m.d.sync += reg.eq(value)
        value = reg
    return value


class SystolicArray(wiring.Component):
    """``rows x cols`` output-stationary MAC array computing ``A · Bᵀ`` tile by tile.

    See the module docstring for the dataflow, throughput, backpressure and latency.

    Parameters
    ----------
    rows, cols : int
        Array shape ``R x C`` (``>= 1``).
    a_bits, b_bits : int
        Signed widths of the ``A`` and ``B`` operands (``>= 2``).
    acc_bits : int
        Signed accumulator and result width (``>= a_bits + b_bits``).
    dsp : str
        ``"infer"`` or ``"ecp5_registered"`` (:class:`hw.dsp.Multiplier`).
    fifo_depth : int
        Result rows the output FIFO holds (``>= 3``; 3 or more sustain one row per cycle).
    split_acc : bool
        Accumulators as two halves with a registered carry (:class:`hw.pe.ProcessingElement`).

    Members
    -------
    i_stream : In(stream.Signature(input_layout(rows, cols, a_bits, b_bits)))
        One reduction step per beat. ``first`` starts a tile (the accumulators restart),
        ``last`` ends it; ``first`` and ``last`` may be on the same beat (``K = 1``). Every tile
        must start with ``first``. ``ready`` depends on ``payload.last`` (a ``last`` beat may
        have to wait, see Throughput).
    o_stream : Out(stream.Signature(output_layout(cols, acc_bits)))
        Results: row ``r`` of ``A · Bᵀ`` per beat (``acc[c]`` = column ``c``), rows in order,
        ``last`` on row ``R - 1``; tiles in input order.

    Raises
    ------
    TypeError, ValueError
        For an invalid parameter; the message names it and the value given.
    """

    def __init__(self, *, rows: int, cols: int, a_bits: int, b_bits: int, acc_bits: int,
                 dsp: str = "infer", fifo_depth: int = 4, split_acc: bool = True):
        check_bits("rows", rows, 1)
        check_bits("cols", cols, 1)
        check_bits("a_bits", a_bits, 2)
        check_bits("b_bits", b_bits, 2)
        check_bits("acc_bits", acc_bits, a_bits + b_bits)
        if dsp not in DSP_LATENCY:
            raise ValueError(f"dsp must be one of {', '.join(DSP_LATENCY)}, not {dsp!r}")
        check_bits("fifo_depth", fifo_depth, 3)
        if not isinstance(split_acc, bool):
            raise TypeError(f"split_acc must be a bool, not {split_acc!r}")
        self.split_acc = split_acc
        self.rows, self.cols = rows, cols
        self.a_bits, self.b_bits, self.acc_bits = a_bits, b_bits, acc_bits
        self.dsp, self.fifo_depth = dsp, fifo_depth
        self.i_layout = input_layout(rows, cols, a_bits, b_bits)
        self.o_layout = output_layout(cols, acc_bits)
        super().__init__({
            "i_stream": In(stream.Signature(self.i_layout)),
            "o_stream": Out(stream.Signature(self.o_layout)),
        })

    @classmethod
    def from_config(cls, cfg, **kwargs) -> SystolicArray:
        """The array of an :class:`attn.AttnConfig`: ``rows``, ``cols``, ``a_bits``,
        ``b_bits``, ``acc_bits`` and ``dsp`` come from ``cfg``."""
        return cls(rows=cfg.rows, cols=cfg.cols, a_bits=cfg.a_bits, b_bits=cfg.b_bits,
                   acc_bits=cfg.acc_bits, dsp=cfg.dsp, **kwargs)

    @property
    def mult_latency(self) -> int:
        """Latency ``Lm`` of the multipliers, in cycles."""
        return DSP_LATENCY[self.dsp]

    @property
    def latency(self) -> int:
        """Cycles from accepting a tile's ``last`` beat to row 0 of its result on ``o_stream``."""
        return self.cols + self.mult_latency + 4

    # -- stimulus and result helpers (pure Python; used by testbenches and benches) ----------

    def encode_tile(self, a, b) -> list:
        """Packed input beats of one tile: ``a`` is ``R x K``, ``b`` is ``C x K``."""
        a = np.asarray(a, dtype=np.int64)
        b = np.asarray(b, dtype=np.int64)
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != self.rows or b.shape[0] != self.cols \
                or a.shape[1] != b.shape[1] or a.shape[1] < 1:
            raise ValueError(f"a must be {self.rows} x K and b {self.cols} x K with K >= 1, "
                             f"not {a.shape} and {b.shape}")
        a_mask, b_mask = (1 << self.a_bits) - 1, (1 << self.b_bits) - 1
        a_shifts = [self.a_bits * r for r in range(self.rows)]
        b_off = self.a_bits * self.rows
        b_shifts = [b_off + self.b_bits * c for c in range(self.cols)]
        first_bit = 1 << (b_off + self.b_bits * self.cols)
        last_bit = first_bit << 1
        steps = a.shape[1]
        beats = []
        for k in range(steps):
            word = 0
            for r, shift in enumerate(a_shifts):
                word |= (int(a[r, k]) & a_mask) << shift
            for c, shift in enumerate(b_shifts):
                word |= (int(b[c, k]) & b_mask) << shift
            if k == 0:
                word |= first_bit
            if k == steps - 1:
                word |= last_bit
            beats.append(word)
        return beats

    def decode_rows(self, words) -> tuple:
        """``(values, last)`` of packed output beats: ``values`` is ``N x C`` int64."""
        mask, sign = (1 << self.acc_bits) - 1, 1 << (self.acc_bits - 1)
        values = np.empty((len(words), self.cols), dtype=np.int64)
        last = np.empty(len(words), dtype=np.int64)
        for i, word in enumerate(words):
            for c in range(self.cols):
                v = (word >> (self.acc_bits * c)) & mask
                values[i, c] = v - (v & sign) * 2
            last[i] = (word >> (self.acc_bits * self.cols)) & 1
        return values, last

    # -- hardware -------------------------------------------------------------------------

    def elaborate(self, platform):
        m = Module()
        rows, cols, lm = self.rows, self.cols, self.mult_latency

        en = Signal(init=1)  # global enable (a register: see "Backpressure")

        # Input: hold a `last` beat until `rows` cycles have passed since the previous one.
        since_last = Signal(range(rows), init=rows - 1)
        gap_ok = Signal()
        m.d.comb += gap_ok.eq(since_last == rows - 1)
        i = self.i_stream
        m.d.comb += i.ready.eq(en & (gap_ok | ~i.payload.last))
        take = Signal()
        m.d.comb += take.eq(i.valid & i.ready)
        with m.If(en):
            with m.If(take & i.payload.last):
                m.d.sync += since_last.eq(0)
            with m.Elif(~gap_ok):
                m.d.sync += since_last.eq(since_last + 1)

        step = Signal(CONTROL)
        m.d.comb += [step.valid.eq(take), step.first.eq(i.payload.first),
                     step.last.eq(i.payload.last)]

        # The array of PEs.
        pes = [[ProcessingElement(a_bits=self.a_bits, b_bits=self.b_bits,
                                  acc_bits=self.acc_bits, dsp=self.dsp,
                                  split_acc=self.split_acc)
                for _ in range(cols)] for _ in range(rows)]
        for r in range(rows):
            for c in range(cols):
                m.submodules[f"pe_{r}_{c}"] = pe = pes[r][c]
                m.d.comb += pe.en.eq(en)
                if c == 0:  # row skew: operands r cycles, flags r + Lm cycles
                    m.d.comb += [
                        pe.a_in.eq(_delay(m, i.payload.a[r], r, en, f"skew_a{r}",
                                          signed(self.a_bits))),
                        pe.ctl_in.eq(_delay(m, step, r + lm, en, f"skew_ctl{r}", CONTROL,
                                            reset_less=False)),
                    ]
                else:
                    m.d.comb += [pe.a_in.eq(pes[r][c - 1].a_out),
                                 pe.ctl_in.eq(pes[r][c - 1].ctl_out)]
                if r == 0:  # column skew: c cycles
                    m.d.comb += pe.b_in.eq(_delay(m, i.payload.b[c], c, en, f"skew_b{c}",
                                                  signed(self.b_bits)))
                else:
                    m.d.comb += pe.b_in.eq(pes[r - 1][c].b_out)

        # Drain: per column, the one PE whose tile just finished; then de-skew the columns.
        row = Signal(self.o_layout)
        row_valid = Signal()
        for c in range(cols):
            picked = 0
            for r in range(rows):
                picked = picked | Mux(pes[r][c].done, pes[r][c].acc, 0)
            col = Signal(signed(self.acc_bits), name=f"col{c}", reset_less=True)
            with m.If(en):
                m.d.sync += col.eq(picked)
            m.d.comb += row.acc[c].eq(_delay(m, col, cols - 1 - c, en, f"deskew{c}",
                                             signed(self.acc_bits)))
        col_valid = Signal()
        col_last = Signal()
        any_done = 0
        for r in range(rows):
            any_done = any_done | pes[r][cols - 1].done
        with m.If(en):
            m.d.sync += [col_valid.eq(any_done), col_last.eq(pes[rows - 1][cols - 1].done)]
        m.d.comb += [row_valid.eq(col_valid), row.last.eq(col_last)]

        # Output FIFO and the enable: `en` is high only if a row written now has room.
        m.submodules.out_fifo = out_fifo = fifo.SyncFIFOBuffered(width=self.o_layout.size,
                                                                 depth=self.fifo_depth)
        write = Signal()
        read = Signal()
        occupancy = Signal(range(self.fifo_depth + 1))
        occupancy_next = Signal(range(self.fifo_depth + 2))
        m.d.comb += [
            write.eq(en & row_valid),
            read.eq(out_fifo.r_rdy & self.o_stream.ready),
            out_fifo.w_data.eq(row.as_value()),
            out_fifo.w_en.eq(write),
            out_fifo.r_en.eq(self.o_stream.ready),
            self.o_stream.payload.eq(out_fifo.r_data),
            self.o_stream.valid.eq(out_fifo.r_rdy),
            occupancy_next.eq(occupancy + write - read),
        ]
        m.d.sync += [occupancy.eq(occupancy_next), en.eq(occupancy_next < self.fifo_depth)]
        return m
