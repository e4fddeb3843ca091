"""The attention core against golden/: every output integer, across shapes, masks, stalls,
back-to-back runs, a reset in the middle of a run, and three simulators."""

import numpy as np
import pytest
from amaranth.hdl import Module, ResetInserter, Signal, Value
from amaranth.lib.memory import Memory

from attn import preset
from attn.config import DSP_MODES
from golden import attention_int, calibrate, make_mask, quantize_input
from hw.bram import RegisteredMemory
from hw.core import AttentionCore
from hw.core_io import CoreShape, collect_output, core_streams
from sim import core_sim
from sim.amaranth_sim import run_simulation
from sim.cocotb_runner import simulator_missing
from sim.core_cocotb import run_core_hdl
from sim.core_sim import pack_streams, simulate_core
from sim.scoreboard import assert_equal
from sim.streams import get_all, unpack
from tests.golden.test_model import random_layer


def layer(cfg, seq_len, d_model, heads, seed=0, causal=False, valid_len=None):
    mha = random_layer(d_model, heads, seed)
    x = np.random.default_rng(seed + 1).normal(0, 1, (seq_len, d_model))
    if seed % 2:
        x[:, seed % d_model] *= 10          # an outlier feature now and then
    mask = make_mask(seq_len, causal=causal, valid_len=valid_len)
    qm = calibrate(cfg, mha, x, mask)
    xi = quantize_input(x, qm, cfg)
    return qm, xi, attention_int(cfg, qm, xi, mask)


# (preset, L, D, H, causal, valid_len, stall): partial row/key/channel blocks, L = 1, H = 1,
# d not a multiple of the array, masks, stalls on every stream
CASES = [
    ("tiny", 4, 8, 2, False, None, 0.0),
    ("tiny", 8, 16, 2, True, None, 0.0),
    ("tiny", 5, 12, 2, False, 3, 0.5),
    ("tiny", 1, 16, 1, False, None, 0.0),
    ("tiny", 3, 10, 2, True, 2, 0.3),
    ("tiny", 7, 6, 1, False, 0, 0.0),
    ("icebreaker_mini", 8, 16, 2, True, None, 0.3),
    ("icebreaker_mini", 5, 12, 2, False, 4, 0.0),
]


@pytest.mark.parametrize("name,seq_len,d_model,heads,causal,valid_len,stall", CASES)
def test_core_amaranth(name, seq_len, d_model, heads, causal, valid_len, stall):
    cfg = preset(name)
    qm, xi, expected = layer(cfg, seq_len, d_model, heads, seed=seq_len + d_model,
                             causal=causal, valid_len=valid_len)
    run = simulate_core(cfg, qm, xi, causal=causal, valid_len=valid_len, stall=stall,
                        name=f"core_{name}_{seq_len}_{d_model}_{heads}")
    assert_equal("core output y", expected.y, run.y)
    check_beats(run.counters, CoreShape(cfg, seq_len, d_model, heads), causal, valid_len)


def check_beats(counters, shape, causal, valid_len=None):
    """The array and the softmax took exactly the beats the controller's loop bounds give:
    keys a causal or padding mask hides from a whole row block are skipped, nothing is
    issued twice."""
    assert counters["array_beats"] == shape.array_beats(causal, valid_len)
    assert counters["softmax_beats"] == shape.softmax_beats(causal, valid_len)


@pytest.mark.parametrize("rows,cols,writers,shape,stall", [
    (4, 4, 0, (9, 4, 1), 0.5),   # one word per token: a row block is read as soon as it is in
    (2, 4, 0, (7, 8, 2), 0.0),   # C > R: the banks write X slower than it comes, X waits
    (4, 2, 0, (6, 6, 3), 0.7),
    (4, 4, 1, (9, 8, 2), 0.0),   # one serializer for all banks
    (4, 2, 4, (6, 6, 3), 0.3),   # one per bank, and more than the K banks
])
def test_core_lane_banks(rows, cols, writers, shape, stall):
    """X/Q and K banks write a row a lane a cycle (hw/lane_bank.py) from the writer's
    serializers: a row block of X is fed only once its bank has written it, full queues hold
    the X stream and busy serializers the writer, and each row lands in its own bank."""
    cfg = preset("default").replace(max_seq_len=12, max_d_model=24, max_heads=4, rows=rows,
                                    cols=cols, bank_writers=writers)
    qm, xi, expected = layer(cfg, *shape, seed=rows + cols, causal=True)
    run = simulate_core(cfg, qm, xi, causal=True, stall=stall,
                        name=f"core_lanes_{rows}x{cols}_{writers}_{shape[0]}")
    assert_equal(f"core output y ({rows}x{cols} array, {cfg.bank_writer_count} bank writers, "
                 f"L, D, H = {shape})", expected.y, run.y)
    check_beats(run.counters, CoreShape(cfg, *shape), True)


@pytest.mark.parametrize("units,stall", [(1, 0.3), (4, 0.0)])
def test_core_requant_units(units, stall):
    """Any number of requantizers (one per lane, or one for all) gives the same integers: each
    takes its lanes of every result row, in lockstep with the others."""
    cfg = preset("default").replace(max_seq_len=8, max_d_model=16, max_heads=2,
                                    requant_units=units)
    qm, xi, expected = layer(cfg, 6, 12, 2, seed=units, causal=True)
    run = simulate_core(cfg, qm, xi, causal=True, stall=stall, name=f"core_requant_{units}")
    assert_equal(f"core output y ({cfg.requant_unit_count} requantizers)", expected.y, run.y)


@pytest.mark.slow
@pytest.mark.parametrize("dsp", DSP_MODES)
@pytest.mark.parametrize("seed", range(12))
def test_core_random_shapes(seed, dsp):
    """Nightly size: random L, D, H, masks and stalls on the default preset's widths with
    a small array, with inferred multipliers and with the ECP5's registered DSPs (and the
    feeder that goes with them, :attr:`AttentionCore.feeder_claims`: one address stage at
    odd seeds, two at even ones)."""
    rng = np.random.default_rng(seed)
    cfg = preset("default").replace(max_seq_len=12, max_d_model=24, max_heads=4,
                                    rows=int(rng.choice([1, 2, 4])),
                                    cols=int(rng.choice([1, 2, 4])), dsp=dsp,
                                    address_stages=seed % 2 + 1 if dsp != "infer" else 0)
    heads = int(rng.integers(1, 5))
    d_model = heads * int(rng.integers(1, 24 // heads + 1))
    seq_len = int(rng.integers(1, 13))
    causal = bool(rng.integers(2))
    valid_len = int(rng.integers(0, seq_len + 1)) if rng.random() < 0.3 else None
    qm, xi, expected = layer(cfg, seq_len, d_model, heads, seed=seed, causal=causal,
                             valid_len=valid_len)
    run = simulate_core(cfg, qm, xi, causal=causal, valid_len=valid_len,
                        stall=float(rng.choice([0.0, 0.3, 0.7])), seed=seed,
                        name=f"core_random_{seed}_{dsp}")
    assert_equal(f"core output y ({seq_len}x{d_model}x{heads}, {cfg.rows}x{cfg.cols})",
                 expected.y, run.y)
    check_beats(run.counters, CoreShape(cfg, seq_len, d_model, heads), causal, valid_len)


@pytest.mark.parametrize("rows,cols,masks,slots,shape,causal,valid_len", [
    (1, 2, True, 2, (5, 8, 2), True, None),    # R = 1: row block 0's P.V reduces over 1 key
    (1, 1, True, 4, (4, 4, 1), False, 1),      # padding: one key for every row block
    (2, 4, True, 4, (8, 8, 2), False, 5),      # padding inside a key block, no causal mask
    (2, 4, True, 8, (7, 8, 2), True, 3),       # C > R: a key block spans two row blocks
    (4, 2, True, 4, (6, 8, 1), True, 0),       # causal and every key masked: probabilities 0
    (4, 2, False, 2, (6, 8, 2), False, None),  # no mask hardware: every key, always
    (2, 2, True, 4, (8, 8, 2), True, None),
    (2, 4, True, 4, (8, 8, 4), False, None),   # d = 2: S three blocks ahead of the softmax
    (2, 4, True, 2, (8, 8, 4), True, 7),
])
def test_core_key_bounds(rows, cols, masks, slots, shape, causal, valid_len):
    """With a causal mask a row block computes scores, softmax rows and P.V sums only up to
    its last query's key, with a padding mask only up to the last key it leaves (at least
    one), with S up to ``slots - 1`` blocks ahead of P.V: exact output, and exactly the beats
    of :meth:`CoreShape.array_beats`, fewer than without the padding mask."""
    cfg = preset("default").replace(max_seq_len=8, max_d_model=8, max_heads=4, rows=rows,
                                    cols=cols, masks=masks, score_slots=slots)
    qm, xi, expected = layer(cfg, *shape, seed=rows * 8 + cols, causal=causal,
                             valid_len=valid_len)
    run = simulate_core(cfg, qm, xi, causal=causal, valid_len=valid_len, stall=0.2,
                        name=f"core_bounds_{rows}x{cols}_{int(masks)}_{slots}_{shape[0]}")
    assert_equal(f"core output y ({rows}x{cols}, L, D, H = {shape}, causal={causal}, "
                 f"valid_len={valid_len}, {slots} slots)", expected.y, run.y)
    core_shape = CoreShape(cfg, *shape)
    check_beats(run.counters, core_shape, causal, valid_len)
    if masks and valid_len is not None and valid_len < shape[0]:
        assert run.counters["array_beats"] < core_shape.array_beats(causal)


@pytest.mark.parametrize("units,shape,causal,valid_len", [
    (2, (7, 12, 2), True, None),
    (4, (12, 24, 3), False, 5),
    (4, (3, 8, 1), True, None),
])
def test_core_parallel_softmax_units(units, shape, causal, valid_len):
    cfg = preset("default").replace(max_seq_len=12, max_d_model=24, max_heads=4, rows=4,
                                    cols=2, softmax_units=units)
    qm, xi, expected = layer(cfg, *shape, seed=units, causal=causal, valid_len=valid_len)
    run = simulate_core(cfg, qm, xi, causal=causal, valid_len=valid_len, stall=0.3,
                        name=f"core_units_{units}_{shape[0]}")
    assert_equal(f"core output y with {units} softmax units", expected.y, run.y)
    check_beats(run.counters, CoreShape(cfg, *shape), causal, valid_len)


def test_core_rejects_bad_softmax_units():
    """The core takes its softmax units from the configuration, which refuses a bad count."""
    with pytest.raises(ValueError, match=r"softmax_units \(3\) must be 0 or a power of two "
                                         r"dividing rows \(2\)"):
        AttentionCore(preset("tiny").replace(softmax_units=3))


def test_core_takes_softmax_units_from_config():
    assert AttentionCore(preset("ulx3s_8x4")).softmax_units == 2
    assert AttentionCore(preset("tiny").replace(rows=4, softmax_units=4)).softmax_units == 4


def test_core_back_to_back_runs():
    cfg = preset("tiny")
    qm, xi, expected = layer(cfg, 6, 8, 2, seed=3, causal=True)
    run = simulate_core(cfg, qm, xi, causal=True, runs=2, stall=0.2, name="core_twice")
    assert_equal("second run output y", expected.y, run.y)


def test_core_sim_reports_a_deadlock(monkeypatch):
    """Half the weights never come: the harness stops the run with the counters once the core
    has stood still for ``stuck_cycles``, instead of waiting for its deadline."""
    cfg = preset("tiny")
    qm, xi, _ = layer(cfg, 4, 8, 2, seed=5)
    streams = core_sim.core_streams

    def starved(*args, **kwargs):
        whole = streams(*args, **kwargs)
        return {**whole, "w": whole["w"][:len(whole["w"]) // 2]}

    monkeypatch.setattr(core_sim, "core_streams", starved)
    with pytest.raises(AssertionError, match=r"no array or softmax beat for 3000 cycles "
                                             r"\(deadlock\); counters \{'cycles'"):
        simulate_core(cfg, qm, xi, name="core_starved", stuck_cycles=3000)


# registered DSPs on an array with more rows than columns: paired tiles, early phases
PAIRED_ARRAY = dict(dsp="ecp5_registered", rows=4, cols=2, max_heads=4, max_seq_len=16)


@pytest.mark.parametrize("overrides, reset_at", [
    ({}, 300),
    (PAIRED_ARRAY, 150),
])
def test_core_recovers_from_reset_mid_run(overrides, reset_at):
    """Reset during the projections; the next run (all streams sent again) is exact."""
    cfg = preset("tiny").replace(**overrides)
    qm, xi, expected = layer(cfg, 5, 8, 2, seed=4)
    core = AttentionCore(cfg)
    rst = Signal()
    top = Module()
    top.submodules.core = ResetInserter({"sync": rst})(core)
    packed = pack_streams(core, core_streams(cfg, qm, xi))
    out_beats = CoreShape(cfg, 5, 8, 2).wpd * 5
    state = {"epoch": 1}
    out = []

    async def start(ctx):
        ctx.set(Value.cast(core.start.payload), packed["start"])
        ctx.set(core.start.valid, 1)
        await ctx.tick().until(core.start.ready)
        ctx.set(core.start.valid, 0)

    def benches():
        async def driver(ctx):
            await start(ctx)
            await ctx.tick().repeat(reset_at)           # well into the projections
            assert ctx.get(core.busy) and ctx.get(core.counters[1]) > 0
            ctx.set(rst, 1)
            await ctx.tick()
            ctx.set(rst, 0)
            state["epoch"] = 2
            await ctx.tick()
            assert not ctx.get(core.busy)
            await start(ctx)

        def feeder(name):
            stream = getattr(core, f"{name}_stream")
            beats = packed[name]

            async def feed(ctx):   # restarts from the first beat when the epoch changes
                epoch, i = 1, 0
                while not (epoch == 2 and i == len(beats)):
                    if state["epoch"] != epoch:
                        epoch, i = state["epoch"], 0
                    ctx.set(stream.valid, i < len(beats))
                    if i < len(beats):
                        ctx.set(Value.cast(stream.payload), beats[i])
                    _, _, ready, valid = await ctx.tick().sample(stream.ready, stream.valid)
                    if ready and valid:
                        i += 1
                ctx.set(stream.valid, 0)
            return feed

        async def sink(ctx):
            out.extend(await get_all(ctx, core.o_stream, out_beats))
            assert state["epoch"] == 2
        return [driver, feeder("p"), feeder("x"), feeder("w"), sink]

    run_simulation(top, benches, "core_reset", deadline_cycles=50_000)
    layout = core.o_stream.payload.shape()
    y = collect_output(cfg, [unpack(layout, v)["y"] for v in out], 5, 8)
    assert_equal("output after reset", expected.y, y)


def test_core_rejects_non_power_of_two_arrays():
    with pytest.raises(ValueError, match="cols must be a power of two for the attention core, "
                                         "not 3"):
        AttentionCore(preset("tiny").replace(cols=3))


class _Platform:
    def __init__(self, device, family):
        self.device, self.family = device, family


@pytest.mark.parametrize("name, device, family, expected", [
    ("tiny", "iCE40UP5K", "ice40", "infer"),          # 4 PE blocks + 1 requantizer x 3
    ("icebreaker", "iCE40UP5K", "ice40", "shift_add"),  # 8 PE blocks leave none
    ("tiny", "iCE40HX8K", "ice40", "shift_add"),      # no SB_MAC16 at all
    ("icebreaker", "LFE5U-85F", "ecp5", "slices"),
    ("ulx3s_8x4", "LFE5U-85F", "ecp5", "ecp5_registered"),
])
def test_core_requantizer_multiplier_fits_the_dsp_budget(name, device, family, expected):
    cfg = preset(name)
    core = AttentionCore(cfg)
    assert core.requant_multiplier(_Platform(device, family)) == expected
    # registered DSPs in simulation too (the hardware's timing); otherwise "infer"
    assert core.requant_multiplier(None) == (
        "ecp5_registered" if cfg.dsp == "ecp5_registered" else "infer")


@pytest.mark.parametrize("device, family", [("LFE5U-85F", "ecp5"), ("iCE40UP5K", "ice40")])
@pytest.mark.parametrize("params_ram", ["lut", "block"])
def test_core_memory_mapping(device, family, params_ram):
    """On ECP5 the P banks, whose read address (the reduction counter) all R banks share, are
    block RAM and the constants LUT RAM, or block RAM with ``params_ram="block"``; iCE40 has
    no LUT RAM and decides by itself."""
    cfg = preset("ulx3s_8x4").replace(params_ram=params_ram)
    m = AttentionCore(cfg).elaborate(_Platform(device, family))
    probs = [m.submodules[f"probs_{r}"].attrs.get("ram_style") for r in range(cfg.rows)]
    params = m.submodules["params"].attrs.get("ram_style")
    if family == "ecp5":
        assert probs == ["block"] * cfg.rows
        assert params == {"lut": "distributed", "block": "block"}[params_ram]
    else:
        assert probs == [None] * cfg.rows and params is None


@pytest.mark.parametrize("name", ["ulx3s_8x4", "tiny"])
def test_core_v_through_output_registers(name):
    """With registered reads V is a memory per lane read through its block RAM's output
    register (:class:`hw.bram.RegisteredMemory`, DP16KD on ECP5), each at its own copy of the
    read address and written from its own registers (kept by synthesis), and that output
    register is the beat's V operand (no ``v_q`` after it); elsewhere one memory of C lanes
    and a ``v_q`` register."""
    import re

    from amaranth.back import rtlil

    from hw.target import KEEP_COPY

    cfg = preset(name)
    core = AttentionCore(cfg)
    platform = _Platform("LFE5U-85F", "ecp5")
    m = core.elaborate(platform)
    text = rtlil.convert(core, platform=platform)
    defined = set(re.findall(r"wire width \d+ \\(\S+)\n", text))
    kept = set(re.findall(rf"attribute \\{KEEP_COPY} 1\n\s*wire width \d+ \\(\S+)\n", text))
    copies = {f"v_{what}_{c}" for c in range(cfg.cols)
              for what in ("raddr", "w_addr_q", "w_data_q", "w_en_q")}
    if core.registered_reads:
        lanes = [m.submodules[f"v_{c}"] for c in range(cfg.cols)]
        assert all(isinstance(lane, RegisteredMemory) and lane.width == cfg.qkv_bits
                   for lane in lanes)
        assert copies <= kept, sorted(copies - kept)
        assert "v_q" not in defined
    else:
        assert isinstance(m.submodules["v"], Memory)
        assert "v_q" in defined and not copies & defined


@pytest.mark.parametrize("sim,name,shape,stall", [
    ("icarus", "tiny", (5, 12, 2), 0.3),
    ("verilator", "default", (16, 32, 4), 0.2),
    ("verilator", "ulx3s_8x4", (20, 40, 4), 0.2),
])
def test_core_hdl(sim, name, shape, stall):
    """The generated Verilog, two runs back to back with stalls, in cocotb."""
    reason = simulator_missing(sim)
    if reason:
        pytest.skip(reason)
    cfg = preset(name)
    qm, xi, expected = layer(cfg, *shape, seed=9, causal=True)
    y, info = run_core_hdl(sim, cfg, qm, xi, causal=True, stall=stall, runs=2,
                           build_name=f"test_core_{name}")
    assert_equal(f"core output y on {sim}", expected.y, y)
    assert info["runs"][0] == info["runs"][1] or stall > 0   # same work, same counters
    check_beats(info["counters"], CoreShape(cfg, *shape), True)


@pytest.mark.parametrize("units", [1, 2])
def test_core_probabilities_probe(units):
    """The probabilities the softmax units produce (recorded in the simulator) are golden's."""
    cfg = preset("tiny").replace(softmax_units=units)
    qm, xi, expected = layer(cfg, 5, 12, 2, seed=9, causal=True)
    run = simulate_core(cfg, qm, xi, causal=True, name=f"core_probs_{units}",
                        record_probs=True)
    assert_equal("softmax probabilities", expected.probs, run.probs)
    assert_equal("core output y", expected.y, run.y)


@pytest.mark.parametrize("overrides, shape", [
    ({}, (7, 12, 2)), (dict(address_stages=2), (7, 12, 2)), ({}, (1, 16, 1)),
    (dict(address_stages=2), (1, 16, 1)), ({}, (3, 1, 1)), (dict(address_stages=2), (3, 1, 1)),
    (dict(rows=8, cols=2, softmax_units=1, max_heads=4), (2, 16, 4)),
    (dict(requant_units=2, softmax_units=2), (7, 12, 2)),
    (dict(rows=8, cols=4, requant_units=4, bank_writers=1, softmax_units=1, max_heads=4,
          max_seq_len=16), (13, 16, 2)),
])
def test_core_with_registered_dsps(overrides, shape):
    """The ECP5 registered-DSP latency (behavioural model) through the whole core, with the
    feeder claiming the array's output room as it issues a tile's last beat (L = 1 makes every
    P.V beat a tile's last, which must wait for the claim: the array's R-cycle gap between
    last beats, kept by the issue logic alone) and the buffer after it (output stalls hold
    the requantizers: a result row the buffer must keep), and the registered reads
    (:attr:`AttentionCore.registered_reads`): eight rows of two keys for one softmax unit
    keep it from taking every score (it held back half of them), so scores wait in its
    reader's queue while the reader's stages go on. Two requantizers of one lane each finish
    a tile of two rows in two cycles, sooner than the next tile's constants are read ahead
    (:attr:`AttentionCore.params_ahead`): the requantizers must wait for them. One serializer
    for rows of four lanes falls behind the requantizers, which then wait for credit; with
    one lane per requantizer whether they take a row is decided a cycle ahead. With D = 1
    each projection tile reduces over one beat, so a beat that reads a stored weight is
    followed by the next tile's beat that writes a new one at the same address: the read
    must come first (it did not with :attr:`AttentionCore.staged_addresses` delaying the
    reads and not the writes). The shapes run with one address stage (FA) and two (FB
    too)."""
    cfg = preset("tiny").replace(dsp="ecp5_registered", **overrides)
    assert AttentionCore(cfg).registered_reads
    # With D = 1 every 8-bit weight quantizes to +-127: at seed 9 the signs of W_q, W_k and
    # W_v alternate, so a beat that read the next tile's weight would change the result (at
    # seed 5 all three are -127)
    seed = 9 if shape[1] == 1 else 5
    qm, xi, expected = layer(cfg, *shape, seed=seed, causal=True)
    run = simulate_core(cfg, qm, xi, causal=True, stall=0.3,
                        name=f"core_registered_dsp_{cfg.rows}_{shape[0]}_"
                             f"{cfg.address_stage_count}")
    assert_equal("core output y", expected.y, run.y)
    check_beats(run.counters, CoreShape(cfg, *shape), causal=True)


# (L, D, H, stall): 18 projection tiles in nine pairs; three (the last one alone); one row
# block; D = 1 (each tile one beat, the two halves of the weights read in turn); stalls
PAIRED = [(7, 12, 2, 0.0), (5, 2, 1, 0.3), (1, 4, 1, 0.0), (9, 1, 1, 0.3), (13, 6, 3, 0.5)]


@pytest.mark.parametrize("seq_len, d_model, heads, stall", PAIRED)
def test_core_paired_tiles(seq_len, d_model, heads, stall):
    """With more array rows than columns and registered DSPs the projections run their tiles
    in pairs (:attr:`AttentionCore.paired_tiles`): tile t on a row block, tile t + 1 on the
    same one, then both on the next; each keeps its weights in its half of the weights
    memory and its own constants and destination."""
    cfg = preset("tiny").replace(**PAIRED_ARRAY)
    assert AttentionCore(cfg).paired_tiles
    qm, xi, expected = layer(cfg, seq_len, d_model, heads, seed=9 if d_model == 1 else 3,
                             causal=True)
    run = simulate_core(cfg, qm, xi, causal=True, stall=stall,
                        name=f"core_paired_{seq_len}_{d_model}_{heads}")
    assert_equal(f"core output y (paired tiles, L, D, H = {seq_len, d_model, heads})",
                 expected.y, run.y)
    check_beats(run.counters, CoreShape(cfg, seq_len, d_model, heads), causal=True)


def test_core_paired_tiles_take_x_as_it_comes(monkeypatch):
    """While X loads (C values a cycle, a beat takes R) two tiles per row block leave the
    array waiting less than one: the same layer, exact both ways, starves the array fewer
    cycles with pairs."""
    cfg = preset("tiny").replace(**PAIRED_ARRAY)
    qm, xi, expected = layer(cfg, 16, 8, 2, seed=4)
    runs = {}
    for paired in (True, False):
        monkeypatch.setattr(AttentionCore, "paired_tiles", property(lambda self, p=paired: p))
        runs[paired] = simulate_core(cfg, qm, xi, name=f"core_paired_x_{paired}")
        assert_equal(f"core output y (paired tiles {paired})", expected.y, runs[paired].y)
    assert runs[True].counters["array_starved"] < runs[False].counters["array_starved"]
    assert runs[True].cycles < runs[False].cycles


def test_core_results_queue_full():
    """An output that takes a row only now and then (95 % backpressure) fills the writer's
    results queue: the requantizers, which take a row a cycle after deciding to (one lane
    each, registered DSPs), must stop while every row inside them or queued has a place, by
    the credit count of the cycle they decide for, not of the one before (with that one a
    row more went in than the queue holds, and was lost)."""
    cfg = preset("tiny").replace(dsp="ecp5_registered", requant_units=2, softmax_units=2)
    qm, xi, expected = layer(cfg, 7, 12, 2, seed=5)
    run = simulate_core(cfg, qm, xi, out_stall=0.95, name="core_results_queue_full",
                        deadline_cycles=20_000)
    assert_equal("core output y", expected.y, run.y)


@pytest.mark.parametrize("name, stages, per_lane, fb", [
    ("ulx3s_8x4", 0, True, False), ("ulx3s_8x4", 2, True, True), ("tiny", 0, False, False),
])
def test_core_feed_lanes_apart(name, stages, per_lane, fb):
    """With registered reads each lane of the array's beat (R operand rows, C columns) has
    its own copy of the beat's selects, a copy that synthesis keeps
    (:data:`hw.target.KEEP_COPY`), and no queue before the array (the feeder claims the
    array's output room as it issues: the array takes every beat), the softmax units'
    counters take the end of a P.V op from a register, and the requantizers take their
    constants from two register sets read ahead, each requantizer with its own copy of the
    set's select, and each X/Q bank's token count is compared with the row block in a
    register of its own, and the read addresses and the beat's fields pass a register per
    group of four memories or lanes where there are two address stages
    (:attr:`AttentionCore.staged_addresses`, by default on arrays of more than 64 PEs), and
    the issue's beats go through the beat queue; elsewhere one select and none of those
    registers."""
    import re

    from amaranth.back import rtlil

    from hw.target import KEEP_COPY

    cfg = preset(name).replace(address_stages=stages)
    core = AttentionCore(cfg)
    assert core.registered_reads == per_lane
    text = rtlil.convert(core, platform=_Platform("LFE5U-85F", "ecp5"))
    kept = set(re.findall(rf"attribute \\{KEEP_COPY} 1\n\s*wire width \d+ \\(\S+)\n", text))
    lanes = [f"a{r}" for r in range(cfg.rows)] + [f"b{c}" for c in range(cfg.cols)]
    sels = {f"f2_sel_{lane}" for lane in lanes}
    sels |= {f"params_sel_{g}" for g in range(core.requant_units)}
    assert "feed_q" not in text
    # the P.V end for the softmax units' counters, the two constants sets and each X/Q
    # bank's "this row block's tokens are in" are registers
    registers = {"pv_ended", "params_0", "params_1"}
    registers |= {f"x_tok_ok_{r}" for r in range(cfg.rows)}
    # the beat queue's two entries and its read pointer (:attr:`AttentionCore.beat_queue`)
    registers |= {"beat_0", "beat_1", "beat_r_ptr"}
    assert core.beat_queue == per_lane
    defined = set(re.findall(r"wire width \d+ \\(\S+)\n", text))
    # FB: the read addresses and the beat's fields go to a register per group of memories or
    # lanes, which FA's copies take (and the weights are written from FB)
    row_groups, col_groups = (range(-(-n // core.FB_GROUP)) for n in (cfg.rows, cfg.cols))
    staged = {f"{name}_g{g}" for name in ("xq_raddr", "p_raddr", "fa_rows")
              for g in row_groups}
    staged |= {f"{name}_g{g}" for name in ("k_raddr", "v_raddr", "fa_cols")
               for g in col_groups}
    staged |= {"w_raddr_g0"}
    assert core.staged_addresses == fb
    if per_lane:
        assert sels <= kept, sorted(sels - kept)
        assert registers <= defined, sorted(registers - defined)
        if fb:
            assert staged <= kept, sorted(staged - kept)
            assert "w_waddr" in defined
        else:
            assert not (staged | {"w_waddr"}) & defined
    else:
        assert not kept & sels and "f2_sel_" not in text and "params_sel_" not in text
        assert not (registers | staged | {"w_waddr"}) & defined
