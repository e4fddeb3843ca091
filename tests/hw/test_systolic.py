"""The systolic array equals ``golden.quant.matmul_exact`` tile for tile, under random stalls."""

import numpy as np
import pytest
from amaranth import Module, Signal, Value
from amaranth.hdl import ResetInserter

import attn
from golden.quant import matmul_exact, qmax, qmin
from hw.systolic import SystolicArray
from sim.amaranth_sim import run_simulation
from sim.cocotb_runner import BUILD, run_cocotb, simulator_missing, write_verilog
from sim.scoreboard import assert_equal
from sim.streams import Pattern, get_all, put_all

# Small shapes for the Amaranth simulator (8x8 and 2x4 run on Verilator: test_cocotb_*).
SHAPES = [(2, 2), (1, 3), (3, 1), (3, 5), (4, 4)]
# (input idle probability, output backpressure probability); 250 tiles each -> 1000 per shape.
STALLS = [(0.0, 0.0), (0.5, 0.5), (0.9, 0.2), (0.2, 0.9)]
TILES = 250

# Parameter-validation tests build components they never elaborate.
pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


def config(rows, cols, **changes):
    return attn.preset("tiny").replace(rows=rows, cols=cols, **changes)


def random_tiles(cfg, count, seed, max_k=None, fixed_k=None):
    """``count`` tiles ``(a, b)`` with random K (1 .. max_k, or always ``fixed_k``) and a mix
    of operand kinds: uniform, all minimum, all maximum, extremes with random signs."""
    rng = np.random.default_rng(seed)
    max_k = max_k or min(cfg.max_reduction, 2 * cfg.rows + 3)
    tiles = []
    for n in range(count):
        k = int(rng.integers(1, max_k + 1)) if n % 7 else int(rng.choice([1, cfg.rows]))
        k = fixed_k or k
        kind = rng.integers(0, 6)
        shapes = ((cfg.rows, k), (cfg.cols, k))
        bits = (cfg.a_bits, cfg.b_bits)
        if kind == 1:      # all most-negative: the largest products
            a, b = (np.full(s, qmin(w)) for s, w in zip(shapes, bits))
        elif kind == 2:    # all most-positive
            a, b = (np.full(s, qmax(w)) for s, w in zip(shapes, bits))
        elif kind == 3:    # extremes with random signs
            a, b = (np.where(rng.integers(0, 2, s) == 1, qmin(w), qmax(w))
                    for s, w in zip(shapes, bits))
        else:
            a, b = (rng.integers(qmin(w), qmax(w) + 1, s) for s, w in zip(shapes, bits))
        tiles.append((a, b))
    return tiles


def check_rows(dut, tiles, got, name):
    """Every result row (packed words ``got``) and ``last`` flag of ``tiles``, exactly."""
    values, last = dut.decode_rows(got)
    assert_equal(f"{name} results", np.concatenate([matmul_exact(a, b.T) for a, b in tiles]),
                 values)
    assert_equal(f"{name} last",
                 np.tile(np.arange(dut.rows) == dut.rows - 1, len(tiles)).astype(np.int64), last)


def run_tiles(dut, tiles, stall_in, stall_out, name, seed=0, ready_log=None):
    """Stream ``tiles`` through ``dut``; check every result row and ``last`` flag exactly."""
    beats = [w for a, b in tiles for w in dut.encode_tile(a, b)]
    rows = len(tiles) * dut.rows
    got = []
    finished = []

    def benches():
        async def producer(ctx):
            await put_all(ctx, dut.i_stream, beats, Pattern(stall_in, seed + 1))

        async def consumer(ctx):
            got.extend(await get_all(ctx, dut.o_stream, rows, Pattern(stall_out, seed + 2)))
            finished.append(True)
        benches = [producer, consumer]
        if ready_log is not None:
            async def monitor(ctx):
                async for _, _, valid, ready in ctx.tick().sample(dut.i_stream.valid,
                                                                  dut.i_stream.ready):
                    if finished:
                        return
                    ready_log.append((valid, ready))
            benches.append(monitor)
        return benches

    cycles = 4 * (len(beats) + rows + 50) / (1 - max(stall_in, stall_out))
    run_simulation(dut, benches, name, deadline_cycles=int(cycles))
    check_rows(dut, tiles, got, name)


@pytest.mark.parametrize("stall_in,stall_out", STALLS)
@pytest.mark.parametrize("rows,cols", SHAPES)
def test_random_tiles(rows, cols, stall_in, stall_out):
    cfg = config(rows, cols)
    dut = SystolicArray.from_config(cfg)
    tiles = random_tiles(cfg, TILES, seed=rows * 100 + cols + int(stall_in * 10))
    run_tiles(dut, tiles, stall_in, stall_out, f"systolic_{rows}x{cols}_{stall_in}_{stall_out}")


@pytest.mark.parametrize("stall_in,stall_out", [(0.0, 0.0), (0.5, 0.7)])
@pytest.mark.parametrize("rows,cols", [(2, 3), (4, 4)])
def test_registered_dsp_model(rows, cols, stall_in, stall_out):
    """The ECP5 registered-DSP timing (latency 4) through its behavioural model; the 4x4 runs
    use one accumulator register (``split_acc=False``)."""
    cfg = config(rows, cols, dsp="ecp5_registered")
    dut = SystolicArray.from_config(cfg, split_acc=rows != 4)
    assert dut.mult_latency == 4
    tiles = random_tiles(cfg, 200, seed=7 + rows)
    run_tiles(dut, tiles, stall_in, stall_out, f"systolic_reg_{rows}x{cols}_{stall_in}")


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_fixed_reduction_lengths(k):
    """Every tile of the stream has the same K, below, at and above R (4x4)."""
    cfg = config(4, 4)
    dut = SystolicArray.from_config(cfg)
    tiles = random_tiles(cfg, 60, seed=k, fixed_k=k)
    run_tiles(dut, tiles, 0.0, 0.0, f"systolic_k{k}")


@pytest.mark.parametrize("rows,cols,k", [(4, 4, 4), (4, 4, 9), (3, 5, 3), (1, 3, 1)])
def test_bubble_free_for_long_tiles(rows, cols, k):
    """Contract: with ``K >= R`` and a consumer that is always ready, the input never waits
    (``ready`` is high in every cycle the producer offers a beat)."""
    cfg = config(rows, cols)
    dut = SystolicArray.from_config(cfg)
    tiles = random_tiles(cfg, 40, seed=k, fixed_k=k)
    log = []
    run_tiles(dut, tiles, 0.0, 0.0, f"systolic_bubble_{rows}x{cols}_{k}", ready_log=log)
    offered = [ready for valid, ready in log if valid]
    assert len(offered) >= len(tiles) * k
    assert all(offered), f"input waited in {offered.count(0)} of {len(offered)} offered cycles"


def run_claimed_tiles(dut, tiles, stall_in, stall_out, name, seed=0):
    """Like :func:`run_tiles`, with a producer that claims each tile's output room when it
    issues the tile's ``last`` beat (only while ``claim_ok``) and hands every beat to the array
    ``claim_lead`` cycles after issuing it, never waiting on ``ready``. Returns the cycles in
    which a last beat was issued."""
    beats = [w for a, b in tiles for w in dut.encode_tile(a, b)]
    last_bit = 1 << dut.i_layout["last"].offset
    rows = len(tiles) * dut.rows
    got, issued_last, not_ready = [], [], []

    def benches():
        async def producer(ctx):
            rng = np.random.default_rng(seed + 1)
            pipe = [None] * dut.claim_lead
            index = cycle = 0
            while index < len(beats) or any(b is not None for b in pipe):
                beat = None
                if index < len(beats) and rng.random() >= stall_in:
                    if not beats[index] & last_bit or ctx.get(dut.claim_ok):
                        beat, index = beats[index], index + 1
                is_last = beat is not None and bool(beat & last_bit)
                if is_last:
                    issued_last.append(cycle)
                ctx.set(dut.claim, is_last)
                pipe.append(beat)
                head = pipe.pop(0)
                ctx.set(dut.i_stream.valid, head is not None)
                ctx.set(Value.cast(dut.i_stream.payload), head or 0)
                if head is not None and not ctx.get(dut.i_stream.ready):
                    not_ready.append(cycle)
                await ctx.tick()
                cycle += 1
            ctx.set(dut.claim, 0)
            ctx.set(dut.i_stream.valid, 0)

        async def consumer(ctx):
            got.extend(await get_all(ctx, dut.o_stream, rows, Pattern(stall_out, seed + 2)))
        return [producer, consumer]

    cycles = 4 * (len(beats) + rows + 50) / (1 - max(stall_in, stall_out))
    run_simulation(dut, benches, name, deadline_cycles=int(cycles))
    assert not not_ready, f"{name}: ready low in cycles {not_ready[:10]}"
    check_rows(dut, tiles, got, name)
    return issued_last


@pytest.mark.parametrize("lead", [0, 3])
@pytest.mark.parametrize("stall_in,stall_out", STALLS)
def test_claimed_room(stall_in, stall_out, lead):
    """With ``claim_lead`` the producer claims each tile's room ahead and the array takes
    every beat: exact results under random input bubbles and output backpressure, claims at
    least ``R`` cycles apart, in the registered-DSP timing too; the smallest FIFO (``R``
    rows) as well."""
    for dsp, depth in (("infer", None), ("ecp5_registered", None), ("infer", 3)):
        cfg = config(3, 4, dsp=dsp)
        dut = SystolicArray.from_config(cfg, claim_lead=lead, fifo_depth=depth)
        assert dut.claim_lead == lead
        tiles = random_tiles(cfg, 60, seed=31 + lead + int(stall_out * 10))
        claims = run_claimed_tiles(dut, tiles, stall_in, stall_out,
                                   f"systolic_claim{lead}_{dsp}_{depth}_{stall_in}_{stall_out}")
        assert len(claims) == len(tiles)
        assert min(np.diff(claims)) >= cfg.rows


def test_claim_default_fifo_depth():
    """The default FIFO holds the claim lead's rows more, so that an always-ready consumer
    never holds up a producer issuing long tiles back to back."""
    cfg = config(4, 4)
    plain = SystolicArray.from_config(cfg)
    dut = SystolicArray.from_config(cfg, claim_lead=3)
    assert dut.fifo_depth == plain.fifo_depth + 3
    k = 6
    tiles = random_tiles(cfg, 30, seed=3, fixed_k=k)
    claims = run_claimed_tiles(dut, tiles, 0.0, 0.0, "systolic_claim_bubble_free")
    assert list(np.diff(claims)) == [k] * (len(tiles) - 1)


@pytest.mark.parametrize("lutram", [False, True])
@pytest.mark.parametrize("stall_in,stall_out", [(0.0, 0.0), (0.3, 0.8)])
def test_smallest_fifo(stall_in, stall_out, lutram):
    """A FIFO of only ``rows`` rows still gives exact results (each ``last`` beat waits until
    the whole FIFO is free), just fewer tiles per cycle; with either read port."""
    cfg = config(3, 2)
    dut = SystolicArray.from_config(cfg, fifo_depth=3, lutram_fifo=lutram)
    tiles = random_tiles(cfg, 80, seed=11)
    run_tiles(dut, tiles, stall_in, stall_out, f"systolic_fifo3_{stall_out}_{lutram}")


@pytest.mark.parametrize("stall_in,stall_out", STALLS)
def test_lutram_fifo(stall_in, stall_out):
    """The asynchronous (LUT RAM) output FIFO with the inferred multipliers, under stalls."""
    cfg = config(3, 4)
    dut = SystolicArray.from_config(cfg, lutram_fifo=True)
    tiles = random_tiles(cfg, 150, seed=21 + int(stall_out * 10))
    run_tiles(dut, tiles, stall_in, stall_out, f"systolic_lutram_{stall_in}_{stall_out}")


@pytest.mark.parametrize("lutram", [False, True])
def test_read_address_per_column(lutram):
    """With the LUT RAM FIFO every column's memory reads at its own copy of the read address,
    a copy synthesis keeps (:data:`hw.target.KEEP_COPY`); with read ports one shared register.
    (That every copy advances is what test_lutram_fifo's results check.)"""
    import re

    from amaranth.back import rtlil

    from hw.target import KEEP_COPY

    cfg = config(3, 4)
    text = rtlil.convert(SystolicArray.from_config(cfg, lutram_fifo=lutram))
    kept = set(re.findall(rf"attribute \\{KEEP_COPY} 1\n\s*wire width \d+ \\(\S+)\n", text))
    copies = {f"r_addr_{c}" for c in range(cfg.cols)}
    if lutram:
        assert copies <= kept, sorted(copies - kept)
        assert not re.search(r"wire width \d+ \\r_addr\n", text)
    else:
        assert not kept & copies and re.search(r"wire width \d+ \\r_addr\n", text)


class _Ecp5:
    """A platform that is an ECP5 to `hw.target` (no floorplan for this device)."""
    device, family = "LFE5U-25F", "ecp5"


def test_flags_per_pe_on_ecp5(yosys, tmp_path):
    """On ECP5 every PE keeps its own flag registers through synthesis (the board builds'
    :func:`hw.target.keep_copies_script`): one ``valid`` flip-flop per PE, where Yosys
    otherwise merges the PEs of an anti-diagonal (rows + cols - 1 of them). Elsewhere the
    flags carry no :data:`hw.target.KEEP_COPY`."""
    from amaranth.back import rtlil

    from hw.target import KEEP_COPY
    from tests.hw.ecp5_synth import ecp5_flops

    rows, cols = 3, 4
    cfg = config(rows, cols)
    assert KEEP_COPY not in rtlil.convert(SystolicArray.from_config(cfg))
    text = rtlil.convert(SystolicArray.from_config(cfg), name="array", platform=_Ecp5())
    valid = r"pe_\d+_\d+\.ctl\.valid"
    assert ecp5_flops(yosys, tmp_path, text, "array", keep=False, nets=valid) < rows * cols
    assert ecp5_flops(yosys, tmp_path, text, "array", keep=True, nets=valid) == rows * cols


def test_control_skew_is_one_chain(yosys, tmp_path):
    """The rows' control skew is one chain of ``rows - 1 + Lm`` stages that every row taps,
    also on ECP5 with the keep script (a chain per row from the same gate put that gate in
    front of every row's first stage: rows * (rows - 1) / 2 + rows * Lm stages)."""
    from amaranth.back import rtlil

    from tests.hw.ecp5_synth import ecp5_flops

    rows, cols = 4, 2
    dut = SystolicArray.from_config(config(rows, cols, dsp="ecp5_registered"))
    stages = rows - 1 + dut.mult_latency
    text = rtlil.convert(dut, name="array", platform=_Ecp5())
    flops = ecp5_flops(yosys, tmp_path, text, "array", keep=True, nets=r"skew_ctl\d*_d\d+")
    assert 0 < flops <= 3 * stages, f"{flops} control skew flip-flops for {stages} stages"


@pytest.mark.parametrize("dsp,lutram", [("infer", False), ("infer", True),
                                        ("ecp5_registered", None)])
def test_latency_is_as_documented(dsp, lutram):
    """Row 0 of a tile's result is valid ``latency`` cycles after its ``last`` beat is taken."""
    cfg = config(3, 4, dsp=dsp)
    dut = SystolicArray.from_config(cfg, lutram_fifo=lutram)
    a, b = random_tiles(cfg, 1, seed=5, fixed_k=3)[0]
    beats = dut.encode_tile(a, b)
    seen = {}

    def benches():
        async def bench(ctx):
            ctx.set(dut.o_stream.ready, 1)
            cycle = 0
            for beat in beats:
                ctx.set(dut.i_stream.valid, 1)
                ctx.set(Value.cast(dut.i_stream.payload), beat)
                await ctx.tick()
                cycle += 1
            ctx.set(dut.i_stream.valid, 0)
            seen["last"] = cycle - 1
            while not ctx.get(dut.o_stream.valid):
                await ctx.tick()
                cycle += 1
            seen["row0"] = cycle
        return [bench]

    run_simulation(dut, benches, f"systolic_latency_{dsp}_{lutram}", deadline_cycles=200)
    assert seen["row0"] - seen["last"] == dut.latency
    assert dut.latency == 4 + dut.mult_latency + (3 if dut.lutram_fifo else 4)


@pytest.mark.parametrize("dsp,reset_at", [("infer", 23), ("ecp5_registered", 31),
                                           ("ecp5_registered", 9)])
def test_recovers_from_reset_mid_stream(dsp, reset_at):
    """A reset while tiles are in the array and results are leaving: afterwards only the
    results of the tiles sent after the reset come out, exactly (the PEs' result registers
    have no reset; their flags and the FIFO pointers do)."""
    cfg = config(3, 4, dsp=dsp)
    array = SystolicArray.from_config(cfg)
    rst = Signal()
    top = Module()
    top.submodules.array = ResetInserter({"sync": rst})(array)
    before = random_tiles(cfg, 8, seed=11)
    after = random_tiles(cfg, 12, seed=12)
    expected = np.concatenate([matmul_exact(a, b.T) for a, b in after])
    got = []

    def benches():
        async def driver(ctx):
            ctx.set(array.o_stream.ready, 1)
            for phase, tiles in enumerate((before, after)):
                beats = [w for a, b in tiles for w in array.encode_tile(a, b)]
                i = cycle = drain = 0
                while i < len(beats) or (phase == 1 and drain < 200):
                    if phase == 0 and cycle == reset_at:
                        break
                    drain += i == len(beats)
                    ctx.set(array.i_stream.valid, i < len(beats))
                    if i < len(beats):
                        ctx.set(Value.cast(array.i_stream.payload), beats[i])
                    _, _, ready, valid, o_valid, o_payload = await ctx.tick().sample(
                        array.i_stream.ready, array.i_stream.valid, array.o_stream.valid,
                        Value.cast(array.o_stream.payload))
                    i += bool(ready and valid)
                    if phase == 1 and o_valid:
                        got.append(o_payload)
                    cycle += 1
                if phase == 0:
                    assert i < len(beats), "the reset should hit the stream in flight"
                    ctx.set(array.i_stream.valid, 0)
                    ctx.set(rst, 1)
                    await ctx.tick()
                    ctx.set(rst, 0)
        return [driver]

    run_simulation(top, benches, f"systolic_reset_{dsp}_{reset_at}", deadline_cycles=2000)
    values, last = array.decode_rows(got)
    assert_equal(f"rows after the reset ({dsp})", expected, values)
    assert last.tolist() == [int(r == 2) for _ in after for r in range(3)]


def test_default_fifo_depth():
    """The default FIFO holds the rows of every tile in flight: ``latency + rows``."""
    dut = SystolicArray.from_config(config(4, 4))
    assert dut.fifo_depth == dut.latency + 4


def test_short_tiles_wait_for_the_drain():
    """With ``K < R`` the input holds ``last`` beats (documented throughput limit)."""
    cfg = config(4, 2)
    dut = SystolicArray.from_config(cfg)
    rng = np.random.default_rng(3)
    tiles = [(rng.integers(-9, 9, (4, 1)), rng.integers(-9, 9, (2, 1))) for _ in range(20)]
    log = []
    run_tiles(dut, tiles, 0.0, 0.0, "systolic_short", ready_log=log)
    offered = [ready for valid, ready in log if valid]
    assert offered.count(0) > 0


def test_from_config_reads_widths():
    cfg = attn.preset("icebreaker")
    dut = SystolicArray.from_config(cfg)
    assert (dut.rows, dut.cols, dut.a_bits, dut.b_bits, dut.acc_bits, dut.dsp) == \
        (cfg.rows, cfg.cols, cfg.a_bits, cfg.b_bits, cfg.acc_bits, cfg.dsp)
    assert dut.i_layout.size == cfg.rows * cfg.a_bits + cfg.cols * cfg.b_bits + 2
    assert dut.o_layout.size == cfg.cols * cfg.acc_bits + 1


def test_encode_decode_helpers():
    dut = SystolicArray(rows=2, cols=3, a_bits=4, b_bits=5, acc_bits=10)
    a = np.array([[-8, 7], [1, -1]])
    b = np.array([[-16, 15], [0, 3], [2, -2]])
    beats = dut.encode_tile(a, b)
    from sim.streams import unpack
    fields = [unpack(dut.i_layout, w) for w in beats]
    assert [f["first"] for f in fields] == [1, 0] and [f["last"] for f in fields] == [0, 1]
    word = sum((v & 0x3FF) << (10 * c) for c, v in enumerate([-512, 511, -1])) | 1 << 30
    values, last = dut.decode_rows([word])
    assert values.tolist() == [[-512, 511, -1]] and last.tolist() == [1]
    with pytest.raises(ValueError, match=r"a must be 2 x K and b 3 x K"):
        dut.encode_tile(a, b[:2])


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(rows=0), ValueError, "rows must be at least 1, not 0"),
    (dict(cols="4"), TypeError, "cols must be an int, not '4'"),
    (dict(a_bits=1), ValueError, "a_bits must be at least 2, not 1"),
    (dict(b_bits=2.0), TypeError, "b_bits must be an int, not 2.0"),
    (dict(acc_bits=20), ValueError, "acc_bits must be at least 24, not 20"),
    (dict(dsp="xilinx"), ValueError, "dsp must be one of infer, ecp5_registered, not 'xilinx'"),
    (dict(fifo_depth=1), ValueError, "fifo_depth must be at least 2, not 1"),
    (dict(split_acc="yes"), TypeError, "split_acc must be a bool or None, not 'yes'"),
    (dict(lutram_fifo=1), TypeError, "lutram_fifo must be a bool or None, not 1"),
    (dict(floorplan=None), TypeError, "floorplan must be a bool, not None"),
    (dict(claim_lead=-1), ValueError, "claim_lead must be None or an int >= 0, not -1"),
    (dict(claim_lead=True), ValueError, "claim_lead must be None or an int >= 0, not True"),
])
def test_invalid_parameters(kwargs, error, message):
    params = dict(rows=2, cols=2, a_bits=12, b_bits=12, acc_bits=30) | kwargs
    with pytest.raises(error, match=message):
        SystolicArray(**params)


def run_cocotb_tiles(sim, preset, changes, tiles, stalls, seed=1, **extra):
    """Build the array of ``attn.preset(preset).replace(**changes)`` as Verilog and run
    tests/hw/cocotb_systolic.py on ``sim``."""
    reason = simulator_missing(sim)
    if reason:
        pytest.skip(reason)
    cfg = attn.preset(preset).replace(**changes)
    tag = f"systolic_{cfg.rows}x{cfg.cols}_{cfg.dsp}"
    path = write_verilog(SystolicArray.from_config(cfg), BUILD / "verilog" / f"{tag}.v",
                         name="systolic")
    run_cocotb(sim=sim, verilog_file=path, toplevel="systolic",
               test_module="tests.hw.cocotb_systolic", build_name=tag,
               params={"preset": preset, "changes": changes, "tiles": tiles,
                       "stalls": stalls, "seed": seed, **extra})


# Larger arrays on compiled simulators: 4 stall patterns x 250 tiles = 1000 tiles each.
COCOTB_RUNS = [
    ("verilator", "default", {"rows": 8, "cols": 8}),
    ("verilator", "icebreaker", {}),
    ("icarus", "tiny", {"rows": 3, "cols": 5}),
]


@pytest.mark.parametrize("sim,preset,changes", COCOTB_RUNS,
                         ids=[f"{s}-{p}-{c.get('rows', '')}" for s, p, c in COCOTB_RUNS])
def test_cocotb_random_tiles(sim, preset, changes):
    run_cocotb_tiles(sim, preset, changes, TILES, [list(s) for s in STALLS])


@pytest.mark.slow
@pytest.mark.parametrize("sim", ["icarus", "verilator"])
def test_cocotb_registered_dsp_model(sim):
    run_cocotb_tiles(sim, "ulx3s", {"rows": 4, "cols": 6}, TILES, [list(s) for s in STALLS])


@pytest.mark.slow
@pytest.mark.parametrize("stall_in,stall_out", [(0.0, 0.0), (0.7, 0.7)])
@pytest.mark.parametrize("rows,cols", SHAPES + [(5, 3), (6, 6)])
def test_random_tiles_long(rows, cols, stall_in, stall_out):
    cfg = config(rows, cols)
    dut = SystolicArray.from_config(cfg)
    tiles = random_tiles(cfg, 3000, seed=rows * 31 + cols, max_k=cfg.max_reduction)
    run_tiles(dut, tiles, stall_in, stall_out, f"systolic_long_{rows}x{cols}_{stall_in}")
