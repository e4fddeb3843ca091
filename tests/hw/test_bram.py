# amaranth: UnusedElaboratable=no
"""hw/bram.py: the registered memory's model against a reference, cycle for cycle; its DP16KD
blocks on ECP5 (widths, output register, and the address pins Yosys's own mapping uses)."""

import json
import random
import subprocess
from collections import Counter

import pytest
from amaranth import ClockDomain, Module, ResetInserter, Signal
from amaranth.back import verilog
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator
from amaranth_boards.ulx3s import ULX3S_85F_Platform

from hw.bram import RegisteredMemory, dp16kd_width
from hw.target import keep_copies_script


def test_dp16kd_width():
    assert [dp16kd_width(d) for d in (1, 512, 513, 1024, 1025, 2048, 4096, 4410, 16384, 16385)] \
        == [36, 36, 18, 18, 9, 9, 4, 2, 1, None]


@pytest.mark.parametrize("width,depth", [(0, 4), (4, 0), (4, True), (2.5, 8)])
def test_bad_shape(width, depth):
    with pytest.raises(ValueError, match="must be a positive int"):
        RegisteredMemory(width=width, depth=depth, name="m")


@pytest.mark.parametrize("input_registers,a_reads", [(False, False), (True, False),
                                                     (True, True)])
def test_model_is_two_cycles_and_holds(input_registers, a_reads):
    """Random reads and writes, some of the address being read: ``r_data`` is the word read
    two cycles before (the old word on a collision), held between reads; the output register
    keeps its value through a reset. With ``input_registers`` everything a cycle later; with
    ``a_reads`` ``a_r_data`` is the word at ``w_addr`` likewise, held over writes."""
    mem = RegisteredMemory(width=12, depth=40, name="m", input_registers=input_registers,
                           a_reads=a_reads)
    rst = Signal()
    dut = ResetInserter(rst)(mem)
    rng = random.Random(5)
    ref = [0] * 40
    checked = []

    async def bench(ctx):
        latch = out = a_latch = a_out = 0
        given = [(False, 0, False, 0, 0)] * (2 if input_registers else 1)
        for cycle in range(600):
            r_en, w_en = rng.random() < 0.5, rng.random() < 0.5
            r_addr = rng.randrange(40)
            w_addr = r_addr if rng.random() < 0.2 else rng.randrange(40)
            w_data = rng.getrandbits(12)
            for sig, value in ((mem.r_en, r_en), (mem.r_addr, r_addr), (mem.w_en, w_en),
                               (mem.w_addr, w_addr), (mem.w_data, w_data)):
                ctx.set(sig, value)
            await ctx.tick()
            # what the memory sees this cycle: what was given now, or the cycle before
            given = given[1:] + [(r_en, r_addr, w_en, w_addr, w_data)]
            r_en, r_addr, w_en, w_addr, w_data = given[0]
            latch, out = (ref[r_addr] if r_en else latch), latch
            a_latch, a_out = (a_latch if w_en else ref[w_addr]), a_latch
            if w_en:
                ref[w_addr] = w_data
            assert ctx.get(mem.r_data) == out, f"cycle {cycle}"
            if a_reads:
                assert ctx.get(mem.a_r_data) == a_out, f"cycle {cycle}"
            checked.append(out)
        ctx.set(mem.r_en, 0)
        ctx.set(mem.w_en, 0)
        for _ in range(3):
            await ctx.tick()
        held = ctx.get(mem.r_data)
        ctx.set(rst, 1)
        await ctx.tick()
        assert ctx.get(mem.r_data) == held != 0

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert len(set(checked)) > 100


@pytest.mark.parametrize("width,depth,blocks,slice_width", [
    (144, 128, 4, 36), (62, 287, 2, 36), (62, 600, 4, 18), (20, 2000, 3, 9), (7, 4410, 4, 2),
    (3, 16384, 3, 1)])
def test_ecp5_blocks(width, depth, blocks, slice_width):
    """On ECP5: ``ceil(width / slice_width)`` DP16KD side by side at full depth, reading on
    port B through its output register (at 36 bits, whose data come out on both ports, both
    output registers), writing on port A."""
    mem = RegisteredMemory(width=width, depth=depth, name="m")
    m = mem.elaborate(ULX3S_85F_Platform())
    assert mem.blocks == blocks
    for i in range(blocks):
        inst = m.submodules[f"dp16kd{i}"]
        assert inst.type == "DP16KD"
        assert inst.parameters["REGMODE_B"] == "OUTREG"
        assert inst.parameters["REGMODE_A"] == ("OUTREG" if slice_width == 36 else "NOREG")
        assert inst.parameters["DATA_WIDTH_A"] == inst.parameters["DATA_WIDTH_B"] \
            == slice_width
    with pytest.raises(AttributeError):
        m.submodules[f"dp16kd{blocks}"]


def test_deeper_than_a_block_is_the_model_on_ecp5():
    mem = RegisteredMemory(width=2, depth=16385, name="m")
    m = mem.elaborate(ULX3S_85F_Platform())
    assert mem.blocks == 0 and m.submodules.memory is mem.memory


def _yosys_json(yosys, tmp_path, name, design, ports) -> dict:
    """``synth_ecp5`` of ``design`` as the board builds run it (copies marked ``keep``)."""
    (tmp_path / f"{name}.v").write_text(verilog.convert(design, name=name, ports=ports,
                                                        emit_src=False))
    subprocess.run([yosys, "-q", "-p",
                    f"read_verilog {name}.v; proc; {keep_copies_script()}; synth_ecp5 -top {name}; "
                    f"write_json {name}.json"],
                   cwd=tmp_path, check=True, timeout=300)
    return json.loads((tmp_path / f"{name}.json").read_text())["modules"][name]


def _pins(module, through=None) -> dict:
    """``{pin: bits}`` over every DP16KD of ``module``: the address pins of the port that never
    writes (``WEx`` tied to 0) and of the port that writes (port bits as ints, other pins as
    their constant), and the data pins on ``wd`` or ``rd``. ``through`` maps a flip-flop's
    output net to its input net: a pin driven by one counts as driven by its input."""
    bits = {name: {b: i for i, b in enumerate(module["netnames"][name]["bits"])}
            for name in ("ra", "wa", "wd", "rd")}
    # (with a read on the write port: its data, ``ad``, as "ad<bit>")
    bits["rd"].update({b: f"ad{i}" for i, b in
                       enumerate(module["netnames"].get("ad", {"bits": []})["bits"])})
    we = module["netnames"]["we"]["bits"]
    pins = {}
    for cell in module["cells"].values():
        if cell["type"] != "DP16KD":
            continue
        conn = {pin: [through.get(net, net) for net in nets] if through else nets
                for pin, nets in cell["connections"].items()}
        side = "B" if conn["WEB"] == ["0"] else "A"
        other = "A" if side == "B" else "B"
        for b in range(14):
            net = conn[f"AD{side}{b}"][0]
            pins.setdefault(f"AD{side}{b}", set()).add(
                bits["ra"].get(net, net if isinstance(net, str) else "?"))
            net = conn[f"AD{other}{b}"][0]      # a byte enable: "1", or ``we`` (``WEx`` 1)
            pins.setdefault(f"AD{other}{b}", set()).add(
                bits["wa"].get(net, "1" if net in we else net))
        for port in "AB":
            for b in range(18):
                for pin, name in ((f"DI{port}{b}", "wd"), (f"DO{port}{b}", "rd")):
                    net = conn.get(pin, ["x"])[0]
                    if net in bits[name]:
                        pins.setdefault(pin, set()).add(bits[name][net])
    return pins


class _OnECP5(RegisteredMemory):
    """A RegisteredMemory elaborated for the ULX3S whatever the platform; checks the output
    registers (port A's with ``a_reads``)."""

    def elaborate(self, platform):
        m = super().elaborate(ULX3S_85F_Platform())
        for i in range(self.blocks):
            params = m.submodules[f"dp16kd{i}"].parameters
            assert params["REGMODE_B"] == "OUTREG"
            if self.a_reads:
                assert params["REGMODE_A"] == "OUTREG" and params["DATA_WIDTH_A"] <= 18
        return m


def _ports(width, depth) -> dict:
    """The test designs' ports: read and write address, enable, data; ``ad`` port A's data."""
    return {"ra": Signal(range(depth), name="ra"), "re": Signal(name="re"),
            "wa": Signal(range(depth), name="wa"), "wd": Signal(width, name="wd"),
            "we": Signal(name="we"), "rd": Signal(width, name="rd"),
            "ad": Signal(width, name="ad")}


def _ours(yosys, tmp_path, name, ports, width, depth, **options):
    """Yosys's netlist of our memory (on ECP5) with ``options``, and its block count."""
    m = Module()
    m.submodules.mem = reg = _OnECP5(width=width, depth=depth, name="m", **options)
    m.d.comb += [reg.w_addr.eq(ports["wa"]), reg.w_data.eq(ports["wd"]),
                 reg.w_en.eq(ports["we"]), reg.r_addr.eq(ports["ra"]),
                 reg.r_en.eq(ports["re"]), ports["rd"].eq(reg.r_data)]
    if reg.a_reads:
        m.d.comb += ports["ad"].eq(reg.a_r_data)
    return _yosys_json(yosys, tmp_path, name, m, list(ports.values())), reg


@pytest.mark.parametrize("width,depth", [(72, 512), (36, 300), (18, 1024), (9, 2000), (4, 3000),
                                         (1, 9000)])
def test_pins_follow_yosys(yosys, tmp_path, width, depth):
    """The addresses and data sit on the same DP16KD pins as in Yosys's own mapping of the same
    memory (``synth_ecp5``, output register unused; at 36 bits its ``PDPW16KD``): the pin
    convention is not only ours."""
    ports = _ports(width, depth)
    ra, re, wa, wd, we, rd = (ports[n] for n in ("ra", "re", "wa", "wd", "we", "rd"))

    # Yosys's memory writes on a clock of its own: on one clock it would keep the old word on a
    # collision with registered copies of the write port and a bypass, not on the block's pins.
    inferred = Module()
    inferred.domains.wr = ClockDomain(reset_less=True)
    inferred.submodules.mem = mem = Memory(shape=width, depth=depth, init=[])
    wp, rp = mem.write_port(domain="wr"), mem.read_port(transparent_for=())
    inferred.d.comb += [wp.addr.eq(wa), wp.data.eq(wd), wp.en.eq(we),
                        rp.addr.eq(ra), rp.en.eq(re), rd.eq(rp.data)]

    theirs = _pins(_yosys_json(yosys, tmp_path, "inferred", inferred, list(ports.values())))
    mine = _pins(_ours(yosys, tmp_path, "ours", ports, width, depth)[0])
    assert mine == theirs
    for prefix, port in (("ADB", ra), ("DI", wd), ("DO", rd)):
        assert sorted(i for pin, s in mine.items() if pin.startswith(prefix)
                      for i in s if isinstance(i, int)) == list(range(len(port))), prefix


@pytest.mark.parametrize("width,depth", [(72, 512), (20, 2000), (7, 4410)])
def test_input_registers_at_every_block(yosys, tmp_path, width, depth):
    """With ``input_registers`` each block's address, enable and data pins come from flip-flops
    of its own (one per pin, read by nothing else, kept apart through synthesis), whose inputs
    are what those pins have without them."""
    ports = _ports(width, depth)
    plain, reg = _ours(yosys, tmp_path, "plain", ports, width, depth)
    module, _ = _ours(yosys, tmp_path, "registered", ports, width, depth, input_registers=True)
    assert reg.blocks > 1
    through = {cell["connections"]["Q"][0]: cell["connections"]["DI"][0]
               for cell in module["cells"].values() if cell["type"] == "TRELLIS_FF"}
    loads = Counter(net for cell in module["cells"].values()
                    for pin, nets in cell["connections"].items()
                    if cell["port_directions"][pin] == "input" for net in nets)
    port_nets = {net for name in ports for net in module["netnames"][name]["bits"]}
    registered_pins = 0
    for cell in module["cells"].values():
        if cell["type"] != "DP16KD":
            continue
        for pin, (net, *_) in cell["connections"].items():
            if pin.startswith(("AD", "DI", "CEB", "WEA")) and not isinstance(net, str):
                assert net not in port_nets and net in through and loads[net] == 1, pin
                registered_pins += pin.startswith(("ADB", "CEB"))
    assert registered_pins == reg.blocks * (len(ports["ra"]) + 1)
    assert _pins(module, through) == _pins(plain)


@pytest.mark.parametrize("width,depth", [(20, 2000), (7, 4410)])
def test_a_reads_pins(yosys, tmp_path, width, depth):
    """With ``a_reads`` (the write port reads too) the blocks are those without it, pin for pin
    (``test_pins_follow_yosys``), and port A's data comes out on ``DOA`` through its output
    register into ``a_r_data``. (Yosys's own mapping of such a memory emulates its
    read-during-write behaviour with logic in front of the pins: not comparable pin by pin.)"""
    ports = _ports(width, depth)
    plain = _pins(_ours(yosys, tmp_path, "plain", ports, width, depth)[0])
    mine = _pins(_ours(yosys, tmp_path, "a_reads", ports, width, depth, a_reads=True)[0])
    doa = {pin: bits for pin, bits in mine.items() if pin.startswith("DOA")}
    assert {pin: bits for pin, bits in mine.items() if pin not in doa} == plain
    assert sorted(i for bits in doa.values() for i in bits) == sorted(f"ad{i}"
                                                                     for i in range(width))
