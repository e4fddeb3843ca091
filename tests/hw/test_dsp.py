"""Multipliers: exact products, the documented latency under a toggling enable, and the ECP5
primitive on an ECP5 platform."""

import json
import subprocess

import numpy as np
import pytest
from amaranth import Elaboratable, Module, Signal, signed
from amaranth.back import rtlil, verilog
from amaranth.sim import Simulator

from boards.toolchain import ToolchainError, use_yowasp
from golden.quant import qmax, qmin
from hw.dsp import DSP_LATENCY, Multiplier, ice40_mac16, mac16_blocks, times_constant
from sim.amaranth_sim import run_simulation
from sim.scoreboard import assert_equal

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


class _Clocked(Elaboratable):
    """The multiplier plus a clocked domain (the combinational style has none of its own)."""

    def __init__(self, dut):
        self.dut = dut

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.dut
        tick = Signal()
        m.d.sync += tick.eq(~tick)
        return m


@pytest.mark.parametrize("a_bits,b_bits", [(16, 16), (18, 18), (5, 9)])
@pytest.mark.parametrize("style", list(DSP_LATENCY))
def test_products_and_latency(style, a_bits, b_bits):
    dut = Multiplier(a_bits=a_bits, b_bits=b_bits, style=style)
    rng = np.random.default_rng(a_bits + b_bits)
    n = 400
    a = rng.integers(qmin(a_bits), qmax(a_bits) + 1, n)
    b = rng.integers(qmin(b_bits), qmax(b_bits) + 1, n)
    a[:4], b[:4] = [qmin(a_bits), qmin(a_bits), qmax(a_bits), qmax(a_bits)], \
        [qmin(b_bits), qmax(b_bits), qmin(b_bits), qmax(b_bits)]
    en = rng.random(n) < 0.7
    en[:8] = True
    got = []

    def benches():
        async def drive(ctx):
            for i in range(n):
                ctx.set(dut.a, int(a[i]))
                ctx.set(dut.b, int(b[i]))
                ctx.set(dut.en, int(en[i]))
                got.append(ctx.get(dut.p))
                await ctx.tick()
        return [drive]

    run_simulation(_Clocked(dut), benches, f"mult_{style}_{a_bits}x{b_bits}",
                   deadline_cycles=n + 10)
    # Model: the operands presented in enabled cycles come out `latency` enabled cycles later.
    lat = dut.latency
    if lat == 0:
        assert_equal("products", a * b, got)
        return
    enabled = np.flatnonzero(en)
    # At cycle t the output is the product of the operands of the lat-th enabled cycle
    # before t (counting enabled cycles strictly before t).
    expected, observed = [], []
    for t in range(n):
        before = enabled[enabled < t]
        if len(before) >= lat:
            src = before[-lat]
            expected.append(a[src] * b[src])
            observed.append(got[t])
    assert len(expected) > n // 2
    assert_equal("registered products", expected, observed)


def test_ecp5_platform_instantiates_mult18x18d():
    class Ecp5Stub:  # what the Multiplier looks at on an Amaranth LatticePlatform
        family = "ecp5"

    dut = Multiplier(a_bits=16, b_bits=16, style="ecp5_registered")
    text = verilog.convert(dut, platform=Ecp5Stub(), ports=[dut.en, dut.a, dut.b, dut.p])
    assert "MULT18X18D" in text
    for reg in ("INPUTA", "INPUTB", "PIPELINE", "OUTPUT"):
        assert f'.REG_{reg}_CLK("CLK0")' in text
    # pins the fabric cannot reach (cascade inputs) or that need the constant net stay open:
    # tying them made nextpnr fail to route 8x8 arrays
    for pin in (".SRIA0(", ".SRIB0(", ".C0(", ".CLK1(", ".CE1(", ".RST0(", ".SOURCEA("):
        assert pin not in text
    assert "BEL" not in text                      # placed by nextpnr unless a site is given
    placed = Multiplier(a_bits=16, b_bits=16, style="ecp5_registered", site="X4/Y10/MULT18_0")
    text = verilog.convert(placed, platform=Ecp5Stub(),
                           ports=[placed.en, placed.a, placed.b, placed.p])
    assert '(* BEL = "X4/Y10/MULT18_0" *)' in text
    sim_text = verilog.convert(Multiplier(a_bits=16, b_bits=16, style="ecp5_registered"),
                               ports=[])
    assert "MULT18X18D" not in sim_text


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(a_bits=1), ValueError, "a_bits must be at least 2, not 1"),
    (dict(b_bits=None), TypeError, "b_bits must be an int, not None"),
    (dict(style="dsp48"), ValueError, "style must be one of infer, ecp5_registered, not 'dsp48'"),
    (dict(a_bits=19, style="ecp5_registered"), ValueError,
     "needs operands of at most 18 bits, not a_bits=19, b_bits=16"),
    (dict(site=3), TypeError, "site must be a non-empty str or None, not 3"),
])
def test_invalid_parameters(kwargs, error, message):
    with pytest.raises(error, match=message):
        Multiplier(**(dict(a_bits=16, b_bits=16) | kwargs))


@pytest.mark.parametrize("constant", [0, 1, 2, 3, 18, 27, 48, 255])
def test_times_constant_is_a_product_without_a_multiplier(constant):
    x = Signal(10)
    product = times_constant(x, constant)
    values = [0, 1, 5, 777, 1023]
    got = []

    async def bench(ctx):
        for v in values:
            ctx.set(x, v)
            got.append(ctx.get(product))

    sim = Simulator(Module())
    sim.add_testbench(bench)
    sim.run()
    assert got == [v * constant for v in values]
    m = Module()
    out = Signal(len(product) if constant else 1)
    m.d.comb += out.eq(product)
    assert "$mul" not in rtlil.convert(m, ports=[x, out])   # nothing for Yosys to map to a DSP
    with pytest.raises(ValueError, match="constant must be a non-negative int, not -2"):
        times_constant(x, -2)


class _Product(Elaboratable):
    def __init__(self, a_bits, b_bits):
        self.a = Signal(signed(a_bits))
        self.b = Signal(b_bits)
        self.p = Signal(signed(a_bits + b_bits))

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.p.eq(self.a * self.b)
        return m


@pytest.mark.parametrize("a_bits, b_bits", [(16, 16), (17, 16), (37, 16), (40, 12), (33, 20),
                                            (20, 3), (34, 18), (5, 5)])
def test_mac16_blocks_is_what_yosys_builds(a_bits, b_bits, tmp_path):
    """The count the core plans the iCE40's SB_MAC16 budget with is Yosys's own."""
    try:
        tools = use_yowasp("ice40", bitstream=False, log=None)
    except ToolchainError as exc:
        pytest.skip(str(exc))
    top = _Product(a_bits, b_bits)
    (tmp_path / "p.il").write_text(rtlil.convert(top, ports=[top.a, top.b, top.p]))
    subprocess.run([tools["yosys"], "-q", "-p", "read_rtlil p.il; synth_ice40 -dsp -top top; "
                    "tee -q -o stat.json stat -json"], cwd=tmp_path, check=True)
    cells = json.loads((tmp_path / "stat.json").read_text())["modules"]["\\top"]
    used = cells["num_cells_by_type"].get("SB_MAC16", 0)
    assert used == mac16_blocks(a_bits, b_bits), f"Yosys used {used} SB_MAC16"


def test_ice40_mac16_counts_the_device_blocks():
    class Platform:
        def __init__(self, device):
            self.device = device
    assert ice40_mac16(Platform("iCE40UP5K")) == 8
    assert ice40_mac16(Platform("iCE40HX8K")) == 0
    assert ice40_mac16(Platform("LFE5U-85F")) == 0
    assert ice40_mac16(None) == 0
