"""The processing element: dot products per tile, pass-through of operands and flags, and the
global enable, against a cycle model; both multiplier styles."""

import numpy as np
import pytest

import attn
from golden.quant import qmax, qmin
from hw.dsp import DSP_LATENCY
from hw.pe import ProcessingElement
from sim.amaranth_sim import run_simulation
from sim.scoreboard import assert_equal

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


def stimulus(cfg, lm, cycles, enable_prob, seed):
    """Per cycle: (en, a, b, valid, first, last) for a stream of tiles whose flags are delayed
    by ``lm`` enabled cycles relative to the operands (as the array's row skew does)."""
    rng = np.random.default_rng(seed)
    ops = []
    while len(ops) < cycles:
        k = int(rng.integers(1, 6))
        for i in range(k):
            extreme = rng.integers(0, 4) == 0
            a = qmin(cfg.a_bits) if extreme else int(rng.integers(qmin(cfg.a_bits),
                                                                  qmax(cfg.a_bits) + 1))
            b = qmin(cfg.b_bits) if extreme else int(rng.integers(qmin(cfg.b_bits),
                                                                  qmax(cfg.b_bits) + 1))
            ops.append((a, b, 1, int(i == 0), int(i == k - 1)))
            if rng.random() < 0.2:  # an invalid step (bubble) inside or between tiles
                ops.append((int(rng.integers(-5, 5)), int(rng.integers(-5, 5)), 0, 0, 0))
    flags = [(0, 0, 0)] * lm + [op[2:] for op in ops]
    steps = [op[:2] + flags[i] for i, op in enumerate(ops)]
    out, n = [], 0
    while n < len(steps):
        en = int(rng.random() < enable_prob)
        out.append((en,) + steps[n])
        n += en
    return out


def model(cfg, lm, stim):
    """Expected (a_out, b_out, ctl_out, done, acc-or-None) per cycle, after the cycle's inputs
    were applied at the previous clock edge."""
    a_reg = b_reg = 0
    ctl = (0, 0, 0)
    acc, done = 0, 0
    pipe = [0] * lm          # products in flight in the registered multiplier (oldest last)
    expected = []
    for en, a, b, valid, first, last in stim:
        expected.append((a_reg, b_reg, ctl, done, acc if done else None))
        p = a_reg * b_reg if lm == 0 else pipe[-1]
        if en:
            if ctl[0]:
                acc = p if ctl[1] else acc + p
            done = ctl[0] & ctl[2]
            if lm:
                pipe = [a_reg * b_reg] + pipe[:-1]
            a_reg, b_reg, ctl = a, b, (valid, first, last)
    return expected


@pytest.mark.parametrize("split_acc", [True, False])
@pytest.mark.parametrize("enable_prob", [1.0, 0.6])
@pytest.mark.parametrize("dsp", list(DSP_LATENCY))
def test_pe_against_cycle_model(dsp, enable_prob, split_acc):
    cfg = attn.preset("tiny").replace(dsp=dsp)
    dut = ProcessingElement(a_bits=cfg.a_bits, b_bits=cfg.b_bits, acc_bits=cfg.acc_bits,
                            dsp=dsp, split_acc=split_acc)
    lm = dut.latency
    stim = stimulus(cfg, lm, 600, enable_prob, seed=lm * 10 + int(enable_prob * 10))
    expected = model(cfg, lm, stim)
    observed = []
    every_acc = []  # acc in every cycle

    def benches():
        async def drive(ctx):
            for en, a, b, valid, first, last in stim:
                ctx.set(dut.en, en)
                ctx.set(dut.a_in, a)
                ctx.set(dut.b_in, b)
                ctx.set(dut.ctl_in, {"valid": valid, "first": first, "last": last})
                ctl = ctx.get(dut.ctl_out)
                observed.append((ctx.get(dut.a_out), ctx.get(dut.b_out),
                                 (ctl.valid, ctl.first, ctl.last), ctx.get(dut.done),
                                 ctx.get(dut.acc) if ctx.get(dut.done) else None))
                every_acc.append(ctx.get(dut.acc))
                await ctx.tick()
        return [drive]

    run_simulation(dut, benches, f"pe_{dsp}_{enable_prob}_{split_acc}",
                   deadline_cycles=len(stim) + 10)
    dones = [i for i, e in enumerate(expected) if e[3]]
    assert len(dones) > 50
    for name, index in (("a_out", 0), ("b_out", 1), ("done", 3)):
        assert_equal(f"pe {name}", [e[index] for e in expected], [o[index] for o in observed])
    assert_equal("pe ctl_out", [e[2] for e in expected], [o[2] for o in observed])
    assert_equal("pe acc at done", [expected[i][4] for i in dones],
                 [observed[i][4] for i in dones])
    # The array ORs the results of a column: acc must be 0 whenever done is low.
    idle = [acc for acc, o in zip(every_acc, observed) if not o[3]]
    assert len(idle) > 50 and not any(idle), "acc must be 0 while done is low"


def test_pe_dot_products_are_golden():
    """Independently of the cycle model: each finished acc is the tile's dot product."""
    cfg = attn.preset("tiny")
    stim = stimulus(cfg, 0, 400, 0.7, seed=5)
    expected = model(cfg, 0, stim)
    # Reconstruct dot products from the stimulus alone.
    dots, acc = [], 0
    for en, a, b, valid, first, last in stim:
        if en and valid:
            acc = a * b if first else acc + a * b
            if last:
                dots.append(acc)
    # done stays high while the enable is low; each result counts in its enabled cycle.
    finished = [e[4] for e, s in zip(expected, stim) if e[3] and s[0]]
    assert len(finished) > 30
    assert finished == dots[:len(finished)]


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(a_bits=0), ValueError, "a_bits must be at least 2, not 0"),
    (dict(b_bits="8"), TypeError, "b_bits must be an int, not '8'"),
    (dict(acc_bits=15), ValueError, "acc_bits must be at least 16, not 15"),
    (dict(dsp="gowin"), ValueError, "dsp must be one of infer, ecp5_registered, not 'gowin'"),
    (dict(split_acc=1), TypeError, "split_acc must be a bool, not 1"),
    (dict(dsp_site=""), TypeError, "dsp_site must be a non-empty str or None, not ''"),
])
def test_pe_invalid_parameters(kwargs, error, message):
    with pytest.raises(error, match=message):
        ProcessingElement(**(dict(a_bits=8, b_bits=8, acc_bits=20) | kwargs))
