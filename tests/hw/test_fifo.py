# amaranth: UnusedElaboratable=no
"""hw/fifo.py and hw/target.py: the block-RAM FIFO asks Yosys for block RAM on iCE40 only;
the register buffer and the credit queue pass every beat once and in order, at a beat a cycle."""

import random

import numpy as np
import pytest
from amaranth import Module, Signal
from amaranth_boards.icebreaker import ICEBreakerPlatform
from amaranth_boards.ulx3s import ULX3S_85F_Platform

from hw.fifo import BlockRAMFIFO, credit_queue, register_buffer
from hw.target import is_ice40
from sim.amaranth_sim import run_simulation
from sim.scoreboard import assert_equal


def _storage_attrs(platform):
    m = BlockRAMFIFO(width=12, depth=4).elaborate(platform)
    return m.submodules.storage.attrs


def test_block_ram_on_ice40_only():
    assert _storage_attrs(ICEBreakerPlatform()) == {"ram_style": "block"}
    assert _storage_attrs(ULX3S_85F_Platform()) == {}
    assert _storage_attrs(None) == {}


def test_is_ice40():
    assert is_ice40(ICEBreakerPlatform())
    assert not is_ice40(ULX3S_85F_Platform())
    assert not is_ice40(None)


@pytest.mark.parametrize("valid_rate, take_rate, seed", [
    (1.0, 1.0, 0), (0.7, 0.5, 1), (1.0, 0.2, 2), (0.3, 0.9, 3),
])
def test_register_buffer(valid_rate, take_rate, seed):
    """:func:`hw.fifo.register_buffer`: every beat the producer hands over (while ``ready``)
    reaches the consumer once and in order; with both sides always willing, a beat a cycle."""
    m = Module()
    valid, take, data = Signal(), Signal(), Signal(16)
    out_valid, out_data, ready = register_buffer(m, "buf", valid, data, take)
    got_valid, got, got_ready = Signal(), Signal(16), Signal()
    m.d.comb += [got_valid.eq(out_valid), got.eq(out_data), got_ready.eq(ready)]
    rng = random.Random(seed)
    beats, taken = 200, []

    def benches():
        async def bench(ctx):
            sent, cycle = 0, 0
            while len(taken) < beats:
                offer = sent < beats and rng.random() < valid_rate
                ctx.set(valid, offer)
                ctx.set(data, sent)
                ctx.set(take, rng.random() < take_rate)
                _, _, was_ready, took, out, value = await ctx.tick().sample(
                    got_ready, take, got_valid, got)
                if offer and was_ready:
                    sent += 1
                if out and took:
                    taken.append((cycle, value))
                cycle += 1
        return [bench]

    run_simulation(m, benches, f"register_buffer_{seed}", deadline_cycles=20_000)
    assert_equal("beats taken", np.arange(beats), np.array([beat for _, beat in taken]))
    if valid_rate == take_rate == 1.0:
        cycles = [cycle for cycle, _ in taken]
        assert cycles == list(range(cycles[0], cycles[0] + beats)), "a bubble"


def test_credit_queue_rejects_bad_credits():
    with pytest.raises(ValueError, match="credit queue 'q': credits must be a positive int, "
                                         "not 0"):
        credit_queue(Module(), "q", Signal(), Signal(4), Signal(), Signal(), 0)


@pytest.mark.parametrize("stages, credits, take_rate, seed", [
    (3, 5, 1.0, 0), (3, 5, 0.6, 1), (3, 5, 0.1, 2), (1, 3, 0.7, 3), (3, 8, 0.5, 4),
])
def test_credit_queue(stages, credits, take_rate, seed):
    """:func:`hw.fifo.credit_queue` behind a pipeline that never stops and issues against the
    queue's credits, as the feeder does: every beat reaches the consumer once and in order
    while the consumer takes at random, and a consumer that takes every cycle (after a stall
    of its own that fills the queue) gets a beat every cycle from the first one on."""
    m = Module()
    want, take, issue = Signal(), Signal(), Signal()
    count = Signal(16)
    pipe = [(Signal(name=f"valid_{i}"), Signal(16, name=f"data_{i}")) for i in range(stages)]
    out_valid, out_payload, room = credit_queue(m, "q", *pipe[-1], take, issue, credits)
    got_valid, got = Signal(), Signal(16)
    m.d.comb += [issue.eq(want & room), got_valid.eq(out_valid), got.eq(out_payload)]
    with m.If(issue):
        m.d.sync += count.eq(count + 1)
    m.d.sync += [pipe[0][0].eq(issue), pipe[0][1].eq(count ^ (count << 8))]   # all 16 bits
    for (valid, data), (next_valid, next_data) in zip(pipe, pipe[1:]):
        m.d.sync += [next_valid.eq(valid), next_data.eq(data)]

    rng = random.Random(seed)
    beats = 300
    taken = []          # (cycle, beat)

    def benches():
        async def bench(ctx):
            cycle = 0
            while len(taken) < beats:
                if take_rate == 1.0:
                    ctx.set(want, 1)
                    ctx.set(take, not 5 <= cycle < 40)
                else:
                    ctx.set(want, rng.random() < 0.8)
                    ctx.set(take, rng.random() < take_rate)
                _, _, valid, value, took = await ctx.tick().sample(got_valid, got, take)
                if valid and took:
                    taken.append((cycle, value))
                cycle += 1
        return [bench]

    run_simulation(m, benches, f"credit_queue_{seed}", deadline_cycles=20_000)
    sent = np.arange(beats)
    assert_equal("beats taken", (sent ^ (sent << 8)) & 0xffff,
                 np.array([beat for _, beat in taken]))
    if take_rate == 1.0:
        resumed = [cycle for cycle, _ in taken if cycle >= 40]
        assert resumed == list(range(40, 40 + len(resumed))), "the consumer waited"

