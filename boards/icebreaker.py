"""iCEBreaker (iCE40UP5K-SG48): 12 MHz oscillator, FTDI UART on pins 6/9, flashed by
``iceprog``.

The preset that fits is ``icebreaker_mini``: it fills about 97 % of the UP5K's logic cells,
where nextpnr's routes are long and its fmax moves with any change to the netlist (19.6 to
24.6 MHz measured); 16 MHz (15.9375 from the PLL) keeps a margin under the lowest. The layer's
compute time hardly matters there: the UART's transfer takes 70 times longer.
"""

from amaranth_boards.icebreaker import ICEBreakerPlatform

from .top import BoardSpec

SPEC = BoardSpec(
    name="icebreaker", family="ice40", platform=ICEBreakerPlatform, clock="clk12",
    preset="icebreaker_mini", clock_mhz=16.0, baud=1_000_000, programmer="iceprog", leds=2,
    description="iCEBreaker, Lattice iCE40UP5K (5,280 LC, 8 DSP, 30 EBR, 4 SPRAM)")
