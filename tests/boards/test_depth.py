"""boards.depth: the logic-depth estimate over a Yosys netlist, on hand-built netlists whose
depth is known and on a real iCE40 synthesis."""

import json

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from boards.depth import DELAYS, analyze, family_of, main

D = DELAYS["ecp5"]


class Netlist:
    """A flattened ECP5 netlist built cell by cell; nets are numbered from 2 (Yosys's 0/1
    are constants)."""

    def __init__(self):
        self.cells, self.netnames, self.next_bit = {}, {}, 2

    def net(self, name=None, src=None):
        bit, self.next_bit = self.next_bit, self.next_bit + 1
        if name:
            self.netnames[name] = {"bits": [bit], "hide_name": 0,
                                   "attributes": {"src": src} if src else {}}
        return bit

    def cell(self, ctype, name=None, **ports):
        dirs = {p: ("output" if p in ("Q", "Z", "S0", "S1", "COUT", "O", "CO")
                    or p.startswith("DO") else "input") for p in ports}
        name = name or f"$c{len(self.cells)}"
        self.cells[name] = {"type": ctype, "port_directions": dirs,
                            "connections": {p: [b] for p, b in ports.items()}}
        return name

    def ff(self, d, name, src=None):
        q = self.net(name, src)
        self.cell("TRELLIS_FF", CLK=self.clk, DI=d, Q=q)
        return q

    def lut(self, *ins):
        z = self.net()
        self.cell("LUT4", Z=z, **dict(zip("ABCD", ins)))
        return z

    def json(self):
        return {"modules": {"top": {"attributes": {"top": "00000000000000000000000000000001"},
                                    "ports": {"clk": {"direction": "input", "bits": [self.clk]}},
                                    "cells": self.cells, "netnames": self.netnames}}}

    @classmethod
    def with_clock(cls):
        n = cls()
        n.clk = n.net("clk")
        return n


def by_end(report):
    return {ep.end: ep for ep in report.endpoints}


def test_lut_chain_levels_and_delay():
    n = Netlist.with_clock()
    a_d = n.net()
    a = n.ff(a_d, "core.a")
    b = n.ff(n.lut(n.lut(a, a)), "core.b")
    n.ff(a, "core.c")
    n.cells["$loopback"] = {"type": "LUT4", "port_directions": {"A": "input", "Z": "output"},
                            "connections": {"A": [b], "Z": [a_d]}}
    report = analyze(n.json())
    assert report.family == "ecp5" and report.top == "top" and report.loops == 0
    ends = by_end(report)
    assert ends["core.b"].levels == 2
    assert ends["core.b"].ns == pytest.approx(D.clk_q + 2 * (D.net + D.lut) + D.net + D.setup)
    assert ends["core.b"].start == "core.a" and ends["core.b"].path[0] == "core.a"
    assert ends["core.c"].levels == 0
    assert ends["core.c"].ns == pytest.approx(D.clk_q + D.net + D.setup)
    assert report.endpoints[0].end == "core.b"   # deepest first


def test_slice_connections_cost_no_net():
    """A LUT into its PFUMX and a carry into the next carry cell are wired in the slice."""
    n = Netlist.with_clock()
    a = n.ff(n.net(), "a")
    z = n.net()
    n.cell("PFUMX", ALUT=n.lut(a), BLUT=n.lut(a), C0=a, Z=z)
    n.ff(z, "mux_out")
    cin = None
    for _ in range(4):
        cout, s1 = n.net(), n.net()
        ports = {"A0": a, "B0": a, "COUT": cout, "S1": s1}
        if cin is not None:
            ports["CIN"] = cin
        n.cell("CCU2C", **ports)
        cin = cout
    n.ff(s1, "sum_msb")
    ends = by_end(analyze(n.json()))
    assert ends["mux_out"].levels == 1
    assert ends["mux_out"].ns == pytest.approx(D.clk_q + D.net + D.lut + D.mux + D.net + D.setup)
    # into the first cell's LUT and carry, three carries along the chain, the last cell's sum
    assert ends["sum_msb"].levels == 1
    assert ends["sum_msb"].ns == pytest.approx(
        D.clk_q + D.net + D.lut + 2 * D.carry + D.lut + D.net + D.setup)


def test_memories_dsps_and_unknown_cells_cut_paths():
    n = Netlist.with_clock()
    a = n.ff(n.net(), "a")
    do = n.net("ram_do")
    n.cell("DP16KD", CLKA=n.clk, ADA0=n.lut(a), DOA0=do)
    n.ff(n.lut(do), "after_ram")
    odd = n.net("odd_out")
    n.cell("MYSTERY", I=n.lut(a), Q=odd)
    report = analyze(n.json())
    ends = by_end(report)
    assert ends["after_ram"].start == "ram_do"
    assert ends["after_ram"].ns == pytest.approx(D.ram_q + D.net + D.lut + D.net + D.setup)
    assert ends["$c2.ADA0"].levels == 1 and ends["$c2.ADA0"].end_cell == "DP16KD"
    assert report.unknown_cells == {"MYSTERY": 1}


def test_a_combinational_loop_is_cut_and_counted():
    n = Netlist.with_clock()
    a = n.ff(n.net(), "a")
    x, y = n.net("x"), n.net("y")
    n.cell("LUT4", A=a, B=y, Z=x)
    n.cell("LUT4", A=x, Z=y)
    n.ff(y, "end")
    report = analyze(n.json())
    assert report.loops >= 1
    assert by_end(report)["end"].levels >= 1


def test_groups_gather_bits_and_copies():
    assert family_of("core.unit_3.acc[12]") == "core.unit_#.acc"
    assert family_of("core.$signal$528<core.py:1730>[3]") == "core.$signal$#<core.py:1730>"
    n = Netlist.with_clock()
    a = n.ff(n.net(), "src")
    for u in range(3):
        n.ff(n.lut(a), f"unit_{u}.acc")
    n.ff(n.lut(n.lut(a)), "core.$signal$7", src="/x/hw/core.py:1730|/x/hw/core.py:9")
    report = analyze(n.json())
    groups = report.groups()
    assert (groups[0]["end"], groups[0]["count"]) == ("core.$signal$#<core.py:1730>", 1)
    assert (groups[1]["start"], groups[1]["end"], groups[1]["count"]) == ("src", "unit_#.acc", 3)
    json.dumps(report.as_dict())


@pytest.mark.parametrize(("netlist", "message"), [
    ({}, "no 'modules'"),
    ({"modules": {"a": {"cells": {"x": {}}}, "b": {"cells": {"y": {}}}}}, "top module"),
])
def test_not_a_netlist(netlist, message):
    with pytest.raises(ValueError, match=message):
        analyze(netlist)


def test_unknown_module_and_family():
    n = Netlist.with_clock()
    with pytest.raises(ValueError, match="'nope' not in the netlist"):
        analyze(n.json(), top="nope")
    with pytest.raises(ValueError, match="unknown family 'xilinx'"):
        analyze(n.json(), family="xilinx")


def test_cli(tmp_path, capsys):
    n = Netlist.with_clock()
    n.ff(n.lut(n.lut(n.ff(n.net(), "a"))), "b")
    path = tmp_path / "top.json"
    path.write_text(json.dumps(n.json()))
    out_json = tmp_path / "depth.json"
    assert main([str(path), "--group", "--path", "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    assert "a → b" in text and "deepest path" in text
    assert json.loads(out_json.read_text())["deepest"][0]["levels"] == 2
    for argv, message in [([str(tmp_path / "none.json")], "no such file"),
                          ([str(path), "--top", "0"], "--top must be at least 1")]:
        with pytest.raises(SystemExit):
            main(argv)
        assert message in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(SystemExit):
        main([str(tmp_path / "bad.json")])
    assert "not JSON" in capsys.readouterr().err


class WideAnd(wiring.Component):
    """``o`` is the AND of 32 registered bits: three LUT4 levels on iCE40."""

    def __init__(self):
        super().__init__({"i": In(32), "o": Out(1)})

    def elaborate(self, platform):
        m = Module()
        held, out = Signal(32), Signal()
        m.d.sync += [held.eq(self.i), out.eq(held.all())]
        m.d.comb += self.o.eq(out)
        return m


def test_real_ice40_netlist(tmp_path):
    from tests.boards.test_synth import _build_or_skip
    report = _build_or_skip("ice40", WideAnd(), name="test_depth_and", clock_mhz=40.0,
                            build_dir=tmp_path)
    assert report.routed
    depth = analyze(tmp_path / "test_depth_and.json")
    assert depth.family == "ice40" and not depth.unknown_cells and depth.loops == 0
    deepest = depth.endpoints[0]
    assert deepest.levels == 3 and deepest.start.startswith("dut"), deepest
