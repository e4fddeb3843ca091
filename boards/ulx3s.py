"""ULX3S with an LFE5U-85F: 25 MHz oscillator, FTDI UART, flashed by ``openFPGALoader``."""

from amaranth_boards.ulx3s import ULX3S_85F_Platform

from .top import BoardSpec

SPEC = BoardSpec(
    name="ulx3s", family="ecp5", platform=ULX3S_85F_Platform, clock="clk25",
    preset="ulx3s_8x4", clock_mhz=65.0, baud=1_000_000, programmer="openFPGALoader", leds=3,
    description="ULX3S, Lattice ECP5 LFE5U-85F (83,640 LUT4, 156 DSP, 208 DP16KD)")
