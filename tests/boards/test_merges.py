"""boards.merges: the flip-flops Yosys would merge, on a hand-built design whose copies are
known and on the ECP5 cores."""

import json

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Elaboratable, Module, Signal

from attn import preset
from boards.merges import find_merges, main
from hw.core import AttentionCore
from hw.target import KEEP_COPY


class _Copies(Elaboratable):
    """``copies`` submodules, each registering the same 8-bit sum (``kept`` of those
    registers KEEP_COPY) and driving an output of its own; plus one register of another
    value, which nothing merges with."""

    def __init__(self, copies, kept):
        self.a, self.b = Signal(8), Signal(8)
        self.outs = [Signal(8, name=f"out{i}") for i in range(copies + 1)]
        self.kept = kept

    def elaborate(self, platform):
        m = Module()
        for i, out in enumerate(self.outs[:-1]):
            sub = Module()
            copy = Signal(8, name="copy", attrs={KEEP_COPY: 1} if i < self.kept else {})
            sub.d.sync += copy.eq(self.a + self.b)
            sub.d.comb += out.eq(copy)
            m.submodules[f"user{i}"] = sub
        other = Signal(8, name="other")
        m.d.sync += other.eq(self.a - self.b)
        m.d.comb += self.outs[-1].eq(other)
        return m

    def rtlil(self):
        return rtlil.convert(self, name="top", ports=[self.a, self.b, *self.outs])


@pytest.mark.parametrize("copies, kept, merged", [
    (3, 0, 16),     # three become one: two registers' bits removed
    (3, 1, 16),     # the unkept two merge into the kept one
    (3, 2, 8),
    (3, 3, 0),      # all kept: nothing to report
    (1, 0, 0),      # a register of its own
])
def test_groups(yosys, copies, kept, merged):
    report = find_merges(_Copies(copies, kept).rtlil(), yosys=yosys)
    assert report.flops == copies + 1
    assert report.merged_bits == merged
    if merged:
        (group,) = report.groups
        assert (group.count, group.width, group.kept) == (copies, 8, kept)
        assert group.names == tuple(f"user{i}.copy" for i in range(copies))
    else:
        assert report.groups == []


@pytest.mark.parametrize("name", ["ulx3s_8x4", "ulx3s_16x8"])
def test_ecp5_core_keeps_its_copies(yosys, name):
    """Elaborated for ECP5, the core's per-bank and per-unit registers of shared values (the
    banks' direct-write address and data, the X/Q banks' entry, the score memories' write
    address and data) stay apart; what Yosys still merges is at most 3 bits a register (a
    PE's control beside the array's skew copy of it, the requantizers' valid and last)."""
    platform = type("Platform", (), {"device": "LFE5U-85F", "family": "ecp5"})()
    report = find_merges(rtlil.convert(AttentionCore(preset(name)), name="core",
                                       platform=platform), yosys=yosys)
    assert report.flops > 1000
    wide = [g for g in report.groups if g.width > 3]
    assert not wide, "\n".join(f"{g.count} x {g.width} bits: {g.names}" for g in wide)


def test_cli(yosys, tmp_path, capsys):
    design = tmp_path / "top.il"
    design.write_text(_Copies(4, 0).rtlil())
    out_json = tmp_path / "report" / "merges.json"
    assert main([str(design), "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "5 flip-flop cells; synthesis merges 1 groups of them (24 flip-flop bits)" in out
    assert "user0.copy, user1.copy, user2.copy, user3.copy" in out
    report = json.loads(out_json.read_text())
    assert report["merged_bits"] == 24 and report["groups"][0]["count"] == 4
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing.il")])
    assert "no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(design), "--top", "0"])
    broken = tmp_path / "broken.il"
    broken.write_text("module \\top\n  this is not rtlil\nend\n")
    with pytest.raises(SystemExit):
        main([str(broken)])
    assert "yosys failed" in capsys.readouterr().err
