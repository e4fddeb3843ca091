"""The attention core: multi-head self-attention from X and the weights to the output, on one
systolic array and one softmax unit, bit-exact with :func:`golden.attention_int`.

Schedule of one run (``L x D``, ``H`` heads of ``d``, array ``R x C``; counts in
:class:`hw.core_io.CoreShape`):

1. *load*: the requantization constants (``p_stream``) into on-chip memories, and X
   (``x_stream``) from the same cycle on (it goes on loading during 2);
2. *projections*: for each tile of ``C`` channels of Q, K, V (``matrix -> head -> block``) and
   each block of ``R`` tokens, one array tile ``X_blk · W_tileᵀ`` (``K = D``); the first row
   block takes the weights from ``w_stream`` and keeps them for the other row blocks (with
   :attr:`AttentionCore.paired_tiles` two tiles take turns on each row block); results
   are requantized per channel into the Q, K, V buffers;
3. *attention*: for each row block and head (``n = rb * H + h``) two array operations, scores
   ``S(n) = Q_h · K_hᵀ`` (``ceil(keys / C)`` tiles of ``K = d``) and ``PV(n) = P_h · V_h``
   (``d / C`` tiles of ``K = keys``), where ``keys`` is the row block's key bound
   (:meth:`hw.core_io.CoreShape.key_bound`: the keys a padding mask leaves, with a causal
   mask only those up to its last query - the masked rest would give probabilities 0),
   issued in the order
   ``S(0) S(1) PV(0) S(2) PV(1) ...`` (or with S up to ``slots - 1`` blocks ahead,
   :attr:`AttentionCore.attention_slots`) so the softmax of block ``n`` (score rows of
   ``keys`` streamed from the score memory into :class:`hw.softmax.Softmax`, probabilities
   into the P memory, both in ``slots`` slots) runs while the array computes the ops around
   it (with :attr:`AttentionCore.early_phases` the first S starts once Q and K are written,
   while the V tiles still drain);
4. *output*: for each tile of ``C`` output channels and each row block, ``concat · W_oᵀ``
   (``K = D``, weights from ``w_stream`` as in 2), requantized and sent out on ``o_stream``
   (with :attr:`AttentionCore.early_phases` from the attention's last beat on, each row
   block once its head outputs are written).

Stream formats and orders: :mod:`hw.core_io`. Buffers (``amaranth.lib.memory``): X, Q and the
concatenated head outputs in ``R`` banks (token mod R), K in ``C`` banks (token mod C), V in
one memory, each word holding ``C`` channels of one token with the channels of each head
starting on a word boundary (the X/Q and K banks are :class:`hw.lane_bank.LaneBank`: one value
per address, read one value at a time; the writer writes its rows into them a lane a cycle, and
X beats reach the X/Q banks through a queue each); scores (``slots`` slots of ``R x L``), P (``R``
banks of ``slots`` slots of ``L``), one tile of weights (``D`` words; two with paired tiles),
the constants (one word per tile).

The array and the softmax are never given a beat they cannot take, so valid/ready stalls on any
stream only pause the core. Rows and columns of a tile past ``L``, ``D`` or ``d`` are fed
zeros and their results are dropped.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Shape, Signal, signed, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .bram import RegisteredMemory
from .core_io import lanes_layout, param_layout, run_args_layout
from .dsp import ice40_mac16, mac16_blocks, times_constant
from .fifo import BlockRAMFIFO, credit_queue, register_buffer
from .lane_bank import LaneBank, LaneSerializer
from .requant import Requantizer, sum_width
from .softmax import Softmax
from .systolic import SystolicArray
from .target import (
    KEEP_COPY,
    block_ram_attrs,
    is_ecp5,
    is_ice40,
    keep_copy_on_ecp5,
    one_hot_on_ecp5,
)

__all__ = ["AttentionCore", "COUNTERS"]

#: Names of the performance counters, in the order of :attr:`AttentionCore.counters`.
COUNTERS = ("cycles", "array_beats", "array_starved", "softmax_beats", "w_wait",
            "out_stall", "softmax_wait")

# operations of the array
_PROJ, _S, _PV, _OUT = range(4)


def _log2(n: int) -> int:
    return (n - 1).bit_length()


def _pow2(n: int) -> int:
    return 1 << _log2(max(n, 1))


def _ceil_div(a, b):
    return -(-a // b)


class AttentionCore(wiring.Component):
    """Multi-head self-attention core for one :class:`attn.AttnConfig`.

    Parameters
    ----------
    cfg : AttnConfig
        Every width, the maximum shape and the array size. ``rows`` and ``cols`` must be
        powers of two. ``cfg.softmax_unit_count`` softmax units work on the rows of a block
        in parallel.

    Members
    -------
    start : In(stream.Signature(run_args_layout(cfg)))
        One beat starts a run (accepted only while idle).
    p_stream, x_stream, w_stream : In(stream.Signature(...))
        Constants, input and weights, in the orders of :mod:`hw.core_io`.
    o_stream : Out(stream.Signature(...))
        The output, ``C`` channels of one token per beat, ``last`` on the run's final beat.
    busy : Out(1)
        High from the accepted ``start`` beat until the last output beat has left.
    counters : Out(data.ArrayLayout(32, len(COUNTERS)))
        Performance counters (:data:`COUNTERS`), cleared by each ``start``: cycles of the run;
        beats the array took; cycles the array had no beat while a phase ran; beats the
        softmax took; cycles waiting for ``w_stream``; cycles the output waited for
        ``o_stream.ready``; cycles the array waited for the softmax.
    """

    #: Memories (or array lanes) per register of the stage FB (:attr:`staged_addresses`).
    FB_GROUP = 4

    def __init__(self, cfg):
        for name in ("rows", "cols"):
            value = getattr(cfg, name)
            if value & (value - 1):
                self._MustUse__silence = True
                raise ValueError(f"{name} must be a power of two for the attention core, "
                                 f"not {value}")
        self.cfg = cfg
        #: Lane serializers of the writer (bank ``b`` takes its rows from serializer
        #: ``b mod serializers``; checked by the configuration).
        self.serializers = cfg.bank_writer_count
        #: Softmax units (a power of two dividing ``rows``, checked by the configuration).
        self.softmax_units = cfg.softmax_unit_count
        out_layout = data.StructLayout({"y": lanes_layout(cfg, cfg.y_bits), "last": 1})
        super().__init__({
            "start": In(stream.Signature(run_args_layout(cfg))),
            "p_stream": In(stream.Signature(param_layout(cfg))),
            "x_stream": In(stream.Signature(lanes_layout(cfg, cfg.x_bits))),
            "w_stream": In(stream.Signature(lanes_layout(cfg, cfg.w_bits))),
            "o_stream": Out(stream.Signature(out_layout)),
            "busy": Out(1),
            "counters": Out(data.ArrayLayout(32, len(COUNTERS))),
        })

    # -- static sizes --------------------------------------------------------------------

    @property
    def words_per_token(self) -> int:
        """Words per token of the X/concat, Q, K and V buffers: the most any supported shape
        needs, ``max H * ceil(d / C)`` (heads start on word boundaries)."""
        cfg = self.cfg
        return max(h * _ceil_div(d_model // h, cfg.cols)
                   for d_model in range(1, cfg.max_d_model + 1)
                   for h in range(1, min(cfg.max_heads, d_model) + 1) if d_model % h == 0)

    @property
    def attention_slots(self) -> int:
        """Score blocks (one row block of one head) the score and P memories hold
        (``cfg.score_slot_count``): S runs up to ``slots - 1`` blocks ahead of the P.V
        waiting for the softmax."""
        return self.cfg.score_slot_count

    @property
    def requant_units(self) -> int:
        """Requantizers working in parallel (the config's ``requant_unit_count``)."""
        return self.cfg.requant_unit_count

    @property
    def feeder_claims(self) -> bool:
        """Whether the feeder's stages never stop and the array takes every beat: the issue
        logic claims a tile's output room when it issues the tile's last beat
        (:class:`hw.systolic.SystolicArray` with ``claim_lead``; see the feeder in
        :meth:`elaborate`). With the ECP5's registered DSPs (``cfg.dsp``), the arrays that
        span the die; not on the small and iCE40 configurations, which have no die to cross
        (there the stages stop while the array does not take a beat). A configuration
        choice, not the platform's, so that simulated cycles are the hardware's."""
        return self.cfg.dsp == "ecp5_registered"

    @property
    def paired_tiles(self) -> bool:
        """Whether the projections run their tiles in pairs (wherever the feeder claims,
        :attr:`feeder_claims`, on arrays with more rows than columns): tile ``t`` on a row
        block, then tile ``t + 1`` on the same block, then both on the next, the weights of
        the two kept in two halves of the weights memory. X arrives ``C`` values a cycle and
        a beat takes ``R``, so while X loads one tile at a time leaves the array waiting for
        each row block (on the 16x8 the reference layer's first 512 cycles held 256 beats);
        two tiles take a block's X as fast as it comes. Results do not depend on it."""
        return self.feeder_claims and self.cfg.rows > self.cfg.cols

    @property
    def early_phases(self) -> bool:
        """Whether the attention and the output phases start before the results of the phase
        before are all written (wherever the feeder claims, :attr:`feeder_claims`; the
        iCE40UP5K preset has no logic cell to spare): the attention once Q and K are written
        (the V tiles, which come last, may still drain: P.V reads V only after an S op
        written after them and its softmax block), the output as soon as the attention's
        last beat is issued, a tile on row block ``rb`` waiting only until the head outputs
        of the row blocks up to ``rb`` are in the banks (`x_ready` in the output phase). On
        the 16x8 the reference layer's V tiles took 47 cycles to drain and its last P.V
        results 59, in which the array had no beat."""
        return self.feeder_claims

    @property
    def beat_queue(self) -> bool:
        """Whether the issue logic puts its beats into a queue of two registers that the
        feeder takes from (wherever the feeder claims, :attr:`feeder_claims`): the loop
        counters then move on their own conditions and the queue's room (a register), and
        only the queue's consumer waits for the array's room and the weights. On the 16x8
        ULX3S device the weights' valid and the array's room ran through the issue to every
        loop counter (`want_w` -> `k_base`, 11.6 ns at 767f867). A cycle more of latency
        at each wait; the counters run ahead while the feeder waits for the weights."""
        return self.feeder_claims

    @property
    def feed_lead(self) -> int:
        """Cycles from issuing a beat to the array taking it when the stages never stop: FB
        (with :attr:`staged_addresses`), FA (with :attr:`registered_reads`), F1, F2."""
        return 2 + self.registered_reads + self.staged_addresses

    @property
    def staged_addresses(self) -> bool:
        """Whether the read addresses and the beat's fields pass a stage FB before FA
        (``cfg.address_stage_count`` is 2: by default where the feeder claims,
        :attr:`feeder_claims`, on arrays of more than 64 PEs): the addresses go to a register
        per group of :attr:`FB_GROUP` memories (KEEP_COPY), and FA's copies at the memories
        take them from those, so that two registers lie between the central counters and
        each memory, not one (on the 16x8 ULX3S device `k` -> V's read address -> the
        farthest lane's copy was a 13.1 ns path; the 8x4 lost 9 MHz with it). The weights
        are written from FB too. A cycle more of latency per operation."""
        return self.cfg.address_stage_count == 2

    @property
    def softmax_credits(self) -> int:
        """The same for each softmax unit's reader with :attr:`registered_reads`: its four
        stages (F1, F1b, F2, F3) and the credit's cycle hold five scores while the unit takes
        one a cycle, so six keep it busy."""
        return 6

    @property
    def registered_reads(self) -> bool:
        """Whether the memory reads take one more register stage (wherever the feeder
        claims, :attr:`feeder_claims`): the feeder registers each read address at its memory
        (a copy per bank; on the 16x8 ULX3S device one address net to the 16 X/Q banks had
        12 ns of routing), and each softmax feed takes the score words through the score memory's
        output register (:class:`hw.bram.RegisteredMemory`; on the 8x8 device the word
        crossed 53 rows from its block RAM to the selection) and registers the score it
        selected. A cycle more of latency per operation, two per softmax block."""
        return self.feeder_claims

    @property
    def params_ahead(self) -> bool:
        """Whether the writer reads a tile's requantization constants ahead into one of two
        register sets (wherever the feeder claims, :attr:`feeder_claims`) instead of feeding
        the requantizers from the constants memory's read port: on the 16x8 ULX3S device that
        block RAM's output (5.6 ns clock-to-output) ran 44 columns into the requantizers'
        ``acc + bias``, its slowest path. No cycle is added: the next tile's set is loaded
        while the current tile is requantized (the first tile's while the array computes it:
        four cycles from its descriptor, the memories' addresses registered at the take), and
        the sets change at the tile boundary."""
        return self.feeder_claims

    def requant_multiplier(self, platform) -> str:
        """The requantizers' multiplier on ``platform`` (:class:`hw.requant.Requantizer`):
        ``"ecp5_registered"`` wherever the array's multipliers are (``cfg.dsp``; in simulation
        too, so the core has the hardware's timing), otherwise ``"slices"`` on ECP5 (one
        18x18 product per slice, its registers in the fabric); ``"infer"`` (DSP blocks)
        on an iCE40 whose SB_MAC16 blocks the array (one per PE) leaves enough of them
        (:func:`hw.dsp.mac16_blocks` each), ``"shift_add"`` (fabric adders) on one that does
        not; ``"infer"`` without a platform. On the iCE40UP5K with 16-bit operands a 2x2 array
        leaves room (4 + 3 blocks), a 2x4 does not."""
        if self.cfg.dsp == "ecp5_registered":
            return "ecp5_registered"
        if is_ecp5(platform):
            return "slices"
        if not is_ice40(platform):
            return "infer"
        cfg = self.cfg
        need = (cfg.pes * mac16_blocks(cfg.a_bits, cfg.b_bits)
                + self.requant_units * mac16_blocks(sum_width(cfg.acc_bits, cfg.bias_bits),
                                                    cfg.mult_bits))
        return "infer" if need <= ice40_mac16(platform) else "shift_add"

    @property
    def max_tiles(self) -> int:
        """Constant words: projection and output tiles."""
        return 3 * self.words_per_token + _ceil_div(self.cfg.max_d_model, self.cfg.cols)

    def buffer_bits(self) -> dict:
        """Bits of every on-chip buffer (for docs and reports)."""
        cfg = self.cfg
        r, c, lmax = cfg.rows, cfg.cols, cfg.max_seq_len
        wpt = self.words_per_token
        blocks_r, blocks_c = _ceil_div(lmax, r), _ceil_div(lmax, c)
        return {
            "x_concat_q": 2 * r * blocks_r * wpt * c * max(cfg.x_bits, cfg.head_bits,
                                                        cfg.qkv_bits),
            "k": c * blocks_c * wpt * c * cfg.qkv_bits,
            "v": lmax * wpt * c * cfg.qkv_bits,
            "scores": self.attention_slots * _pow2(r) * _pow2(blocks_c) * c * cfg.score_bits,
            "probs": r * self.attention_slots * _pow2(lmax) * cfg.prob_bits,
            "weights": (1 + self.paired_tiles) * cfg.max_d_model * c * cfg.w_bits,
            "params": self.max_tiles * c * (cfg.bias_bits + cfg.mult_bits + cfg.shift_bits),
        }

    # -- gateware ------------------------------------------------------------------------

    def elaborate(self, platform):
        cfg = self.cfg
        m = Module()
        R, C = cfg.rows, cfg.cols
        lr, lc = _log2(R), _log2(C)
        lmax, dmax, hmax = cfg.max_seq_len, cfg.max_d_model, cfg.max_heads
        stride = self.words_per_token
        wpt_bits = max(1, _log2(stride + 1))
        rblk_bits = _log2(_ceil_div(lmax, R))
        cblk_bits = _log2(_ceil_div(lmax, C))
        tok_bits = _log2(lmax)
        slots = self.attention_slots
        slot_bits = _log2(slots)

        m.submodules.array = array = SystolicArray.from_config(
            cfg, claim_lead=self.feed_lead if self.feeder_claims else None)
        U = self.softmax_units
        RU = R // U                          # rows of a block per softmax unit
        lru = _log2(RU)
        softmaxes = []
        for u in range(U):
            # Row queues of 2: a score row is a whole sequence, and rows of 8 keys or more
            # run at full speed with 2 (shorter ones at 0.2-0.8 of it, where a run is short
            # anyway); each entry of the 4 a lone softmax needs for rows of 3 costs about
            # 30 flip-flops.
            # With `registered_reads` the unit's score buffer reads through the block RAM's
            # output register and its ingest counts a cycle late (on the 8x8 ULX3S device its
            # counters' loop ran through this core's queue in front of it, 33 columns away).
            softmaxes.append(Softmax(cfg=cfg, queue_depth=2,
                                     registered_reads=self.registered_reads,
                                     counted_late=self.registered_reads))
            m.submodules[f"softmax_{u}"] = softmaxes[u]
        #: The softmax units of the latest elaboration (simulation probes read their outputs).
        self.softmax_modules = softmaxes
        # Requantizers in lockstep, each on C / units lanes of every result row; the results
        # are clamped afterwards to the width of the row's stage (clamping to a wider range
        # first changes nothing).
        rq_bits = max(cfg.qkv_bits, cfg.score_bits, cfg.head_bits, cfg.y_bits)
        units = self.requant_units
        per = C // units
        multiplier = self.requant_multiplier(platform)
        rqs = []
        for g in range(units):
            rqs.append(Requantizer(lanes=per, in_bits=cfg.acc_bits, bias_bits=cfg.bias_bits,
                                   mult_bits=cfg.mult_bits, shift_bits=cfg.shift_bits,
                                   out_bits=rq_bits, rounding=cfg.rounding,
                                   multiplier=multiplier))
            m.submodules[f"requant_{g}"] = rqs[g]
        rq = rqs[0]

        on_ecp5 = is_ecp5(platform)

        def mem(name, shape, depth, lutram=False, block=False, bram=False):
            # On ECP5 the shallow memories read by many lanes go to LUT RAM, keeping block RAM
            # for the big buffers, unless they hold more than one block RAM's worth (16 Kbit):
            # the ulx3s constants (432 bits x 213 words) took 1,512 DPR16X4 slices there.
            # On iCE40 (no LUT RAM) a few words Yosys would build from flip-flops and
            # multiplexers go to a block RAM with `block` (a logic cell per bit saved).
            # `bram` asks for block RAM on ECP5 as well: for memories whose read address
            # goes to many of them at once, one block each instead of tens of LUT-RAM slices.
            small = lutram and Shape.cast(shape).width * depth <= 16384
            attrs = {"ram_style": "distributed"} if small and on_ecp5 else None
            if block:
                attrs = block_ram_attrs(platform) or attrs
            if bram and on_ecp5:
                attrs = {"ram_style": "block"}
            memory = Memory(shape=shape, depth=max(depth, 2), init=[], attrs=attrs)
            m.submodules[name] = memory
            return memory

        qkv_lanes = data.ArrayLayout(signed(cfg.qkv_bits), C)   # written lane by lane
        # X, Q and the head outputs share R banks: X and the head outputs (written after the
        # projections) at words [0, q_base), Q at [q_base, 2 q_base). The projections read X
        # and attention reads Q, never both at once, so one read port per bank serves both and
        # a bank fills its block RAM twice as far (the ECP5 ulx3s core did not fit otherwise).
        # These banks and K's are read one value at a time (:class:`hw.lane_bank.LaneBank`).
        # The writer hands each of its rows to a serializer (bank b's is b mod
        # `bank_writers`), which writes it a lane a cycle on a narrow bus of its own, side by
        # side with the other serializers; X rows arrive C lanes at once and go through a
        # queue per bank. X loads send a token's words to one bank back to back, so that queue
        # holds a token (`stride` rows).
        xq_shape = signed(max(cfg.x_bits, cfg.head_bits, cfg.qkv_bits))
        q_base = _ceil_div(lmax, R) * stride
        # (With C = 1 the writer's values go to the banks unregistered: the iCE40UP5K, the
        # only such preset, has no cells to spare and no die to cross.)
        # The queues' ready is a register: on the 8x8 ULX3S device a bank's fill level ->
        # its ready -> the selected bank's -> the X stream's handshake -> every bank's
        # write enable was the critical path.
        # With `feeder_claims` the loader acts on a bank's ready a cycle late, and its rows go
        # to a register at each bank before the queue: on the 16x8 ULX3S device the loader's
        # take crossed the die to every bank's queue level and write enable (14.6 ns).
        late = self.feeder_claims and C > 1
        xq_bank = [LaneBank(lanes=C, shape=xq_shape, words=2 * q_base, queue_depth=stride,
                            d_registered=C > 1, ready_registered=True,
                            late_ready=late, w_registered=late) for r in range(R)]
        k_bank = [LaneBank(lanes=C, shape=signed(cfg.qkv_bits),
                           words=_ceil_div(lmax, C) * stride, queue_depth=0,
                           d_registered=C > 1) for c in range(C)]
        # serializer i writes the X/Q and K banks b with b mod `self.serializers` = i; a row's
        # tag says which: b // `self.serializers`, and 1 above it for K
        ls = _log2(self.serializers)
        sel_bits = _log2(max(R, C)) - ls
        serializer = [LaneSerializer(lanes=C, shape=xq_shape,
                                     words=max(b.words for b in xq_bank[:1] + k_bank[:1]),
                                     tag_bits=sel_bits + 1)
                      for i in range(self.serializers)]
        for name, units in (("xq", xq_bank), ("k", k_bank), ("serializer", serializer)):
            for i, unit in enumerate(units):
                m.submodules[f"{name}_{i}"] = unit
        # V: with `registered_reads` a memory per lane read through the block RAM's output
        # register (:class:`hw.bram.RegisteredMemory`), which is then F1's `v_q`: on the 8x4
        # ULX3S device the one V block RAM's data (5.8 ns after the clock) crossed 39 rows to
        # `v_q`, its slowest path (11.1 ns). Per lane, because lanes are written one mask bit
        # each (a DP16KD has no 16-bit write enables).
        if self.registered_reads:
            v_lane_mem = [RegisteredMemory(width=cfg.qkv_bits, depth=lmax * stride,
                                           name=f"v_{c}") for c in range(C)]
            for c, memory in enumerate(v_lane_mem):
                m.submodules[f"v_{c}"] = memory
        else:
            v_mem = mem("v", qkv_lanes, lmax * stride)

        def at(block, word):
            """Address of ``word`` of token (or token block) ``block``."""
            return times_constant(block, stride) + word
        # scores: unit u reads rows u*RU .. u*RU + RU - 1 of a block from its own memory (block
        # RAM on ECP5: on the 8x8 ULX3S device, eight of them in LUT RAM took 576 DPR16X4
        # slices with four slots; the read goes to a register and nothing else). With
        # `registered_reads` that register is the block RAM's own output register
        # (:class:`hw.bram.RegisteredMemory`; F1b of the softmax readers, below).
        score_word = data.ArrayLayout(signed(cfg.score_bits), C)
        s_depth = slots * _pow2(RU) << cblk_bits
        if self.registered_reads:
            s_mem = [RegisteredMemory(width=score_word.size, depth=s_depth, name=f"scores_{u}")
                     for u in range(U)]
            for u, memory in enumerate(s_mem):
                m.submodules[f"scores_{u}"] = memory
        else:
            s_mem = [mem(f"scores_{u}", score_word, s_depth, bram=True) for u in range(U)]
        # P: one bank per array row, all read at the reduction counter's address (block RAM
        # on ECP5, where in LUT RAM that counter reached ~780 slices across the die)
        p_mem = [mem(f"probs_{r}", unsigned(cfg.prob_bits), slots << tok_bits, bram=True)
                 for r in range(R)]
        pairs = self.paired_tiles
        w_mem = mem("weights", lanes_layout(cfg, cfg.w_bits), _pow2(dmax) << pairs)
        block_params = cfg.params_ram == "block"
        c_mem = mem("params", param_layout(cfg), self.max_tiles, lutram=not block_params,
                    bram=block_params)
        head_layout = data.StructLayout({"mult": unsigned(cfg.mult_bits),
                                         "shift": unsigned(cfg.shift_bits)})
        h_mem = mem("head_params", head_layout, 2 * _pow2(hmax), block=True)

        # ---- run arguments and derived counts ------------------------------------------
        args = Signal(run_args_layout(cfg))
        L, D, d = args.seq_len, args.d_model, args.head_dim
        # Counts derived from the arguments are registers loaded with them at `start` (they
        # stay fixed for the run), so that their adders do not lie in front of the loop
        # counters' comparisons (on the 8x4, the row blocks from `L` began the critical path).
        # The last row block and the last tile of a PV op are kept for equality comparisons (a
        # LUT tree) instead of `x + 1 < n` (an adder and a carry chain): on the 8x8 ULX3S
        # device `blk + 1 < wph` -> a PV op's end -> the softmax units' counters was the
        # critical path. Every loop counter's end is such an equality (`pj_j == last_pv_blk`,
        # not `pj_j + 1 == wph`: on the 16x8's netlist the adders and carry chains of those
        # comparisons lay behind the issue, before `rem_cols`, `pj_base` and the counters).
        wph = Signal(range(dmax + 1), reset_less=True)      # words per head
        wpd = Signal(range(dmax + 1), reset_less=True)      # words per token of X / output
        last_w = Signal(range(dmax), reset_less=True)       # wpd - 1
        last_tok = Signal(range(lmax), reset_less=True)     # L - 1
        last_rb = Signal(range(lmax + 1), reset_less=True)  # row blocks - 1
        last_pv_blk = Signal(range(dmax + 1), reset_less=True)   # wph - 1
        last_h = Signal(range(hmax), reset_less=True)            # H - 1
        last_d = Signal(range(dmax), reset_less=True)            # head_dim - 1
        # keys a padding mask leaves (at least one: a row with every key masked has
        # probabilities 0 whatever its length) and the row block of the last of them
        pad = Signal(range(lmax + 1), reset_less=True)
        pad_last_rb = Signal(range(lmax + 1), reset_less=True)

        def derived_counts(a):
            words = (a.d_model + C - 1) >> lc
            keys = Mux(a.valid_len == 0, 1, Mux(a.valid_len < a.seq_len, a.valid_len,
                                                a.seq_len))
            return [wph.eq((a.head_dim + C - 1) >> lc), wpd.eq(words),
                    last_w.eq(words - 1), last_tok.eq(a.seq_len - 1),
                    last_rb.eq((a.seq_len - 1) >> lr),
                    last_pv_blk.eq((a.head_dim - 1) >> lc), last_h.eq(a.heads - 1),
                    last_d.eq(a.head_dim - 1),
                    pad.eq(keys), pad_last_rb.eq((keys - 1) >> lr)]

        def key_bound(row_block):
            """Keys row block ``row_block`` computes scores for, normalizes and reduces over
            (:meth:`hw.core_io.CoreShape.key_bound`): the keys before ``valid_len`` (at
            least one, at most L), and with a causal mask only those up to its last query,
            ``(row_block + 1) * R``, where that is fewer. The keys past it are masked for
            every query of the block, so their scores would be dropped and their
            probabilities are 0: skipping them changes no result (a row whose every key is
            masked has probabilities 0 whatever its length)."""
            if not cfg.masks:
                return L
            # ((row_block + 1) * R < pad exactly when row_block < (pad - 1) // R)
            return Mux(args.causal & (row_block < pad_last_rb), (row_block + 1) << lr, pad)

        def key_bound_over_c(row_block):
            """``key_bound(row_block) > C`` without its adder and shift: ``(row_block + 1) *
            R > C`` exactly when ``row_block >= C // R`` (R and C powers of two)."""
            return Mux(args.causal & (row_block < pad_last_rb), row_block >= C // R, pad > C)

        # ---- top-level sequence ---------------------------------------------------------
        running = Signal()
        # copies of `running` for the far groups of registers it clears (the X banks' token
        # counters, each softmax unit's), kept apart on ECP5: on the 16x8 ULX3S device its
        # clear went to 164 flip-flops across the die on one net (13.2 ns)
        keep = keep_copy_on_ecp5(platform)
        running_x = Signal(name="running_x", attrs=keep)
        running_sm = [Signal(name=f"running_sm_{u}", attrs=keep) for u in range(U)]
        run_flags = [running, running_x, *running_sm]
        outstanding = Signal(range(64))    # tiles issued to the array and not yet written
        tile_issued = Signal()
        tile_retired = Signal()
        # `drained`: no tile is issued and not written. With `feeder_claims` the count takes
        # the issues and retires of the cycle before, from registers, so that neither the issue
        # logic nor the writer lies before its carry chain (on the 16x8 ULX3S device the issue
        # -> `outstanding` was 12.6 ns); a tile issued in either cycle is not counted yet, a
        # tile retired last cycle still is.
        drained = Signal()
        if self.feeder_claims:
            issued_q, retired_q = Signal(name="issued_q"), Signal(name="retired_q")
            m.d.sync += [issued_q.eq(tile_issued), retired_q.eq(tile_retired),
                         outstanding.eq(outstanding + issued_q - retired_q)]
            m.d.comb += drained.eq((outstanding == 0) & ~tile_issued & ~issued_q)
        else:
            m.d.sync += outstanding.eq(outstanding + tile_issued - tile_retired)
            m.d.comb += drained.eq((outstanding == 0) & ~tile_issued)
        out_done = Signal()                 # last output beat left
        # `qk_written` (:attr:`early_phases`): every Q and K row is in its bank. The writer
        # retires rows in order and the projections' V tiles come last, so once a V row
        # retired (`v_retired`) no Q or K row is left to retire, and `banks_written` then says
        # they all landed (V rows do not go to the banks).
        v_retired = Signal()
        qk_written = Signal()
        # every X row queued at the X/Q banks is in them (a row is in a bank's queue from the
        # cycle after it is taken), and so is every row the writer retired (its serializer is
        # done and the bank's registered write landed)
        # (`banks_written` from a register with `feeder_claims`: see the writer below)
        banks_idle = Signal()
        banks_now = Signal()
        banks_written = Signal()
        m.d.comb += [banks_idle.eq(Cat(bank.idle for bank in xq_bank).all()),
                     banks_now.eq(banks_idle
                                  & Cat(u.i_stream.ready for u in serializer).all()
                                  & ~Cat(bank.d_pending for bank in xq_bank + k_bank).any())]
        m.d.comb += self.busy.eq(running)

        # phase flags driven by the FSM
        load_p, load_x, phase_proj, phase_att, phase_out = (Signal(name=n) for n in (
            "load_p", "load_x", "phase_proj", "phase_att", "phase_out"))
        proj_done = Signal()       # every projection tile issued
        att_done = Signal()        # every attention op issued
        out_issued = Signal()      # every output tile issued

        # loading counters
        lp_m = Signal(range(3))
        lp_h = Signal(range(hmax))
        lp_j = Signal(range(dmax))
        lp_stage = Signal(range(3))        # 0 projection tiles, 1 output tiles, 2 heads
        lp_idx = Signal(range(self.max_tiles))
        lp_half = Signal()                 # head params: score (0) / P.V (1)
        lx_tok = Signal(range(lmax + 1))
        lx_w = Signal(range(dmax))
        x_loaded = Signal()                # every token of X is taken from x_stream

        with m.FSM(name="phase") as phase_fsm:
            with m.State("IDLE"):
                m.d.comb += self.start.ready.eq(1)
                with m.If(self.start.valid):
                    m.d.sync += [args.eq(self.start.payload)] + [f.eq(1) for f in run_flags]
                    m.d.sync += derived_counts(self.start.payload)
                    m.d.sync += [lp_m.eq(0), lp_h.eq(0), lp_j.eq(0), lp_stage.eq(0),
                                 lp_idx.eq(0), lp_half.eq(0), lx_tok.eq(0), lx_w.eq(0)]
                    m.next = "LOAD_P"
            with m.State("LOAD_P"):
                m.d.comb += load_p.eq(1)
                with m.If(self.p_stream.valid):
                    with m.Switch(lp_stage):
                        with m.Case(0):
                            m.d.sync += lp_idx.eq(lp_idx + 1)
                            with m.If(lp_j == last_pv_blk):
                                m.d.sync += lp_j.eq(0)
                                with m.If(lp_h == last_h):
                                    m.d.sync += lp_h.eq(0)
                                    with m.If(lp_m == 2):
                                        m.d.sync += [lp_m.eq(0), lp_stage.eq(1)]
                                    with m.Else():
                                        m.d.sync += lp_m.eq(lp_m + 1)
                                with m.Else():
                                    m.d.sync += lp_h.eq(lp_h + 1)
                            with m.Else():
                                m.d.sync += lp_j.eq(lp_j + 1)
                        with m.Case(1):
                            m.d.sync += lp_idx.eq(lp_idx + 1)
                            with m.If(lp_j == last_w):
                                m.d.sync += [lp_j.eq(0), lp_stage.eq(2)]
                            with m.Else():
                                m.d.sync += lp_j.eq(lp_j + 1)
                        with m.Case(2):
                            m.d.sync += lp_half.eq(~lp_half)
                            with m.If(lp_half):
                                with m.If(lp_h == last_h):
                                    m.d.sync += lp_h.eq(0)
                                    m.next = "PROJ"
                                with m.Else():
                                    m.d.sync += lp_h.eq(lp_h + 1)
            with m.State("PROJ"):
                m.d.comb += phase_proj.eq(1)
                with m.If(proj_done & (qk_written if self.early_phases
                                       else drained & banks_written)):
                    m.next = "ATT"
            with m.State("ATT"):
                m.d.comb += phase_att.eq(1)
                with m.If(att_done & (1 if self.early_phases else drained & banks_written)):
                    m.next = "OUT"
            with m.State("OUT"):
                m.d.comb += phase_out.eq(1)
                with m.If(out_done):
                    m.d.sync += [f.eq(0) for f in run_flags]
                    m.next = "IDLE"

        one_hot_on_ecp5(phase_fsm, platform)

        # loads: memory writes
        # X loads from the start of a run, beside the constants (their streams are apart),
        # and on while the projections run: a row block is fed once its tokens are in
        with m.If(~running):
            m.d.sync += x_loaded.eq(0)
        m.d.comb += load_x.eq((load_p | phase_proj) & ~x_loaded)
        # X rows go through each bank's queue; the writer's values go straight in, ahead of it.
        x_take = Signal()
        x_bank = lx_tok[:lr] if lr else 0      # the bank of the token being loaded
        x_room = Signal()
        rooms = Cat(b.w_stream.ready for b in xq_bank)
        if xq_bank[0].late_ready:
            # the ready of the bank written next cycle, selected into a register here (the
            # banks take a row offered a cycle after their ready): on the 16x8 ULX3S device
            # the banks' ready flags crossed the die to their selection and `x_take` crossed
            # it back to every bank's queue in one cycle (12.9 ns, the slowest path)
            # Both candidates are selected from the banks' flags apart from the take, which
            # picks one of them last: at 767f867 the phase register -> `load_x` -> `x_take`
            # -> the next bank's number -> the 16-way selection was the 16x8's slowest path
            # at seed 2 with timing-driven rip-up (11.3 ns).
            if lr:
                bank_after = Signal.like(x_bank, name="x_bank_after")
                m.d.comb += bank_after.eq(x_bank + 1)
                m.d.sync += x_room.eq(Mux(x_take & (lx_w == last_w),
                                          rooms.bit_select(bank_after, 1),
                                          rooms.bit_select(x_bank, 1)))
            else:
                m.d.sync += x_room.eq(rooms[0])
        else:
            m.d.comb += x_room.eq(rooms.bit_select(x_bank, 1))
        m.d.comb += x_take.eq(load_x & self.x_stream.valid & x_room)
        with m.If(x_take):
            with m.If(lx_w == last_w):
                m.d.sync += [lx_w.eq(0), lx_tok.eq(lx_tok + 1)]
                with m.If(lx_tok == last_tok):
                    m.d.sync += x_loaded.eq(1)
            with m.Else():
                m.d.sync += lx_w.eq(lx_w + 1)
        m.d.comb += [self.p_stream.ready.eq(load_p),
                     self.x_stream.ready.eq(load_x & x_room)]
        wp = c_mem.write_port()
        m.d.comb += [wp.addr.eq(lp_idx), wp.data.eq(self.p_stream.payload),
                     wp.en.eq(load_p & self.p_stream.valid & (lp_stage != 2))]
        hwp = h_mem.write_port()
        m.d.comb += [hwp.addr.eq(Cat(lp_half, lp_h)),
                     hwp.data.mult.eq(self.p_stream.payload.mult[0]),
                     hwp.data.shift.eq(self.p_stream.payload.shift[0]),
                     hwp.en.eq(load_p & self.p_stream.valid & (lp_stage == 2))]
        # The payload is not gated (`valid` is, through `x_take`): on the 16x8 ULX3S device
        # gating it with `load_x` put the phase register in front of every bank's queue
        # storage, across the die.
        xq_wr = [bank.w_stream for bank in xq_bank]
        for r in range(R):
            # the tag marks a token's last word: `x_tokens` counts them as they land
            m.d.comb += [xq_wr[r].valid.eq(x_take & (x_bank == r)),
                         xq_wr[r].payload.word.eq(at(lx_tok >> lr, lx_w)),
                         xq_wr[r].payload.mask.eq((1 << C) - 1),
                         xq_wr[r].payload.tag.eq(lx_w == last_w)]
            for c in range(C):
                m.d.comb += xq_wr[r].payload.data[c].eq(self.x_stream.payload[c])

        # ---- feeder: array operations --------------------------------------------------
        # F0: counters -> memory addresses (issue); F1: memory data -> registers (a block RAM's
        # output, slow to leave it on ECP5, goes to a register and nothing else); F2: those
        # registers -> array beat (lane, operand and mask selection). The stages advance
        # together (`adv`), and F0 issues only while they may (`feed_room`).
        # With `feeder_claims` the stages never stop and the array takes every beat: F0 puts
        # its beats into the beat queue (:attr:`beat_queue`), whose consumer (`pop`) loads the
        # first stage; it takes a tile's last beat only while the array has room for the
        # tile's result rows (`claim_ok`, a register of the array's) and claims that room as
        # it takes it (`feed_lead` cycles before the beat reaches the array). The array's `ready` is
        # constant, and nothing between F0 and the array waits: on the 16x8 ULX3S device a
        # `ready` from the beat's `last` crossed the die four times through the issue logic
        # to the loop counters (21.5 ns); behind a skid register, from that register through
        # the stages' enable to the weights' source (14.9 ns); behind a queue of LUT RAM
        # that the array took from first (`hw.fifo.credit_queue`), from the queue's `last`
        # through `ready` to the other lanes' read pointers (15.1 ns).
        f1_valid = Signal()
        f2_valid = Signal()
        adv = Signal()
        feed_room = Signal(init=1)
        if self.feeder_claims:
            m.d.comb += adv.eq(1)
        else:
            m.d.comb += [adv.eq(~f2_valid | array.i_stream.ready), feed_room.eq(adv)]

        # The weights: with `registered_reads` through a queue of LUT RAM, so that the issue
        # logic, which takes them, moves only its read pointer and level: not the weights'
        # source (on the 16x8 ULX3S device: the array's skid register -> the issue ->
        # `w_stream.ready` -> the host link's weights queue, 14.9 ns), nor the enables of a
        # buffer's data (through a two-register buffer: its spare register's, 14.9 ns too).
        w_take = Signal()
        if self.registered_reads:
            w_shape = self.w_stream.payload.shape()
            m.submodules.w_queue = w_queue = fifo.SyncFIFO(width=Shape.cast(w_shape).width,
                                                           depth=4)
            m.d.comb += [w_queue.w_data.eq(self.w_stream.payload),
                         w_queue.w_en.eq(self.w_stream.valid),
                         self.w_stream.ready.eq(w_queue.w_rdy), w_queue.r_en.eq(w_take)]
            w_valid, w_payload = w_queue.r_rdy, data.View(w_shape, w_queue.r_data)
        else:
            w_valid, w_payload = self.w_stream.valid, self.w_stream.payload
            m.d.comb += self.w_stream.ready.eq(w_take)

        desc_layout = data.StructLayout({
            "op": unsigned(2), "target": unsigned(2), "rb": unsigned(max(1, rblk_bits)),
            "blk": unsigned(max(1, cblk_bits, wpt_bits)), "hword": unsigned(wpt_bits),
            "head": unsigned(max(1, _log2(hmax))), "slot": unsigned(slot_bits),
            "tile": unsigned(_log2(self.max_tiles) or 1), "col_mask": unsigned(C),
            "op_last": unsigned(1), "run_last": unsigned(1),
        })
        desc_depth = 8
        m.submodules.desc = desc = fifo.SyncFIFOBuffered(width=desc_layout.size,
                                                         depth=desc_depth)
        # A tile's descriptor is pushed the cycle after its first beat is issued; the writer
        # reads the tile's requantization constants when it takes the descriptor.
        desc_in = Signal(desc_layout)
        pend = Signal()
        pend_desc = Signal(desc_layout)

        issue = Signal()            # F0 issues a beat this cycle
        cur_op = Signal(3, init=7)  # 7 = none
        # (its next value, set by `op_to`: the issue's gate below is a register of it)
        cur_op_next = Signal(3)
        m.d.comb += cur_op_next.eq(cur_op)
        m.d.sync += cur_op.eq(cur_op_next)

        def op_to(value):
            m.d.comb += cur_op_next.eq(value)
        # this beat takes its weights from w_stream: (cur_op is _PROJ or _OUT) & (rb == 0), a
        # register set with them (on the 8x8 ULX3S device `rb == 0` and the op decode were the
        # first four of the eight logic levels before the weights reader's queue)
        want_w = Signal()
        k = Signal(range(max(lmax, dmax) + 1))
        k_lane = Signal(max(1, lc))
        k_word = Signal(wpt_bits + 1)
        rb = Signal(range(lmax + 1))
        rem_rows = Signal(range(lmax + 1))     # L - rb * R
        blk = Signal(range(max(lmax, dmax) + 1))
        rem_cols = Signal(range(max(lmax, dmax) + 1))
        first = Signal(init=1, name="first")   # k == 0
        last = Signal(name="last")             # the tile's last beat: `left` == 0
        # beats of the tile after this one, and the tile's reduction length - 1 and == 1
        # (set by `start_tile`; an op's tiles all have the same)
        left, red_m1 = (Signal(range(max(lmax, dmax)), name=n) for n in ("left", "red_m1"))
        red_one = Signal()
        tile = Signal(range(self.max_tiles + 1))
        # Word addresses of the current token block in the X/Q banks (Q at `q_base` up) and the
        # current key block in the K banks, kept beside the counters they follow (`rb` or the
        # op's row block, `blk`): a read address is then one register plus `k_word`.
        a_base = Signal(range(2 * q_base + 1))
        k_base = Signal(range(_ceil_div(lmax, C) * stride + 1))
        v_word = Signal(wpt_bits + 1)          # PV: the V word of the op's column block

        # projection loop (matrix, head, block) and its head base word
        pj_m = Signal(range(3))
        pj_h = Signal(range(hmax))
        pj_j = Signal(range(dmax + 1))
        pj_base = Signal(wpt_bits + 1)
        # with `paired_tiles`: the pair's tile running (`half`: 0 the first, 1 the second),
        # whether the pair has a second (`has_b`: not after the last tile), and the first
        # tile's counters, taken again at the next row block
        half = Signal()
        has_b = Signal()
        pa_m, pa_h, pa_j, pa_base = (Signal.like(v, name=f"pa_{v.name[3:]}")
                                     for v in (pj_m, pj_h, pj_j, pj_base))
        pa_tile, pa_rem = Signal.like(tile, name="pa_tile"), Signal.like(rem_cols, name="pa_rem")
        # attention op counters: S and PV sequences, each with (rb, head, base word) and the
        # slot (of the score and P memories) of the op: S(n) and PV(n) use slot n mod `slots`
        # (score blocks, one per row block and head, are counted in `count` signals)
        count = range(_ceil_div(lmax, R) * hmax + 1)
        s_rb = Signal(range(lmax + 1))
        s_h = Signal(range(hmax))
        s_base = Signal(wpt_bits + 1)
        s_slot = Signal(slot_bits)
        pv_rb = Signal(range(lmax + 1))
        pv_h = Signal(range(hmax))
        pv_base = Signal(wpt_bits + 1)
        pv_slot = Signal(slot_bits)
        s_end = Signal()
        pv_end = Signal()
        # key blocks of the S op's row block: from the row block counter a cycle before, which
        # never moved in the cycle before an op starts (an op ends, the next starts a cycle
        # later), so it holds from its first beat
        s_last_blk = Signal(range(lmax + 1))    # the S op's key blocks - 1
        m.d.sync += s_last_blk.eq((key_bound(s_rb) - 1) >> lc)
        # whether the op has a tile after the current one: another row block (`rb_more`, for
        # projections and the output), another key block (`s_more`) or column block
        # (`pv_more`). With `feeder_claims` two registers set beside `rb` and `blk` from
        # their next values, so that no comparison of a counter lies between the issue and
        # the counters it advances (on the 16x8 ULX3S device the issue -> `blk != s_last_blk`
        # -> the enables of `rem_cols` and `k_base` were the slowest paths of the netlist).
        rb_more, s_more, pv_more = rb != last_rb, blk != s_last_blk, blk != last_pv_blk
        if self.feeder_claims:
            rb_more = Signal(name="rb_more")
            s_more = pv_more = Signal(name="blk_more")

        def set_next(flag, value):
            # a flag kept as a register of its counters' next values (with `feeder_claims`)
            if self.feeder_claims:
                m.d.sync += flag.eq(value)

        # S ops done minus PV ops done, 0 to `slots`: S(n) starts while n <= PV ops done +
        # slots - 1, so PV(n - slots) has ended (its reads of P slot n mod `slots` are issued)
        # and the softmax has finished block n - slots (its reads of score slot n mod `slots`)
        s_lead = Signal(range(slots + 1))
        s_drained = Signal(count)   # S ops fully written to the score memory
        # whether the next S op may start (S ops left, at most `slots` ahead of PV): with
        # `feeder_claims` a register set from the next values of `s_lead` and `s_end` (the
        # comparison of `s_lead` before an op's start was the next slowest path)
        s_open = ~s_end & (s_lead < slots)
        if self.feeder_claims:
            s_open = Signal(name="s_open", init=1)
        # blocks each softmax unit finished minus PV ops done, 0 to `slots` (a unit finishes
        # block n after S(n); PV(n) waits until every unit finished block n)
        sm_ahead = [Signal(range(slots + 1), name=f"sm_ahead_{u}") for u in range(U)]
        pv_ends = Signal()          # this cycle ends a PV op
        sm_ready = Signal()         # every unit has written the probabilities of the next PV
        # With `feeder_claims` the units' counters take the end of a PV op a cycle late, from a
        # register (`pv_ended`), and no PV starts in that cycle: on the 16x8 ULX3S device the
        # end of a PV op (from the issue) went to the eight units' counters, and the LUT they
        # share sat 33 columns from the issue logic, in the middle of the slowest path.
        # `sm_ready` comes from a register too (last cycle's, and no PV ended since): the eight
        # units' counters sit by their units, and on the 16x8 device their comparisons were
        # the start of the issue logic's slowest paths (a PV op's start -> the counters).
        pv_ended, sm_written = pv_ends, Cat(ahead != 0 for ahead in sm_ahead).all()
        if self.feeder_claims:
            pv_ended = Signal()
            m.d.sync += pv_ended.eq(pv_ends)
            sm_written_r = Signal(name="sm_written_r")
            m.d.sync += sm_written_r.eq(sm_written & ~pv_ended)
            sm_written = sm_written_r & ~pv_ended
        m.d.comb += sm_ready.eq(sm_written)
        # output loop
        ot_cb = Signal(range(dmax + 1))
        ot_h = Signal(range(hmax))
        ot_j = Signal(range(dmax + 1))
        ot_base = Signal(wpt_bits + 1)

        with m.If(~running):
            op_to(7)
            set_next(s_open, 1)
            m.d.sync += [want_w.eq(0), pj_m.eq(0), pj_h.eq(0), pj_j.eq(0),
                         pj_base.eq(0), s_rb.eq(0), s_h.eq(0), s_base.eq(0), s_slot.eq(0),
                         s_end.eq(0), s_lead.eq(0), pv_rb.eq(0), pv_h.eq(0), pv_base.eq(0),
                         pv_slot.eq(0), pv_end.eq(0),
                         ot_cb.eq(0), tile.eq(0), proj_done.eq(0), att_done.eq(0),
                         out_issued.eq(0), rb.eq(0), half.eq(0), has_b.eq(0)]

        # choose the next operation when none is in progress
        can_issue = Signal()
        # Two conditions of an issue come from registers, so that no carry chain lies before
        # `issue`, which selects the next value of every loop counter:
        # - `x_ready`: the tokens of the current projection row block are loaded. Last cycle's
        #   comparison still holds unless a tile ended (`rb` may have moved on): then it waits
        #   a cycle, which only happens while X is still arriving.
        # - `desc_room`: a first beat may push one more descriptor. Last cycle's count plus
        #   the descriptor pushed since (at most one a cycle) leaves the room needed.
        #   With C > 1 a token is in once its bank wrote its last word (`x_tokens`), and all
        #   of X once the banks are idle after the last word was taken (`x_in`).
        x_ready = Signal()
        desc_room = Signal()
        if C == 1:
            block_in = lx_tok >= ((rb + 1) << lr)
            x_in = x_loaded
        else:
            x_tokens = [Signal(range(_ceil_div(lmax, R) + 1), name=f"x_tokens_{r}")
                        for r in range(R)]
            x_in = Signal()
            with m.If(~running_x):
                m.d.sync += [x_in.eq(0)] + [t.eq(0) for t in x_tokens]
            with m.Else():
                m.d.sync += x_in.eq(x_in | (x_loaded & banks_idle))
                for t, bank in zip(x_tokens, xq_bank):
                    with m.If(bank.tag_done):
                        m.d.sync += t.eq(t + 1)
            if self.feeder_claims:
                # each bank's comparison in a register (by the bank's counter), so that the 16
                # counters of the 16x8 ULX3S device do not cross the die to `rb` and back to
                # `x_ready` in one cycle (12.2 ns). Two cycles old then: it holds unless a tile
                # ended in either (the counters only grow; `rb` only grows within an op).
                tok_ok = [Signal(name=f"x_tok_ok_{r}") for r in range(R)]
                ended = Signal()
                m.d.sync += [ok.eq(t > rb) for ok, t in zip(tok_ok, x_tokens)]
                m.d.sync += ended.eq(issue & last)
                block_in = Cat(tok_ok).all() & ~ended
            else:
                block_in = Cat(t > rb for t in x_tokens).all()
        # With :attr:`early_phases` the same register says in the output phase that the head
        # outputs of the output tile's row block are in the banks (`pv_blocks`: row blocks
        # whose every P.V row is), last cycle's comparison, which holds unless a tile ended
        # as well (an output op starts at row block 0, never past the one compared before).
        x_cond = x_in | (block_in & ~(issue & last))
        pv_blocks = Signal(range(_ceil_div(lmax, R) + 1))
        x_ready_next = Signal()

        def waits_x(op):
            if self.early_phases:
                return (op == _PROJ) | (op == _OUT)
            return op == _PROJ
        if self.early_phases:
            m.d.comb += x_ready_next.eq(Mux(phase_out, (pv_blocks > rb) & ~(issue & last),
                                            x_cond))
        else:
            m.d.comb += x_ready_next.eq(x_cond)
        m.d.sync += [x_ready.eq(x_ready_next),
                     desc_room.eq(desc.level + pend < desc_depth - 2)]
        # With the beat queue (:attr:`beat_queue`) the counters' own conditions and the
        # queue's room (`gen_room`, a register) decide; the array's room and the weights are
        # the queue's consumer's (`pop`, below).
        gen_room = Signal()
        # The gate of the op and its X: with `feeder_claims` a register (`go`) of the next op
        # and X readiness, so that the issue is one LUT from registers (on the 16x8 ULX3S
        # device the op's decode -> the issue -> the counters were the slowest paths).
        op_ready = (cur_op != 7) & (~waits_x(cur_op) | x_ready)
        if self.feeder_claims:
            go = Signal(name="go")
            m.d.sync += go.eq((cur_op_next != 7) & (~waits_x(cur_op_next) | x_ready_next))
            op_ready = go
        counters_ready = op_ready & (~first | desc_room)
        if self.beat_queue:
            m.d.comb += can_issue.eq(counters_ready & gen_room)
        else:
            m.d.comb += can_issue.eq(counters_ready & feed_room & (~want_w | w_valid))
        m.d.comb += issue.eq(can_issue)

        def start_tile(k_word_init, reduction_m1, reduction_one):
            m.d.sync += [k.eq(0), k_lane.eq(0), k_word.eq(k_word_init), first.eq(1),
                         last.eq(reduction_one), left.eq(reduction_m1),
                         red_m1.eq(reduction_m1), red_one.eq(reduction_one)]

        # A PV op's reduction length (its row block's key bound) and rows: with
        # `feeder_claims` registers of them, a cycle behind `pv_rb`, which is a cycle more
        # than a PV op's start can follow the PV op before it (`sm_ready` waits for
        # `pv_ended`); the key bound's comparison and adders were then the slowest paths to
        # the tile's counters (`left`).
        pv_kb = key_bound(pv_rb)
        pv_red_m1, pv_red_one, pv_rows = pv_kb - 1, pv_kb == 1, L - (pv_rb << lr)
        if self.feeder_claims:
            regs = (Signal.like(left, name="pv_red_m1"), Signal(name="pv_red_one"),
                    Signal.like(rem_rows, name="pv_rows"))
            m.d.sync += [r.eq(v) for r, v in zip(regs, (pv_red_m1, pv_red_one, pv_rows))]
            pv_red_m1, pv_red_one, pv_rows = regs

        with m.If(cur_op == 7):
            with m.If(phase_proj & ~proj_done):
                first_rem = d - (pj_j << lc)
                op_to(_PROJ)
                m.d.sync += [rb.eq(0), want_w.eq(1), rem_rows.eq(L),
                             rem_cols.eq(first_rem), a_base.eq(0)]
                set_next(rb_more, last_rb != 0)
                start_tile(0, D - 1, D == 1)
                if pairs:
                    m.d.sync += [half.eq(0),
                                 has_b.eq(~((pj_m == 2) & (pj_h == last_h)
                                            & (pj_j == last_pv_blk))),
                                 pa_m.eq(pj_m), pa_h.eq(pj_h), pa_j.eq(pj_j),
                                 pa_base.eq(pj_base), pa_tile.eq(tile),
                                 pa_rem.eq(first_rem)]
            with m.Elif(phase_att & ~att_done):
                # the next S while it is at most one ahead of PV; else the next PV once its
                # probabilities are complete
                with m.If(s_open):
                    op_to(_S)
                    m.d.sync += [blk.eq(0), rem_cols.eq(L),
                                 rem_rows.eq(L - (s_rb << lr)),
                                 a_base.eq(q_base + at(s_rb, 0)), k_base.eq(0)]
                    # (`s_last_blk` may still be the previous row block's in this cycle)
                    set_next(s_more, key_bound_over_c(s_rb))
                    start_tile(s_base, d - 1, d == 1)
                with m.Elif(~pv_end & sm_ready):
                    op_to(_PV)
                    m.d.sync += [blk.eq(0), rem_cols.eq(d),
                                 rem_rows.eq(pv_rows), v_word.eq(pv_base)]
                    set_next(pv_more, last_pv_blk != 0)
                    start_tile(pv_base, pv_red_m1, pv_red_one)
            with m.Elif(phase_out & ~out_issued):
                op_to(_OUT)
                m.d.sync += [rb.eq(0), want_w.eq(1), rem_rows.eq(L),
                             rem_cols.eq(D - (ot_cb << lc)), ot_h.eq(0), ot_j.eq(0),
                             ot_base.eq(0), a_base.eq(0), half.eq(0), has_b.eq(0)]
                set_next(rb_more, last_rb != 0)
                start_tile(0, D - 1, D == 1)

        # `first` and `last` of the current tile are registers, set by `start_tile` and here
        # from `left` and the op's `red_m1` / `red_one`, so that neither a comparison of `k`
        # nor the op's reduction length (selected by `cur_op`) lies behind `issue` (on the
        # 16x8 ULX3S device `k + 2` compared with that length after `issue` was 14.1 ns)
        with m.If(issue):
            m.d.sync += first.eq(last)
            with m.If(last):
                m.d.sync += [left.eq(red_m1), last.eq(red_one)]
            with m.Else():
                m.d.sync += [left.eq(left - 1), last.eq(left == 1)]

        # advance the reduction counters on every issued beat
        with m.If(issue):
            m.d.sync += k.eq(k + 1)
            if lc:
                m.d.sync += k_lane.eq(k_lane + 1)
                with m.If(k_lane == C - 1):
                    m.d.sync += k_word.eq(k_word + 1)
            else:
                m.d.sync += k_word.eq(k_word + 1)
            with m.If(cur_op == _OUT):
                # channels of the concatenation run head by head
                with m.If(ot_j == last_d):
                    m.d.sync += [ot_j.eq(0), ot_h.eq(ot_h + 1), ot_base.eq(ot_base + wph),
                                 k_word.eq(ot_base + wph), k_lane.eq(0)]
                with m.Else():
                    m.d.sync += ot_j.eq(ot_j + 1)

        # end of a tile: next tile or next operation
        with m.If(issue & last):
            m.d.sync += [k.eq(0), k_lane.eq(0)]
            with m.Switch(cur_op):
                with m.Case(_PROJ, _OUT):
                    m.d.sync += [ot_h.eq(0), ot_j.eq(0), ot_base.eq(0)]

                    def next_proj_tile():
                        # next (matrix, head, block)
                        with m.If(pj_j == last_pv_blk):
                            m.d.sync += pj_j.eq(0)
                            with m.If(pj_h == last_h):
                                m.d.sync += [pj_h.eq(0), pj_base.eq(0)]
                                with m.If(pj_m == 2):
                                    m.d.sync += proj_done.eq(1)
                                with m.Else():
                                    m.d.sync += pj_m.eq(pj_m + 1)
                            with m.Else():
                                m.d.sync += [pj_h.eq(pj_h + 1), pj_base.eq(pj_base + wph)]
                        with m.Else():
                            m.d.sync += pj_j.eq(pj_j + 1)

                    if pairs:
                        with m.If(~half & has_b):
                            # the pair's second tile on the same row block (`has_b` only in a
                            # projection)
                            m.d.sync += [half.eq(1), tile.eq(tile + 1), k_word.eq(0),
                                         rem_cols.eq(Mux(pj_j == last_pv_blk, d, rem_cols - C))]
                            next_proj_tile()
                    with (m.Elif if pairs else m.If)(rb_more):
                        m.d.sync += [rb.eq(rb + 1), want_w.eq(0), rem_rows.eq(rem_rows - R),
                                     k_word.eq(0), a_base.eq(a_base + stride)]
                        set_next(rb_more, rb + 1 != last_rb)
                        if pairs:
                            with m.If(half):
                                # back to the pair's first tile
                                m.d.sync += [half.eq(0), pj_m.eq(pa_m), pj_h.eq(pa_h),
                                             pj_j.eq(pa_j), pj_base.eq(pa_base),
                                             tile.eq(pa_tile), rem_cols.eq(pa_rem)]
                    with m.Else():
                        op_to(7)
                        m.d.sync += [want_w.eq(0), tile.eq(tile + 1),
                                     half.eq(0)]
                        with m.If(cur_op == _PROJ):
                            next_proj_tile()
                        with m.Else():
                            with m.If(ot_cb == last_w):
                                m.d.sync += out_issued.eq(1)
                            with m.Else():
                                m.d.sync += ot_cb.eq(ot_cb + 1)
                with m.Case(_S):
                    with m.If(s_more):
                        m.d.sync += [blk.eq(blk + 1), rem_cols.eq(rem_cols - C),
                                     k_word.eq(s_base), k_base.eq(k_base + stride)]
                        set_next(s_more, blk + 1 != s_last_blk)
                    with m.Else():
                        op_to(7)
                        m.d.sync += [s_slot.eq(s_slot + 1), s_lead.eq(s_lead + 1)]
                        set_next(s_open, (s_lead + 1 < slots)
                                 & ~((s_h == last_h) & (s_rb == last_rb)))
                        with m.If(s_h == last_h):
                            m.d.sync += [s_h.eq(0), s_base.eq(0)]
                            with m.If(s_rb == last_rb):
                                m.d.sync += s_end.eq(1)
                            with m.Else():
                                m.d.sync += s_rb.eq(s_rb + 1)
                        with m.Else():
                            m.d.sync += [s_h.eq(s_h + 1), s_base.eq(s_base + wph)]
                with m.Case(_PV):
                    with m.If(pv_more):
                        m.d.sync += [blk.eq(blk + 1), rem_cols.eq(rem_cols - C),
                                     v_word.eq(v_word + 1)]
                        set_next(pv_more, blk + 1 != last_pv_blk)
                    with m.Else():
                        op_to(7)
                        m.d.sync += [pv_slot.eq(pv_slot + 1), s_lead.eq(s_lead - 1)]
                        set_next(s_open, ~s_end)
                        m.d.comb += pv_ends.eq(1)
                        with m.If(pv_h == last_h):
                            m.d.sync += [pv_h.eq(0), pv_base.eq(0)]
                            with m.If(pv_rb == last_rb):
                                m.d.sync += [pv_end.eq(1), att_done.eq(1)]
                            with m.Else():
                                m.d.sync += pv_rb.eq(pv_rb + 1)
                        with m.Else():
                            m.d.sync += [pv_h.eq(pv_h + 1), pv_base.eq(pv_base + wph)]

        # descriptor of each tile, pushed with its first beat
        cur_rb = Signal.like(rb)
        with m.Switch(cur_op):
            with m.Case(_S):
                m.d.comb += cur_rb.eq(s_rb)
            with m.Case(_PV):
                m.d.comb += cur_rb.eq(pv_rb)
            with m.Default():
                m.d.comb += cur_rb.eq(rb)
        col_mask = Signal(C)
        m.d.comb += col_mask.eq(Cat(rem_cols > c for c in range(C)))
        row_mask = Signal(R)
        m.d.comb += row_mask.eq(Cat(rem_rows > r for r in range(R)))
        m.d.comb += [
            desc_in.op.eq(cur_op[:2]), desc_in.rb.eq(cur_rb),
            desc_in.col_mask.eq(col_mask),
            tile_issued.eq(issue & first),
        ]
        m.d.sync += pend.eq(issue & first)
        with m.If(issue & first):
            # (`tile` in the registered assignment: a continuous one from a register that
            # keeps its initial value is never evaluated by Icarus, leaving X)
            m.d.sync += [pend_desc.eq(desc_in), pend_desc.tile.eq(tile)]
        m.d.comb += [desc.w_en.eq(pend), desc.w_data.eq(pend_desc)]
        with m.Switch(cur_op):
            with m.Case(_PROJ):
                m.d.comb += [desc_in.target.eq(pj_m), desc_in.hword.eq(pj_base + pj_j),
                             desc_in.run_last.eq(0)]
            with m.Case(_S):
                m.d.comb += [desc_in.blk.eq(blk), desc_in.head.eq(s_h),
                             desc_in.slot.eq(s_slot),
                             desc_in.op_last.eq(~s_more)]
            with m.Case(_PV):
                m.d.comb += [desc_in.hword.eq(v_word), desc_in.head.eq(pv_h),
                             desc_in.slot.eq(pv_slot)]
                if self.early_phases:
                    # `op_last`: the row block's last P.V tile
                    m.d.comb += desc_in.op_last.eq(~pv_more & (pv_h == last_h))
            with m.Case(_OUT):
                m.d.comb += desc_in.run_last.eq((ot_cb == last_w) & ~rb_more)

        # The beat the counters describe (issued this cycle with `issue`): its fields and read
        # addresses. With the beat queue it goes to one of two registers, which the feeder's
        # first stage takes in turn (`pop`, from `head`); else it is loaded in the cycle it is
        # issued.
        beat_layout = data.StructLayout({
            "op": unsigned(2), "rows": unsigned(R), "cols": unsigned(C), "first": 1,
            "last": 1, "wsrc": 1, "wslot": 1, "k": unsigned(len(k)),
            "xq": unsigned(len(xq_bank[0].r_addr)), "kq": unsigned(len(k_bank[0].r_addr)),
            "p": unsigned(tok_bits + slot_bits), "v": unsigned(_log2(lmax * stride)),
        })
        gen_beat = Signal(beat_layout)
        m.d.comb += [gen_beat.op.eq(cur_op[:2]), gen_beat.rows.eq(row_mask),
                     gen_beat.cols.eq(col_mask), gen_beat.first.eq(first),
                     gen_beat.last.eq(last), gen_beat.wsrc.eq(want_w), gen_beat.k.eq(k),
                     gen_beat.wslot.eq(half),
                     gen_beat.xq.eq(Cat(k_lane[:lc], a_base + k_word)),
                     gen_beat.kq.eq(Cat(k_lane[:lc], k_base + k_word)),
                     gen_beat.p.eq(Cat(k[:tok_bits], pv_slot)),
                     gen_beat.v.eq(at(k, v_word))]
        pop = Signal()              # the feeder takes `head` this cycle
        if self.beat_queue:
            # Two entries written by the issue in turn and read in turn: `pop` moves a read
            # pointer and the count, and no entry's enable (when `pop` moved the head into
            # the place of a spare register instead, its net to the head's 80 enables was the
            # 16x8's slowest path at seed 2, 11.3 ns)
            entries = [Signal(beat_layout, name=f"beat_{i}", reset_less=True) for i in (0, 1)]
            w_ptr, r_ptr = Signal(name="beat_w_ptr"), Signal(name="beat_r_ptr")
            level = Signal(range(3), name="beat_level")
            head = Signal(beat_layout, name="beat_head")
            head_valid = Signal(name="beat_head_valid")
            # room for a beat whatever the consumer does: a free entry (2 is `level[1]`)
            m.d.comb += [gen_room.eq(~level[1]), head_valid.eq(level != 0),
                         head.eq(Mux(r_ptr, entries[1], entries[0]))]
            m.d.comb += pop.eq(head_valid & (~head.last | array.claim_ok)
                               & (~head.wsrc | w_valid))
            # The free entry the issue writes next takes the counters' beat in every cycle,
            # issued or not (a beat not issued is overwritten): its enable is two registers',
            # not the issue's (`cur_op` -> the issue -> the entry's 80 enables was the 16x8's
            # slowest path at seed 1, 11.1 ns).
            for i, entry in enumerate(entries):
                with m.If((w_ptr == i) & gen_room):
                    m.d.sync += entry.eq(gen_beat)
            with m.If(~running):
                m.d.sync += [level.eq(0), w_ptr.eq(0), r_ptr.eq(0)]
            with m.Else():
                m.d.sync += [level.eq(level + issue - pop), w_ptr.eq(w_ptr ^ issue),
                             r_ptr.eq(r_ptr ^ pop)]
        else:
            head = gen_beat
            m.d.comb += pop.eq(issue)
        if self.feeder_claims:
            m.d.comb += array.claim.eq(pop & head.last)
        m.d.comb += w_take.eq(pop & head.wsrc)
        w_waiting = Signal()        # a beat waits for the weights (a performance counter)
        m.d.comb += w_waiting.eq(head.wsrc & ~w_valid
                                 & (head_valid if self.beat_queue else feed_room))

        # memory reads for the beat being issued (data valid in F1). With `registered_reads`
        # a stage FA lies between F0 and F1: the read addresses go to registers, a copy at
        # each memory (KEEP_COPY: synthesis keeps the copies apart), and the memories read
        # from those; the beat's fields wait in `fa` beside them.
        f1 = Signal(data.StructLayout({
            "op": unsigned(2), "rows": unsigned(R),
            "cols": unsigned(C), "first": 1, "last": 1, "wsrc": 1,
        }))
        f1_w = Signal(lanes_layout(cfg, cfg.w_bits), reset_less=True)
        if self.registered_reads:
            fa, fa_valid = Signal.like(f1, name="fa"), Signal(name="fa_valid")
            fa_w = Signal.like(f1_w, name="fa_w", reset_less=True)
            with m.If(adv):
                m.d.sync += [f1_valid.eq(fa_valid), f1.eq(fa), f1_w.eq(fa_w)]
        else:
            fa, fa_valid, fa_w = f1, f1_valid, f1_w
        # (the stage the issue loads: FB with `staged_addresses`, else FA)
        fi, fi_valid, fi_w = fa, fa_valid, fa_w
        if self.staged_addresses:
            fi, fi_valid = Signal.like(f1, name="fb"), Signal(name="fb_valid")
            fi_w = Signal.like(f1_w, name="fb_w", reset_less=True)
            with m.If(adv):
                m.d.sync += [fa_valid.eq(fi_valid), fa.eq(fi), fa_w.eq(fi_w)]
        with m.If(adv):
            m.d.sync += [fi_valid.eq(pop), f2_valid.eq(f1_valid)]
        # the beat's fields: with `feeder_claims` (stages that never stop) loaded every cycle,
        # the valid flag says whether they are a beat's, so the issue drives no enable of theirs
        load_fields = Signal()
        load_w = Signal()
        if self.feeder_claims:
            m.d.comb += [load_fields.eq(1), load_w.eq(1)]
        else:
            m.d.comb += [load_fields.eq(pop), load_w.eq(pop & head.wsrc)]
        with m.If(load_fields):
            m.d.sync += [fi.op.eq(head.op), fi.rows.eq(head.rows), fi.first.eq(head.first),
                         fi.last.eq(head.last), fi.wsrc.eq(head.wsrc), fi.cols.eq(head.cols)]
        with m.If(load_w):
            m.d.sync += fi_w.eq(w_payload)

        staged = {}

        def read_address(value, name, index=None):
            # `value`, or with `registered_reads` a register of it (`name`, `name_{index}`
            # for memory `index` of several); with `staged_addresses` that register takes
            # `value` from a register of the memory's group (`name_g{group}`)
            if not self.registered_reads:
                return value
            if self.staged_addresses:
                key = (name, (index or 0) // self.FB_GROUP)
                if key not in staged:
                    staged[key] = Signal(len(value), name=f"{name}_g{key[1]}",
                                         reset_less=True, attrs={KEEP_COPY: 1})
                    with m.If(adv):
                        m.d.sync += staged[key].eq(value)
                value = staged[key]
            copy = Signal(len(value), name=name if index is None else f"{name}_{index}",
                          reset_less=True, attrs={KEEP_COPY: 1})
            with m.If(adv):
                m.d.sync += copy.eq(value)
            return copy

        wb_w = w_mem.write_port()
        # a beat's weights at its reduction index, in the half of its tile with `paired_tiles`
        w_index = Cat(head.k[:_log2(dmax)], head.wslot) if pairs else head.k
        if self.staged_addresses:
            # the weights are written a cycle late too (from FB), so that the reads and
            # writes of the beats stay in the order they have without FB (a beat reading a
            # stored weight reads it before the next tile's beat overwrites it)
            w_addr, w_en = Signal(len(w_index), name="w_waddr"), Signal(name="w_wen")
            m.d.sync += [w_addr.eq(w_index), w_en.eq(pop & head.wsrc)]
            m.d.comb += [wb_w.addr.eq(w_addr), wb_w.data.eq(fi_w), wb_w.en.eq(w_en)]
        else:
            m.d.comb += [wb_w.addr.eq(w_index), wb_w.data.eq(w_payload),
                         wb_w.en.eq(pop & head.wsrc)]
        wb_r = w_mem.read_port(transparent_for=(wb_w,))
        m.d.comb += [wb_r.addr.eq(read_address(w_index, "w_raddr")), wb_r.en.eq(adv)]

        p_rd = [p_mem[r].read_port() for r in range(R)]
        if not self.registered_reads:
            v_rd = v_mem.read_port()
        xq_addr, k_addr = head.xq, head.kq
        for r in range(R):
            m.d.comb += [
                xq_bank[r].r_addr.eq(read_address(xq_addr, "xq_raddr", r)),
                xq_bank[r].r_en.eq(adv),
                p_rd[r].addr.eq(read_address(head.p, "p_raddr", r)),
                p_rd[r].en.eq(adv),
            ]
        for c in range(C):
            m.d.comb += [k_bank[c].r_addr.eq(read_address(k_addr, "k_raddr", c)),
                         k_bank[c].r_en.eq(adv)]
        v_r_addr = head.v
        if self.registered_reads:
            for c, memory in enumerate(v_lane_mem):
                m.d.comb += [memory.r_addr.eq(read_address(v_r_addr, "v_raddr", c)),
                             memory.r_en.eq(adv)]
        else:
            m.d.comb += [v_rd.addr.eq(v_r_addr), v_rd.en.eq(adv)]

        # F1: the memories' words into registers (data without a reset: `f2_valid` says
        # whether they hold anything, and the core's reset net stays short)
        f2 = Signal.like(f1)
        xq_q = [Signal.like(xq_bank[r].r_data, name=f"xq_q_{r}", reset_less=True)
                for r in range(R)]
        p_q = [Signal.like(p_rd[r].data, name=f"p_q_{r}", reset_less=True) for r in range(R)]
        k_q = [Signal.like(k_bank[c].r_data, name=f"k_q_{c}", reset_less=True)
               for c in range(C)]
        wb_q, f2_w = (Signal.like(v, name=name, reset_less=True) for v, name in
                      ((wb_r.data, "wb_q"), (f1_w, "f2_w")))
        if self.registered_reads:
            # the memories' output registers (`adv` is always high here)
            v_q = [memory.r_data.as_signed() for memory in v_lane_mem]
        else:
            v_q = Signal.like(v_rd.data, name="v_q", reset_less=True)
            with m.If(adv):
                m.d.sync += v_q.eq(v_rd.data)
        with m.If(adv):
            m.d.sync += [f2.eq(f1), wb_q.eq(wb_r.data), f2_w.eq(f1_w)]
            m.d.sync += [q.eq(word) for q, word in zip(
                xq_q + p_q + k_q, [b.r_data for b in xq_bank] + [port.data for port in p_rd]
                + [b.r_data for b in k_bank])]

        # F2: assemble the array beat. With `registered_reads` each lane of the beat has its
        # own copy of the beat's fields, decoded into selects (KEEP_COPY): on the 16x8 ULX3S
        # device the one `f2` register fed all 24 lanes, and the path from `f2` through a
        # lane's selection to an array row crossed 40 columns (16.1 ns).
        beat = Signal(array.i_stream.payload.shape())
        m.d.comb += [beat.first.eq(f2.first), beat.last.eq(f2.last)]
        per_lane = self.registered_reads
        if per_lane:
            # each lane's selects, one-hot with the lane's mask folded in
            def selects(lane, *sources):
                return Signal(data.StructLayout({source: 1 for source in sources}),
                              name=f"f2_sel_{lane}", attrs={KEEP_COPY: 1})
            def decode(lane_a, lane_b, sel_a, sel_b):
                # the selects from each lane's fields, registered: `lane_a(r)` gives row r's
                # op and mask bit, `lane_b(c)` column c's op, mask bit and weights source
                with m.If(adv):
                    for r, sel in enumerate(sel_a):
                        op, row = lane_a(r)
                        m.d.sync += [sel.p.eq(row & (op == _PV)), sel.xq.eq(row & (op != _PV))]
                    for c, sel in enumerate(sel_b):
                        op, col, wsrc = lane_b(c)
                        weights = (op == _PROJ) | (op == _OUT)
                        m.d.sync += [sel.w.eq(col & weights & wsrc),
                                     sel.wb.eq(col & weights & ~wsrc),
                                     sel.k.eq(col & (op == _S)),
                                     sel.v.eq(col & (op == _PV))]
            sel_a = [selects(f"a{r}", "p", "xq") for r in range(R)]
            sel_b = [selects(f"b{c}", "w", "wb", "k", "v") for c in range(C)]
            if self.staged_addresses:
                # (stages that never stop) FB's fields go to a copy per group of lanes
                # (FA), are decoded into a copy per lane (F1), then into the lane's selects
                # (F2): three registers from the central fields to the lanes, the first net
                # reaching a few groups, not every lane (on the 16x8 ULX3S device F1's fields
                # -> the selects was a 13.5 ns path; FA's -> a copy per lane -> the selects
                # still 13.1 ns)
                n = self.FB_GROUP

                def groups(name, mask):
                    copies = []
                    for g in range(_ceil_div(len(mask), n)):
                        part = mask[n * g:n * g + n]
                        copy = Signal(data.StructLayout({"op": 2, "wsrc": 1,
                                                         "mask": len(part)}),
                                      name=f"{name}_g{g}", attrs={KEEP_COPY: 1})
                        with m.If(adv):
                            m.d.sync += [copy.op.eq(fi.op), copy.wsrc.eq(fi.wsrc),
                                         copy.mask.eq(part)]
                        copies.append(copy)
                    return copies
                g_a, g_b = groups("fa_rows", fi.rows), groups("fa_cols", fi.cols)
                pre_a = [Signal.like(sel, name=f"f1_sel_a{r}") for r, sel in enumerate(sel_a)]
                pre_b = [Signal.like(sel, name=f"f1_sel_b{c}") for c, sel in enumerate(sel_b)]
                decode(lambda r: (g_a[r // n].op, g_a[r // n].mask[r % n]),
                       lambda c: (g_b[c // n].op, g_b[c // n].mask[c % n], g_b[c // n].wsrc),
                       pre_a, pre_b)
                with m.If(adv):
                    m.d.sync += [sel.eq(pre) for sel, pre in zip(sel_a + sel_b, pre_a + pre_b)]
            else:
                decode(lambda r: (f1.op, f1.rows[r]), lambda c: (f1.op, f1.cols[c], f1.wsrc),
                       sel_a, sel_b)
        m.d.comb += [array.i_stream.valid.eq(f2_valid), array.i_stream.payload.eq(beat)]
        for r in range(R):
            # X / head outputs (projections, output) or Q (scores) from the shared bank, P (PV)
            if per_lane:
                sel = sel_a[r]
                m.d.comb += beat.a[r].eq(Mux(sel.p, p_q[r], 0) | Mux(sel.xq, xq_q[r], 0))
                continue
            a = Signal(signed(cfg.a_bits), name=f"a_{r}")
            m.d.comb += [a.eq(Mux(f2.op == _PV, p_q[r], xq_q[r])),
                         beat.a[r].eq(Mux(f2.rows[r], a, 0))]
        for c in range(C):
            if per_lane:
                sel = sel_b[c]
                m.d.comb += beat.b[c].eq(Mux(sel.w, f2_w[c], 0) | Mux(sel.wb, wb_q[c], 0)
                                         | Mux(sel.k, k_q[c], 0) | Mux(sel.v, v_q[c], 0))
                continue
            b = Signal(signed(cfg.b_bits), name=f"b_{c}")
            with m.Switch(f2.op):
                with m.Case(_PROJ, _OUT):
                    m.d.comb += b.eq(Mux(f2.wsrc, f2_w[c], wb_q[c]))
                with m.Case(_S):
                    m.d.comb += b.eq(k_q[c])
                with m.Case(_PV):
                    m.d.comb += b.eq(v_q[c])
            m.d.comb += beat.b[c].eq(Mux(f2.cols[c], b, 0))

        # ---- writer: array results -> requantization -> buffers / output ----------------
        # The descriptor at the head of its FIFO belongs to the tile whose rows come out of
        # the array next; it gives the requantizer that tile's constants, and each row's
        # destination travels through a small FIFO beside the requantizer.
        # The writer takes the descriptor at the head of the FIFO into `cur` while it reads
        # that tile's constants (projection and output tiles: per channel, by tile number;
        # scores and P.V: per head); both are held until the tile's last row is requantized.
        # With `params_ahead` the next tile's descriptor and constants wait in a second set.
        head_desc = data.View(desc_layout, desc.r_data)
        c_rd = c_mem.read_port()
        h_rd = h_mem.read_port()
        take_desc = Signal()
        # (with `params_ahead` only the cycle after a take uses what the constants memories
        # read, so they read every cycle: on the 16x8 ULX3S device the take -> their block
        # RAMs' clock enables was a 13.9 ns path)
        read_en = 1 if self.params_ahead else take_desc
        c_addr, h_addr = head_desc.tile, Cat(head_desc.op == _PV, head_desc.head)
        if self.params_ahead:
            # (the addresses a cycle later, from registers of their own that the placer puts
            # at the memories: on the 16x8 ULX3S device the descriptor queue's head ran 29
            # columns to the constants' block RAMs, 10.3 ns of routing, the slowest path at
            # seed 1)
            at_take = c_addr, h_addr
            c_addr, h_addr = (Signal.like(a, name=f"{n}_addr", attrs={KEEP_COPY: 1})
                              for n, a in zip(("params", "head_params"), at_take))
            with m.If(take_desc):
                m.d.sync += [c_addr.eq(at_take[0]), h_addr.eq(at_take[1])]
        m.d.comb += [desc.r_en.eq(take_desc),
                     c_rd.addr.eq(c_addr), c_rd.en.eq(read_en),
                     h_rd.addr.eq(h_addr), h_rd.en.eq(read_en)]

        def picked(op):
            # a tile's constants, one set per output lane, from what was read for its op
            value = Signal(param_layout(cfg))
            per_channel = (op == _PROJ) | (op == _OUT)
            for c in range(C):
                m.d.comb += [
                    value.mult[c].eq(Mux(per_channel, c_rd.data.mult[c], h_rd.data.mult)),
                    value.shift[c].eq(Mux(per_channel, c_rd.data.shift[c], h_rd.data.shift)),
                    value.bias[c].eq(Mux(per_channel, c_rd.data.bias[c], 0))]
            return value

        switch = Signal()       # the requantizers take their last row of a tile
        m.d.comb += switch.eq(rq.p_stream.valid & rq.p_stream.ready)
        if self.params_ahead:
            cur, cur_valid, cur_valid_next, unit_params = self._params_ahead(
                m, desc_layout, desc.r_rdy, head_desc, take_desc, picked, switch)
        else:
            cur = Signal(desc_layout)
            cur_valid = Signal()
            m.d.comb += take_desc.eq(desc.r_rdy & (~cur_valid | switch))
            with m.If(take_desc):
                m.d.sync += [cur.eq(head_desc), cur_valid.eq(1)]
            with m.Elif(switch):
                m.d.sync += cur_valid.eq(0)
            unit_params = [picked(cur.op)] * len(rqs)
        for g, unit in enumerate(rqs):
            m.d.comb += unit.p_stream.valid.eq(cur_valid)
            for i, c in enumerate(range(g * per, (g + 1) * per)):
                m.d.comb += [unit.p_stream.payload.mult[i].eq(unit_params[g].mult[c]),
                             unit.p_stream.payload.shift[i].eq(unit_params[g].shift[c]),
                             unit.p_stream.payload.bias[i].eq(unit_params[g].bias[c])]

        # With C > 1 the rows wait in the results queue (`queued_results`, below); their routing
        # then travels with them decoded (`route`): whether a valid row goes to the X/Q or K
        # banks or out, and its serializer one-hot, so that the queue's output reaches the
        # retire (the queue's read) through no decode of the op and no selection by the token
        # (on the 16x8's netlist the results queue's output -> the serializers' ready -> the
        # retire -> the queue's level was 7 levels).
        queued_results = C > 1
        route_layout = data.StructLayout({"to_k": 1, "to_bank": 1, "is_out": 1,
                                          "sel": self.serializers})
        ctrl_layout = data.StructLayout({
            "op": unsigned(2), "target": unsigned(2), "token": unsigned(_log2(lmax + R) + 1),
            "row": unsigned(max(1, lr)), "blk": desc_layout["blk"].shape,
            "hword": unsigned(wpt_bits), "slot": unsigned(slot_bits), "cols": unsigned(C),
            "run_last": unsigned(1), "op_end": unsigned(1), "valid": unsigned(1),
            **({"route": route_layout} if queued_results else {}),
        })
        # Rows inside the requantizers: one enters every `per` cycles at most and leaves
        # `rq.latency` cycles later, so `in_flight` entries of the row queue (and of the results
        # queue's credit below) never hold the array back (4 for a 5-cycle requantizer on two
        # lanes; 10 for the 9-cycle one of registered DSPs on one).
        in_flight = _ceil_div(rq.latency, per) + 1
        # With `ready_ahead` whether the requantizers take a row this cycle is a register
        # (`rq_ready`), computed a cycle ahead from the next credit count, the constants set
        # in use next cycle and the row queue's level (two entries of margin, as the queue's
        # own ready is not known a cycle ahead): on the 16x8 ULX3S device the credit count,
        # the row queue and the constants sets crossed the die through that handshake to the
        # clock enable of the result register's 163 bits at the requantizers (13.3 ns). Only
        # where a requantizer takes a row in one cycle (one lane each).
        ready_ahead = self.feeder_claims and per == 1 and queued_results
        m.submodules.rows = rows_q = BlockRAMFIFO(width=ctrl_layout.size,
                                                  depth=in_flight + 2 * ready_ahead)
        row = Signal(range(R))
        into_rq = Signal()
        # With C > 1 a row for the X/Q or K banks takes a cycle per lane. So that this never
        # freezes the requantizers (a clock enable on their ~400 flip-flops each, from the end
        # of a long handshake), their rows go into a queue of `res_depth` rows, and a row enters
        # them only while that queue has room for every row already inside (`credit`).
        res_depth = max(8, in_flight + 3)
        credit_ok = Signal(init=1)
        # The array's result rows: with `feeder_claims` through a two-register buffer, so that
        # the array's `o_stream.ready` is a register: on the 8x8 ULX3S device the requantizers'
        # ready (from the writer's descriptor handshake) -> the array's output reservation
        # crossed the die (12.1 ns, 7.5 of it routing). The rows reach the requantizers from
        # registers as well: through a skid register that passes a row on in its cycle, a
        # tile's last row came from the array's output memory into the descriptor handshake
        # (the constants' read enable, `cur`), the critical path of both the 8x8 and the 16x8
        # devices (11.7 and 17.1 ns).
        result = Signal(array.o_stream.payload.shape())
        result_valid = Signal()
        take_result = Signal()
        if ready_ahead:
            # (`rq_ready` implies the constants are there: the requantizers take the row)
            rq_ready = Signal(name="rq_ready")
            rows_ok = rq_ready
            m.d.comb += take_result.eq(rq_ready)
        else:
            rows_ok = rows_q.w_rdy & credit_ok
            m.d.comb += take_result.eq(rq.i_stream.ready & rows_q.w_rdy)
        if self.feeder_claims:
            held_valid, held, empty = register_buffer(m, "o_skid", array.o_stream.valid,
                                                       array.o_stream.payload, take_result)
            m.d.comb += [array.o_stream.ready.eq(empty), result_valid.eq(held_valid),
                         result.eq(held)]
        else:
            m.d.comb += [array.o_stream.ready.eq(take_result),
                         result_valid.eq(array.o_stream.valid),
                         result.eq(array.o_stream.payload)]
        for g, unit in enumerate(rqs):
            m.d.comb += [unit.i_stream.valid.eq(result_valid & rows_ok),
                         unit.i_stream.payload.last.eq(result.last)]
            for i in range(per):
                m.d.comb += unit.i_stream.payload.acc[i].eq(result.acc[g * per + i])
        m.d.comb += into_rq.eq(result_valid & take_result)
        with m.If(into_rq):
            m.d.sync += row.eq(Mux(row == R - 1, 0, row + 1))
        row_in = data.View(ctrl_layout, rows_q.w_data)
        m.d.comb += [
            rows_q.w_en.eq(into_rq),
            row_in.op.eq(cur.op), row_in.target.eq(cur.target), row_in.row.eq(row),
            row_in.token.eq((cur.rb << lr) | row), row_in.blk.eq(cur.blk),
            row_in.hword.eq(cur.hword), row_in.slot.eq(cur.slot), row_in.cols.eq(cur.col_mask),
            row_in.run_last.eq(cur.run_last), row_in.op_end.eq(cur.op_last & (row == R - 1)),
            # a row of a token < L (compared here, not where the row's result is written, as
            # that decides whether X waits a cycle, which is a long path already)
            row_in.valid.eq(row_in.token < L),
        ]

        def dest_of(to_k, token):
            """The bank of a row for the banks: K token mod C, X/Q token mod R."""
            return Mux(to_k, token[:lc], token[:lr])

        def routing(ctrl):
            """A row's destination (:data:`route_layout`) from its op, target, token and
            validity: the X/Q banks (a projection's Q, a P.V row), the K banks or the output,
            and for the banks the serializer of its bank, one-hot."""
            to_xq = ctrl.valid & (((ctrl.op == _PROJ) & (ctrl.target == 0)) | (ctrl.op == _PV))
            to_k = ctrl.valid & (ctrl.op == _PROJ) & (ctrl.target == 1)
            return {"to_k": to_k, "to_bank": to_xq | to_k,
                    "is_out": ctrl.valid & (ctrl.op == _OUT),
                    "sel": Mux(to_xq | to_k, 1 << dest_of(to_k, ctrl.token)[:ls], 0)}
        if queued_results:
            m.d.comb += [row_in.route[k].eq(v) for k, v in routing(row_in).items()]

        # gather the requantizer's values into rows (`res`, with its `ctrl`), clamp to the
        # stage's width
        res_layout = data.ArrayLayout(signed(rq_bits), C)
        lane = Signal(range(per))
        gathered = Signal(res_layout)
        res_valid = Signal()
        retire = Signal()
        took_v = Signal()
        row_out = Signal()
        m.d.comb += [took_v.eq(rq.o_stream.valid & rq.o_stream.ready),
                     row_out.eq(took_v & (lane == per - 1)),
                     rows_q.r_en.eq(row_out)]
        row_vals = Cat(*(gathered[g * per + i] if i < per - 1 else unit.o_stream.payload.value
                         for g, unit in enumerate(rqs) for i in range(per)))
        with m.If(took_v):
            m.d.sync += lane.eq(Mux(lane == per - 1, 0, lane + 1))
            for i in range(per - 1):
                with m.If(lane == i):
                    m.d.sync += [gathered[g * per + i].eq(unit.o_stream.payload.value)
                                 for g, unit in enumerate(rqs)]
        if queued_results:
            m.submodules.results = results = fifo.SyncFIFOBuffered(
                width=res_layout.size + ctrl_layout.size, depth=res_depth)
            credit = Signal(range(res_depth + 1))       # rows in the requantizers or queued
            credit_next = Signal.like(credit)
            m.d.comb += credit_next.eq(credit + into_rq - retire)
            m.d.sync += credit.eq(credit_next)
            if ready_ahead:
                # the queue's inner level next cycle is at most its level now + 1. The credit
                # count's next value against `res_depth` without its adder: the three
                # comparisons of `credit` run beside the retire, which only selects one (on
                # the 16x8's netlist the retire -> the adder -> the comparison -> `rq_ready`
                # was the core's deepest path left, 7 levels)
                room_next = Mux(into_rq & ~retire, credit < res_depth - 1,
                                Mux(~into_rq & retire, credit < res_depth + 1,
                                    credit < res_depth))
                m.d.sync += rq_ready.eq(room_next & cur_valid_next
                                        & (rows_q.level < rows_q.depth - 2))
            m.d.comb += [credit_ok.eq(credit < res_depth),
                         results.w_en.eq(row_out),
                         results.w_data.eq(Cat(row_vals, rows_q.r_data)),
                         results.r_en.eq(retire), res_valid.eq(results.r_rdy)]
            res = data.View(res_layout, results.r_data[:res_layout.size])
            ctrl = data.View(ctrl_layout, results.r_data[res_layout.size:])
            for unit in rqs:
                m.d.comb += unit.o_stream.ready.eq(1)
        else:
            res = Signal(res_layout)
            ctrl = Signal(ctrl_layout)
            for unit in rqs:
                m.d.comb += unit.o_stream.ready.eq(~res_valid | retire)
            with m.If(retire):
                m.d.sync += res_valid.eq(0)
            with m.If(row_out):
                m.d.sync += [res_valid.eq(1), ctrl.eq(rows_q.r_data), res.eq(row_vals)]

        token = ctrl.token
        valid_row = Signal()
        m.d.comb += valid_row.eq(ctrl.valid)
        # A row for the X/Q or K banks (`dest`: X/Q bank token mod R, K bank token mod C)
        # retires into that bank's serializer once that one is free.
        route = Signal(route_layout)
        if queued_results:
            m.d.comb += route.eq(ctrl.route)
        else:
            m.d.comb += [route[k].eq(v) for k, v in routing(ctrl).items()]
        to_k, to_bank, out_row, sel = route.to_k, route.to_bank, route.is_out, route.sel
        dest = Signal(range(max(R, C)))
        dest_free = Signal()
        m.d.comb += [dest.eq(dest_of(to_k, token)),
                     dest_free.eq((sel & Cat(u.i_stream.ready for u in serializer)).any())]
        m.d.comb += [
            self.o_stream.valid.eq(res_valid & out_row),
            retire.eq(res_valid & (~to_bank | dest_free) & (~out_row | self.o_stream.ready)),
            tile_retired.eq(retire & (ctrl.row == R - 1)),
            # (an equality with a register, not `token + 1 == L`: at seed 1 of the 16x8 with
            # the beat queue that adder's carry chain began the slowest path, from the results
            # queue through the run's end to the running flags' copies, 11.1 ns)
            self.o_stream.payload.last.eq(ctrl.run_last & (token == last_tok)),
        ]

        def clamp(value, bits):
            hi, lo = (1 << (bits - 1)) - 1, -(1 << (bits - 1))
            return Mux(value > hi, hi, Mux(value < lo, lo, value))[:bits]

        def lanes_of(bits):
            return Cat(*(clamp(res[c], bits) for c in range(C)))

        for c in range(C):
            m.d.comb += self.o_stream.payload.y[c].eq(
                Mux(ctrl.cols[c], clamp(res[c], cfg.y_bits).as_signed(), 0))

        wr = retire & valid_row
        # a row for the X/Q or K banks, clamped to its stage's width, to its bank's serializer
        xq_word = at(token >> lr, ctrl.hword) + Mux(ctrl.op == _PROJ, q_base, 0)
        bank_row = Signal(data.ArrayLayout(xq_shape, C))
        for c in range(C):
            m.d.comb += bank_row[c].eq(Mux(ctrl.op == _PV,
                                           clamp(res[c], cfg.head_bits).as_signed(),
                                           clamp(res[c], cfg.qkv_bits).as_signed()))
        for i, unit in enumerate(serializer):
            m.d.comb += [
                unit.i_stream.valid.eq(res_valid & sel[i]),
                unit.i_stream.payload.word.eq(Mux(to_k, at(token >> lc, ctrl.hword), xq_word)),
                unit.i_stream.payload.data.eq(bank_row),
                unit.i_stream.payload.mask.eq(ctrl.cols),
                unit.i_stream.payload.tag.eq(Cat(dest[ls:ls + sel_bits], to_k)),
            ]
            for bank, is_k in ((xq_bank, 0), (k_bank, 1)):
                for b in range(i, len(bank), self.serializers):
                    m.d.comb += [bank[b].d_addr.eq(unit.addr), bank[b].d_data.eq(unit.data),
                                 bank[b].d_en.eq(unit.en
                                                 & (unit.tag == (b >> ls | is_k << sel_bits)))]
        # Every row the writer retired is in the X/Q and K banks. With `feeder_claims` from a
        # register (a cycle late; not while a row goes to a serializer or X to a bank): on the
        # 16x8 ULX3S device the 16 banks' flags crossed the die to the phase register's enable
        # (12.1 ns). The phase then changes a cycle later.
        if self.feeder_claims:
            m.d.sync += banks_written.eq(banks_now & ~(retire & to_bank) & ~x_take)
        else:
            m.d.comb += banks_written.eq(banks_now)
        v_wr = wr & (ctrl.op == _PROJ) & (ctrl.target == 2)
        # row blocks whose head outputs are all in the banks (:attr:`early_phases`): counted
        # as their last P.V row retires (`pv_retired`), taken into `pv_blocks` while
        # `banks_written` says every row retired before is in
        if self.early_phases:
            with m.If(~running):
                m.d.sync += v_retired.eq(0)
            with m.Elif(retire & (ctrl.op == _PROJ) & (ctrl.target == 2)):
                m.d.sync += v_retired.eq(1)
            m.d.comb += qk_written.eq(v_retired & banks_written)
            pv_retired = Signal.like(pv_blocks)
            with m.If(~running):
                m.d.sync += [pv_retired.eq(0), pv_blocks.eq(0)]
            with m.Else():
                with m.If(retire & (ctrl.op == _PV) & ctrl.op_end):
                    m.d.sync += pv_retired.eq(pv_retired + 1)
                with m.If(banks_written):
                    m.d.sync += pv_blocks.eq(pv_retired)
        v_w_addr = at(token, ctrl.hword)
        if self.registered_reads:
            # each lane's write from registers of its own, beside its block RAMs (on the 8x4
            # ULX3S device, once V was read through the output registers, the clamped result
            # crossed 37 rows to a V block RAM's data input: 10.1 ns, the slowest path). A V
            # word then lands a cycle after its row retires; the first P.V op reads V after
            # an S op and its softmax block, long after the projections' last row.
            for c, memory in enumerate(v_lane_mem):
                w_addr, w_data = (Signal.like(port, name=f"v_{what}_{c}", reset_less=True,
                                              attrs={KEEP_COPY: 1})
                                  for port, what in ((memory.w_addr, "w_addr_q"),
                                                     (memory.w_data, "w_data_q")))
                w_en = Signal(name=f"v_w_en_q_{c}", attrs={KEEP_COPY: 1})
                m.d.sync += [w_addr.eq(v_w_addr),
                             w_data.eq(clamp(res[c], cfg.qkv_bits)),
                             w_en.eq(v_wr & ctrl.cols[c])]
                m.d.comb += [memory.w_addr.eq(w_addr), memory.w_data.eq(w_data),
                             memory.w_en.eq(w_en)]
        else:
            port = v_mem.write_port(granularity=1)
            m.d.comb += [port.addr.eq(v_w_addr),
                         port.data.eq(lanes_of(cfg.qkv_bits)),
                         port.en.eq(Mux(v_wr, ctrl.cols, 0))]
        # With `registered_reads` the score writes reach the block RAMs from registers (on
        # the 8x8 ULX3S device the writer's retire -> a score block RAM's write enable crossed
        # the die, 11.5 ns), each unit's kept on ECP5. A block's last word then lands the
        # cycle after `s_drained` counts it: a unit starts the block the cycle after that at
        # the earliest and reads its first word a cycle later still.
        s_written = Signal()
        m.d.comb += s_written.eq(retire & (ctrl.op == _S) & ctrl.op_end)
        s_domain = m.d.sync if self.registered_reads else m.d.comb
        for u in range(U):
            if self.registered_reads:
                s_wr = s_mem[u]
                s_wr_addr, s_wr_data, s_wr_en = s_wr.w_addr, s_wr.w_data, s_wr.w_en
                # every unit's copy of the address and the word (not one register merged
                # by Yosys, which wrote all U score memories across the die)
                for port in (s_wr_addr, s_wr_data):
                    port.attrs.update(keep)
            else:
                s_wr = s_mem[u].write_port()
                s_wr_addr, s_wr_data, s_wr_en = s_wr.addr, s_wr.data, s_wr.en
            s_domain += [s_wr_addr.eq(Cat(ctrl.blk[:cblk_bits], ctrl.row[:lru], ctrl.slot)),
                         s_wr_data.eq(lanes_of(cfg.score_bits)),
                         s_wr_en.eq(retire & (ctrl.op == _S)
                                    & ((ctrl.row[lru:lr] == u) if U > 1 else 1))]
        with m.If(s_written):
            m.d.sync += s_drained.eq(s_drained + 1)

        # ---- softmax: score rows in, probability rows out -------------------------------
        # A block starts when its scores are written and every unit is idle; each unit then
        # streams its RU rows (all of them, also rows past L, whose probabilities PV ignores)
        # and writes the probabilities to the P banks of those rows.
        sm_n = Signal(count)                  # blocks started
        sm_rb, sm_h = Signal(range(lmax + 1), name="sm_rb"), Signal(range(hmax), name="sm_h")
        blk_rb = Signal(range(lmax + 1))      # row block and slot of the block in flight
        blk_slot = Signal(slot_bits)
        sm_len = Signal(range(lmax + 1))      # its rows' length: the row block's key bound
        busy = [Signal(name=f"sm_busy_{u}") for u in range(U)]
        idle = Signal()
        m.d.comb += idle.eq(~Cat(*busy).any())
        block_start = Signal()
        m.d.comb += block_start.eq(running & idle & phase_att & (s_drained > sm_n))
        # With `feeder_claims` the block's key bound less one and whether it is one are
        # registers of `sm_rb`'s (`sm_kb_*`), a cycle behind it: `sm_rb` moves at a block start
        # and the next comes two cycles later at the earliest (every unit is busy in the
        # cycle after one). The key bound's comparison and multiplexers before the units'
        # `sm_j_last` were the deepest core paths of the 16x8's netlist (7 levels). At a
        # block's start they become its rows' (`sm_len_*`), which the units count down with.
        sm_kb = key_bound(sm_rb)
        if self.feeder_claims:
            sm_kb_m1 = Signal.like(sm_len, name="sm_kb_m1")
            sm_kb_one = Signal(name="sm_kb_one")
            m.d.sync += [sm_kb_m1.eq(sm_kb - 1), sm_kb_one.eq(sm_kb == 1)]
            sm_len_m1 = Signal.like(sm_len, name="sm_len_m1")
            sm_len_one = Signal(name="sm_len_one")
        with m.If(~running):
            m.d.sync += [sm_n.eq(0), sm_rb.eq(0), sm_h.eq(0), s_drained.eq(0)]
        with m.Elif(block_start):
            m.d.sync += [blk_rb.eq(sm_rb), blk_slot.eq(sm_n[:slot_bits]), sm_n.eq(sm_n + 1)]
            if self.feeder_claims:
                m.d.sync += [sm_len_m1.eq(sm_kb_m1), sm_len_one.eq(sm_kb_one)]
            else:
                m.d.sync += sm_len.eq(sm_kb)
            with m.If(sm_h == last_h):
                m.d.sync += [sm_h.eq(0), sm_rb.eq(sm_rb + 1)]
            with m.Else():
                m.d.sync += sm_h.eq(sm_h + 1)

        sm_beats = Signal(range(U + 1))       # softmax input beats this cycle (counter)
        beats = []
        for u, softmax in enumerate(softmaxes):
            j, row = Signal(range(lmax + 1), name=f"sm_j_{u}"), Signal(range(RU),
                                                                    name=f"sm_row_{u}")
            # F1: read issued, the word next cycle, into a register (as the feeder's, a block
            # RAM's output goes to a register and nothing else); F2: its lane to the unit.
            # With `registered_reads` a register more before F2 (F1b), the lane to a register
            # (F3), and the stages never stop: as the array's feeder they hand the unit its
            # beats through a queue and issue against its credits (`sm_room`), so that the
            # unit's `ready` reaches neither the stages' enables nor the issue.
            f1 = Signal(name=f"sm_f1_{u}")
            f2 = Signal(name=f"sm_f2_{u}")
            info = Signal(data.StructLayout({"lane": unsigned(max(1, lc)), "mask": 1,
                                             "last": 1}), name=f"sm_info_{u}")
            info2 = Signal.like(info, name=f"sm_info2_{u}")
            sm_adv, sm_room = Signal(name=f"sm_adv_{u}"), Signal(name=f"sm_room_{u}")
            f_out = f2
            if self.registered_reads:
                f_out = Signal(name=f"sm_f3_{u}")
                m.d.comb += sm_adv.eq(1)
            else:
                m.d.comb += [sm_adv.eq(~f_out | softmax.i_stream.ready), sm_room.eq(sm_adv)]
            issue_sm = Signal(name=f"sm_issue_{u}")
            m.d.comb += issue_sm.eq(sm_room & busy[u])
            s_addr = Cat(j[lc:][:cblk_bits], row, blk_slot)
            if self.registered_reads:
                m.d.comb += [s_mem[u].r_addr.eq(s_addr), s_mem[u].r_en.eq(1)]
            else:
                s_rd = s_mem[u].read_port()
                m.d.comb += [s_rd.addr.eq(s_addr), s_rd.en.eq(sm_adv)]
            query = Signal(range(lmax + R), name=f"sm_query_{u}")
            m.d.comb += query.eq((blk_rb << lr) | (u * RU) | row)
            masked = Signal(name=f"sm_masked_{u}")
            m.d.comb += masked.eq((args.causal & (j > query)) | (j >= args.valid_len))
            # the row's last score (`j` the last key): with `feeder_claims` a register, set
            # from the keys left after `j` (`j_rem`, counting down; the comparison of `j + 1`
            # was on the units' slowest paths, then that of `j + 2` behind the issue)
            j_last = j + 1 == sm_len
            if self.feeder_claims:
                j_last = Signal(name=f"sm_j_last_{u}")
                j_rem = Signal.like(sm_len, name=f"sm_j_rem_{u}")    # sm_len - 1 - j
            with m.If(~running_sm[u]):
                m.d.sync += [busy[u].eq(0), j.eq(0), row.eq(0)]
            with m.Elif(block_start):
                m.d.sync += busy[u].eq(1)
                if self.feeder_claims:
                    m.d.sync += [j_last.eq(sm_kb_one), j_rem.eq(sm_kb_m1)]
            s_q = Signal(score_word, name=f"sm_word_{u}", reset_less=True)
            # with `registered_reads` the word passes one more register on its way, F1b: the
            # block RAM's output register (on the 8x8 ULX3S device nextpnr put `sm_word` beside
            # the unit, 53 rows from its block RAM, whose data leave 5.8 ns after the clock
            # without it; 59 rows for a register in the fabric between them)
            if self.registered_reads:
                f1b, info_b = Signal(name=f"sm_f1b_{u}"), Signal.like(info, name=f"sm_info_b_{u}")
                m.d.sync += [f1b.eq(f1), info_b.eq(info)]
                word_in, valid_in, info_in = data.View(score_word, s_mem[u].r_data), f1b, info_b
            else:
                word_in, valid_in, info_in = s_rd.data, f1, info
            with m.If(sm_adv):
                m.d.sync += [f1.eq(issue_sm), f2.eq(valid_in), info2.eq(info_in),
                             s_q.eq(word_in)]
            with m.If(issue_sm):
                m.d.sync += [info.lane.eq(j[:lc] if lc else 0), info.mask.eq(masked),
                             info.last.eq(j_last)]
                with m.If(j_last):
                    m.d.sync += [j.eq(0), row.eq(row + 1)]
                    if self.feeder_claims:
                        m.d.sync += [j_last.eq(sm_len_one), j_rem.eq(sm_len_m1)]
                    with m.If(row == RU - 1):
                        m.d.sync += [row.eq(0), busy[u].eq(0)]
                with m.Else():
                    m.d.sync += j.eq(j + 1)
                    if self.feeder_claims:
                        m.d.sync += [j_last.eq(j_rem == 1), j_rem.eq(j_rem - 1)]
            sm_in = softmax.i_stream.payload
            feed = Signal.like(sm_in, name=f"sm_feed_{u}")
            m.d.comb += [feed.score.eq(s_q[info2.lane]), feed.last.eq(info2.last)]
            if cfg.masks:
                m.d.comb += feed.mask.eq(info2.mask)
            if self.registered_reads:
                feed3 = Signal.like(feed, name=f"sm_feed3_{u}", reset_less=True)
                m.d.sync += [f_out.eq(f2), feed3.eq(feed)]
                sm_valid, sm_beat, room = credit_queue(m, f"sm_q_{u}", f_out, feed3,
                                                      softmax.i_stream.ready, issue_sm,
                                                      self.softmax_credits)
                m.d.comb += [softmax.i_stream.valid.eq(sm_valid), sm_in.eq(sm_beat),
                             sm_room.eq(room)]
            else:
                m.d.comb += [softmax.i_stream.valid.eq(f_out), sm_in.eq(feed)]
            beats.append(softmax.i_stream.valid & softmax.i_stream.ready)

            # probabilities -> the P banks of this unit's rows, in the slot of its block
            po_j = Signal(range(lmax + 1), name=f"po_j_{u}")
            po_row = Signal(range(RU), name=f"po_row_{u}")
            p_slot = Signal(slot_bits, name=f"sm_p_slot_{u}")
            m.d.comb += softmax.o_stream.ready.eq(1)
            took_p = softmax.o_stream.valid
            for i in range(RU):
                port = p_mem[u * RU + i].write_port()
                m.d.comb += [port.addr.eq(Cat(po_j[:tok_bits], p_slot)),
                             port.data.eq(softmax.o_stream.payload.prob),
                             port.en.eq(took_p & (po_row == i))]
            block_done = Signal(name=f"sm_block_done_{u}")
            m.d.comb += block_done.eq(took_p & softmax.o_stream.payload.last & (po_row == RU - 1))
            with m.If(~running_sm[u]):
                m.d.sync += [po_j.eq(0), po_row.eq(0), p_slot.eq(0), sm_ahead[u].eq(0)]
            with m.Else():
                m.d.sync += sm_ahead[u].eq(sm_ahead[u] + block_done - pv_ended)
                with m.If(took_p):
                    with m.If(softmax.o_stream.payload.last):
                        m.d.sync += [po_j.eq(0), po_row.eq(po_row + 1)]
                        with m.If(po_row == RU - 1):
                            m.d.sync += [po_row.eq(0), p_slot.eq(p_slot + 1)]
                    with m.Else():
                        m.d.sync += po_j.eq(po_j + 1)
        if self.feeder_claims:
            # a cycle late, from a register (the count only lags: the units take no beat in a
            # run's last cycles): the units' flags crossed the die into the counter's carry
            # chain in one cycle, the 16x8 ULX3S device's slowest path once the issue logic's
            # were shorter (11.1 ns). Each unit's flag is a register of its own first, by its
            # unit (two cycles late): summed straight from the units' handshakes the eight
            # flags still crossed the die into the sum (its slowest path at 3dee96b, seed 1,
            # 11.3 ns, 3.1 of it one wire)
            flags = [Signal(name=f"sm_beat_{u}") for u in range(U)]
            m.d.sync += [f.eq(b) for f, b in zip(flags, beats)]
            m.d.sync += sm_beats.eq(sum(flags))
        else:
            m.d.comb += sm_beats.eq(sum(beats))

        # ---- output end and counters ----------------------------------------------------
        m.d.comb += out_done.eq(self.o_stream.valid & self.o_stream.ready
                                & self.o_stream.payload.last)
        counters = self.counters
        with m.If(self.start.valid & self.start.ready):
            for i in range(len(COUNTERS)):
                m.d.sync += counters[i].eq(0)
        with m.Elif(running):
            m.d.sync += counters[0].eq(counters[0] + 1)
            with m.If(array.i_stream.valid & array.i_stream.ready):
                m.d.sync += counters[1].eq(counters[1] + 1)
            with m.If((phase_proj | phase_att | phase_out) & ~array.i_stream.valid):
                m.d.sync += counters[2].eq(counters[2] + 1)
            m.d.sync += counters[3].eq(counters[3] + sm_beats)
            with m.If(w_waiting):
                m.d.sync += counters[4].eq(counters[4] + 1)
            with m.If(self.o_stream.valid & ~self.o_stream.ready):
                m.d.sync += counters[5].eq(counters[5] + 1)
            with m.If(phase_att & (cur_op == 7) & ~s_open & ~pv_end
                      & ~sm_ready):
                m.d.sync += counters[6].eq(counters[6] + 1)
        return m

    def _params_ahead(self, m, desc_layout, desc_ready, head_desc, take_desc, picked, switch):
        """The writer's descriptors and constants with :attr:`params_ahead`.

        Two sets (descriptor and constants), used in turn: a descriptor is taken into the set
        ``fill`` while that set is free, its constants read in the next cycle (from
        addresses registered at the take), registered (``staged``, a cycle with no clock
        enable) and loaded into the set; the requantizers
        use the set ``sel`` until they take the tile's last row (``switch``), which frees it.
        Every clock enable comes from a register, and the requantizers' constants from the
        sets through one multiplexer whose select has a copy per requantizer (KEEP_COPY).
        Returns the current descriptor, whether its constants are loaded (now and in the next
        cycle), and the constants each requantizer sees."""
        cfg, units = self.cfg, self.requant_units
        sets = [Signal(param_layout(cfg), name=f"params_{s}", reset_less=True) for s in (0, 1)]
        descs = [Signal(desc_layout, name=f"params_desc_{s}") for s in (0, 1)]
        busy = [Signal(name=f"params_busy_{s}") for s in (0, 1)]  # taken, not yet freed
        full = [Signal(name=f"params_full_{s}") for s in (0, 1)]  # loaded, not yet freed
        fill = Signal()
        sel = Signal()
        m.d.comb += take_desc.eq(desc_ready & ~Mux(fill, busy[1], busy[0]))

        # `read`: the memories read the taken descriptor's constants (their addresses were
        # registered at the take); `got`: what they read is at their outputs
        read = Signal()
        read_desc = Signal(desc_layout)
        read_set = Signal()
        got = Signal()
        got_desc = Signal(desc_layout)
        got_set = Signal()
        staged = Signal(param_layout(cfg), reset_less=True)
        staged_desc = Signal(desc_layout)
        # `load[s]`: `staged` goes to set s, from a register of its own that enables the
        # set's descriptor (on the 16x8 ULX3S device a valid and a set number through a LUT,
        # 12.9 ns); the constants load at the requantizers' copies of it, below. (Kept: it
        # would merge into one of those copies, far from the descriptors it enables.)
        loading = [got & (got_set == s) for s in (0, 1)]
        load = [Signal(name=f"params_load_{s}", attrs={KEEP_COPY: 1}) for s in (0, 1)]
        m.d.sync += [read.eq(take_desc), got.eq(read), got_desc.eq(read_desc),
                     got_set.eq(read_set), staged.eq(picked(got_desc.op)),
                     staged_desc.eq(got_desc)]
        m.d.sync += [load[s].eq(loading[s]) for s in (0, 1)]
        with m.If(take_desc):
            m.d.sync += [read_desc.eq(head_desc), read_set.eq(fill), fill.eq(~fill)]
        # Each requantizer's lanes of a set load at a copy of `load` of their own (KEEP_COPY),
        # by the requantizer: one `params_load` enabled the sets' flip-flops of all eight
        # 16x8 requantizers across the die (9 ns of wire to the farthest, at d57b73e), and
        # held them near the middle, away from the requantizers they feed.
        per = self.cfg.cols // units
        for g in range(units):
            for s in (0, 1):
                unit_load = Signal(name=f"params_load_{s}_{g}", attrs={KEEP_COPY: 1})
                m.d.sync += unit_load.eq(loading[s])
                with m.If(unit_load):
                    m.d.sync += [getattr(sets[s], field)[c].eq(getattr(staged, field)[c])
                                 for field in ("mult", "shift", "bias")
                                 for c in range(g * per, (g + 1) * per)]
        for s in (0, 1):
            with m.If(take_desc & (fill == s)):
                m.d.sync += busy[s].eq(1)
            with m.If(load[s]):
                m.d.sync += [descs[s].eq(staged_desc), full[s].eq(1)]
            with m.If(switch & (sel == s)):
                m.d.sync += [busy[s].eq(0), full[s].eq(0)]
        with m.If(switch):
            m.d.sync += sel.eq(~sel)

        unit_params = []
        for g in range(units):
            copy = Signal(name=f"params_sel_{g}", attrs={KEEP_COPY: 1})
            with m.If(switch):
                m.d.sync += copy.eq(~copy)
            value = Signal(param_layout(cfg), name=f"params_used_{g}")
            m.d.comb += value.eq(Mux(copy, sets[1], sets[0]))
            unit_params.append(value)
        cur = Signal(desc_layout)
        cur_valid = Signal()
        cur_valid_next = Signal()
        m.d.comb += [cur.eq(Mux(sel, descs[1], descs[0])),
                     cur_valid.eq(Mux(sel, full[1], full[0]))]
        # next cycle's `cur_valid`, as the statements above will make it
        full_next = [Mux(switch & (sel == s), 0, Mux(load[s], 1, full[s])) for s in (0, 1)]
        m.d.comb += cur_valid_next.eq(Mux(sel ^ switch, full_next[1], full_next[0]))
        return cur, cur_valid, cur_valid_next, unit_params
