"""The chip top every board shares: PLL, reset, the device (:class:`hw.device.AttentionDevice`)
on the board's FTDI UART, and LEDs.

A board file (``boards/icebreaker.py``, ``boards/ulx3s.py``) describes its board with a
:class:`BoardSpec`: the amaranth-boards platform, the preset that fits, the clock the PLL makes,
the UART baud rate and the programmer. :class:`BoardTop` turns a spec and a configuration into
the top that :func:`boards.build.build_board` hands to Yosys and nextpnr.

LEDs: the first lights while a run is in progress, the second blinks at about 1 Hz (the clock
runs), the third (where there is one) shows the PLL locked. The ``sync`` domain is held in reset
until the PLL has locked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from amaranth import ClockDomain, ClockSignal, Elaboratable, Instance, Module, ResetSignal, Signal
from amaranth.lib.cdc import ResetSynchronizer

from hw.device import AttentionDevice
from hw.target import global_reset
from hw.uart import uart_divisor

from .pll import PllSettings, ecp5_pll, ice40_pll

__all__ = ["BoardSpec", "BoardTop", "timing_target"]


@dataclass(frozen=True)
class BoardSpec:
    """One board.

    Attributes
    ----------
    name : str
        As ``attn build --board`` takes it.
    family : str
        ``"ice40"`` or ``"ecp5"`` (see :mod:`boards.synth`).
    platform : type
        The amaranth-boards platform class.
    clock : str
        Resource name of the board oscillator.
    preset : str
        The configuration preset built by default.
    clock_mhz : float
        Frequency the PLL makes for the design (the timing constraint).
    baud : int
        UART baud rate of the bitstream.
    programmer : str
        Command that flashes it (as amaranth-boards uses it).
    leds : int
        LEDs the top drives (at most 3).
    description : str
        One line for listings.
    """

    name: str
    family: str
    platform: type
    clock: str
    preset: str
    clock_mhz: float
    baud: int
    programmer: str
    leds: int
    description: str

    def pll(self, clock_mhz: float | None = None) -> PllSettings:
        """PLL settings for ``clock_mhz`` (default: the board's), checked to within 1 %."""
        f_out = self.clock_mhz if clock_mhz is None else clock_mhz
        f_in = self.platform().default_clk_frequency / 1e6
        make = ice40_pll if self.family == "ice40" else ecp5_pll
        return make(f_in, f_out).check(f_out)


def timing_target(clock_mhz: float, target_mhz: float | None) -> float:
    """nextpnr's timing target for a design clock of ``clock_mhz``: ``target_mhz``, at least
    the clock (``None``: the clock). Anything else raises :class:`ValueError`."""
    if target_mhz is None:
        return float(clock_mhz)
    if (not isinstance(target_mhz, (int, float)) or isinstance(target_mhz, bool)
            or not target_mhz >= clock_mhz):
        raise ValueError(f"the timing target must be a frequency of at least the clock "
                         f"({clock_mhz:g} MHz), not {target_mhz!r}")
    return float(target_mhz)


class BoardTop(Elaboratable):
    """The whole chip for ``spec`` and configuration ``cfg`` at ``clock_mhz`` and ``baud``.

    ``target_mhz`` (default: the clock) is the frequency nextpnr is told the design clock
    runs at, at least the clock: a higher target makes its timing-driven placement and
    routing work harder for the same bitstream clock.

    Members
    -------
    device : hw.device.AttentionDevice
    pll : boards.pll.PllSettings
    divisor : int
        UART clocks per bit.
    """

    def __init__(self, spec: BoardSpec, cfg, *, clock_mhz: float | None = None,
                 baud: int | None = None, target_mhz: float | None = None):
        self.spec = spec
        self.cfg = cfg
        self.pll = spec.pll(clock_mhz)
        self.clock_hz = self.pll.f_out_mhz * 1e6
        self.target_mhz = timing_target(self.pll.f_out_mhz, target_mhz)
        self.baud = spec.baud if baud is None else baud
        self.divisor = uart_divisor(self.clock_hz, self.baud)
        # the parser gives up on a frame after 2 ms without a byte
        self.device = AttentionDevice(cfg, divisor=self.divisor,
                                      timeout_cycles=int(self.clock_hz * 2e-3))

    def elaborate(self, platform):
        m = Module()
        spec, pll = self.spec, self.pll
        m.domains.sync = ClockDomain()
        # The constraint below names this wire; Yosys merges it into the domain's clock net and,
        # without "keep", drops the name, and nextpnr then ignores the constraint (timing the
        # clock at the PLL's frequency, whatever the target).
        clk = Signal(name="pll_clk", attrs={"keep": 1})
        m.d.comb += ClockSignal("sync").eq(clk)
        locked = Signal()
        if spec.family == "ice40":
            pad = platform.request(spec.clock, dir="-")
            params = {f"p_{k}": v for k, v in pll.params.items()}
            m.submodules.pll = Instance("SB_PLL40_PAD", **params,
                                        i_PACKAGEPIN=pad.io, i_RESETB=1, i_BYPASS=0,
                                        o_PLLOUTGLOBAL=clk, o_LOCK=locked)
        else:
            clk_in = platform.request(spec.clock).i
            params = {f"p_{k}": v for k, v in pll.params.items()}
            attrs = {"a_FREQUENCY_PIN_CLKI": f"{pll.f_in_mhz:g}",
                     "a_FREQUENCY_PIN_CLKOP": f"{pll.f_out_mhz:g}",
                     "a_ICP_CURRENT": "12", "a_LPF_RESISTOR": "8",
                     "a_MFG_ENABLE_FILTEROPAMP": "1", "a_MFG_GMCREF_SEL": "2"}
            m.submodules.pll = Instance(
                "EHXPLLL", **params, **attrs,
                p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
                p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA",
                p_OUTDIVIDER_MUXB="DIVB", p_OUTDIVIDER_MUXC="DIVC", p_OUTDIVIDER_MUXD="DIVD",
                p_CLKOP_ENABLE="ENABLED",
                i_RST=0, i_STDBY=0, i_CLKI=clk_in, o_CLKOP=clk, i_CLKFB=clk,
                i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1, i_PHASELOADREG=1,
                i_PLLWAKESYNC=0, i_ENCLKOP=0, o_LOCK=locked)
        platform.add_clock_constraint(clk, self.target_mhz * 1e6)
        # The reset synchronizer's last flip-flop resets the domain; on ECP5 through a global
        # buffer (`hw.target.global_reset`: on the 16x8 ULX3S device it reached the host
        # link's 566 flip-flops over the general routing, up to 9.7 ns of wire).
        m.domains.reset = ClockDomain("reset", local=True)
        m.d.comb += [ClockSignal("reset").eq(clk),
                     ResetSignal("sync").eq(global_reset(m, platform, ResetSignal("reset"),
                                                         "sync_rst"))]
        m.submodules.reset_sync = ResetSynchronizer(~locked, domain="reset")

        m.submodules.device = device = self.device
        uart = platform.request("uart", 0)
        m.d.comb += [device.rx.eq(uart.rx.i), uart.tx.o.eq(device.tx)]

        # A free-running counter whose top bit toggles every 2**n cycles, the power of two
        # nearest half a second (a plain carry chain: no reload, no comparison).
        blink = Signal(max(1, round(math.log2(self.clock_hz / 2))) + 1)
        m.d.sync += blink.eq(blink + 1)
        heartbeat = blink[-1]
        for index, value in enumerate((device.running, heartbeat, locked)[:spec.leds]):
            m.d.comb += platform.request("led", index).o.eq(value)
        return m
