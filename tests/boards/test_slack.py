"""boards.slack: endpoints by arrival from nextpnr's detailed timing report, on a hand-built
report and on a real one (``data/ecp5_slack.v`` synthesized by ``synth_ecp5``, its top module
in ``data/ecp5_slack.json``, placed and routed by nextpnr-ecp5 with
``--detailed-timing-report``: inputs registered, a multiplier, an XOR, an adder)."""

import json
from pathlib import Path

import pytest

from boards.slack import arrivals, deepest_paths, families, main, missing

DATA = Path(__file__).parent / "data"
REAL = DATA / "ecp5_slack.report.json"
NETLIST = DATA / "ecp5_slack.json"


def _net(driver, *ends):
    return {"net": f"{driver}_net", "driver": driver, "port": "Q", "event": "posedge clk",
            "endpoints": [{"cell": c, "port": p, "event": "posedge clk", "delay": [0.5, ns]}
                          for c, p, ns in ends]}


HAND = {"fmax": {"clk": {"achieved": 95.0, "constraint": 100.0}},
        "detailed_net_timings": [
            _net("a", ("core.bank_0.acc_TRELLIS_FF_Q_3", "DI", 10.4),
                 ("core.bank_1.acc_TRELLIS_FF_Q", "DI", 9.0),
                 ("core.mem.0.0", "DIA7", 10.6)),
            # the same endpoint reached by a second net, later: the later arrival counts
            _net("b", ("core.bank_1.acc_TRELLIS_FF_Q", "DI", 10.1),
                 ("core.flag_SB_DFFE_Q", "E", 4.0))]}


def test_arrivals_and_families():
    ends = arrivals(HAND)
    assert [(a.name, a.ns) for a in ends] == [
        ("core.mem.0.0.DIA7", 10.6), ("core.bank_0.acc", 10.4), ("core.bank_1.acc", 10.1),
        ("core.flag", 4.0)]
    late = missing(ends, 100.0)
    assert [a.name for a in late] == ["core.mem.0.0.DIA7", "core.bank_0.acc", "core.bank_1.acc"]
    assert missing(ends, 95.0) == ends[:1]           # 10.53 ns
    groups = families(late)
    assert [(g["family"], g["count"], g["latest"].ns) for g in groups] == [
        ("core.mem.#.#.DIA#", 1, 10.6), ("core.bank_#.acc", 2, 10.4)]
    with pytest.raises(ValueError, match="detailed-timing-report"):
        arrivals({"fmax": {}, "critical_paths": []})


def test_real_report_agrees_with_the_critical_path():
    """The latest arrival at a register is nextpnr's register-to-register critical path, and
    its clock splits the endpoints: none miss just below it, the multiplier's do above."""
    report = json.loads(REAL.read_text())
    (path,) = [p for p in report["critical_paths"] if "<async>" not in (p["from"], p["to"])]
    critical = sum(step["delay"] for step in path["path"])
    ends = arrivals(REAL)
    registers = [a for a in ends if a.port in ("DI", "M", "CE", "LSR")]
    assert registers[0].ns == pytest.approx(critical, abs=1e-3)
    assert registers[0].name == "r1"
    achieved = report["fmax"][next(iter(report["fmax"]))]["achieved"]
    assert missing(registers, achieved * 0.995) == []
    late = missing(registers, achieved * 1.01)
    assert late and {a.name for a in late} == {"r1"}
    # every register of the design is an endpoint, the inputs' first ones too
    assert {"ra", "rb", "r1", "r2", "q"} <= {a.name for a in registers}


def test_cli(tmp_path, capsys):
    out_json = tmp_path / "out" / "slack.json"
    assert main([str(REAL), "--mhz", "100,300", "--top", "1", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "44 endpoints, the latest 6.23 ns (clock 100 MHz constraint, 160.6 achieved)" in out
    assert "at 100 MHz (10.00 ns): 0 endpoints in 0 families miss" in out
    late300 = missing(arrivals(REAL), 300.0)
    assert (f"at 300 MHz (3.33 ns): {len(late300)} endpoints in {len(families(late300))} "
            "families miss") in out
    saved = json.loads(out_json.read_text())
    assert [m["mhz"] for m in saved["missing"]] == [100.0, 300.0]
    assert saved["missing"][0]["endpoints"] == 0
    at300 = saved["missing"][1]
    assert at300["endpoints"] == len(late300) > 0
    assert len(at300["families"]) == 1          # --top 1
    hand = tmp_path / "hand.json"
    hand.write_text(json.dumps(HAND))
    assert main([str(hand)]) == 0                # the report's constraint: 100 MHz
    out = capsys.readouterr().out
    assert "at 100 MHz (10.00 ns): 3 endpoints in 2 families miss" in out
    assert "10.60      1  core.mem.#.#.DIA#  (core.mem.0.0.DIA7)" in out
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"fmax": {}, "critical_paths": []}))
    for argv, message in (([str(tmp_path / "none.json")], "no such file"),
                          ([str(plain)], "detailed-timing-report"),
                          ([str(hand), "--mhz", "fast"], "not a list of numbers"),
                          ([str(hand), "--mhz", "0"], "must be positive"),
                          ([str(hand), "--top", "0"], "at least 1")):
        with pytest.raises(SystemExit):
            main(argv)
        assert message in capsys.readouterr().err, argv


def test_netlist_paths(tmp_path, capsys):
    """With the route's netlist each family's latest endpoint gets its deepest logic path:
    the product register r1 is one level (the multiplier) from the input registers, those
    are straight from the pins."""
    paths = deepest_paths(NETLIST)
    assert paths["r1"].levels == 1 and paths["r1"].start.startswith(("ra[", "rb["))
    assert paths["ra"].levels == 0 and paths["ra"].start.startswith("a[")
    out_json = tmp_path / "slack.json"
    assert main([str(REAL), "--mhz", "300", "--netlist", str(NETLIST),
                 "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert f"deepest logic: 1 levels from {paths['r1'].start}" in out
    (r_family,) = [f for f in json.loads(out_json.read_text())["missing"][0]["families"]
                   if f["family"] == "r#"]
    assert r_family["deepest_logic"]["levels"] == 1
    for argv, message in (([str(REAL), "--netlist", str(tmp_path / "none.json")],
                           "no such file"),
                          ([str(REAL), "--netlist", str(REAL)], "not a Yosys JSON netlist")):
        with pytest.raises(SystemExit):
            main(argv)
        assert message in capsys.readouterr().err, argv
