from amaranth import Module, Signal
from amaranth.back import rtlil

from hw.target import KEEP_COPY
from tests.hw.ecp5_synth import ecp5_flops


def _copies(yosys, tmp_path, keep: bool) -> int:
    """Flip-flops Yosys (``synth_ecp5`` up to LUT mapping) leaves of four registered copies of
    one 8-bit sum, each read by its own output: the copies carry :data:`KEEP_COPY`."""
    a, b = Signal(8, name="a"), Signal(8, name="b")
    en = Signal(name="en")
    outs = [Signal(8, name=f"o{i}") for i in range(4)]
    m = Module()
    total = Signal(8)
    m.d.sync += total.eq(a + b)
    for i, out in enumerate(outs):
        copy = Signal(8, name=f"copy{i}", attrs={KEEP_COPY: 1})
        with m.If(en):
            m.d.sync += copy.eq(total)
        m.d.comb += out.eq(copy)
    text = rtlil.convert(m, name="top", ports=[a, b, en, *outs])
    return ecp5_flops(yosys, tmp_path, text, "top", keep=keep)


def test_keep_copies_script(yosys, tmp_path):
    """Without the script Yosys merges the identical copies into one register (8 + 8
    flip-flops); with it every copy stays (8 + 32)."""
    assert _copies(yosys, tmp_path, keep=False) == 16
    assert _copies(yosys, tmp_path, keep=True) == 40
