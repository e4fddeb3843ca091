"""Run Amaranth-simulator testbenches, with waveforms on request or on failure.

``ATTN_WAVES=1`` writes ``build/waves/<name>.vcd`` for every run; otherwise a failing run is
repeated once with waveforms on (testbenches are seeded, so it fails the same way) and the
file is named in the failure message.
"""

from __future__ import annotations

import os

from amaranth.sim import Simulator

from .cocotb_runner import BUILD

__all__ = ["run_simulation", "run_stream_unit"]


def run_simulation(dut, testbenches, name: str, *, period: float = 1e-8,
                   deadline_cycles: int | None = None, processes=()) -> None:
    """Simulate ``dut`` with a clock and the given async ``testbenches`` until they return.

    ``deadline_cycles`` bounds the run: if the testbenches are still waiting then, the run
    fails instead of hanging. ``processes`` are added as background processes (they do not
    keep the simulation running).
    """
    def build():
        sim = Simulator(dut)
        sim.add_clock(period)
        for tb in testbenches():
            sim.add_testbench(tb)
        for process in processes:
            sim.add_process(process)
        if deadline_cycles is not None:
            async def watchdog(ctx):
                await ctx.delay(deadline_cycles * period)
                raise AssertionError(f"{name}: still running after {deadline_cycles} cycles")
            sim.add_process(watchdog)
        return sim

    def run(sim):
        sim.run()

    wave_dir = BUILD / "waves"
    vcd = wave_dir / f"{name}.vcd"
    if os.environ.get("ATTN_WAVES", "") not in ("", "0"):
        wave_dir.mkdir(parents=True, exist_ok=True)
        sim = build()
        with sim.write_vcd(str(vcd)):
            run(sim)
        return
    try:
        run(build())
    except AssertionError as exc:
        wave_dir.mkdir(parents=True, exist_ok=True)
        sim = build()
        try:
            with sim.write_vcd(str(vcd)):
                run(sim)
        except AssertionError:
            pass
        raise AssertionError(f"{exc}\nwaveforms: {vcd}") from None


def run_stream_unit(dut, payloads, count: int, name: str, *, stall_in: float = 0.0,
                    stall_out: float = 0.0, seed: int = 0, deadline_cycles: int | None = None
                    ) -> list:
    """Drive pre-packed ``payloads`` into ``dut.i_stream`` and collect ``count`` payloads from
    ``dut.o_stream``, with seeded random idle and backpressure; returns them (integers)."""
    from .streams import Pattern, get_all, put_all

    got = []

    def benches():
        async def producer(ctx):
            await put_all(ctx, dut.i_stream, payloads, Pattern(stall_in, seed + 1))

        async def consumer(ctx):
            got.extend(await get_all(ctx, dut.o_stream, count, Pattern(stall_out, seed + 2)))
        return [producer, consumer]

    run_simulation(dut, benches, name, deadline_cycles=deadline_cycles)
    return got
