"""Run the attention core in the Amaranth simulator on a quantized layer.

:func:`simulate_core` feeds the core's streams from :func:`hw.core_io.core_streams` (with
optional random stalls on every input and on the output), collects the output and the
performance counters, and returns them with the cycle count. Used by the tests, the benchmarks
and ``attn run --backend amaranth``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Value

from hw.core import COUNTERS, AttentionCore
from hw.core_io import collect_output, core_streams

from .amaranth_sim import run_simulation
from .streams import Pattern, get_all, pack, put_all, unpack

__all__ = ["CoreRun", "simulate_core", "pack_streams"]


@dataclass
class CoreRun:
    """Result of one simulated run: ``y`` (``L x D`` integers), ``cycles`` from the accepted
    start beat to the last output beat, the performance counters by name, and (when asked
    for) ``probs``, the ``H x L x L`` probabilities as the core's softmax units produced
    them."""

    y: np.ndarray
    cycles: int
    counters: dict
    probs: np.ndarray | None = None


def _assemble_probs(cfg, core, shape, beats_per_unit, causal, valid_len) -> np.ndarray:
    """Place the probability beats of each softmax unit (the order is documented in
    :mod:`hw.core`: blocks ``(row block, head)``, each unit's rows of the block, each row as
    long as the block's key bound (:meth:`CoreShape.key_bound`; the keys past it are masked,
    probability 0); rows past ``L`` are computed too and dropped here)."""
    seq_len, heads = shape.seq_len, shape.heads
    units = core.softmax_units
    rows_per_unit = cfg.rows // units
    probs = np.full((heads, seq_len, seq_len), -1, dtype=np.int64)
    for u, beats in enumerate(beats_per_unit):
        pos = 0
        for row_block in range(shape.row_blocks):
            keys = shape.key_bound(row_block, causal, valid_len)
            for head in range(heads):
                for i in range(rows_per_unit):
                    row = beats[pos:pos + keys]
                    if len(row) < keys:
                        raise AssertionError(
                            f"softmax unit {u} produced {len(beats)} probabilities, fewer than "
                            f"the rows of {shape.row_blocks} row blocks and {heads} heads")
                    pos += keys
                    query = row_block * cfg.rows + u * rows_per_unit + i
                    if query < seq_len:
                        probs[head, query] = 0
                        probs[head, query, :keys] = row
        if pos != len(beats):
            raise AssertionError(f"softmax unit {u} produced {len(beats)} probabilities, "
                                 f"not {pos}")
    if (probs < 0).any():
        raise AssertionError("the softmax units did not produce every probability row")
    return probs


def pack_streams(core: AttentionCore, streams: dict) -> dict:
    """Pre-pack the beats of :func:`hw.core_io.core_streams` into integers."""
    layouts = {name: getattr(core, f"{name}_stream").payload.shape() for name in "pxw"}
    return {
        "start": pack(core.start.payload.shape(), streams["args"]),
        **{name: [pack(layouts[name], beat) for beat in streams[name]] for name in "pxw"},
    }


def simulate_core(cfg, model, x_int, *, causal=False, valid_len=None, stall: float = 0.0,
                  out_stall: float | None = None, seed: int = 0,
                  core: AttentionCore | None = None, runs: int = 1,
                  name: str = "core", deadline_cycles: int | None = None,
                  progress=None, record_probs: bool = False,
                  stuck_cycles: int = 20_000) -> CoreRun:
    """Simulate ``runs`` back-to-back runs of the core (the result is the last one's).

    ``stall`` is the probability of an idle cycle on each input stream and of backpressure on
    the output (0 = none); ``out_stall``, if given, is the output's instead.
    ``progress(cycles_done, ideal_cycles)`` is called every 5,000 simulated cycles.
    ``record_probs`` watches the softmax units' outputs of the last run and returns them as
    ``probs``.

    A run fails (``AssertionError``) once the core has been busy for ``stuck_cycles`` without
    an array or softmax beat (a deadlock), or after ``deadline_cycles`` in all (by default 20
    times the ideal cycles, more with stalls).
    """
    core = core or AttentionCore(cfg)
    streams = core_streams(cfg, model, x_int, causal=causal, valid_len=valid_len)
    shape = streams["shape"]
    packed = pack_streams(core, streams)
    out_count = shape.wpd * shape.seq_len
    out_layout = core.o_stream.payload.shape()
    outputs, cycles, counters = [], [], []

    def benches():
        async def driver(ctx):
            for _ in range(runs):
                ctx.set(Value.cast(core.start.payload), packed["start"])
                ctx.set(core.start.valid, 1)
                await ctx.tick().until(core.start.ready)
                ctx.set(core.start.valid, 0)
                start = 0
                async for _ in ctx.tick():
                    start += 1
                    if not ctx.get(core.busy):
                        break
                cycles.append(start)
                counters.append([int(ctx.get(core.counters[i])) for i in range(len(COUNTERS))])

        def feeder(stream_name, index):
            async def feed(ctx):
                for run in range(runs):
                    await put_all(ctx, getattr(core, f"{stream_name}_stream"),
                                  packed[stream_name],
                                  Pattern(stall, seed * 7 + index * 101 + run))
            return feed

        async def sink(ctx):
            for run in range(runs):
                beats = await get_all(ctx, core.o_stream, out_count,
                                      Pattern(stall if out_stall is None else out_stall,
                                              seed * 7 + 5 + run))
                outputs.append(beats)

        return [driver, feeder("p", 1), feeder("x", 2), feeder("w", 3), sink]

    ideal = runs * shape.macs() // cfg.pes

    async def reporter(ctx):        # a process, not a testbench: it never holds the run open
        done = 0
        while True:
            await ctx.delay(5000 * 1e-8)
            done += 5000
            progress(done, ideal)

    prob_beats = [[] for _ in range(core.softmax_units)]

    async def recorder(ctx):        # the last run's softmax outputs, sampled at each edge
        units = core.softmax_modules
        signals = [sig for unit in units for sig in (unit.o_stream.valid,
                                                     unit.o_stream.payload.prob)]
        async for _, _, *values in ctx.tick().sample(*signals):
            if len(cycles) == runs - 1:
                for u in range(len(units)):
                    if values[2 * u]:
                        prob_beats[u].append(int(values[2 * u + 1]))

    async def watchdog(ctx):        # a process: fails a run that stopped moving
        step, still, last = 1000, 0, None
        while True:
            await ctx.delay((step - 1) * 1e-8)
            _, _, busy, *values = await ctx.tick().sample(core.busy, *core.counters)
            now = [values[COUNTERS.index(c)] for c in ("array_beats", "softmax_beats")]
            still = still + step if busy and now == last else 0
            last = now
            if still >= stuck_cycles:
                raise AssertionError(f"{name}: the core is busy but made no array or softmax "
                                     f"beat for {still} cycles (deadlock); counters "
                                     f"{dict(zip(COUNTERS, values))}")

    processes = ([reporter] if progress is not None else []) + ([recorder] if record_probs
                                                                 else []) + [watchdog]
    macs = shape.macs()
    deadline = deadline_cycles or runs * (20 * macs // cfg.pes + 20_000) * (
        1 + int(20 * max(stall, out_stall or 0)))
    run_simulation(core, benches, name, deadline_cycles=deadline, processes=processes)
    lanes = [[unpack(out_layout, beat)["y"] for beat in beats] for beats in outputs]
    last_flags = [unpack(out_layout, beat)["last"] for beat in outputs[-1]]
    if last_flags[-1] != 1 or any(last_flags[:-1]):
        raise AssertionError(f"{name}: 'last' must mark only the final output beat, "
                             f"got {last_flags}")
    y = collect_output(cfg, lanes[-1], shape.seq_len, shape.d_model)
    probs = (_assemble_probs(cfg, core, shape, prob_beats, causal, valid_len) if record_probs
             else None)
    return CoreRun(y=y, cycles=cycles[-1], counters=dict(zip(COUNTERS, counters[-1])),
                   probs=probs)

