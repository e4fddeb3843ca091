# amaranth: UnusedElaboratable=no
"""hw/divider.py: exact saturating quotients against Python integer division, with stalls."""

import numpy as np
import pytest

from hw.divider import Divider, divider_input_layout, divider_output_layout
from sim.amaranth_sim import run_stream_unit
from sim.scoreboard import assert_equal
from sim.streams import pack, unpack


def expected_quotient(dividend, divisor, quotient_bits):
    top = (1 << quotient_bits) - 1
    return top if divisor == 0 else min(dividend // divisor, top)


def run_divider(dut, operands, stall_in=0.0, stall_out=0.0, seed=0, name="divider"):
    """Push ``operands`` (list of (dividend, divisor, tag)) through ``dut``; returns the
    quotients and tags that came out, in order."""
    i_layout = divider_input_layout(dut.dividend_bits, dut.divisor_bits, dut.tag_bits)
    o_layout = divider_output_layout(dut.quotient_bits, dut.tag_bits)
    payloads = [pack(i_layout, {"dividend": n, "divisor": d, "tag": t}) for n, d, t in operands]
    got = run_stream_unit(dut, payloads, len(payloads), name, stall_in=stall_in,
                          stall_out=stall_out, seed=seed,
                          deadline_cycles=40 * len(payloads) + 200)
    out = [unpack(o_layout, p) for p in got]
    return [o["quotient"] for o in out], [o["tag"] for o in out]


def check(dut, operands, **kwargs):
    quotients, tags = run_divider(dut, operands, **kwargs)
    expected = [expected_quotient(n, d, dut.quotient_bits) for n, d, _ in operands]
    assert_equal("quotient", expected, quotients)
    assert_equal("tag", [t for _, _, t in operands], tags)


def test_exhaustive_small():
    """Every (dividend, divisor) pair of a 4-bit quotient, 6-bit divisor divider that does not
    overflow, plus overflow and divide-by-zero cases for every divisor. The dividend is 12 bits
    wide, wider than divisor + quotient, so overflow cannot saturate by accident."""
    dut = Divider(dividend_bits=12, divisor_bits=6, quotient_bits=4, tag_bits=3)
    ops = [(n, d, (n + d) & 7) for d in range(1, 64) for n in range(d << 4)]
    big = sorted({*range(0, 4096, 61), 4095})
    ops += [(n, d, n & 7) for d in range(0, 64) for n in big if n >= d << 4]
    check(dut, ops, name="divider_exhaustive")


@pytest.mark.parametrize("stall_in,stall_out", [(0, 0), (0.5, 0.5), (0.9, 0.2), (0.2, 0.9)])
def test_random_softmax_widths(stall_in, stall_out):
    """The widths the default softmax uses: 34-bit dividend, 22-bit divisor, 12-bit quotient."""
    dut = Divider(dividend_bits=34, divisor_bits=22, quotient_bits=12, tag_bits=1)
    rng = np.random.default_rng(7)
    ops = []
    for _ in range(300):
        d = int(rng.integers(0, 1 << 22))
        limit = d << 12
        n = int(rng.integers(0, min(limit, 1 << 34))) if limit else 0
        ops.append((n, d, int(rng.integers(0, 2))))
    # Edge cases: divisor 1, dividend 0, largest values, exact multiples, just below overflow,
    # overflow and division by zero.
    top_n, top_d = (1 << 34) - 1, (1 << 22) - 1
    ops += [(0, 1, 0), (0, top_d, 1), ((1 << 12) - 1, 1, 0), (1 << 12, 1, 1), (top_n, 1, 0),
            (top_n, top_d, 1), (top_d << 12, top_d, 0), ((top_d << 12) - 1, top_d, 1),
            (top_n, 0, 0), (0, 0, 1), (12345 * 4000, 12345, 0), (12345 * 4000 - 1, 12345, 1)]
    check(dut, ops, stall_in=stall_in, stall_out=stall_out,
          name=f"divider_random_{stall_in}_{stall_out}")


@pytest.mark.parametrize("widths", [(1, 1, 1), (8, 3, 8), (6, 8, 2), (40, 17, 24)])
def test_random_widths(widths):
    """Odd shapes: 1-bit everything, dividend narrower than the divisor, wide quotients."""
    nb, db, qb = widths
    dut = Divider(dividend_bits=nb, divisor_bits=db, quotient_bits=qb)
    rng = np.random.default_rng(nb * 100 + db)
    ops = [(int(rng.integers(0, 1 << nb)), int(rng.integers(0, 1 << db)), 0)
           for _ in range(150)]
    ops += [((1 << nb) - 1, 1, 0), (0, 0, 0), ((1 << nb) - 1, (1 << db) - 1, 0)]
    check(dut, ops, stall_in=0.3, stall_out=0.5, name=f"divider_widths_{nb}_{db}_{qb}")


def test_latency_attribute():
    assert Divider(dividend_bits=34, divisor_bits=22, quotient_bits=12).latency == 12
    assert Divider(dividend_bits=34, divisor_bits=22, quotient_bits=12,
                   bits_per_stage=2).latency == 6
    assert Divider(dividend_bits=20, divisor_bits=12, quotient_bits=7,
                   bits_per_stage=3).latency == 3


@pytest.mark.parametrize("step,widths", [(2, (12, 6, 4)), (2, (20, 12, 7)), (3, (20, 12, 7)),
                                         (4, (34, 22, 12)), (4, (5, 3, 2))])
def test_bits_per_stage_exact(step, widths):
    """Several restoring steps per stage give the same quotients, with stalls (partial first
    stages when the quotient width is not a multiple of the step)."""
    nb, db, qb = widths
    dut = Divider(dividend_bits=nb, divisor_bits=db, quotient_bits=qb, tag_bits=2,
                  bits_per_stage=step)
    rng = np.random.default_rng(step * 1000 + qb)
    ops = []
    for _ in range(200):
        d = int(rng.integers(0, 1 << db))
        limit = min(d << qb, 1 << nb) if d else 1 << nb
        ops.append((int(rng.integers(0, limit)), d, int(rng.integers(0, 4))))
    ops += [((1 << nb) - 1, 1, 0), (0, 0, 1), ((1 << nb) - 1, (1 << db) - 1, 2), (0, 1, 3)]
    check(dut, ops, stall_in=0.3, stall_out=0.3, name=f"divider_step{step}_{nb}_{db}_{qb}")


@pytest.mark.parametrize("step", [1, 2, 3])
def test_measured_latency(step):
    """The first quotient is valid ``latency`` cycles after the operands were taken."""
    from amaranth.sim import Simulator

    dut = Divider(dividend_bits=20, divisor_bits=12, quotient_bits=8, bits_per_stage=step)
    seen = []

    async def bench(ctx):
        ctx.set(dut.o_stream.ready, 1)
        ctx.set(dut.i_stream.payload.dividend, 1000)
        ctx.set(dut.i_stream.payload.divisor, 7)
        ctx.set(dut.i_stream.valid, 1)
        await ctx.tick()                     # operands taken at this edge
        ctx.set(dut.i_stream.valid, 0)
        for cycle in range(1, 20):
            if ctx.get(dut.o_stream.valid):
                seen.append((cycle, ctx.get(dut.o_stream.payload.quotient)))
                break
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [(dut.latency, 1000 // 7)], seen


_BAD_VALUES = [(0, ValueError), (65, ValueError), (-1, ValueError), (2.0, TypeError),
               (True, TypeError), ("8", TypeError)]
_BAD = [(param, value, error)
        for param in ("dividend_bits", "divisor_bits", "quotient_bits", "tag_bits")
        for value, error in _BAD_VALUES
        if not (param == "tag_bits" and value == 0)]  # a zero-width tag is valid


@pytest.mark.parametrize("value,error", [(0, ValueError), (5, ValueError), (1.0, TypeError)])
def test_invalid_bits_per_stage(value, error):
    with pytest.raises(error, match=rf"^bits_per_stage must be .*not {value!r}$"):
        Divider(dividend_bits=8, divisor_bits=4, quotient_bits=4, bits_per_stage=value)


@pytest.mark.parametrize("param,value,error", _BAD)
def test_invalid_parameters(param, value, error):
    kwargs = {"dividend_bits": 8, "divisor_bits": 4, "quotient_bits": 4, param: value}
    with pytest.raises(error, match=rf"^{param} must be .*not {value!r}$"):
        Divider(**kwargs)


def test_parameters_are_keyword_only():
    with pytest.raises(TypeError):
        Divider(8, 4, 4)  # noqa
