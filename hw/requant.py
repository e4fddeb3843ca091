"""Streaming requantization: ``saturate(round_shift((acc + bias) * M, S), out_bits)``.

Bit-exact with :func:`golden.quant.requantize` applied to ``acc + bias`` (golden/ computes
projections as ``x @ w.T + b`` and then requantizes, so adding the bias here, after the array,
is the same arithmetic; products with no bias use ``bias = 0``).

Streams
-------
``i_stream``
    Result rows of the systolic array (the payload layout of
    :func:`hw.systolic.output_layout`): ``acc`` holds ``lanes`` values, one per output channel
    (tile column), ``last`` marks a tile's final row. Connect ``SystolicArray.o_stream``
    directly.
``p_stream``
    Per-channel parameters, **one beat per tile**: ``mult[c]`` (unsigned ``mult_bits``),
    ``shift[c]`` (unsigned ``shift_bits``) and ``bias[c]`` (signed ``bias_bits``) for lane
    ``c``. A beat is used for every row of a tile and consumed with the tile's last row, so the
    controller sends the parameters of a tile's output channels along with its operands (they
    come from the same place as the weights). Per-head scales are sent as equal lanes.
``o_stream``
    One requantized value per beat (signed ``out_bits``), row by row, lane 0 first; ``last`` on
    the tile's final value.

Throughput and latency
----------------------
One value per cycle: a row takes ``lanes`` cycles, so the unit keeps up with an
``R x C`` array for reduction lengths ``K >= R * C``. A value leaves :attr:`latency` cycles
after its row and parameters are both valid (no stalls): 5, or 9 with ``"ecp5_registered"``.
One ``stall`` signal (output valid and not ready) freezes the whole pipeline; nothing is lost
or repeated.

Multiplier
----------
``"infer"``: ``(acc + bias) * M`` as one ``*`` followed by one more register (the tool maps it,
e.g. to iCE40 SB_MAC16 blocks). ``"slices"``: ``acc + bias`` cut into 17-bit slices, each slice
times ``M`` as a ``*`` into its own register (one 18x18 DSP block each, ECP5's MULT18X18D, whose
own registers Yosys leaves unused), the slices' products summed in the next stage: no carry
chain shares a cycle with the multipliers. ``"ecp5_registered"``: the same slices (and ``M`` in
17-bit slices too), each pair of slices multiplied by a :class:`hw.dsp.Multiplier` of that style:
a MULT18X18D with its input, pipeline and output registers and one fabric register after it
(the behavioural model with the same four stages off ECP5, so simulation has the hardware's
timing). Three more stages than ``"slices"``, but neither side of the DSP block shares a cycle
with the route to it: with ``"slices"`` the requantizers' DSPs, placed far from their
registers, were the critical path of routed 8x8 cores. ``"shift_add"``: no ``*`` at all;
partial products of 4 multiplier bits each are summed in the first stage and combined in the
second (fabric only: for iCE40, whose eight SB_MAC16 are all taken by a 2x4 array).

Shift
-----
Shifts larger than the product width give the same result as ``product width + 1`` (0 for
both roundings), so the shifter is clamped there instead of being as wide as ``2**shift_bits``.
For ``S >= 1`` the product is shifted by ``S - 1`` and the last bit left decides the rounding
(``half_up``: ``(t + 1) >> 1``; ``half_even`` also looks at whether any lower bit was set), so
no ``2**(S-1)`` is decoded or added.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .dsp import DSP_LATENCY, Multiplier, check_bits
from .systolic import output_layout

__all__ = ["Requantizer", "param_layout", "sum_width", "MULTIPLIERS"]

MULTIPLIERS = ("infer", "slices", "ecp5_registered", "shift_add")
ROUNDINGS = ("half_up", "half_even")
_CHUNK = 4  # multiplier bits per partial product of the shift-add multiplier
_DSP_SLICE = 17  # operand bits per DSP partial product (unsigned, fits 18x18 signed)


def _shifted_sum(parts, bits: int):
    """``sum(part << j for j, part in parts)`` as a signed ``bits``-wide expression."""
    acc = Const(0, signed(bits))
    for j, part in parts:
        acc = acc + (part << j)
    return acc


def sum_width(in_bits: int, bias_bits: int) -> int:
    """Signed width of ``acc + bias`` for a signed ``in_bits`` accumulator and a signed
    ``bias_bits`` bias (the multiplier's other operand has ``mult_bits``)."""
    return max(in_bits, bias_bits) + 1


def param_layout(lanes: int, mult_bits: int, shift_bits: int, bias_bits: int):
    """Payload of one ``p_stream`` beat: the parameters of ``lanes`` output channels."""
    return data.StructLayout({
        "mult": data.ArrayLayout(unsigned(mult_bits), lanes),
        "shift": data.ArrayLayout(unsigned(shift_bits), lanes),
        "bias": data.ArrayLayout(signed(bias_bits), lanes),
    })


class Requantizer(wiring.Component):
    """Per-channel requantization of array result rows, one value per cycle.

    See the module docstring for the streams, throughput and arithmetic.

    Parameters
    ----------
    lanes : int
        Values per input row (the array's ``cols``).
    in_bits : int
        Signed width of the accumulator values (``acc_bits``).
    bias_bits, mult_bits, shift_bits : int
        Widths of the per-channel bias (signed), multiplier and shift (unsigned).
    out_bits : int
        Signed width the result saturates to.
    rounding : str
        ``"half_up"`` or ``"half_even"`` (as :func:`golden.quant.round_shift`).
    multiplier : str
        ``"infer"``, ``"slices"``, ``"ecp5_registered"`` or ``"shift_add"``.

    Members
    -------
    i_stream : In(stream.Signature(output_layout(lanes, in_bits)))
    p_stream : In(stream.Signature(param_layout(lanes, mult_bits, shift_bits, bias_bits)))
    o_stream : Out(stream.Signature({"value": signed(out_bits), "last": 1}))

    Raises
    ------
    TypeError, ValueError
        For an invalid parameter; the message names it and the value given.
    """

    def __init__(self, *, lanes: int, in_bits: int, bias_bits: int, mult_bits: int,
                 shift_bits: int, out_bits: int, rounding: str = "half_up",
                 multiplier: str = "infer"):
        check_bits("lanes", lanes, 1)
        check_bits("in_bits", in_bits, 2)
        check_bits("bias_bits", bias_bits, 2)
        check_bits("mult_bits", mult_bits, 1)
        check_bits("shift_bits", shift_bits, 1, 8)
        check_bits("out_bits", out_bits, 2)
        if rounding not in ROUNDINGS:
            raise ValueError(f"rounding must be one of {', '.join(ROUNDINGS)}, not {rounding!r}")
        if multiplier not in MULTIPLIERS:
            raise ValueError(f"multiplier must be one of {', '.join(MULTIPLIERS)}, "
                             f"not {multiplier!r}")
        self.lanes, self.in_bits, self.bias_bits = lanes, in_bits, bias_bits
        self.mult_bits, self.shift_bits, self.out_bits = mult_bits, shift_bits, out_bits
        self.rounding, self.multiplier = rounding, multiplier
        self.i_layout = output_layout(lanes, in_bits)
        self.p_layout = param_layout(lanes, mult_bits, shift_bits, bias_bits)
        self.o_layout = data.StructLayout({"value": signed(out_bits), "last": 1})
        super().__init__({
            "i_stream": In(stream.Signature(self.i_layout)),
            "p_stream": In(stream.Signature(self.p_layout)),
            "o_stream": Out(stream.Signature(self.o_layout)),
        })

    @classmethod
    def from_config(cls, cfg, *, out_bits: int, multiplier: str = "infer") -> Requantizer:
        """The unit for an :class:`attn.AttnConfig`'s array: ``lanes = cols``, ``in_bits =
        acc_bits``, bias/mult/shift widths and rounding from ``cfg``."""
        return cls(lanes=cfg.cols, in_bits=cfg.acc_bits, bias_bits=cfg.bias_bits,
                   mult_bits=cfg.mult_bits, shift_bits=cfg.shift_bits, out_bits=out_bits,
                   rounding=cfg.rounding, multiplier=multiplier)

    @property
    def product_stages(self) -> int:
        """Register stages from ``acc + bias`` (stage 1) to its product with ``M``: 2, or the
        DSP block's latency plus the partial products' sum with ``"ecp5_registered"``."""
        if self.multiplier == "ecp5_registered":
            return DSP_LATENCY["ecp5_registered"] + 1
        return 2

    @property
    def latency(self) -> int:
        """Cycles from a value's issue (its row and parameters valid, no stall) to its output:
        ``acc + bias``, the product, the shift, the rounded and saturated result (the
        rounding and the saturation test a stage apart with :attr:`split_saturation`)."""
        return 1 + self.product_stages + 2 + self.split_shift + self.split_saturation

    @property
    def split_shift(self) -> bool:
        """With ``"ecp5_registered"`` the right shift by ``S - 1`` takes two stages (by its
        multiple of four, then by the rest; one cycle more): the one-stage shifter over the
        product's width, six levels of multiplexers, was the widest family of deep paths of
        the 16x8 ULX3S netlist (436 flip-flops, 11.3 ns estimated by :mod:`boards.depth`)."""
        return self.multiplier == "ecp5_registered"

    @property
    def split_saturation(self) -> bool:
        """With ``"ecp5_registered"`` the rounding and the saturation test take a stage of
        their own before the saturating select (one cycle more): on the 16x8 ULX3S device the
        saturation test, a comparison as wide as the product, then the select were the
        critical path (11.2 ns)."""
        return self.multiplier == "ecp5_registered"

    @property
    def sum_bits(self) -> int:
        """Signed width of ``acc + bias``."""
        return sum_width(self.in_bits, self.bias_bits)

    @property
    def product_bits(self) -> int:
        """Signed width of ``(acc + bias) * M``."""
        return self.sum_bits + self.mult_bits

    def elaborate(self, platform):
        m = Module()
        lanes, pbits = self.lanes, self.product_bits
        i, p, o = self.i_stream, self.p_stream, self.o_stream
        ps, lat = self.product_stages, self.latency

        # `lat` pipeline stages, all frozen by `stall`: valid/last of stage n in [n - 1].
        stall = Signal()
        valid = [Signal(name=f"valid{n}") for n in range(1, lat + 1)]
        last = [Signal(name=f"last{n}") for n in range(1, lat + 1)]
        m.d.comb += stall.eq(valid[-1] & ~o.ready)

        # Stage 0: serialize the row (lane counter) and pick the lane's parameters.
        lane = Signal(range(lanes))
        issue = Signal()
        row_done = Signal()
        m.d.comb += [issue.eq(i.valid & p.valid & ~stall),
                     row_done.eq(lane == lanes - 1),
                     i.ready.eq(issue & row_done),
                     p.ready.eq(issue & row_done & i.payload.last)]
        with m.If(issue):
            m.d.sync += lane.eq(Mux(row_done, 0, lane + 1))

        acc = Signal(signed(self.in_bits))
        bias = Signal(signed(self.bias_bits))
        mult = Signal(unsigned(self.mult_bits))
        shift = Signal(unsigned(self.shift_bits))
        with m.Switch(lane):
            for c in range(lanes):
                with m.Case(c):
                    m.d.comb += [acc.eq(i.payload.acc[c]), bias.eq(p.payload.bias[c]),
                                 mult.eq(p.payload.mult[c]), shift.eq(p.payload.shift[c])]

        # Stage 1: acc + bias; the shift clamped to pbits + 1 (same result, narrower shifter)
        # and taken as S - 1 with a flag for S = 0: round_shift(x, S) for S >= 1 is
        # (x >> (S - 1)) rounded by its last bit, so no 2**(S-1) is ever added.
        total = Signal(signed(self.sum_bits), reset_less=True)
        mult1 = Signal(unsigned(self.mult_bits), reset_less=True)
        smax = pbits + 1
        # Stages 1 .. 1 + ps: the shift (max(S, 1) - 1, clamped) and the S == 0 flag (no
        # rounding) travel beside the product, which is ready at stage 1 + ps.
        shifts = [Signal(range(smax), name=f"shift{n}", reset_less=True)
                  for n in range(1, ps + 2)]
        exacts = [Signal(name=f"exact{n}", reset_less=True)
                  for n in range(1, ps + 3 + self.split_shift)]
        prod = Signal(signed(pbits), reset_less=True)
        # Stage 2 + ps: t = x >> (S - 1) (and for half_even, whether bits below it were set);
        # stage 3 + ps: the rounded, saturated result (with `split_saturation`, stage 3 + ps the
        # rounded value and the saturation flags, stage 4 + ps the result). With
        # `split_shift` t takes stages 2 + ps (by the multiple of four) and 3 + ps (the rest),
        # and the later stages come a cycle later.
        work = pbits + 2
        t = Signal(signed(work), reset_less=True)
        sticky = Signal(reset_less=True)
        out = Signal(signed(self.out_bits), reset_less=True)

        self._elaborate_product(m, total, mult1, prod, ~stall)
        with m.If(~stall):
            m.d.sync += [valid[0].eq(issue), last[0].eq(i.payload.last & row_done)]
            m.d.sync += [valid[n].eq(valid[n - 1]) for n in range(1, lat)]
            m.d.sync += [last[n].eq(last[n - 1]) for n in range(1, lat)]
            m.d.sync += [total.eq(acc + bias), mult1.eq(mult),
                         shifts[0].eq(Mux(shift > smax, smax - 1,
                                          Mux(shift == 0, 0, shift - 1))),
                         exacts[0].eq(shift == 0)]
            m.d.sync += [shifts[n].eq(shifts[n - 1]) for n in range(1, len(shifts))]
            m.d.sync += [exacts[n].eq(exacts[n - 1]) for n in range(1, len(exacts))]

            wide = Signal(signed(work))
            m.d.comb += wide.eq(prod)
            if self.split_shift:
                coarse = Signal(signed(work), name="coarse", reset_less=True)
                fine = Signal(2, name="fine", reset_less=True)
                m.d.sync += [coarse.eq(wide >> Cat(Const(0, 2), shifts[-1][2:])),
                             fine.eq(shifts[-1][:2]), t.eq(coarse >> fine)]
            else:
                m.d.sync += t.eq(wide >> shifts[-1])
            if self.rounding == "half_even":
                below = Cat(*(shifts[-1] > n for n in range(work)))   # 2**(S-1) - 1
                if self.split_shift:
                    sticky1 = Signal(name="sticky1", reset_less=True)
                    m.d.sync += [sticky1.eq((wide.as_unsigned() & below) != 0),
                                 sticky.eq(sticky1)]
                else:
                    m.d.sync += sticky.eq((wide.as_unsigned() & below) != 0)

            # Last stage: q = t >> 1 rounded up by the half bit t[0]: always for half_up, for
            # half_even unless it is an exact tie (nothing below) and q is already even.
            q = t >> 1
            if self.rounding == "half_up":
                up = t[0]
            else:
                up = t[0] & (sticky | q[0])
            # The rounded value matters only where it does not saturate, where it fits in
            # `out_bits`: the rounding adder is that wide.
            ob = self.out_bits
            rounded = Signal(signed(ob))
            m.d.comb += rounded.eq(Mux(exacts[-1], t[:ob], q[:ob] + up))
            hi = (1 << (ob - 1)) - 1
            lo = -(1 << (ob - 1))
            # Saturation: whether q + up leaves [lo, hi], from q and up (up is 0 or 1), so the
            # comparisons run beside the rounding adder, not after it (on the 8x8 ULX3S device
            # adder then comparison was the critical path, 11.0 ns).
            over = Signal()
            under = Signal()
            m.d.comb += [
                over.eq(Mux(exacts[-1], t > hi, (q > hi) | ((q == hi) & up))),
                under.eq(Mux(exacts[-1], t < lo, (q < lo - 1) | ((q == lo - 1) & ~up))),
            ]
            if self.split_saturation:
                rounded_r = Signal(signed(ob), reset_less=True)
                over_r = Signal(reset_less=True)
                under_r = Signal(reset_less=True)
                m.d.sync += [rounded_r.eq(rounded), over_r.eq(over), under_r.eq(under)]
                rounded, over, under = rounded_r, over_r, under_r
            m.d.sync += out.eq(Mux(over, hi, Mux(under, lo, rounded)))

        m.d.comb += [o.valid.eq(valid[-1]), o.payload.value.eq(out),
                     o.payload.last.eq(last[-1])]
        return m

    def _elaborate_product(self, m, total, mult, prod, en):
        """:attr:`product_stages` register stages, advancing while ``en``, from (total, mult)
        to prod = total * mult."""
        pbits = self.product_bits
        if self.multiplier == "infer":
            prod2 = Signal(signed(pbits), reset_less=True)
            with m.If(en):
                m.d.sync += [prod2.eq(total * mult), prod.eq(prod2)]
            return
        if self.multiplier == "ecp5_registered":
            # Every pair of slices of `total` (the top one signed) and of M (unsigned) into its
            # own registered DSP block; their products summed in the stage after.
            parts = []
            for j, a in self._slices(total, signed_top=True):
                for k, b in self._slices(mult, signed_top=False):
                    mul = Multiplier(a_bits=max(2, len(a) + (not a.shape().signed)),
                                     b_bits=len(b) + 1, style="ecp5_registered")
                    m.submodules[f"mult_{j}_{k}"] = mul
                    m.d.comb += [mul.en.eq(en), mul.a.eq(a), mul.b.eq(b)]
                    parts.append((j + k, mul.p))
            with m.If(en):
                m.d.sync += prod.eq(_shifted_sum(parts, pbits))
            return
        if self.multiplier == "slices":
            # `total` in slices of _DSP_SLICE bits (the top one signed), each times M into its
            # own register (one 18x18 DSP multiplier each), summed in the next stage: the
            # partial products' sum does not share a cycle with the multipliers.
            parts = []
            for j, piece in self._slices(total, signed_top=True):
                part = Signal(signed(len(piece) + self.mult_bits + 1), name=f"part{j}",
                              reset_less=True)
                with m.If(en):
                    m.d.sync += part.eq(piece * mult)
                parts.append((j, part))
            with m.If(en):
                m.d.sync += prod.eq(_shifted_sum(parts, pbits))
            return
        chunks = []
        for j in range(0, self.mult_bits, _CHUNK):
            terms = [Mux(mult[j + n], total << n, 0)
                     for n in range(min(_CHUNK, self.mult_bits - j))]
            part = Signal(signed(self.sum_bits + _CHUNK), name=f"partial{j}", reset_less=True)
            acc = terms[0]
            for term in terms[1:]:
                acc = acc + term
            with m.If(en):
                m.d.sync += part.eq(acc)
            chunks.append((j, part))
        with m.If(en):
            m.d.sync += prod.eq(_shifted_sum(chunks, pbits))

    @staticmethod
    def _slices(value, *, signed_top):
        """``(offset, slice)`` of ``value`` in ``_DSP_SLICE``-bit pieces from bit 0; with
        ``signed_top`` the top piece is signed (``value``'s sign), the others unsigned."""
        pieces = []
        for j in range(0, len(value), _DSP_SLICE):
            piece = value[j:j + _DSP_SLICE]
            if signed_top and j + _DSP_SLICE >= len(value):
                piece = piece.as_signed()
            pieces.append((j, piece))
        return pieces
