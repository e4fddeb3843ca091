"""iCEBreaker (iCE40UP5K-SG48): 12 MHz oscillator, FTDI UART on pins 6/9, flashed by
``iceprog``."""

from amaranth_boards.icebreaker import ICEBreakerPlatform

from .top import BoardSpec

SPEC = BoardSpec(
    name="icebreaker", family="ice40", platform=ICEBreakerPlatform, clock="clk12",
    preset="icebreaker", clock_mhz=30.0, baud=1_000_000, programmer="iceprog", leds=2,
    description="iCEBreaker, Lattice iCE40UP5K (5,280 LC, 8 DSP, 30 EBR, 4 SPRAM)")
