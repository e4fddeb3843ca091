"""Signed multipliers for the systolic array: an inferred ``*`` or a registered ECP5 DSP.

Two styles, chosen by :attr:`attn.AttnConfig.dsp`:

``"infer"``
    ``p = a * b`` as a combinational ``*`` (latency 0). Yosys maps it onto a DSP block: on
    iCE40 with ``synth_ice40 -dsp`` each ``*`` becomes one SB_MAC16; on ECP5 one MULT18X18D
    whose internal registers stay unused.
``"ecp5_registered"``
    A MULT18X18D with its input, pipeline and output registers enabled, followed by one fabric
    register (latency 4): the DSP columns sit far from the fabric that accumulates, and the
    extra register lets the placer split that route (8x8: 112 MHz instead of the 89 MHz
    estimate without it). On an ECP5 platform (``platform.family == "ecp5"``) the primitive is
    instantiated; everywhere else (``platform is None`` in the Amaranth simulator, Verilog
    export, other families) a behavioural model with the same four register stages and the
    same clock enable is elaborated, so simulation and hardware have identical timing.

All registers advance only when ``en`` is high (the array's global enable), and none of them
is reset: the array qualifies products with its own ``valid`` flags.
"""

from __future__ import annotations

from amaranth import ClockSignal, Const, Module, Signal, signed
from amaranth.hdl import Instance
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .target import device, is_ecp5

__all__ = ["DSP_LATENCY", "Multiplier", "check_bits", "check_site", "times_constant",
           "ice40_mac16", "mac16_blocks"]

#: Latency in enabled clock cycles of each multiplier style.
DSP_LATENCY = {"infer": 0, "ecp5_registered": 4}

_ECP5_WIDTH = 18  # MULT18X18D operand width
_MAC16_WIDTH = 16  # SB_MAC16 operand width

#: SB_MAC16 blocks of the iCE40 devices that have any (the HX and LP parts have none).
_ICE40_MAC16 = {"ice40up5k": 8, "ice40up3k": 4}


def ice40_mac16(platform) -> int:
    """SB_MAC16 blocks of an iCE40 ``platform``'s device; 0 for any other platform or none."""
    return _ICE40_MAC16.get(device(platform), 0)


def mac16_blocks(a_bits: int, b_bits: int) -> int:
    """SB_MAC16 blocks Yosys (``synth_ice40 -dsp``) builds a signed ``a_bits`` by unsigned
    ``b_bits`` product from.

    Yosys's ``mul2dsp`` cuts each operand into 16-bit slices (the last one shorter) and maps
    each pair of slices to one block, except pairs with a slice under 2 bits or a product under
    11 bits, which it leaves to the fabric.
    """
    def slices(bits):
        return [_MAC16_WIDTH] * (bits // _MAC16_WIDTH) + [bits % _MAC16_WIDTH] * (
            bits % _MAC16_WIDTH > 0)
    return sum(1 for a in slices(a_bits) for b in slices(b_bits)
               if a >= 2 and b >= 2 and a + b >= 11)


def check_bits(name: str, value, minimum: int = 1, maximum: int | None = None) -> int:
    """Validate an integer parameter; errors name the parameter and the value given."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        upper = f" and at most {maximum}" if maximum is not None else ""
        raise ValueError(f"{name} must be at least {minimum}{upper}, not {value!r}")
    return value


def times_constant(value, constant: int):
    """``value * constant`` (``constant >= 0``) as a sum of shifted copies of ``value``.

    Yosys maps a product with a constant to a DSP block like any other product: an
    unregistered one in an address or length path, and one DSP fewer for the array (iCE40 has
    eight). The sum costs one adder per set bit of ``constant`` beyond the first.
    """
    if not isinstance(constant, int) or constant < 0:
        raise ValueError(f"constant must be a non-negative int, not {constant!r}")
    terms = [value << i for i in range(constant.bit_length()) if constant >> i & 1]
    return sum(terms[1:], terms[0]) if terms else Const(0, 1)


def check_site(name: str, value) -> str | None:
    """Validate a DSP site name (a non-empty str) or ``None``; errors name the parameter."""
    if value is not None and (not isinstance(value, str) or not value):
        raise TypeError(f"{name} must be a non-empty str or None, not {value!r}")
    return value


class Multiplier(wiring.Component):
    """Signed ``a_bits`` x ``b_bits`` multiplier with a fixed latency in enabled cycles.

    Parameters
    ----------
    a_bits, b_bits : int
        Signed operand widths (``>= 2``; at most 18 for ``"ecp5_registered"``).
    style : str
        ``"infer"`` or ``"ecp5_registered"`` (see the module docstring).
    site : str or None
        With ``"ecp5_registered"`` on ECP5: the MULT18X18D site to place the DSP on (nextpnr's
        ``BEL`` attribute, e.g. ``"X4/Y10/MULT18_0"``; :mod:`hw.floorplan`). ``None``: nextpnr
        chooses. Ignored by every other style and platform.

    Members
    -------
    en : In(1)
        Clock enable of every internal register (ignored by the combinational style).
    a : In(signed(a_bits))
    b : In(signed(b_bits))
    p : Out(signed(a_bits + b_bits))
        ``a * b`` of the operands presented :attr:`latency` enabled cycles earlier.

    Raises
    ------
    TypeError, ValueError
        For an invalid parameter; the message names it and the value given.
    """

    def __init__(self, *, a_bits: int, b_bits: int, style: str = "infer",
                 site: str | None = None):
        check_bits("a_bits", a_bits, 2)
        check_bits("b_bits", b_bits, 2)
        if style not in DSP_LATENCY:
            raise ValueError(f"style must be one of {', '.join(DSP_LATENCY)}, not {style!r}")
        if style == "ecp5_registered" and max(a_bits, b_bits) > _ECP5_WIDTH:
            raise ValueError(f"style 'ecp5_registered' needs operands of at most {_ECP5_WIDTH} "
                             f"bits, not a_bits={a_bits}, b_bits={b_bits}")
        check_site("site", site)
        self.a_bits = a_bits
        self.b_bits = b_bits
        self.style = style
        self.site = site
        super().__init__({
            "en": In(1),
            "a": In(signed(a_bits)),
            "b": In(signed(b_bits)),
            "p": Out(signed(a_bits + b_bits)),
        })

    @property
    def latency(self) -> int:
        """Enabled cycles from operands to product."""
        return DSP_LATENCY[self.style]

    def elaborate(self, platform):
        m = Module()
        if self.style == "infer":
            m.d.comb += self.p.eq(self.a * self.b)
        elif is_ecp5(platform):
            self._elaborate_mult18x18d(m)
        else:
            self._elaborate_registered_model(m)
        return m

    def _elaborate_registered_model(self, m):
        a_reg = Signal(signed(self.a_bits), reset_less=True)
        b_reg = Signal(signed(self.b_bits), reset_less=True)
        pipe = Signal(signed(self.a_bits + self.b_bits), reset_less=True)
        out = Signal(signed(self.a_bits + self.b_bits), reset_less=True)
        fabric = Signal(signed(self.a_bits + self.b_bits), reset_less=True)
        with m.If(self.en):
            m.d.sync += [a_reg.eq(self.a), b_reg.eq(self.b), pipe.eq(a_reg * b_reg),
                         out.eq(pipe), fabric.eq(out)]
        m.d.comb += self.p.eq(fabric)

    def _elaborate_mult18x18d(self, m):
        a18 = Signal(signed(_ECP5_WIDTH))
        b18 = Signal(signed(_ECP5_WIDTH))
        p36 = Signal(2 * _ECP5_WIDTH)
        fabric = Signal(signed(self.a_bits + self.b_bits), reset_less=True)
        with m.If(self.en):
            m.d.sync += fabric.eq(p36[:self.a_bits + self.b_bits])
        m.d.comb += [a18.eq(self.a), b18.eq(self.b), self.p.eq(fabric)]
        one = Const(1, 1)
        registers = {f"p_REG_{reg}_{what}": value
                     for reg in ("INPUTA", "INPUTB", "PIPELINE", "OUTPUT")
                     for what, value in (("CLK", "CLK0"), ("CE", "CE0"), ("RST", "RST0"))}
        # Only A, B, P, CLK0 and CE0 are connected. The cascade inputs (SRIA, SRIB) have no
        # route from the fabric, and tying them, C, SOURCEA/B or the unused clock/control
        # banks 1-3 to the constant net made nextpnr fail to route 8x8 arrays ("failed to find
        # a route for ... $PACKER_GND_NET"); left open they default to 0.
        ports = {}
        for i in range(_ECP5_WIDTH):
            ports[f"i_A{i}"] = a18[i]
            ports[f"i_B{i}"] = b18[i]
        for i in range(2 * _ECP5_WIDTH):
            ports[f"o_P{i}"] = p36[i]
        attrs = {"a_BEL": self.site} if self.site is not None else {}
        m.submodules.mult18x18d = Instance(
            "MULT18X18D", **attrs,
            p_REG_INPUTC_CLK="NONE", p_GSR="DISABLED", p_RESETMODE="SYNC",
            p_CAS_MATCH_REG="FALSE", p_MULT_BYPASS="DISABLED", p_SOURCEB_MODE="B_SHIFT",
            p_HIGHSPEED_CLK="NONE",
            i_SIGNEDA=one, i_SIGNEDB=one, i_CLK0=ClockSignal(), i_CE0=self.en,
            **registers, **ports)
