"""A buffer written a row of lanes at a time and read one lane at a time.

The array takes one value per row (``a``) or column (``b``) and cycle, but the attention core's
results, and the layer input, arrive a row of ``C`` channels (lanes) at a time. A buffer that
stores whole rows has to be read a whole row at a time too, and on an 8×8 ECP5 array the
X/Q and K banks sent 2,048 bits a cycle across the die to multiplexers that kept 256 of them:
the device did not route. :class:`LaneBank` stores one value per address (lane ``l`` of word
``w`` at ``w * lanes + l``), so a read returns only the value used, and a bank's block RAMs are
used to their depth instead of their width. The price is the writes: one value a
cycle, either straight from the writer (``d_*``, ahead of everything else) or from a queue of
whole rows (``w_stream``), one lane a cycle. Direct writes are registered at the bank (unless
told otherwise), so a writer across the die drives flip-flops, not the memory's write port and
the queue's pop.
"""

from __future__ import annotations

from amaranth import Cat, Module, Shape, Signal, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from .target import KEEP_COPY, keep_copy_on_ecp5

__all__ = ["LaneBank", "LaneSerializer", "row_layout"]


def row_layout(lanes: int, shape, words: int, tag_bits: int = 1) -> data.StructLayout:
    """A row written into a :class:`LaneBank`: ``word`` (its address in rows), ``data`` (one
    value per lane), ``mask`` (the lanes to write) and ``tag`` (reported by ``tag_done`` once
    the row is in the memory; a :class:`LaneSerializer` passes ``tag_bits`` of it along)."""
    return data.StructLayout({
        "word": unsigned(max(1, ceil_log2(words))),
        "data": data.ArrayLayout(shape, lanes),
        "mask": unsigned(lanes),
        "tag": unsigned(tag_bits),
    })


def _check_lanes_words(lanes, words):
    if not isinstance(lanes, int) or lanes < 1 or lanes & (lanes - 1):
        raise ValueError(f"lanes must be a power of two, not {lanes!r}")
    if not isinstance(words, int) or words < 1:
        raise ValueError(f"words must be a positive integer, not {words!r}")


class LaneBank(wiring.Component):
    """``words`` rows of ``lanes`` values of ``shape``, written by rows, read by values.

    Parameters
    ----------
    lanes : int
        Values per row (a power of two).
    shape : shape-like
        Shape of one value.
    words : int
        Rows the bank holds.
    queue_depth : int
        Rows the write queue holds (not used when ``lanes == 1``; ``0``: no queue, only
        ``d_*`` writes). A row takes one cycle per lane up to its last masked one, so a writer
        that sends bursts of ``n`` rows to one bank and then leaves it alone long enough runs
        at full speed with ``queue_depth >= n``.
    attrs : dict or None
        Attributes of the memory (e.g. ``ram_style``).
    d_registered : bool
        Register the direct writes at the bank (default; on ECP5 the address and data
        registers are :data:`~hw.target.KEEP_COPY`, one set per bank even where several banks
        share a bus); otherwise they land in their cycle.
    ready_registered : bool
        ``w_stream.ready`` comes from a register (with ``lanes > 1``): it says the queue held
        fewer than ``queue_depth`` rows in the last cycle, so it has room for one in this one.
        A writer's handshake then starts at a flip-flop instead of the queue's fill level, at
        the cost of two queue entries more (``queue_depth + 2`` rows are built: the ready
        says what the level was a cycle ago, and the queue takes no row in a cycle it is
        full, even one in which a row leaves). Default off.
    late_ready : bool
        With ``ready_registered`` and a queue (``lanes > 1``, ``queue_depth > 0``): the
        writer may act on ``w_stream.ready`` a cycle late. A row offered in a cycle after one
        with ``ready`` high is taken whatever ``ready`` says now (the writer offers one only
        then), and the queue is a row deeper for it. A writer
        that serves many banks can then select the ready of the bank it writes next into a
        register of its own: the banks' flags cross to it in one cycle, its ``valid`` to them
        in the next. Default off.
    w_registered : bool
        With ``ready_registered`` and a queue: a row taken from ``w_stream`` goes to a register
        at the bank first and into the queue a cycle later (the queue is a row deeper for it,
        and ``idle`` counts the row in the register). A writer that serves many banks then
        drives flip-flops at each bank, not the queue's write enable and fill level. On ECP5
        that register is :data:`~hw.target.KEEP_COPY`: banks fed the same rows keep one each
        (merged, one register wrote every bank's queue across the die). Default off.

    Members
    -------
    w_stream : In(stream.Signature(row_layout(...)))
        Rows to write. The lanes set in ``mask`` of a row go to addresses
        ``word * lanes + l``, in order, one a cycle; a row with no lane set takes a cycle and
        writes nothing. With ``lanes == 1`` the row is written in the cycle it is offered
        (``ready`` is high unless a direct write lands this cycle).
    d_addr, d_data, d_en :
        One value written directly at value address ``d_addr`` while ``d_en`` is high. It
        lands in the memory the next cycle (with ``d_registered``; else in this one), ahead of
        the queue: the queue's row waits that cycle.
    r_addr, r_en, r_data :
        The read port (``amaranth.lib.memory`` semantics: ``r_data`` is the value at the
        ``r_addr`` of the last cycle ``r_en`` was high, not transparent for the writes).
    idle : Out(1)
        No row is queued or being written. Every row taken before this cycle is in the memory.
    d_pending : Out(1)
        A registered direct write lands this cycle (``d_en`` was high last cycle; always low
        without ``d_registered``).
    tag_done : Out(1)
        The last lane of a row with ``tag`` set is written this cycle (reads from the next
        cycle on return it).
    """

    def __init__(self, *, lanes: int, shape, words: int, queue_depth: int = 2, attrs=None,
                 d_registered: bool = True, ready_registered: bool = False,
                 late_ready: bool = False, w_registered: bool = False):
        _check_lanes_words(lanes, words)
        if not isinstance(queue_depth, int) or queue_depth < 0:
            raise ValueError(f"queue_depth must be a non-negative integer, not "
                             f"{queue_depth!r}")
        self.lanes, self.shape, self.words = lanes, Shape.cast(shape), words
        self.queue_depth, self.attrs = queue_depth, attrs
        self.d_registered = bool(d_registered)
        self.ready_registered = bool(ready_registered)
        for option, value in (("late_ready", late_ready), ("w_registered", w_registered)):
            if value and not (ready_registered and lanes > 1 and queue_depth > 0):
                raise ValueError(f"{option} needs ready_registered and a queue (lanes > 1, "
                                 f"queue_depth > 0)")
        self.late_ready, self.w_registered = bool(late_ready), bool(w_registered)
        self.depth = words * lanes
        super().__init__({
            "w_stream": In(stream.Signature(row_layout(lanes, shape, words))),
            "r_addr": In(range(max(self.depth, 2))),
            "r_en": In(1),
            "r_data": Out(shape),
            "d_addr": In(range(max(self.depth, 2))),
            "d_data": In(shape),
            "d_en": In(1),
            "idle": Out(1),
            "d_pending": Out(1),
            "tag_done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        lanes, ll = self.lanes, ceil_log2(self.lanes)
        m.submodules.memory = memory = Memory(shape=self.shape, depth=max(self.depth, 2),
                                              init=[], attrs=self.attrs)
        rd = memory.read_port()
        wr = memory.write_port()
        m.d.comb += [rd.addr.eq(self.r_addr), rd.en.eq(self.r_en), self.r_data.eq(rd.data)]
        row = self.w_stream.payload
        # direct writes (registered) first; the queue's writes (below) only in cycles without
        d_addr, d_data, d_en = self.d_addr, self.d_data, self.d_en
        if self.d_registered:
            # (kept on ECP5: the banks on one serializer's bus see the same address and data,
            # and Yosys would merge their registers into one that writes all of them)
            d_addr, d_data = (Signal.like(s, name=s.name + "_r", reset_less=True,
                                          attrs=keep_copy_on_ecp5(platform))
                              for s in (self.d_addr, self.d_data))
            d_en = Signal.like(self.d_en, name="d_en_r", attrs={KEEP_COPY: 1})
            m.d.sync += [d_addr.eq(self.d_addr), d_data.eq(self.d_data), d_en.eq(self.d_en)]
            # `d_pending` from a register of its own, so that the consumers of the flag do not
            # pull the one that gates the queue's writes away from the bank (on the 8x8 ULX3S
            # device the core's "every bank written" gate put it 33 columns from its bank's
            # lane counter: the slowest path, 10.6 ns). Both are KEEP_COPY: Yosys merges a
            # kept flip-flop with an identical one that is not.
            pending = Signal(name="d_pending_r", attrs={KEEP_COPY: 1})
            m.d.sync += pending.eq(self.d_en)
            m.d.comb += self.d_pending.eq(pending)
        m.d.comb += [wr.addr.eq(d_addr), wr.data.eq(d_data), wr.en.eq(d_en)]

        if self.queue_depth == 0:
            m.d.comb += self.idle.eq(1)
            return m
        if lanes == 1:
            take = Signal()
            m.d.comb += [self.w_stream.ready.eq(~d_en), self.idle.eq(1),
                         take.eq(self.w_stream.valid & ~d_en),
                         self.tag_done.eq(take & row.tag)]
            with m.If(~d_en):
                m.d.comb += [wr.addr.eq(row.word), wr.data.eq(row.data[0]),
                             wr.en.eq(take & row.mask[0])]
            return m

        # A queue entry is the row and whether any lane after its first is masked (found before
        # the queue, so that the head row's last lane is a register bit, not a search).
        layout = row_layout(lanes, self.shape, self.words)
        entry_layout = data.StructLayout({"row": layout, "single": unsigned(1)})
        entry = Signal(entry_layout)
        m.d.comb += [entry.row.eq(row), entry.single.eq(row.mask[1:] == 0)]
        # (`depth` rows in all, at least two: the queue's and the current row's)
        depth = (self.queue_depth + 2 * self.ready_registered + self.late_ready
                 + self.w_registered)
        m.submodules.queue = queue = fifo.SyncFIFO(width=entry_layout.size,
                                                     depth=max(1, depth - 1))
        # The row being written is in registers of its own (`cur`), taken from the queue's
        # read port when the last one leaves: every cycle of a row is decided by flip-flops
        # (whether the row is there, its last lane, the direct write), not by the queue (its
        # output register's enable, a lane comparison and the direct write were four LUTs and
        # the 16x8 ULX3S device's slowest path at seed 2, 11.3 ns).
        cur = Signal(layout, reset_less=True)
        cur_valid = Signal()
        mask = Signal(lanes, reset_less=True)    # the lanes left, the current one in bit 0
        single = Signal(reset_less=True)         # no lane left after the current one
        lane = Signal(ll)
        write = Signal()             # the current row's lane `lane` goes this cycle
        final = Signal()             # this cycle writes the row's last masked lane
        load = Signal()              # `cur` takes the queue's head row (if there is one)
        head = data.View(entry_layout, queue.r_data)
        m.d.comb += [write.eq(cur_valid & ~d_en), final.eq(write & single),
                     load.eq(~cur_valid | final), queue.r_en.eq(load),
                     self.tag_done.eq(final & cur.tag)]
        with m.If(load):
            m.d.sync += [cur.eq(head.row), cur_valid.eq(queue.r_rdy), mask.eq(head.row.mask),
                         single.eq(head.single), lane.eq(0)]
        with m.Elif(write):
            m.d.sync += [mask.eq(mask >> 1), single.eq(mask[2:] == 0), lane.eq(lane + 1)]
        with m.If(~d_en):
            m.d.comb += [wr.addr.eq(Cat(lane, cur.word)), wr.data.eq(cur.data[lane]),
                         wr.en.eq(write & mask[0])]

        taken = Signal()
        level = queue.level + cur_valid     # rows queued or being written
        if self.ready_registered:
            # At most one row enters a cycle, so the bank holds at most `queue_depth` rows
            # now if `level` was below `queue_depth` last cycle, and the queue (`depth - 1`
            # rows, one more than that) has room for this cycle's row even if the current
            # row's registers are empty.
            room = Signal(init=1)
            m.d.sync += room.eq(level < self.queue_depth)
            # (late: `room` a cycle before held for this cycle's row too; the bank then holds
            # at most a row more, and is a row deeper for it; the same for the cycle a row
            # spends in the input register)
            m.d.comb += [taken.eq(self.w_stream.valid if self.late_ready
                                  else self.w_stream.valid & room),
                         self.w_stream.ready.eq(room)]
        else:
            m.d.comb += [taken.eq(self.w_stream.valid), self.w_stream.ready.eq(queue.w_rdy)]
        in_flight = 0
        if self.w_registered:
            # (one per bank on ECP5: merged, the X/Q banks' shared register was the 16x8
            # ULX3S device's slowest path at 8c44df6, seed 1, a 10.5 ns wire to a far bank)
            entry_r = Signal(entry_layout, reset_less=True, attrs=keep_copy_on_ecp5(platform))
            in_flight = Signal()
            m.d.sync += [entry_r.eq(entry), in_flight.eq(taken)]
            m.d.comb += [queue.w_data.eq(entry_r), queue.w_en.eq(in_flight)]
        else:
            m.d.comb += [queue.w_data.eq(entry), queue.w_en.eq(taken)]
        m.d.comb += self.idle.eq((level == 0) & ~in_flight)
        return m


class LaneSerializer(wiring.Component):
    """One row of ``lanes`` values in, one value a cycle out, for a :class:`LaneBank`'s
    direct port.

    A writer with a row for each of several banks hands each row to that bank's serializer in
    one cycle and goes on; the serializers then write their rows side by side, each on its own
    narrow bus. Every output is a flip-flop.

    Parameters
    ----------
    lanes, shape, words :
        As :class:`LaneBank`'s.
    tag_bits : int
        Width of the rows' ``tag``.

    Members
    -------
    i_stream : In(stream.Signature(row_layout(...)))
        A row to write. ``ready`` is high while no row is being written (with ``lanes == 1``:
        always, and the row passes straight through to the outputs in its cycle).
    addr, data, en : Out
        One value a cycle for ``d_addr``, ``d_data`` and ``d_en``: lane ``l`` of a row at
        ``word * lanes + l``, the lanes in order up to the row's last masked one. A row with
        no lane set is written in no cycle.
    tag : Out(tag_bits)
        The ``tag`` of the row being written (e.g. which of the banks on the bus takes it).
    """

    def __init__(self, *, lanes: int, shape, words: int, tag_bits: int = 1):
        _check_lanes_words(lanes, words)
        self.lanes, self.shape, self.words = lanes, Shape.cast(shape), words
        depth = words * lanes
        super().__init__({
            "i_stream": In(stream.Signature(row_layout(lanes, shape, words, tag_bits))),
            "addr": Out(range(max(depth, 2))),
            "data": Out(shape),
            "en": Out(1),
            "tag": Out(tag_bits),
        })

    def elaborate(self, platform):
        m = Module()
        lanes, ll = self.lanes, ceil_log2(self.lanes)
        row = self.i_stream.payload
        if lanes == 1:
            m.d.comb += [self.i_stream.ready.eq(1), self.addr.eq(row.word),
                         self.data.eq(row.data[0]), self.tag.eq(row.tag),
                         self.en.eq(self.i_stream.valid & row.mask[0])]
            return m

        # The row shifts down a lane a cycle: lane 0 of `values` and bit 0 of `mask` are the
        # value being written; the row is done when no masked lane is left.
        # (only `mask` has a reset: the rest means nothing while it is 0)
        values = Signal(data.ArrayLayout(self.shape, lanes), reset_less=True)
        mask = Signal(lanes)
        word = Signal.like(row.word, reset_less=True)
        lane = Signal(ll, reset_less=True)
        tag = Signal.like(self.tag, reset_less=True)
        m.d.comb += [self.i_stream.ready.eq(mask == 0),
                     self.addr.eq(Cat(lane, word)), self.data.eq(values[0]),
                     self.en.eq(mask[0]), self.tag.eq(tag)]
        with m.If(self.i_stream.valid & self.i_stream.ready):
            m.d.sync += [values.eq(row.data), mask.eq(row.mask), word.eq(row.word),
                         lane.eq(0), tag.eq(row.tag)]
        with m.Elif(mask != 0):
            m.d.sync += [values.eq(values.as_value() >> self.shape.width), mask.eq(mask >> 1),
                         lane.eq(lane + 1)]
        return m
