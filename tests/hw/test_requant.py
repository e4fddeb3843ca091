"""The requantization unit equals ``golden.quant.requantize(acc + bias, M, S, bits)`` value for
value, for both roundings and multipliers, under random stalls on all three streams."""

import numpy as np
import pytest
from amaranth.back import verilog

import attn
from golden.quant import qmax, qmin, requantize
from hw.requant import MULTIPLIERS, Requantizer
from sim.amaranth_sim import run_simulation
from sim.scoreboard import assert_equal
from sim.streams import Pattern, get_all, pack, put_all, unpack

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

STALLS = [(0.0, 0.0), (0.5, 0.5), (0.9, 0.3), (0.3, 0.9)]


def random_tiles(dut, count, seed):
    """Tiles of 1-4 rows: (acc rows (n x lanes), mult, shift, bias (lanes each))."""
    rng = np.random.default_rng(seed)
    lanes = dut.lanes
    in_lo, in_hi = qmin(dut.in_bits), qmax(dut.in_bits)
    tiles = []
    for n in range(count):
        rows = int(rng.integers(1, 5))
        kind = n % 5
        if kind == 0:    # extremes of every field
            acc = rng.choice([in_lo, in_hi, 0, -1, 1], (rows, lanes))
            mult = rng.choice([0, 1, (1 << dut.mult_bits) - 1], lanes)
            bias = rng.choice([qmin(dut.bias_bits), qmax(dut.bias_bits), 0], lanes)
            shift = rng.choice([0, 1, dut.product_bits, (1 << dut.shift_bits) - 1], lanes)
        else:            # typical: normalized multipliers, shifts that land near out_bits
            scale = int(rng.integers(1, dut.in_bits))
            acc = rng.integers(-(1 << scale), 1 << scale, (rows, lanes))
            mult = rng.integers(1 << (dut.mult_bits - 1), 1 << dut.mult_bits, lanes)
            bias = rng.integers(-(1 << 20), 1 << 20, lanes)
            shift = rng.integers(0, 1 << dut.shift_bits, lanes) if kind == 1 else \
                np.clip(scale + dut.mult_bits - dut.out_bits + rng.integers(-3, 4, lanes),
                        0, (1 << dut.shift_bits) - 1)
        if kind == 2:    # exact ties: acc * M a multiple of 2**(S-1)
            shift = rng.integers(1, 8, lanes)
            mult = np.ones(lanes, dtype=np.int64)
            acc = (rng.integers(-50, 50, (rows, lanes)) << (shift - 1)) - bias
            acc = np.clip(acc, in_lo, in_hi)
        tiles.append((acc.astype(np.int64), mult.astype(np.int64), shift.astype(np.int64),
                      bias.astype(np.int64)))
    return tiles


def run_requant(dut, tiles, stall_in, stall_par, stall_out, name):
    rows = [pack(dut.i_layout, {"acc": list(map(int, row)), "last": int(r == len(acc) - 1)})
            for acc, *_ in tiles for r, row in enumerate(acc)]
    params = [pack(dut.p_layout, {"mult": list(map(int, mult)), "shift": list(map(int, shift)),
                                  "bias": list(map(int, bias))})
              for _, mult, shift, bias in tiles]
    expected = np.concatenate([
        requantize(acc + bias, mult, shift, dut.out_bits, dut.rounding).reshape(-1)
        for acc, mult, shift, bias in tiles])
    expected_last = np.concatenate([np.arange(acc.size) == acc.size - 1
                                    for acc, *_ in tiles]).astype(np.int64)
    got = []

    def benches():
        async def rows_in(ctx):
            await put_all(ctx, dut.i_stream, rows, Pattern(stall_in, 1))

        async def params_in(ctx):
            await put_all(ctx, dut.p_stream, params, Pattern(stall_par, 2))

        async def values_out(ctx):
            got.extend(await get_all(ctx, dut.o_stream, len(expected), Pattern(stall_out, 3)))
        return [rows_in, params_in, values_out]

    worst = 1 - max(stall_in, stall_par, stall_out)
    run_simulation(dut, benches, name, deadline_cycles=int(4 * (len(expected) + 50) / worst))
    fields = [unpack(dut.o_layout, word) for word in got]
    assert_equal(f"{name} values", expected, [f["value"] for f in fields])
    assert_equal(f"{name} last", expected_last, [f["last"] for f in fields])


@pytest.mark.parametrize("stalls", STALLS)
@pytest.mark.parametrize("rounding", ["half_up", "half_even"])
@pytest.mark.parametrize("multiplier", MULTIPLIERS)
def test_requant_is_golden(multiplier, rounding, stalls):
    cfg = attn.preset("tiny").replace(cols=3, rounding=rounding)
    dut = Requantizer.from_config(cfg, out_bits=cfg.qkv_bits, multiplier=multiplier)
    tiles = random_tiles(dut, 120, seed=len(rounding) + int(10 * stalls[0]))
    stall_in, stall_out = stalls
    run_requant(dut, tiles, stall_in, stall_in / 2, stall_out,
                f"requant_{multiplier}_{rounding}_{stall_in}_{stall_out}")


@pytest.mark.parametrize("lanes,out_bits", [(1, 8), (5, 18), (2, 2)])
def test_requant_shapes(lanes, out_bits):
    """Other lane counts and output widths (scores use score_bits, heads head_bits, ...)."""
    cfg = attn.preset("icebreaker").replace(cols=lanes, rounding="half_even")
    dut = Requantizer.from_config(cfg, out_bits=out_bits, multiplier="shift_add")
    run_requant(dut, random_tiles(dut, 80, seed=lanes), 0.3, 0.3, 0.3,
                f"requant_shape_{lanes}_{out_bits}")


def test_from_config_reads_widths():
    cfg = attn.preset("ulx3s")
    dut = Requantizer.from_config(cfg, out_bits=cfg.y_bits)
    assert (dut.lanes, dut.in_bits, dut.bias_bits, dut.mult_bits, dut.shift_bits,
            dut.rounding) == (cfg.cols, cfg.acc_bits, cfg.bias_bits, cfg.mult_bits,
                              cfg.shift_bits, cfg.rounding)


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(lanes=0), ValueError, "lanes must be at least 1, not 0"),
    (dict(in_bits=True), TypeError, "in_bits must be an int, not True"),
    (dict(shift_bits=9), ValueError, "shift_bits must be at least 1 and at most 8, not 9"),
    (dict(out_bits=1), ValueError, "out_bits must be at least 2, not 1"),
    (dict(rounding="floor"), ValueError,
     "rounding must be one of half_up, half_even, not 'floor'"),
    (dict(multiplier="booth"), ValueError,
     "multiplier must be one of infer, slices, ecp5_registered, shift_add, not 'booth'"),
])
def test_invalid_parameters(kwargs, error, message):
    params = dict(lanes=2, in_bits=30, bias_bits=20, mult_bits=16, shift_bits=6, out_bits=8)
    with pytest.raises(error, match=message):
        Requantizer(**(params | kwargs))


@pytest.mark.slow
@pytest.mark.parametrize("rounding", ["half_up", "half_even"])
@pytest.mark.parametrize("multiplier", MULTIPLIERS)
def test_requant_long(multiplier, rounding):
    cfg = attn.preset("default").replace(rounding=rounding)
    dut = Requantizer.from_config(cfg, out_bits=cfg.score_bits, multiplier=multiplier)
    run_requant(dut, random_tiles(dut, 2000, seed=99), 0.4, 0.4, 0.4,
                f"requant_long_{multiplier}_{rounding}")


@pytest.mark.parametrize("multiplier", MULTIPLIERS)
def test_latency_is_the_documented_one(multiplier):
    """The first value of a burst leaves ``latency`` cycles after its row is offered to an idle
    unit, and a burst of rows leaves one value per cycle."""
    cfg = attn.preset("tiny").replace(cols=2)
    dut = Requantizer.from_config(cfg, out_bits=cfg.qkv_bits, multiplier=multiplier)
    assert dut.latency == (10 if multiplier == "ecp5_registered" else 5)
    first, rows = 3, 3
    out_cycles = []

    def benches():
        async def drive(ctx):
            ctx.set(dut.p_stream.payload, {"mult": [3, 5], "shift": [1, 0], "bias": [0, 1]})
            ctx.set(dut.p_stream.valid, 1)
            ctx.set(dut.o_stream.ready, 1)
            taken = 0
            for t in range(40):
                ctx.set(dut.i_stream.valid, t >= first and taken < rows)
                ctx.set(dut.i_stream.payload, {"acc": [t, -t], "last": 1})
                if ctx.get(dut.o_stream.valid):
                    out_cycles.append(t)
                taken += ctx.get(dut.i_stream.valid) and ctx.get(dut.i_stream.ready)
                await ctx.tick()
        return [drive]

    run_simulation(dut, benches, f"requant_latency_{multiplier}", deadline_cycles=60)
    start = first + dut.latency
    assert out_cycles == list(range(start, start + rows * dut.lanes)), out_cycles


@pytest.mark.parametrize("mult_bits,blocks", [(16, 3), (17, 3), (20, 6)])
def test_ecp5_registered_instantiates_registered_dsps(mult_bits, blocks):
    """On ECP5 every pair of 17-bit slices is one MULT18X18D with all its registers; without
    a platform the behavioural model stands in (no primitive)."""
    class Ecp5Stub:
        family = "ecp5"

    params = dict(lanes=2, in_bits=38, bias_bits=32, mult_bits=mult_bits, shift_bits=6,
                  out_bits=8, multiplier="ecp5_registered")
    dut = Requantizer(**params)
    text = verilog.convert(dut, platform=Ecp5Stub(), name="rq")
    assert text.count("MULT18X18D ") == blocks
    assert text.count('.REG_OUTPUT_CLK("CLK0")') == blocks
    model = Requantizer(**params)
    assert "MULT18X18D" not in verilog.convert(model, name="rq")
