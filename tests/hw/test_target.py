import json
import subprocess

from amaranth import Module, Signal
from amaranth.back import rtlil

from hw.target import KEEP_COPY, keep_copies_script


def _copies(yosys, tmp_path, script: str) -> int:
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
    (tmp_path / "top.il").write_text(rtlil.convert(m, name="top", ports=[a, b, en, *outs]))
    subprocess.run([yosys, "-q", "-p",
                    f"read_rtlil top.il; {script} synth_ecp5 -top top -run begin:map_luts; "
                    "select top; write_json -selected top.json"],
                   cwd=tmp_path, check=True, timeout=300)
    cells = json.loads((tmp_path / "top.json").read_text())["modules"]["top"]["cells"]
    return sum(cell["type"] == "TRELLIS_FF" for cell in cells.values())


def test_keep_copies_script(yosys, tmp_path):
    """Without the script Yosys merges the identical copies into one register (8 + 8
    flip-flops); with it every copy stays (8 + 32)."""
    assert _copies(yosys, tmp_path, "") == 16
    assert _copies(yosys, tmp_path, keep_copies_script() + ";") == 40
