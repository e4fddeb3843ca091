"""The one configuration object that drives golden/, hw/, sim/ and boards/.

Every bit width, every array dimension and every maximum shape of the accelerator is a field of
:class:`AttnConfig`. Derived quantities (accumulator width, sum width, table size, ...) are
properties computed here and nowhere else. Named presets are made with :func:`preset`.

Numerics are specified in ``docs/numerics.md``; the field docs below only name the formats.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["AttnConfig", "PRESETS", "preset", "EXP_MODES", "ROUNDING_MODES", "DSP_MODES",
           "PARAMS_RAMS"]

EXP_MODES = ("exp2", "direct")
ROUNDING_MODES = ("half_up", "half_even")
DSP_MODES = ("infer", "ecp5_registered")
PARAMS_RAMS = ("lut", "block")


def _bits_signed(max_abs: int) -> int:
    """Width of the smallest two's complement integer that holds ``[-max_abs, max_abs]``."""
    return max_abs.bit_length() + 1


def _clog2(n: int) -> int:
    return max(0, (n - 1).bit_length())


# (field, minimum, maximum) for every integer field. Operand widths stop at 18, the widest
# multiplier input of the target DSP blocks (ECP5 MULT18X18D); the other maxima keep golden/
# exact in int64.
_INT_RANGES = {
    "max_seq_len": (1, 4096),
    "max_d_model": (1, 4096),
    "max_heads": (1, 256),
    "rows": (1, 64),
    "cols": (1, 64),
    "x_bits": (2, 18),
    "w_bits": (2, 18),
    "bias_bits": (2, 40),
    "qkv_bits": (2, 18),
    "head_bits": (2, 18),
    "y_bits": (2, 32),
    "score_bits": (4, 24),
    "score_frac_bits": (0, 16),
    "lut_addr_bits": (1, 12),
    "exp_bits": (2, 24),
    "prob_bits": (2, 17),
    "mult_bits": (2, 31),
    "div_bits_per_stage": (1, 4),
    "softmax_units": (0, 64),
    "bank_writers": (0, 64),
    "requant_units": (0, 64),
    "score_slots": (0, 8),
    "address_stages": (0, 2),
}


@dataclass(frozen=True)
class AttnConfig:
    """Frozen configuration of the attention accelerator.

    Parameters
    ----------
    name : str
        Preset name, or ``"custom"``.
    max_seq_len : int
        Largest sequence length ``L`` the hardware buffers hold.
    max_d_model : int
        Largest model width ``D``.
    max_heads : int
        Largest number of heads ``H``; at run time ``D % H == 0`` and ``d = D / H``.
    rows, cols : int
        Dimensions of the systolic array (``rows * cols`` multiply-accumulate elements).
    x_bits, w_bits : int
        Signed widths of the input activations ``X`` and of all weights.
    bias_bits : int
        Signed width of the biases, which are stored at scale ``s_x * s_w[c]``.
    qkv_bits : int
        Signed width of the projected ``Q``, ``K``, ``V``.
    head_bits : int
        Signed width of the per-head outputs (the concatenation fed to the output projection).
    y_bits : int
        Signed width of the layer output ``Y``.
    score_bits : int
        Signed width of the requantized attention scores, in units of ``2**-score_frac_bits``
        of the exponent's base-2 (``exp2`` mode) or natural (``direct`` mode) logarithm.
    score_frac_bits : int
        Fraction bits of the scores.
    exp_mode : str
        ``"exp2"``: ``exp`` as a right shift by the integer part of the score difference and a
        table over its fraction. ``"direct"``: one table indexed by the whole difference.
    lut_addr_bits : int
        Table address width: ``2**lut_addr_bits`` entries.
    exp_bits : int
        Unsigned width of a table entry (exponent values are in ``[0, 2**exp_bits - 1]``).
    prob_bits : int
        Unsigned width of the probabilities; ``2**prob_bits - 1`` stands for 1.0.
    mult_bits : int
        Unsigned width of requantization multipliers (normalized to their top bit set).
    rounding : str
        Rounding rule of every requantization: ``"half_up"`` or ``"half_even"``.
    masks : bool
        Whether the hardware implements causal and key-padding masks.
    dsp : str
        How the array's multipliers are built: ``"infer"`` (``*`` in the netlist) or
        ``"ecp5_registered"`` (MULT18X18D instantiated with its registers).
    params_ram : str
        Where the attention core keeps its per-tile requantization constants on ECP5:
        ``"lut"`` (LUT RAM, the default: its output reaches the requantizers in time) or
        ``"block"`` (DP16KD: about 2,600 LUT4 and 300 LUT-RAM slices fewer, for devices whose
        LUT RAM is congested; the block's 5.8 ns output then starts the requantizers' paths).
        Results and cycles do not depend on it; iCE40 ignores it.
    div_bits_per_stage : int
        Quotient bits per pipeline stage of the softmax's divider (1 to 4): fewer flip-flops,
        a longer path, ``ceil(prob_bits / div_bits_per_stage)`` cycles of latency. Results do
        not depend on it.
    softmax_units : int
        Softmax units of the attention core, each normalizing its share of a row block's rows
        in parallel: a power of two that divides ``rows``, or 0 (the default) for one unit per
        32 PEs (:attr:`softmax_unit_count`).
    bank_writers : int
        Lane serializers that write the attention core's result rows into its X/Q and K banks,
        each a lane a cycle: a power of two up to ``max(rows, cols)``, or 0 (the default) for
        :attr:`bank_writer_count`. Results do not depend on it.
    requant_units : int
        Requantizers of the attention core, working in lockstep on ``cols / requant_units``
        lanes of each result row: a power of two dividing ``cols``, or 0 (the default) for
        :attr:`requant_unit_count`. Results do not depend on it.
    score_slots : int
        Score blocks (one row block of one head) the attention core's score and probability
        memories hold: the array computes scores up to ``score_slots - 1`` blocks ahead of
        the P.V product waiting for the softmax. A power of two from 2 to 8, or 0 (the
        default) for :attr:`score_slot_count`. Results do not depend on it.
    address_stages : int
        Register stages between the attention core's issue logic and its memories' read
        addresses with ``dsp="ecp5_registered"`` (whose feeder never stops): 1 (FA, a copy of
        each address at its memory) or 2 (FB before FA: a register per group of four
        memories, a cycle more per operation, for arrays that span the die), or 0 (the
        default) for :attr:`address_stage_count`. The other DSP modes have none and take
        only 0. Results do not depend on it.

    Raises
    ------
    TypeError
        If a field has the wrong type; the message names the field and the value given.
    ValueError
        If a field is out of range or fields contradict each other; the message names them.
    """

    name: str = "custom"
    max_seq_len: int = 16
    max_d_model: int = 64
    max_heads: int = 4
    rows: int = 4
    cols: int = 4
    x_bits: int = 16
    w_bits: int = 8
    bias_bits: int = 32
    qkv_bits: int = 16
    head_bits: int = 16
    y_bits: int = 16
    score_bits: int = 18
    score_frac_bits: int = 8
    exp_mode: str = "exp2"
    lut_addr_bits: int = 8
    exp_bits: int = 16
    prob_bits: int = 12
    mult_bits: int = 16
    rounding: str = "half_up"
    masks: bool = True
    dsp: str = "infer"
    params_ram: str = "lut"
    div_bits_per_stage: int = 1
    softmax_units: int = 0
    bank_writers: int = 0
    requant_units: int = 0
    score_slots: int = 0
    address_stages: int = 0

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a str, not {self.name!r}")
        for field, (lo, hi) in _INT_RANGES.items():
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{field} must be an int, not {value!r}")
            if not lo <= value <= hi:
                raise ValueError(f"{field} must be between {lo} and {hi}, not {value!r}")
        for field, choices in (("exp_mode", EXP_MODES), ("rounding", ROUNDING_MODES),
                               ("dsp", DSP_MODES), ("params_ram", PARAMS_RAMS)):
            value = getattr(self, field)
            if value not in choices:
                raise ValueError(f"{field} must be one of {', '.join(choices)}, not {value!r}")
        if not isinstance(self.masks, bool):
            raise TypeError(f"masks must be a bool, not {self.masks!r}")
        if self.max_heads > self.max_d_model:
            raise ValueError(f"max_heads ({self.max_heads}) must not exceed max_d_model "
                             f"({self.max_d_model})")
        if self.score_frac_bits >= self.score_bits:
            raise ValueError(f"score_frac_bits ({self.score_frac_bits}) must be less than "
                             f"score_bits ({self.score_bits})")
        if self.exp_mode == "exp2" and self.lut_addr_bits > self.score_frac_bits:
            raise ValueError(f"lut_addr_bits ({self.lut_addr_bits}) must not exceed "
                             f"score_frac_bits ({self.score_frac_bits}) in exp2 mode")
        units = self.softmax_units
        if units and (units & (units - 1) or self.rows % units):
            raise ValueError(f"softmax_units ({units}) must be 0 or a power of two dividing "
                             f"rows ({self.rows})")
        writers, banks = self.bank_writers, max(self.rows, self.cols)
        if writers and (writers & (writers - 1) or writers > banks):
            raise ValueError(f"bank_writers ({writers}) must be 0 or a power of two up to "
                             f"max(rows, cols) ({banks})")
        units = self.requant_units
        if units and (units & (units - 1) or self.cols % units):
            raise ValueError(f"requant_units ({units}) must be 0 or a power of two dividing "
                             f"cols ({self.cols})")
        slots = self.score_slots
        if slots and (slots & (slots - 1) or slots < 2):
            raise ValueError(f"score_slots ({slots}) must be 0 or a power of two from 2 to 8")
        if self.address_stages and self.dsp != "ecp5_registered":
            raise ValueError(f"address_stages ({self.address_stages}) must be 0 unless dsp is "
                             f"ecp5_registered (dsp={self.dsp!r} has no address stages)")
        if self.acc_bits + self.mult_bits > 62:
            raise ValueError(f"acc_bits ({self.acc_bits}) + mult_bits ({self.mult_bits}) must "
                             f"not exceed 62 (requantization products are exact in int64)")

    # -- derived quantities (computed once, here) --------------------------------------------

    @property
    def pes(self) -> int:
        """Number of multiply-accumulate elements."""
        return self.rows * self.cols

    @property
    def softmax_unit_count(self) -> int:
        """Softmax units of the attention core: ``softmax_units``, or for 0 one per 32 PEs
        rounded up to a power of two, at most ``rows`` (a unit takes one score per cycle,
        which keeps up with ``rows * cols`` PEs while ``rows * cols / (2 d)`` is at most 1, and
        16 is the smallest head size ``d`` the figures use)."""
        if self.softmax_units:
            return self.softmax_units
        per_32 = -(-self.pes // 32)
        return min(self.rows, 1 << (per_32 - 1).bit_length())

    @property
    def bank_writer_count(self) -> int:
        """Lane serializers of the attention core's writer: ``bank_writers``, or for 0 two (one
        if the array has a single row and column). Two write a tile's rows fast enough that an
        8×8 array waits 120 cycles of the reference layer's 25,400 for them (one: 790; four or
        eight: none), and each more adds a 128-bit row register and a bus across the die."""
        if self.bank_writers:
            return self.bank_writers
        return min(2, max(self.rows, self.cols))

    @property
    def score_slot_count(self) -> int:
        """Score blocks in the attention core's score and P memories: ``score_slots``, or for
        0 four on arrays of 64 PEs or more, else two. With a causal mask the first row blocks
        have few keys; the array finishes their score and P.V tiles faster than the softmax
        its rows (about three times a row's length plus its pipeline), and on the 8x8 array
        the reference layer then waits 1,043 of its 22,530 cycles for the softmax with two
        slots, 45 of 21,820 with four. Smaller arrays take longer over a block and do not
        wait; each slot more costs them two memories' worth of logic."""
        if self.score_slots:
            return self.score_slots
        return 4 if self.pes >= 64 else 2

    @property
    def address_stage_count(self) -> int:
        """Register stages between the attention core's issue logic and its memories' read
        addresses: ``address_stages``, or for 0 none unless ``dsp="ecp5_registered"``, then
        two on arrays of more than 64 PEs, else one. The second stage (FB) took the 16x8
        ULX3S device from 74.1 / 76.1 / 72.2 to 80.7 / 77.7 / 81.8 MHz at nextpnr seeds
        1 / 2 / 3, and the 8x4 from 103.3 / 103.1 / 103.5 down to 89.1 / 94.3 / 96.4 MHz."""
        if self.address_stages:
            return self.address_stages
        if self.dsp != "ecp5_registered":
            return 0
        return 2 if self.pes > 64 else 1

    @property
    def requant_unit_count(self) -> int:
        """Requantizers of the attention core (each one value per cycle): ``requant_units``, or
        for 0 enough for the ``rows x cols`` results of a tile every 8 cycles, at most 4 (each
        takes 3 DSP blocks on ECP5), so tiles with reductions of at least ``rows * cols / 4``
        never wait for them. A score tile's reduction is the head size ``d``: on a 16x8 array
        with ``d = 16`` four requantizers take 32 cycles for a score tile's 16."""
        if self.requant_units:
            return self.requant_units
        return min(self.cols, 1 << (-(-self.pes // 8) - 1).bit_length(), 4)

    @property
    def a_bits(self) -> int:
        """Signed width of the array's left operand (X, Q, P as signed, head outputs)."""
        return max(self.x_bits, self.qkv_bits, self.prob_bits + 1, self.head_bits)

    @property
    def b_bits(self) -> int:
        """Signed width of the array's top operand (weights, K, V transposed)."""
        return max(self.w_bits, self.qkv_bits)

    @property
    def max_reduction(self) -> int:
        """Longest reduction of any matrix product: ``max(D, L)``."""
        return max(self.max_d_model, self.max_seq_len)

    @property
    def acc_bits(self) -> int:
        """Signed accumulator width that cannot overflow for any stage at the maximum shape."""
        def prod(a, b):  # largest magnitude of a product of signed a-bit and b-bit integers
            return 1 << (a + b - 2)
        bias = 1 << (self.bias_bits - 1)
        d, length = self.max_d_model, self.max_seq_len
        one = (1 << self.prob_bits) - 1
        # P.V: probabilities are non-negative and sum to at most one + L/2 LSB (docs/numerics.md)
        pv = (one + (length + 1) // 2) * (1 << (self.qkv_bits - 1))
        return max(
            _bits_signed(d * prod(self.x_bits, self.w_bits) + bias),      # Q, K, V projections
            _bits_signed(d * prod(self.qkv_bits, self.qkv_bits)),         # Q_h K_h^T
            _bits_signed(pv),                                             # P_h V_h
            _bits_signed(d * prod(self.head_bits, self.w_bits) + bias),   # output projection
        )

    @property
    def shift_bits(self) -> int:
        """Width of a requantization shift amount (shifts are in ``[0, acc_bits + mult_bits)``)."""
        return _clog2(self.acc_bits + self.mult_bits)

    @property
    def lut_size(self) -> int:
        """Number of entries of the exponent table."""
        return 1 << self.lut_addr_bits

    @property
    def exp_max(self) -> int:
        """Exponent of a zero score difference (the row maximum): ``2**exp_bits - 1``."""
        return (1 << self.exp_bits) - 1

    @property
    def prob_one(self) -> int:
        """The integer that stands for probability 1.0: ``2**prob_bits - 1``."""
        return (1 << self.prob_bits) - 1

    @property
    def diff_bits(self) -> int:
        """Unsigned width of a score difference ``max - score``."""
        return self.score_bits

    @property
    def sum_bits(self) -> int:
        """Unsigned width of a row sum of exponents (cannot overflow for ``max_seq_len``)."""
        return (self.max_seq_len * self.exp_max).bit_length()

    @property
    def len_bits(self) -> int:
        """Unsigned width of a sequence length in ``[0, max_seq_len]``."""
        return self.max_seq_len.bit_length()

    # -- shapes ------------------------------------------------------------------------------

    def check_shape(self, seq_len: int, d_model: int, heads: int) -> None:
        """Raise :class:`ValueError` naming the first of L, D, H that this config can't run."""
        for field, value, limit in (("sequence length L", seq_len, self.max_seq_len),
                                    ("model width D", d_model, self.max_d_model),
                                    ("heads H", heads, self.max_heads)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{field} must be an int, not {value!r}")
            if not 1 <= value <= limit:
                raise ValueError(f"{field} = {value} is outside 1..{limit} of config "
                                 f"{self.name!r}")
        if d_model % heads:
            raise ValueError(f"model width D = {d_model} is not divisible by heads H = {heads}")

    def fitted(self, seq_len: int, d_model: int, heads: int) -> AttnConfig:
        """This configuration with its maxima replaced by the given shape (name ``"fitted"``)."""
        return dataclasses.replace(self, name="fitted", max_seq_len=seq_len,
                                   max_d_model=d_model, max_heads=heads)

    def replace(self, **changes) -> AttnConfig:
        """A copy with some fields changed (validated again); the name becomes ``"custom"``."""
        changes.setdefault("name", "custom")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """All fields as a plain dict (JSON-serializable)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> AttnConfig:
        """The inverse of :meth:`to_dict`; unknown keys raise :class:`ValueError`."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown configuration field(s): {', '.join(unknown)}")
        return cls(**values)


def _make_presets() -> dict:
    base = AttnConfig()
    presets = {
        # Smallest useful shape: fast tests in the Amaranth simulator.
        "tiny": base.replace(max_seq_len=8, max_d_model=16, max_heads=2, rows=2, cols=2),
        # The reference layer of the benchmarks: L = 64, D = 64, H = 4 on a 4x4 array.
        "default": base.replace(max_seq_len=64, max_d_model=64, max_heads=4, rows=4, cols=4),
        # iCEBreaker (iCE40UP5K): 8 multipliers, the number of SB_MAC16 blocks.
        "icebreaker": base.replace(max_seq_len=64, max_d_model=64, max_heads=4, rows=2,
                                   cols=4),
        # What fits the iCEBreaker (iCE40UP5K, 5,280 logic cells): a 2x1 array, tiny's shape,
        # 8-bit activations and narrower softmax and constants (12-bit scores keep 4 fraction
        # bits: with 8, peaked heads saturate at 2^-8 and lose 30 points of accuracy); the
        # divider resolves two quotient bits per stage (half its flip-flops).
        "icebreaker_mini": base.replace(max_seq_len=8, max_d_model=16, max_heads=2, rows=2,
                                        cols=1, x_bits=8, qkv_bits=8, head_bits=8, y_bits=8,
                                        bias_bits=20, score_bits=12, score_frac_bits=4,
                                        lut_addr_bits=4, exp_bits=12, prob_bits=8,
                                        mult_bits=12, div_bits_per_stage=2),
        # ULX3S (ECP5-85F): the reference layer's shape on an 8x4 array of registered DSPs
        # with two softmax units (one left the array waiting 6 % of the reference layer) and
        # four score slots (at cab3000 the reference layer: 42,509 cycles; two 43,111, the
        # array waiting 629 of them for the softmax of the first row blocks; four softmax
        # units and two slots 42,694; the slots' memories are block RAMs of the same count).
        # The ULX3S board's preset: it builds in minutes.
        "ulx3s_8x4": base.replace(max_seq_len=64, max_d_model=64, max_heads=4, rows=8, cols=4,
                                  softmax_units=2, score_slots=4, dsp="ecp5_registered"),
        # ULX3S (ECP5-85F): the same shape on an 8x8 array, twice the multipliers, with four
        # softmax units (at 70063ab the causal reference layer waited 53 of its 21,828 cycles
        # for them; eight 45, two 281): the fastest reference layer, but nextpnr takes 20 to
        # 40 minutes.
        "ulx3s_8x8": base.replace(max_seq_len=64, max_d_model=64, max_heads=4, rows=8, cols=8,
                                  softmax_units=4, dsp="ecp5_registered"),
        # ULX3S (ECP5-85F): the same shape on a 16x8 array, 128 registered DSPs, with eight
        # softmax units (at 70063ab the reference layer: 11,683 cycles; 16 units 11,667, four
        # 11,839), eight requantizers (a score tile, K = d = 16, brings
        # 16 rows of 8 in 16 cycles: with four the array waited for them 10 % of the reference
        # layer), eight bank writers (at be45b06 the reference layer: 11,097 cycles; four
        # 11,297: the P.V tiles of the first row blocks, K = 16, bring their rows faster than
        # four write them) and eight score slots (four: 11,136). 152 of the 156 DSPs; the
        # requantization constants in block RAM, so that the device routes (in LUT RAM the
        # corner with the requantizers stayed congested).
        "ulx3s_16x8": base.replace(max_seq_len=64, max_d_model=64, max_heads=4, rows=16,
                                   cols=8, softmax_units=8, requant_units=8, bank_writers=8,
                                   score_slots=8, dsp="ecp5_registered", params_ram="block"),
        # ULX3S (ECP5-85F): MiniLM-sized layers on a 16x8 array of registered MULT18X18D
        # (128 of the 156 DSPs; the attention core needs power-of-two array sides).
        "ulx3s": base.replace(max_seq_len=64, max_d_model=384, max_heads=12, rows=16,
                              cols=8, dsp="ecp5_registered"),
    }
    return {name: dataclasses.replace(cfg, name=name) for name, cfg in presets.items()}


PRESETS: dict = _make_presets()


def preset(name: str) -> AttnConfig:
    """The preset called ``name``; an unknown name raises :class:`ValueError` listing them."""
    try:
        return PRESETS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}") \
            from None
