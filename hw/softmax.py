"""Streaming integer softmax, bit-exact with :func:`golden.softmax.softmax_int`.

Rows of scores stream in and rows of probabilities stream out, one element per cycle sustained.
Each row passes three stages, each working on a different row at the same time:

1. *ingest*: the scores (and mask bits) are written to a ring buffer while the row maximum is
   found; at the row's end its length and maximum are queued for stage 2;
2. *exponent*: the row is read back, ``exp_lookup(max - score)`` is computed (table in block
   RAM), written to a second ring buffer and summed; at the row's end its length and sum are
   queued for stage 3;
3. *normalize*: the exponents are read back and divided,
   ``(e * prob_one + sum // 2) // sum``, by the pipelined :class:`hw.divider.Divider`.

Stage 2 only starts a row once stage 1 has seen its last element (it needs the exact maximum)
and stage 3 once stage 2 has summed it; the ring buffers let the stages overlap, so the latency
of the divider and of the row passes is hidden behind the following rows.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from attn.config import AttnConfig
from golden.softmax import exp_table

from .bram import RegisteredMemory
from .divider import Divider

__all__ = ["Softmax", "softmax_input_layout", "softmax_output_layout"]


def softmax_input_layout(cfg: AttnConfig) -> data.StructLayout:
    """Payload of :attr:`Softmax.i_stream`: ``score`` (``score_bits`` signed), ``mask`` (only
    when ``cfg.masks``; 1 = masked out) and ``last`` (1 on a row's final element)."""
    fields = {"score": signed(cfg.score_bits)}
    if cfg.masks:
        fields["mask"] = unsigned(1)
    fields["last"] = unsigned(1)
    return data.StructLayout(fields)


def softmax_output_layout(cfg: AttnConfig) -> data.StructLayout:
    """Payload of :attr:`Softmax.o_stream`: ``prob`` (``prob_bits`` unsigned,
    ``2**prob_bits - 1`` stands for 1.0) and ``last`` (1 on a row's final element)."""
    return data.StructLayout({"prob": unsigned(cfg.prob_bits), "last": unsigned(1)})


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


class Softmax(wiring.Component):
    """Row-wise integer softmax of a stream of score rows.

    For every input row (any length from 1 to ``cfg.max_seq_len``, ended by ``last``) the unit
    emits a row of the same length whose elements equal, integer for integer,
    ``golden.softmax.softmax_int(row, cfg, mask).probs``; ``last`` marks the row's final
    element. A fully masked row gives all zeros. Both exponent modes of the configuration
    (``"exp2"`` and ``"direct"``) are supported; the table contents are
    ``golden.softmax.exp_table(cfg)``.

    Throughput is one element per cycle, sustained across rows of 3 or more elements, as long
    as the producer and the consumer keep up (rows of 1 and 2 elements run at about 0.4 and
    0.8 per cycle with the default ``queue_depth``). Without stalls, a row's first probability
    leaves ``2 * n + ceil(prob_bits / div_bits_per_stage) + 15`` cycles after its first score
    was taken (``n`` the row length): ``n`` to find the maximum, ``n`` to sum, 15 of pipeline
    and the divider's latency. ``bench/softmax.py`` measures both.

    Parameters
    ----------
    cfg : AttnConfig
        Widths (``score_bits``, ``score_frac_bits``, ``exp_mode``, ``lut_addr_bits``,
        ``exp_bits``, ``prob_bits``, ``sum_bits``), ``max_seq_len`` and ``masks``.
    buffer_depth : int or None
        Entries of each of the two ring buffers (scores, exponents); a power of two of at
        least ``cfg.max_seq_len``. The default, the smallest power of two of at least
        ``cfg.max_seq_len + 16``, sustains one element per cycle for rows of every length.
    queue_depth : int
        Entries of each of the two row queues (length and maximum; length and sum), 1..64
        (default 4). Only rows shorter than 3 elements need more to run at full speed.
    registered_reads : bool
        The score buffer is a :class:`hw.bram.RegisteredMemory`, whose output register (the
        block RAM's own on ECP5) is the register the scores are read into: the same cycles,
        without a block RAM's long clock-to-output time in front of the fabric (default
        ``False``: a memory and a register in the fabric).
    counted_late : bool
        The score buffer and the maxima queue count a taken element from the register it
        lands in, a cycle after it was taken, and keep one entry in reserve for it: the
        producer's ``valid`` then reaches a flip-flop (and no counter's carry chain) in the
        cycle it is taken. Needs a ``buffer_depth`` above ``cfg.max_seq_len`` (a whole row
        and the reserve) and a ``queue_depth`` of at least 2 (default ``False``).

    Members
    -------
    i_stream : In(stream.Signature(softmax_input_layout(cfg)))
        Scores ``{score, mask, last}``.
    o_stream : Out(stream.Signature(softmax_output_layout(cfg)))
        Probabilities ``{prob, last}``.

    Attributes
    ----------
    buffer_depth, queue_depth : int
        The depths in use.
    registered_reads, counted_late : bool
        As given.
    table : numpy.ndarray
        The exponent table (``golden.softmax.exp_table(cfg)``), stored in a ROM.

    Notes
    -----
    Storage: the score ring buffer (``buffer_depth`` x ``score_bits + masks``), the exponent
    ring buffer (``buffer_depth`` x ``exp_bits``) and the table (``lut_size`` x ``exp_bits``)
    are simple dual-port / read-only memories that map to block RAM; the row queues are small
    register FIFOs. No multiplier is used.

    A row longer than ``cfg.max_seq_len`` breaks the contract: its length counter wraps (and a
    row longer than ``buffer_depth`` stalls the unit for good).

    Raises
    ------
    TypeError
        If ``cfg`` is not an :class:`AttnConfig` or a depth is not an int (the message names
        the parameter and the value given).
    ValueError
        If a depth is out of range or ``buffer_depth`` is not a power of two.
    """

    def __init__(self, *, cfg: AttnConfig, buffer_depth: int | None = None,
                 queue_depth: int = 4, registered_reads: bool = False,
                 counted_late: bool = False):
        if not isinstance(cfg, AttnConfig):
            raise TypeError(f"cfg must be an AttnConfig, not {cfg!r}")
        if buffer_depth is None:
            buffer_depth = _pow2_ceil(cfg.max_seq_len + 16)
        if not isinstance(buffer_depth, int) or isinstance(buffer_depth, bool):
            raise TypeError(f"buffer_depth must be an int or None, not {buffer_depth!r}")
        if buffer_depth < cfg.max_seq_len or buffer_depth & (buffer_depth - 1):
            raise ValueError(f"buffer_depth must be a power of two of at least max_seq_len "
                             f"({cfg.max_seq_len}), not {buffer_depth!r}")
        if not isinstance(queue_depth, int) or isinstance(queue_depth, bool):
            raise TypeError(f"queue_depth must be an int, not {queue_depth!r}")
        if not 1 <= queue_depth <= 64:
            raise ValueError(f"queue_depth must be between 1 and 64, not {queue_depth!r}")
        for what, value in (("registered_reads", registered_reads),
                            ("counted_late", counted_late)):
            if not isinstance(value, bool):
                raise TypeError(f"{what} must be a bool, not {value!r}")
        if counted_late and (buffer_depth <= cfg.max_seq_len or queue_depth < 2):
            raise ValueError(f"counted_late needs a buffer_depth above max_seq_len "
                             f"({cfg.max_seq_len}) and a queue_depth of at least 2, not "
                             f"{buffer_depth} and {queue_depth}")
        self.cfg = cfg
        self.buffer_depth = buffer_depth
        self.queue_depth = queue_depth
        self.registered_reads = registered_reads
        self.counted_late = counted_late
        self.table = exp_table(cfg)
        super().__init__({
            "i_stream": In(stream.Signature(softmax_input_layout(cfg))),
            "o_stream": Out(stream.Signature(softmax_output_layout(cfg))),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        sb, eb, pb = cfg.score_bits, cfg.exp_bits, cfg.prob_bits
        lb, sumb = cfg.len_bits, cfg.sum_bits
        depth, qd = self.buffer_depth, self.queue_depth
        ptr_bits = (depth - 1).bit_length()     # ring pointers wrap by overflow
        entry_bits = sb + int(cfg.masks)

        if self.registered_reads:
            m.submodules.scores = scores = RegisteredMemory(width=entry_bits, depth=depth,
                                                            name="scores")
        else:
            m.submodules.scores = scores = Memory(shape=unsigned(entry_bits), depth=depth,
                                                  init=[])
        m.submodules.exps = exps = Memory(shape=unsigned(eb), depth=depth, init=[])
        m.submodules.table = table = Memory(shape=unsigned(eb), depth=cfg.lut_size,
                                            init=[int(v) for v in self.table])
        m.submodules.maxima = maxima = fifo.SyncFIFO(width=lb + sb, depth=qd)
        m.submodules.sums = sums = fifo.SyncFIFO(width=lb + sumb, depth=qd)
        m.submodules.divider = divider = Divider(
            dividend_bits=sumb + pb, divisor_bits=sumb, quotient_bits=pb, tag_bits=1,
            bits_per_stage=cfg.div_bits_per_stage)

        # Occupancy: score entries written and not yet read by stage 2; exponent entries
        # reserved by stage 2 (at issue) and not yet read by stage 3; queue entries reserved
        # when a row's last element is taken (maxima) or issued by stage 2 (sums), until
        # popped.
        # Each count has a registered "room" flag (count below capacity), computed from the
        # count's next value, so that no issue decision waits on a comparison. Entries are
        # counted when reserved and freed one cycle after their consumer is done with them.
        scores_room = Signal(init=1)
        exps_room = Signal(init=1)
        sums_room = Signal(init=1)
        maxima_room = Signal(init=1)

        # -- stage 1: ingest, row maximum ----------------------------------------------------
        # A taken element is registered, then written to the score buffer and folded into
        # the running maximum; a row's (length, maximum) is queued the cycle after that, from
        # registers. Buffer and queue entries are reserved when an element is taken, so
        # neither write can find its target full.
        i_stream = self.i_stream
        ip = i_stream.payload
        in_take = Signal()
        m.d.comb += [
            i_stream.ready.eq(scores_room & maxima_room),
            in_take.eq(i_stream.valid & i_stream.ready),
        ]
        r_valid = Signal()
        r_last = Signal()
        r_entry = Signal(entry_bits, reset_less=True)
        # The score as an offset-binary key (sign bit flipped: unsigned order = signed order),
        # or 0 (the minimum) if masked; unsigned compares map straight onto carry chains.
        r_key = Signal(sb, reset_less=True)
        in_masked = ip.mask if cfg.masks else 0
        m.d.sync += [
            r_valid.eq(in_take), r_last.eq(ip.last),
            r_entry.eq(Cat(ip.score, in_masked)),
            r_key.eq(Mux(in_masked, 0, ip.score.as_unsigned() ^ (1 << (sb - 1)))),
        ]

        in_ptr = Signal(ptr_bits)
        in_first = Signal(init=1)       # the next element starts a row
        in_len = Signal(lb)
        in_max = Signal(sb, reset_less=True)  # offset-binary key of the row maximum
        in_push = Signal()
        if self.registered_reads:
            m.d.comb += [scores.w_addr.eq(in_ptr), scores.w_data.eq(r_entry),
                         scores.w_en.eq(r_valid)]
        else:
            score_w = scores.write_port()
            m.d.comb += [score_w.addr.eq(in_ptr), score_w.data.eq(r_entry),
                         score_w.en.eq(r_valid)]
        m.d.comb += [
            maxima.w_data.eq(Cat(in_len, in_max ^ (1 << (sb - 1)))),
            maxima.w_en.eq(in_push),
        ]
        # r_key >= in_max as the borrow of a subtraction (a carry chain, not a LUT tree)
        key_diff = Signal(sb + 1)
        m.d.comb += key_diff.eq(r_key - in_max)
        m.d.sync += in_push.eq(r_valid & r_last)
        with m.If(r_valid):
            m.d.sync += [
                in_ptr.eq(in_ptr + 1),
                in_first.eq(r_last),
                in_len.eq(Mux(in_first, 1, in_len + 1)),
            ]
            with m.If(in_first | ~key_diff[-1]):
                m.d.sync += in_max.eq(r_key)

        # -- stage 2: exponent and row sum ---------------------------------------------------
        ex_left = Signal(lb)            # elements of the current row still to issue
        ex_active = Signal()            # ex_left != 0
        ex_max = Signal(signed(sb), reset_less=True)
        ex_ptr = Signal(ptr_bits)
        ex_last = Signal()
        ex_issue = Signal()
        ex_load = Signal()
        m.d.comb += [
            ex_issue.eq(ex_active & exps_room & (~ex_last | sums_room)),
            ex_load.eq((~ex_active | (ex_issue & ex_last)) & maxima.r_rdy),
            maxima.r_en.eq(ex_load),
        ]
        with m.If(ex_load):
            m.d.sync += [ex_left.eq(maxima.r_data[:lb]), ex_max.eq(maxima.r_data[lb:]),
                         ex_active.eq(1), ex_last.eq(maxima.r_data[:lb] == 1)]
        with m.Elif(ex_issue):
            m.d.sync += [ex_left.eq(ex_left - 1), ex_active.eq(~ex_last),
                         ex_last.eq(ex_left == 2)]
        with m.If(ex_issue):
            m.d.sync += ex_ptr.eq(ex_ptr + 1)

        # e1: score read; e2: score registered; e3: difference; e4: table read; e5: table
        # word registered; e6: exponent, summed. Block RAM outputs go straight into registers
        # (their clock-to-output time is long); with `registered_reads` the e2 register is the
        # memory's output register. Never stalls: issue waits for room in the exponent buffer
        # and the sum queue instead, and the score buffer is read every cycle.
        e2_entry = Signal(entry_bits, reset_less=True)
        if self.registered_reads:
            m.d.comb += [scores.r_addr.eq(ex_ptr), scores.r_en.eq(1),
                         e2_entry.eq(scores.r_data)]
        else:
            score_r = scores.read_port(transparent_for=())
            m.d.comb += score_r.addr.eq(ex_ptr)
            m.d.sync += e2_entry.eq(score_r.data)
        e1_valid = Signal()
        e1_last = Signal()
        e1_max = Signal(signed(sb), reset_less=True)
        m.d.sync += [e1_valid.eq(ex_issue), e1_last.eq(ex_last), e1_max.eq(ex_max)]

        e2_valid = Signal()
        e2_last = Signal()
        e2_max = Signal(signed(sb), reset_less=True)
        m.d.sync += [e2_valid.eq(e1_valid), e2_last.eq(e1_last), e2_max.eq(e1_max)]

        e3_valid = Signal()
        e3_last = Signal()
        e3_masked = Signal(reset_less=True)
        e3_diff = Signal(sb, reset_less=True)
        m.d.sync += [
            e3_valid.eq(e2_valid), e3_last.eq(e2_last),
            e3_masked.eq(e2_entry[sb] if cfg.masks else 0),
            e3_diff.eq(e2_max - e2_entry[:sb].as_signed()),
        ]

        table_r = table.read_port(transparent_for=())
        shift_width = max(1, (eb - 1).bit_length())
        e3_zero = Signal()
        e3_shift = Signal(shift_width)
        lab, sfb = cfg.lut_addr_bits, cfg.score_frac_bits
        if cfg.exp_mode == "exp2":
            whole = e3_diff[sfb:]
            m.d.comb += [
                table_r.addr.eq(e3_diff[sfb - lab:sfb]),
                e3_zero.eq(e3_masked | (whole >= eb)),
                e3_shift.eq(whole),
            ]
        else:
            m.d.comb += [
                table_r.addr.eq(e3_diff),
                e3_zero.eq(e3_masked | ((e3_diff >> lab) != 0)),
                e3_shift.eq(0),
            ]

        e4_valid = Signal()
        e4_last = Signal()
        e4_zero = Signal(reset_less=True)
        e4_shift = Signal(shift_width, reset_less=True)
        m.d.sync += [e4_valid.eq(e3_valid), e4_last.eq(e3_last), e4_zero.eq(e3_zero),
                     e4_shift.eq(e3_shift)]

        e5_valid = Signal()
        e5_last = Signal()
        e5_zero = Signal(reset_less=True)
        e5_shift = Signal(shift_width, reset_less=True)
        e5_word = Signal(eb, reset_less=True)
        m.d.sync += [e5_valid.eq(e4_valid), e5_last.eq(e4_last), e5_zero.eq(e4_zero),
                     e5_shift.eq(e4_shift), e5_word.eq(table_r.data)]

        e6_valid = Signal()
        e6_last = Signal()
        e6_exp = Signal(eb, reset_less=True)
        m.d.sync += [e6_valid.eq(e5_valid), e6_last.eq(e5_last),
                     e6_exp.eq(Mux(e5_zero, 0, e5_word >> e5_shift))]

        # Row sum and length; the row's (length, sum) is queued the cycle after its last
        # exponent, from registers. A zero sum (a fully masked row: every exponent is 0) is
        # queued as 1, so that every probability of the row is 0 // 1 = 0.
        ex_wptr = Signal(ptr_bits)
        ex_first = Signal(init=1)       # the next exponent starts a row
        ex_sum = Signal(sumb, reset_less=True)
        ex_count = Signal(lb)
        ex_nonzero = Signal()
        ex_push = Signal()
        exp_w = exps.write_port()
        m.d.comb += [
            exp_w.addr.eq(ex_wptr), exp_w.data.eq(e6_exp), exp_w.en.eq(e6_valid),
            sums.w_data.eq(Cat(ex_count, ex_sum[0] | ~ex_nonzero, ex_sum[1:])),
            sums.w_en.eq(ex_push),
        ]
        m.d.sync += ex_push.eq(e6_valid & e6_last)
        with m.If(e6_valid):
            m.d.sync += [
                ex_wptr.eq(ex_wptr + 1), ex_first.eq(e6_last),
                ex_sum.eq(Mux(ex_first, 0, ex_sum) + e6_exp),
                ex_count.eq(Mux(ex_first, 1, ex_count + 1)),
                ex_nonzero.eq(Mux(ex_first, 0, ex_nonzero) | (e6_exp != 0)),
            ]

        # -- stage 3: normalize --------------------------------------------------------------
        advance = Signal()              # the whole stage moves when the divider takes a beat
        m.d.comb += advance.eq(divider.i_stream.ready)
        nm_left = Signal(lb)
        nm_active = Signal()
        nm_sum = Signal(sumb, reset_less=True)
        nm_ptr = Signal(ptr_bits)
        nm_last = Signal()
        nm_issue = Signal()
        nm_load = Signal()
        m.d.comb += [
            nm_issue.eq(nm_active & advance),
            nm_load.eq((~nm_active | (nm_issue & nm_last)) & sums.r_rdy),
            sums.r_en.eq(nm_load),
        ]
        with m.If(nm_load):
            m.d.sync += [nm_left.eq(sums.r_data[:lb]), nm_sum.eq(sums.r_data[lb:]),
                         nm_active.eq(1), nm_last.eq(sums.r_data[:lb] == 1)]
        with m.Elif(nm_issue):
            m.d.sync += [nm_left.eq(nm_left - 1), nm_active.eq(~nm_last),
                         nm_last.eq(nm_left == 2)]
        with m.If(nm_issue):
            m.d.sync += nm_ptr.eq(nm_ptr + 1)

        exp_r = exps.read_port(transparent_for=())
        m.d.comb += [exp_r.addr.eq(nm_ptr), exp_r.en.eq(advance)]

        # n1: exponent read; n2: exponent registered; n3: sum // 2 - e; n4: dividend
        # e * (2**pb - 1) + sum // 2 = (e << pb) + (sum // 2 - e), one carry chain per stage and
        # no multiplier; then the divider.
        n1_valid = Signal()
        n1_last = Signal()
        n1_sum = Signal(sumb, reset_less=True)
        n2_valid = Signal()
        n2_last = Signal()
        n2_sum = Signal(sumb, reset_less=True)
        n2_exp = Signal(eb, reset_less=True)
        n3_valid = Signal()
        n3_last = Signal()
        n3_sum = Signal(sumb, reset_less=True)
        n3_exp = Signal(eb, reset_less=True)
        n3_rest = Signal(signed(max(sumb, eb) + 1), reset_less=True)
        n4_valid = Signal()
        n4_last = Signal()
        n4_sum = Signal(sumb, reset_less=True)
        n4_dividend = Signal(sumb + pb, reset_less=True)
        with m.If(advance):
            m.d.sync += [
                n1_valid.eq(nm_issue), n1_last.eq(nm_last), n1_sum.eq(nm_sum),
                n2_valid.eq(n1_valid), n2_last.eq(n1_last), n2_sum.eq(n1_sum),
                n2_exp.eq(exp_r.data),
                n3_valid.eq(n2_valid), n3_last.eq(n2_last), n3_sum.eq(n2_sum),
                n3_exp.eq(n2_exp), n3_rest.eq((n2_sum >> 1) - n2_exp),
                n4_valid.eq(n3_valid), n4_last.eq(n3_last), n4_sum.eq(n3_sum),
                n4_dividend.eq((n3_exp << pb) + n3_rest),
            ]
        m.d.comb += [
            divider.i_stream.valid.eq(n4_valid),
            divider.i_stream.payload.dividend.eq(n4_dividend),
            divider.i_stream.payload.divisor.eq(n4_sum),
            divider.i_stream.payload.tag.eq(n4_last),
            self.o_stream.valid.eq(divider.o_stream.valid),
            self.o_stream.payload.prob.eq(divider.o_stream.payload.quotient),
            self.o_stream.payload.last.eq(divider.o_stream.payload.tag),
            divider.o_stream.ready.eq(self.o_stream.ready),
        ]

        # -- occupancy counters --------------------------------------------------------------
        # With `counted_late` the ingest's two counts take an element from `r_valid` (the
        # cycle after `in_take`) and keep one entry for the element that may be taken
        # meanwhile.
        late = self.counted_late
        for name, room, size, inc, dec, reserve in (
                ("scores_used", scores_room, depth, r_valid if late else in_take, ex_issue,
                 late),
                ("exps_used", exps_room, depth, ex_issue, nm_issue, 0),
                ("sums_reserved", sums_room, qd, ex_issue & ex_last, nm_load, 0),
                ("maxima_reserved", maxima_room, qd,
                 r_valid & r_last if late else in_take & ip.last, ex_load, late)):
            count = Signal(range(size + 1), name=name)
            count_next = Signal(range(size + 1), name=f"{name}_next")
            # Frees count one cycle late (from a register): conservative, and it keeps the
            # consumers' issue logic off the counter's carry chain.
            freed = Signal(name=f"{name}_freed")
            m.d.sync += freed.eq(dec)
            m.d.comb += count_next.eq(count + inc - freed)
            m.d.sync += [count.eq(count_next),
                         room.eq(count_next < size - 1 if reserve else count_next != size)]
        return m
