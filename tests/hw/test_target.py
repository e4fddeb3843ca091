import subprocess

import pytest
from amaranth import Module, Signal
from amaranth.back import rtlil

from hw.target import KEEP_COPY
from hw.uart import UARTRx
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


class _Platform:
    """Just what :mod:`hw.target` reads of a platform."""

    def __init__(self, family, device):
        self.family, self.device = family, device


@pytest.mark.parametrize(("platform", "one_hot"), [
    (None, False), (_Platform("iCE40", "iCE40UP5K"), False),
    (_Platform("ecp5", "LFE5U-85F"), True)])
def test_fsm_one_hot_on_ecp5_only(platform, one_hot):
    text = rtlil.convert(UARTRx(divisor=16), platform=platform)
    assert ('attribute \\fsm_encoding "one-hot"' in text) is one_hot


def test_yosys_recodes_the_marked_fsm(yosys, tmp_path):
    """Yosys never takes an Amaranth FSM by itself (its state has an initial value); the
    attribute makes it recode the receiver's five states one-hot."""
    for platform, recoded in ((None, False), (_Platform("ecp5", "LFE5U-85F"), True)):
        (tmp_path / "rx.il").write_text(rtlil.convert(UARTRx(divisor=16), name="rx",
                                                      platform=platform))
        log = subprocess.run([yosys, "-p", "read_rtlil rx.il; synth_ecp5 -top rx -run "
                              "begin:map_luts"], cwd=tmp_path, check=True, timeout=600,
                             capture_output=True, text=True).stdout
        assert ("using `one-hot' encoding" in log) is recoded, platform
