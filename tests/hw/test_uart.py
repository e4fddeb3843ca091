"""UART: loopback of random bytes at several divisors and baud ratios, framing errors, overrun,
glitches, divisor computation and parameter checks."""

import numpy as np
import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from hw.uart import MIN_DIVISOR, UART, UARTRx, UARTTx, uart_divisor
from sim.amaranth_sim import run_simulation
from sim.scoreboard import assert_equal
from sim.streams import Pattern, get_all, put_all, unpack
from sim.uart import uart_receive, uart_send


class Loopback(wiring.Component):
    """A transmitter at ``tx_divisor`` wired to a receiver at ``rx_divisor``."""

    def __init__(self, tx_divisor, rx_divisor):
        self.tx = UARTTx(divisor=tx_divisor)
        self.rx = UARTRx(divisor=rx_divisor)
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.tx, m.submodules.rx = self.tx, self.rx
        m.d.comb += self.rx.rx.eq(self.tx.tx)
        return m


@pytest.mark.parametrize("tx_divisor,rx_divisor", [(4, 4), (5, 5), (7, 7), (16, 16),
                                                   (32, 31), (32, 33)])
@pytest.mark.parametrize("stall", [0.0, 0.5])
def test_loopback(tx_divisor, rx_divisor, stall):
    rng = np.random.default_rng(tx_divisor * 100 + rx_divisor)
    sent = [int(b) for b in rng.integers(0, 256, 24)]
    dut = Loopback(tx_divisor, rx_divisor)
    got = []

    def benches():
        async def producer(ctx):
            await put_all(ctx, dut.tx.i_stream, sent, Pattern(stall, seed=1))

        async def consumer(ctx):
            # The receiver cannot be held back: take every byte as it comes.
            got.extend(await get_all(ctx, dut.rx.o_stream, len(sent)))
        return [producer, consumer]

    run_simulation(dut, benches, f"uart_loopback_{tx_divisor}_{rx_divisor}_{stall}",
                   deadline_cycles=len(sent) * 10 * tx_divisor * 3 + 2000)
    fields = [unpack(dut.rx.o_stream.payload.shape(), p) for p in got]
    assert_equal("received bytes", sent, [f["data"] for f in fields])
    assert_equal("framing errors", [0] * len(sent), [f["error"] for f in fields])


@pytest.mark.parametrize("divisor", [4, 6])
def test_rx_framing_error_glitch_and_overrun(divisor):
    dut = UARTRx(divisor=divisor)
    seen = []
    overruns = []

    def benches():
        async def line(ctx):
            ctx.set(dut.rx, 1)
            await ctx.tick().repeat(3)
            ctx.set(dut.rx, 0)                    # a one-cycle glitch: not a start bit
            await ctx.tick()
            ctx.set(dut.rx, 1)
            await ctx.tick().repeat(3 * divisor)
            await uart_send(ctx, dut.rx, 0x3C, divisor, stop_bit=0)   # framing error
            await ctx.tick().repeat(2 * divisor)
            await uart_send(ctx, dut.rx, 0xC3, divisor)
            await ctx.tick().repeat(2 * divisor)
            # Two bytes back to back while nobody takes them: the second is an overrun.
            ctx.set(dut.o_stream.ready, 0)
            await uart_send(ctx, dut.rx, 0x11, divisor)
            await uart_send(ctx, dut.rx, 0x22, divisor)
            await ctx.tick().repeat(2 * divisor)
            seen.append(await get_all(ctx, dut.o_stream, 1))

        async def watch(ctx):
            async for _, _, overrun in ctx.tick().sample(dut.overrun):
                if overrun:
                    overruns.append(1)

        async def consumer(ctx):
            seen.append(await get_all(ctx, dut.o_stream, 2))
        return [line, consumer, watch]

    # ``watch`` runs forever: add it as a background testbench and run for a fixed time.
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    line, consumer, watch = benches()
    sim.add_testbench(line)
    sim.add_testbench(consumer)
    sim.add_testbench(watch, background=True)
    sim.run_until(1e-8 * 60 * 10 * divisor)
    layout = dut.o_stream.payload.shape()
    first = [unpack(layout, p) for p in seen[0]]
    assert first == [{"data": 0x3C, "error": 1}, {"data": 0xC3, "error": 0}]
    assert [unpack(layout, p) for p in seen[1]] == [{"data": 0x11, "error": 0}]
    assert len(overruns) == 1


@pytest.mark.parametrize("divisor", [4, 9])
def test_uart_peer_model_both_directions(divisor):
    """The UART component against the behavioural peer in sim/uart.py."""
    dut = UART(divisor=divisor)
    sent = [0x00, 0xFF, 0xA5, 0x5A, 0x01]
    echoed = []

    def benches():
        async def host(ctx):
            for byte in sent:
                await uart_send(ctx, dut.rx, byte, divisor)

        async def loop(ctx):                     # device: echo every byte plus one
            for _ in sent:
                (payload,) = await get_all(ctx, dut.o_stream, 1)
                await put_all(ctx, dut.i_stream, [(unpack(dut.o_stream.payload.shape(),
                                                          payload)["data"] + 1) & 0xFF])

        async def peer(ctx):
            for _ in sent:
                byte, stop = await uart_receive(ctx, dut.tx, divisor)
                assert stop == 1
                echoed.append(byte)
        return [host, loop, peer]

    run_simulation(dut, benches, f"uart_peer_{divisor}",
                   deadline_cycles=len(sent) * 30 * divisor + 500)
    assert_equal("echoed", [(b + 1) & 0xFF for b in sent], echoed)


@pytest.mark.parametrize("clk_hz,baud,divisor", [(48e6, 3e6, 16), (12e6, 3e6, 4),
                                                 (12e6, 115200, 104), (25e6, 1e6, 25),
                                                 (50e6, 3e6, 17)])
def test_uart_divisor(clk_hz, baud, divisor):
    assert uart_divisor(clk_hz, baud) == divisor


def test_uart_divisor_errors():
    with pytest.raises(ValueError, match=r"baud 5000000.0 at clk_hz 12000000.0 gives 2.40"):
        uart_divisor(12e6, 5e6)
    with pytest.raises(ValueError, match=r"nearest divisor 8 is off by 4.2%"):
        uart_divisor(25e6, 3e6)
    with pytest.raises(ValueError, match=r"baud must be a positive number, not 0"):
        uart_divisor(12e6, 0)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("cls", [UARTRx, UARTTx, UART])
def test_divisor_validation(cls):
    with pytest.raises(ValueError, match=rf"divisor must be at least {MIN_DIVISOR}, not 3"):
        cls(divisor=3)
    with pytest.raises(TypeError, match=r"divisor must be an int, not '16'"):
        cls(divisor="16")
