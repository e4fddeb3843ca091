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
          ▼    ▼    ▼            each column: OR of its PEs' results (only the PE whose tile
        [ OR][ OR][ OR]          just finished has a non-zero one) -> column register
        [mem][mem][mem]          -> the column's FIFO memory (written c cycles apart)
          └────┴───┴──► o_stream: the same address of every column (one row per beat)

A PE's result register holds a finished result for exactly one cycle, the cycle after its
``last`` product, and 0 in every other cycle (:class:`hw.pe.ProcessingElement`). Finished
results of row ``r`` appear in column ``c`` at cycle ``T + r + c`` (``T`` when the last step was
accepted): each column sees at most one finished PE per cycle, and the rows of one tile leave
the array one per cycle, in order ``0 .. R-1``. Each column writes its results into its own
FIFO memory; a row is complete when the last column has written it, so the columns need no
de-skew registers, and no point of the die gathers all ``R x C`` results before the output.

Throughput
----------
Tiles need no fill or drain gap: the next tile accumulates while the previous one leaves. For
``K >= R`` the array accepts one step per cycle forever (if the consumer keeps up). Two tiles
whose ``last`` steps are fewer than ``R`` cycles apart would finish two rows of one column in
the same cycle, so the input holds a ``last`` beat until ``R`` cycles have passed since the
previous one; tiles with ``K < R`` therefore take ``R`` cycles each (utilization ``K / R``).

Backpressure
------------
Nothing in the array ever stops: it has no global enable (a net reaching every register and
DSP clock enable limits the clock and the routing of large arrays). Instead a tile's ``last``
beat is taken only when the output FIFO has room *reserved* for all ``R`` result rows of the
tile: ``reserved`` counts the rows in the FIFO plus the rows of accepted tiles still in the
array, grows by ``R`` when a ``last`` beat is taken and shrinks by one per row read. Other beats
never wait for the output: a tile whose ``last`` beat waits keeps its partial sums in place.
With the default FIFO depth (``latency + R`` rows) a consumer that is always ready never holds
up the input; a smaller FIFO (at least ``R`` rows) only lowers the throughput. Input bubbles
(``i_stream.valid`` low) enter the array as invalid steps.

With ``claim_lead`` the reservation moves to the producer's side: the producer *claims* a
tile's rows (``claim``) in the cycle it commits to the tile's ``last`` beat, only while
``claim_ok`` (a register) is high, and the beat reaches ``i_stream`` ``claim_lead`` cycles
later, the same number for every tile. ``reserved`` grows at the claim, the ``R``-cycle gap is
counted between claims, and ``i_stream.ready`` is constant 1: the array takes every beat, so
nothing in the producer's pipeline waits on the array, and no logic of the array's lies
between a ``last`` beat and its take. The FIFO holds ``claim_lead`` rows more by default.

Latency
-------
From the cycle a ``last`` beat is accepted to the cycle row 0 of its result is first valid on
``o_stream`` (no stalls): ``C + Lm + 4`` cycles with the block-RAM output FIFO, ``C + Lm + 3``
with the LUT-RAM one (no output register), row ``r`` ``r`` cycles later (:attr:`latency`),
``Lm`` being the multiplier latency (0 inferred, 4 registered ECP5 DSP).
"""

from __future__ import annotations

import numpy as np
from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .dsp import DSP_LATENCY, check_bits
from .floorplan import array_sites
from .pe import CONTROL, ProcessingElement
from .target import KEEP_COPY, is_ecp5

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


def _delay(m, value, stages: int, name: str, shape):
    """``value`` delayed by ``stages`` cycles through a chain of registers (no reset)."""
    for i in range(stages):
        reg = Signal(shape, name=f"{name}_d{i}", reset_less=True)
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
    fifo_depth : int or None
        Result rows the output FIFO holds (``>= rows``). ``None``: ``latency + rows``, the
        least with which an always-ready consumer never holds up the input (see
        Backpressure).
    split_acc : bool or None
        Accumulators as two halves with a registered carry (:class:`hw.pe.ProcessingElement`).
        ``None``: split except with ``"ecp5_registered"`` (ECP5 carry chains are fast enough
        for one accumulator, and the split would put an adder on the drain path).
    lutram_fifo : bool or None
        Read the output FIFO asynchronously from LUT RAM, with no output register: the
        payload needs no clock enable that depends on ``o_stream.ready``, whose fan-out to a
        whole result row limited the ECP5 12×12 array to 107 MHz. ``False``: a synchronous
        read port with an output register (block RAM; iCE40 has no LUT RAM). ``None``: LUT
        RAM with ``"ecp5_registered"``, else block RAM.
    claim_lead : int or None
        ``None``: the input's ``ready`` reserves the output room (a ``last`` beat may wait).
        An int ``>= 0``: the producer claims the room ahead, ``claim_lead`` cycles before
        each ``last`` beat (see Backpressure; members ``claim`` and ``claim_ok``), and
        ``ready`` is always high.
    floorplan : bool
        With ``"ecp5_registered"`` on an ECP5 platform whose device has an entry in
        :mod:`hw.floorplan`: pin every PE's DSP to its site there (neighbours in the array
        are neighbours on the die; without it a 12×12 array does not route). Otherwise, or
        when ``False``, nextpnr places the DSPs.

    Members
    -------
    i_stream : In(stream.Signature(input_layout(rows, cols, a_bits, b_bits)))
        One reduction step per beat. ``first`` starts a tile (the accumulators restart),
        ``last`` ends it; ``first`` and ``last`` may be on the same beat (``K = 1``). Every tile
        must start with ``first``. ``ready`` depends on ``payload.last`` (a ``last`` beat may
        have to wait, see Throughput); constant 1 with ``claim_lead``.
    claim : In(1)
        With ``claim_lead``: the producer claims the output room of a tile whose ``last`` beat
        reaches ``i_stream`` ``claim_lead`` cycles later. Only while ``claim_ok``.
    claim_ok : Out(1)
        With ``claim_lead``: a claim in this cycle has room and keeps the ``R``-cycle gap.
    o_stream : Out(stream.Signature(output_layout(cols, acc_bits)))
        Results: row ``r`` of ``A · Bᵀ`` per beat (``acc[c]`` = column ``c``), rows in order,
        ``last`` on row ``R - 1``; tiles in input order.

    Raises
    ------
    TypeError, ValueError
        For an invalid parameter; the message names it and the value given.
    """

    def __init__(self, *, rows: int, cols: int, a_bits: int, b_bits: int, acc_bits: int,
                 dsp: str = "infer", fifo_depth: int | None = None,
                 split_acc: bool | None = None, lutram_fifo: bool | None = None,
                 claim_lead: int | None = None, floorplan: bool = True):
        check_bits("rows", rows, 1)
        check_bits("cols", cols, 1)
        check_bits("a_bits", a_bits, 2)
        check_bits("b_bits", b_bits, 2)
        check_bits("acc_bits", acc_bits, a_bits + b_bits)
        if dsp not in DSP_LATENCY:
            raise ValueError(f"dsp must be one of {', '.join(DSP_LATENCY)}, not {dsp!r}")
        if fifo_depth is not None:
            check_bits("fifo_depth", fifo_depth, rows)
        if split_acc is not None and not isinstance(split_acc, bool):
            raise TypeError(f"split_acc must be a bool or None, not {split_acc!r}")
        if lutram_fifo is not None and not isinstance(lutram_fifo, bool):
            raise TypeError(f"lutram_fifo must be a bool or None, not {lutram_fifo!r}")
        if claim_lead is not None and (not isinstance(claim_lead, int)
                                       or isinstance(claim_lead, bool) or claim_lead < 0):
            raise ValueError(f"claim_lead must be None or an int >= 0, not {claim_lead!r}")
        if not isinstance(floorplan, bool):
            raise TypeError(f"floorplan must be a bool, not {floorplan!r}")
        self.floorplan = floorplan
        self.split_acc = dsp != "ecp5_registered" if split_acc is None else split_acc
        self.lutram_fifo = dsp == "ecp5_registered" if lutram_fifo is None else lutram_fifo
        self.rows, self.cols = rows, cols
        self.a_bits, self.b_bits, self.acc_bits = a_bits, b_bits, acc_bits
        self.dsp = dsp
        self.claim_lead = claim_lead
        self.fifo_depth = (self.latency + rows + (claim_lead or 0) if fifo_depth is None
                           else fifo_depth)
        self.i_layout = input_layout(rows, cols, a_bits, b_bits)
        self.o_layout = output_layout(cols, acc_bits)
        members = {
            "i_stream": In(stream.Signature(self.i_layout)),
            "o_stream": Out(stream.Signature(self.o_layout)),
        }
        if claim_lead is not None:
            members.update(claim=In(1), claim_ok=Out(1))
        super().__init__(members)

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
        return self.cols + self.mult_latency + (3 if self.lutram_fifo else 4)

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

    def dsp_sites(self, platform) -> dict | None:
        """``{(r, c): site}`` of the PEs' DSPs on ``platform`` (see ``floorplan``), or ``None``
        when nextpnr places them."""
        if not self.floorplan or self.dsp != "ecp5_registered" \
                or not is_ecp5(platform):
            return None
        return array_sites(str(getattr(platform, "device", "")), self.rows, self.cols)

    # -- hardware -------------------------------------------------------------------------

    def elaborate(self, platform):
        m = Module()
        rows, cols, lm = self.rows, self.cols, self.mult_latency
        depth = self.fifo_depth

        # Input: a `last` beat waits until `rows` cycles have passed since the previous one and
        # until the output FIFO has room reserved for all `rows` result rows of its tile.
        # Both conditions are registers, computed from the counters' next values: `ready`,
        # and through it the first PEs' flags, is then one gate from flip-flops.
        since_last = Signal(range(rows), init=rows - 1)
        since_next = Signal.like(since_last)
        gap_ok = Signal(init=1)
        reserved = Signal(range(depth + 1))  # rows in the FIFO + rows of accepted tiles
        reserved_next = Signal.like(reserved)
        room = Signal(init=1)
        m.d.sync += [since_last.eq(since_next), gap_ok.eq(since_next == rows - 1),
                     reserved.eq(reserved_next), room.eq(reserved_next <= depth - rows)]
        i = self.i_stream
        take = Signal()
        take_last = Signal()
        counted = Signal()        # a tile's rows reserved in this cycle
        if self.claim_lead is None:
            m.d.comb += [i.ready.eq((gap_ok & room) | ~i.payload.last), counted.eq(take_last)]
        else:
            m.d.comb += [i.ready.eq(1), self.claim_ok.eq(gap_ok & room),
                         counted.eq(self.claim)]
        m.d.comb += [take.eq(i.valid & i.ready), take_last.eq(take & i.payload.last)]
        m.d.comb += since_next.eq(Mux(counted, 0, Mux(gap_ok, since_last, since_last + 1)))

        step = Signal(CONTROL)
        m.d.comb += [step.valid.eq(take), step.first.eq(take & i.payload.first),
                     step.last.eq(take_last)]

        # The array of PEs; their enables are tied high (see "Backpressure").
        sites = self.dsp_sites(platform) or {}
        pes = [[ProcessingElement(a_bits=self.a_bits, b_bits=self.b_bits,
                                  acc_bits=self.acc_bits, dsp=self.dsp,
                                  split_acc=self.split_acc, dsp_site=sites.get((r, c)))
                for c in range(cols)] for r in range(rows)]
        # The rows' control skew is one chain: row r takes stage r + Lm - 1, so that each
        # stage drives the next and one row's first PE. (With a chain of its own per row, all
        # starting at `step`, that gate drove the first stage of every row: on the 16x8 ULX3S
        # device 14.1 ns to the farthest row. Without KEEP_COPY Yosys merges such chains into
        # this one anyway.)
        ctl_skew = [step]
        for k in range(rows - 1 + lm):
            stage = Signal(CONTROL, name=f"skew_ctl_d{k}")
            m.d.sync += stage.eq(ctl_skew[-1])
            ctl_skew.append(stage)
        for r in range(rows):
            for c in range(cols):
                m.submodules[f"pe_{r}_{c}"] = pe = pes[r][c]
                m.d.comb += pe.en.eq(1)
                if c == 0:  # row skew: operands r cycles, flags r + Lm cycles
                    m.d.comb += [
                        pe.a_in.eq(_delay(m, i.payload.a[r], r, f"skew_a{r}",
                                          signed(self.a_bits))),
                        pe.ctl_in.eq(ctl_skew[r + lm]),
                    ]
                else:
                    m.d.comb += [pe.a_in.eq(pes[r][c - 1].a_out),
                                 pe.ctl_in.eq(pes[r][c - 1].ctl_out)]
                if r == 0:  # column skew: c cycles
                    m.d.comb += pe.b_in.eq(_delay(m, i.payload.b[c], c, f"skew_b{c}",
                                                  signed(self.b_bits)))
                else:
                    m.d.comb += pe.b_in.eq(pes[r - 1][c].b_out)

        # Drain: per column, the OR of its PEs' results (a PE's `acc` is 0 unless it has just
        # finished, and at most one per column has) into a register, then into the column's
        # own FIFO memory. Column c writes row r of a tile c cycles before the last column
        # does, so the columns need no de-skew: a row is complete when the last column has
        # written it, and all columns read the same address. One memory per column keeps
        # each next to its column of PEs instead of gathering R x C results in one place.
        mem_depth = 1 << max(1, (depth - 1).bit_length())
        # With LUT RAM (read asynchronously) every column reads at its own copy of the read
        # address, kept apart by synthesis (KEEP_COPY) and so placed beside the column's
        # memory: on the 16x8 ULX3S device one shared register sat 45 columns away from
        # column 0's memory (9.9 ns of routing, the slowest path at seed 2).
        if self.lutram_fifo:
            r_addrs = [Signal(range(mem_depth), name=f"r_addr_{c}", attrs={KEEP_COPY: 1})
                       for c in range(cols)]
        else:
            r_addrs = [Signal(range(mem_depth), name="r_addr")] * cols
        read = Signal()
        m.d.comb += read.eq(self.o_stream.valid & self.o_stream.ready)
        row_valid = Signal()      # the last column writes a row in this cycle
        load = Signal()           # (synchronous read ports) read the next row now
        columns = []
        for c in range(cols):
            picked = 0
            any_done = 0
            for r in range(rows):
                picked = picked | pes[r][c].acc
                any_done = any_done | pes[r][c].done
            width = self.acc_bits + (1 if c == cols - 1 else 0)   # the last one keeps `last`
            col = Signal(width, name=f"col{c}", reset_less=True)
            col_valid = Signal(name=f"col{c}_valid")
            if c == cols - 1:
                m.d.sync += col.eq(Cat(picked[:self.acc_bits], pes[rows - 1][c].done))
                m.d.comb += row_valid.eq(col_valid)
            else:
                m.d.sync += col.eq(picked)
            m.d.sync += col_valid.eq(any_done)
            mem = Memory(shape=width, depth=mem_depth, init=[])
            m.submodules[f"out_col{c}"] = mem
            w_port = mem.write_port()
            w_addr = Signal(range(mem_depth), name=f"col{c}_w_addr")
            m.d.comb += [w_port.en.eq(col_valid), w_port.addr.eq(w_addr), w_port.data.eq(col)]
            with m.If(col_valid):
                m.d.sync += w_addr.eq(w_addr + 1)
            if self.lutram_fifo:
                # The row at the read address is the payload, combinationally: nothing wide
                # waits for `ready`, which only advances the (narrow) read address.
                r_port = mem.read_port(domain="comb")
            else:
                r_port = mem.read_port(transparent_for=())
                m.d.comb += r_port.en.eq(load)
            m.d.comb += r_port.addr.eq(r_addrs[c])
            columns.append(r_port.data)
        m.d.comb += self.o_stream.payload.eq(Cat(*columns))   # acc[0..C-1], then last

        # Complete rows: counted from the last column's writes. A row read from the FIFO
        # frees its reservation (every row had room reserved when its tile's last beat was
        # taken or claimed, so the writes need no full check).
        stored = Signal(range(mem_depth + 1))
        if self.lutram_fifo:
            m.d.comb += self.o_stream.valid.eq(stored != 0)
            with m.If(read):
                m.d.sync += [copy.eq(copy + 1) for copy in r_addrs]
            m.d.sync += stored.eq(stored + row_valid - read)
        else:
            out_valid = Signal()                   # the read ports' data hold an unread row
            m.d.comb += [load.eq((stored != 0) & (~out_valid | self.o_stream.ready)),
                         self.o_stream.valid.eq(out_valid)]
            with m.If(load):
                m.d.sync += [r_addrs[0].eq(r_addrs[0] + 1), out_valid.eq(1)]
            with m.Elif(self.o_stream.ready):
                m.d.sync += out_valid.eq(0)
            m.d.sync += stored.eq(stored + row_valid - load)
        m.d.comb += reserved_next.eq(reserved + Mux(counted, rows, 0) - read)
        return m
