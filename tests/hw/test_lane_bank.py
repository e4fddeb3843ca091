# amaranth: UnusedElaboratable=no
"""hw/lane_bank.py: rows written through the queue land lane by lane where a model of the
memory puts them; ``idle``, ``tag_done`` and the write rate keep their promises; a serializer
turns rows into the lane writes of the direct port, in order, a lane a cycle."""

import random

import pytest
from amaranth import Elaboratable, Module, Signal, signed

from hw.lane_bank import LaneBank, LaneSerializer
from sim.amaranth_sim import run_simulation


def _plan(lanes, rows, rng):
    """Random rows. Untagged rows share words 0..3 (they overwrite each other); tagged rows get
    words of their own, so their values stay until the end."""
    plan, fresh = [], 4
    for i in range(rows):
        tag = int(rng.random() < 0.4)
        mask = (1 << lanes) - 1 if i % 4 == 0 else rng.randrange(1 << lanes)
        if tag:
            mask |= 1      # a tagged row writes at least lane 0
            word, fresh = fresh, fresh + 1
        else:
            word = rng.randrange(4)
        plan.append({"word": word, "data": [rng.randrange(-128, 128) for _ in range(lanes)],
                     "mask": mask, "tag": tag})
    return plan, fresh


def _model(rows, lanes, model=None):
    """Address -> value after ``rows`` (in order) wrote their masked lanes over ``model``."""
    model = dict(model or {})
    for row in rows:
        for lane in range(lanes):
            if row["mask"] >> lane & 1:
                model[row["word"] * lanes + lane] = row["data"][lane]
    return model


async def _offer(ctx, stream, row):
    """Offer ``row`` on ``stream`` and return after the cycle it was taken in."""
    ctx.set(stream.payload, row)
    ctx.set(stream.valid, 1)
    await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)


def _offer_all(stream, plan, rng, state):
    """A testbench offering the rows of ``plan`` with random gaps; it sets
    ``state["offered"]`` when the last one is taken."""
    async def writer(ctx):
        for row in plan:
            while rng.random() < 0.3:
                await ctx.tick()
            await _offer(ctx, stream, row)
        state["offered"] = True
    return writer


async def _check_memory(ctx, dut, model):
    """Read every address of ``model`` through the read port and compare."""
    for addr, value in sorted(model.items()):
        ctx.set(dut.r_addr, addr)
        ctx.set(dut.r_en, 1)
        await ctx.tick()
        got = ctx.get(dut.r_data)
        assert got == value, f"address {addr}: read {got}, the last write was {value}"


@pytest.mark.parametrize("lanes,queue_depth,ready_registered,w_registered",
                         [(1, 2, False, False), (4, 2, False, False), (8, 3, False, False),
                          (4, 1, True, False), (8, 3, True, False), (4, 1, True, True),
                          (8, 2, True, True)])
def test_rows_land_in_order(lanes, queue_depth, ready_registered, w_registered):
    """Random rows with random gaps. After each ``tag_done`` the tagged row is readable from
    the next cycle; once ``idle`` every address holds what the last row to write it wrote
    (with ``w_registered`` too: ``idle`` waits for a row still in the input register)."""
    rng = random.Random(lanes)
    plan, words = _plan(lanes, 80, rng)
    dut = LaneBank(lanes=lanes, shape=signed(8), words=words, queue_depth=queue_depth,
                   ready_registered=ready_registered, w_registered=w_registered)
    state = {"offered": False}

    writer = _offer_all(dut.w_stream, plan, rng, state)

    async def reader(ctx):
        # one read a cycle: the row whose tag_done came last cycle, checked the cycle after
        tagged = iter(row for row in plan if row["tag"])
        seen, due, expect = 0, None, None
        while not (state["offered"] and ctx.get(dut.idle) and due is None and expect is None):
            if expect is not None:
                got = ctx.get(dut.r_data)
                assert got == expect[1], f"tagged row {expect[0]}: read {got} the cycle " \
                                         f"after tag_done, wrote {expect[1]}"
                expect = None
            if due is not None:
                ctx.set(dut.r_addr, due[1])
                ctx.set(dut.r_en, 1)
                expect, due = (due[0], due[2]), None
            else:
                ctx.set(dut.r_en, 0)
            if ctx.get(dut.tag_done):
                row = next(tagged)
                last = max(lane for lane in range(lanes) if row["mask"] >> lane & 1)
                due = (seen, row["word"] * lanes + last, row["data"][last])
                seen += 1
            await ctx.tick()
        assert seen == sum(row["tag"] for row in plan), \
            f"{seen} tag_done pulses for {sum(row['tag'] for row in plan)} tagged rows"
        await _check_memory(ctx, dut, _model(plan, lanes))

    async def idle_means_written(ctx):
        # `idle` in a cycle: every tagged row taken before it has had its `tag_done`
        taken = done = 0
        async for _, _, valid, ready, tag, idle, tag_done in ctx.tick().sample(
                dut.w_stream.valid, dut.w_stream.ready, dut.w_stream.payload.tag, dut.idle,
                dut.tag_done):
            assert not idle or done == taken, \
                f"idle with {taken - done} tagged rows taken and not yet written"
            taken += valid and ready and tag
            done += tag_done

    run_simulation(dut, lambda: [writer, reader],
                   f"lane_bank_{lanes}_{queue_depth}_{int(ready_registered)}_"
                   f"{int(w_registered)}",
                   deadline_cycles=40 * len(plan) * lanes, processes=[idle_means_written])


@pytest.mark.parametrize("lanes,ready_registered", [(4, False), (8, False), (4, True)])
def test_burst_rate(lanes, ready_registered):
    """A burst of ``queue_depth`` full rows is taken in as many cycles, and the bank writes one
    lane a cycle: idle again ``rows * lanes`` cycles later, plus the queue's latency (with
    ``ready_registered`` too: the burst fits the ready of the cycle before)."""
    depth = 3
    dut = LaneBank(lanes=lanes, shape=signed(8), words=8, queue_depth=depth,
                   ready_registered=ready_registered)

    async def bench(ctx):
        cycles = 0              # from the cycle the first row is offered
        for i in range(depth):
            ctx.set(dut.w_stream.payload, {"word": i, "data": [i] * lanes,
                                           "mask": (1 << lanes) - 1, "tag": 0})
            ctx.set(dut.w_stream.valid, 1)
            assert ctx.get(dut.w_stream.ready), f"row {i} of the burst waited"
            await ctx.tick()
            cycles += 1
        ctx.set(dut.w_stream.valid, 0)
        while not ctx.get(dut.idle):
            await ctx.tick()
            cycles += 1
        assert depth * lanes <= cycles <= depth * lanes + 2, \
            f"{depth} rows of {lanes} lanes took {cycles} cycles to write"

    run_simulation(dut, lambda: [bench], f"lane_bank_rate_{lanes}_{int(ready_registered)}",
                   deadline_cycles=200)


@pytest.mark.parametrize("lanes,queue_depth,seed,w_registered",
                         [(4, 1, 0, False), (4, 2, 1, False), (8, 3, 2, False),
                          (4, 1, 3, True), (8, 2, 4, True)])
def test_late_ready(lanes, queue_depth, seed, w_registered):
    """With ``late_ready`` a writer that offers a row in every cycle after one with ``ready``
    high (as the attention core's X loader does, from its own register of it) loses none,
    though ``ready`` may have fallen since: direct writes hold the queue back at random, so
    it fills to the limit. Every row lands where the model puts it (with ``w_registered``
    too, a row a cycle later)."""
    rng = random.Random(seed)
    plan, words = _plan(lanes, 120, rng)
    extra = 4                    # words the direct writes use
    dut = LaneBank(lanes=lanes, shape=signed(8), words=words + extra, queue_depth=queue_depth,
                   ready_registered=True, late_ready=True, w_registered=w_registered)
    state = {"offered": False, "direct": {}, "late": 0}

    async def writer(ctx):
        ready_before = False
        for row in plan:
            while True:
                offer = ready_before and rng.random() < 0.9
                ctx.set(dut.w_stream.payload, row)
                ctx.set(dut.w_stream.valid, offer)
                if offer and not ctx.get(dut.w_stream.ready):
                    state["late"] += 1          # taken on the last cycle's ready alone
                ready_before = bool(ctx.get(dut.w_stream.ready))
                await ctx.tick()
                if offer:
                    break
        ctx.set(dut.w_stream.valid, 0)
        state["offered"] = True

    async def direct(ctx):
        # in runs of random length, so that the queue's head waits long enough for the queue
        # to fill, and then drains while rows still arrive
        run, write = 0, False
        while not state["offered"]:
            if run == 0:
                run, write = rng.randrange(1, 3 * lanes), not write
            run -= 1
            addr = (words + rng.randrange(extra)) * lanes + rng.randrange(lanes)
            value = rng.randrange(-128, 128)
            ctx.set(dut.d_en, write)
            ctx.set(dut.d_addr, addr)
            ctx.set(dut.d_data, value)
            await ctx.tick()
            if write:
                state["direct"][addr] = value
        ctx.set(dut.d_en, 0)
        await ctx.tick().repeat(2)
        while not ctx.get(dut.idle):
            await ctx.tick()
        await _check_memory(ctx, dut, _model(plan, lanes, state["direct"]))

    run_simulation(dut, lambda: [writer, direct],
                   f"lane_bank_late_{lanes}_{queue_depth}_{int(w_registered)}",
                   deadline_cycles=40 * len(plan) * lanes)
    assert state["late"] > 0, "no row was offered after ready fell: the test proves nothing"


@pytest.mark.parametrize("cls", [LaneBank, LaneSerializer])
def test_bad_parameters(cls):
    with pytest.raises(ValueError, match="lanes must be a power of two"):
        cls(lanes=3, shape=8, words=4)
    with pytest.raises(ValueError, match="words must be a positive integer"):
        cls(lanes=2, shape=8, words=0)
    if cls is not LaneBank:
        return
    with pytest.raises(ValueError, match="queue_depth must be a non-negative integer"):
        LaneBank(lanes=2, shape=8, words=4, queue_depth=-1)
    with pytest.raises(ValueError, match="late_ready needs ready_registered"):
        LaneBank(lanes=2, shape=8, words=4, late_ready=True)
    with pytest.raises(ValueError, match="w_registered needs ready_registered"):
        LaneBank(lanes=2, shape=8, words=4, w_registered=True)
    for lanes, depth in ((1, 2), (2, 0)):       # no queue: the row goes in its own cycle
        for option in ("late_ready", "w_registered"):
            with pytest.raises(ValueError, match=rf"{option} needs .* a queue"):
                LaneBank(lanes=lanes, shape=8, words=4, queue_depth=depth,
                         ready_registered=True, **{option: True})


@pytest.mark.parametrize("lanes,queue_depth,registered",
                         [(1, 2, True), (4, 2, True), (4, 0, True), (1, 2, False),
                          (4, 2, False)])
def test_direct_writes_go_first(lanes, queue_depth, registered):
    """Direct writes (``d_*``) land the cycle after (``d_pending`` then), or in their cycle
    unregistered; queued rows wait for the cycles with one and still all land. Direct writes
    use words 0..7, rows words 8..15."""
    rng = random.Random(7 + lanes)
    words = 16
    dut = LaneBank(lanes=lanes, shape=signed(8), words=words, queue_depth=queue_depth,
                   d_registered=registered)
    rows = [] if queue_depth == 0 else [
        {"word": 8 + rng.randrange(8), "data": [rng.randrange(-128, 128) for _ in range(lanes)],
         "mask": (1 << lanes) - 1, "tag": 0} for _ in range(20)]
    direct = [(rng.randrange(8 * lanes), rng.randrange(-128, 128)) if rng.random() < 0.6
              else None for _ in range(120)]
    state = {"offered": not rows}

    async def rows_in(ctx):
        for row in rows:
            await _offer(ctx, dut.w_stream, row)
        state["offered"] = True

    async def direct_in(ctx):
        for item in direct:
            if item is None:
                ctx.set(dut.d_en, 0)
            else:
                ctx.set(dut.d_addr, item[0])
                ctx.set(dut.d_data, item[1])
                ctx.set(dut.d_en, 1)
            await ctx.tick()
            assert ctx.get(dut.d_pending) == (registered and item is not None), \
                "d_pending is not d_en of the last cycle"
        ctx.set(dut.d_en, 0)
        while not (state["offered"] and ctx.get(dut.idle)):
            await ctx.tick()
        direct_model = {item[0]: item[1] for item in direct if item is not None}
        await _check_memory(ctx, dut, _model(rows, lanes, direct_model))

    run_simulation(dut, lambda: [rows_in, direct_in],
                   f"lane_bank_direct_{lanes}_{queue_depth}_{int(registered)}",
                   deadline_cycles=2000)


@pytest.mark.parametrize("lanes,tag_bits", [(1, 1), (4, 3), (8, 1)])
def test_serializer_writes_rows_a_lane_a_cycle(lanes, tag_bits):
    """Random rows with random gaps come out as the lane writes a model expects, in order,
    each with its row's tag; with more than one lane a row is taken only when the last one is
    done, and the outputs change only on a clock edge."""
    rng = random.Random(100 + lanes)
    words = 16
    plan = [{"word": rng.randrange(words), "mask": rng.randrange(1 << lanes),
             "data": [rng.randrange(-128, 128) for _ in range(lanes)],
             "tag": rng.randrange(1 << tag_bits)} for _ in range(60)]
    expected = [(row["word"] * lanes + lane, row["data"][lane], row["tag"])
                for row in plan for lane in range(lanes) if row["mask"] >> lane & 1]
    dut = LaneSerializer(lanes=lanes, shape=signed(8), words=words, tag_bits=tag_bits)
    state = {"offered": False, "writes": []}

    writer = _offer_all(dut.i_stream, plan, rng, state)

    async def monitor(ctx):
        busy_rows = 0
        while not (state["offered"] and ctx.get(dut.i_stream.ready)):
            if ctx.get(dut.en):
                state["writes"].append((ctx.get(dut.addr), ctx.get(dut.data), ctx.get(dut.tag)))
            if lanes > 1 and ctx.get(dut.en) and ctx.get(dut.i_stream.ready):
                busy_rows += 1      # a row is taken while one is being written
            await ctx.tick()
        if lanes > 1:
            # the last write is in the cycle before ready: no lane is left behind
            assert not ctx.get(dut.en), "a lane written after the serializer said it was done"
        assert busy_rows == 0, f"{busy_rows} cycles ready while writing a lane"
        got = state["writes"]
        first = next((i for i, (g, e) in enumerate(zip(got, expected)) if g != e),
                     min(len(got), len(expected)))
        assert got == expected, (f"lane writes differ first at {first}: got "
                                 f"{got[first:first + 3]}, expected {expected[first:first + 3]}"
                                 f" ({len(got)} writes, {len(expected)} expected)")

    top = dut
    if lanes == 1:          # purely combinational: give the simulation a clock domain
        top = Module()
        top.submodules.dut = dut
        top.d.sync += Signal(name="tick").eq(1)
    run_simulation(top, lambda: [writer, monitor], f"lane_serializer_{lanes}",
                   deadline_cycles=60 * (lanes + 4) * 2)


@pytest.mark.parametrize("lanes", [4, 8])
def test_serializer_rate(lanes):
    """Back-to-back full rows: one lane a cycle, and a cycle between rows."""
    rows = 5
    dut = LaneSerializer(lanes=lanes, shape=signed(8), words=8)

    async def bench(ctx):
        ctx.set(dut.i_stream.valid, 1)
        ctx.set(dut.i_stream.payload, {"word": 1, "data": list(range(lanes)),
                                       "mask": (1 << lanes) - 1, "tag": 0})
        cycles, taken, writes = 0, 0, 0
        while taken < rows or not ctx.get(dut.i_stream.ready):
            taken += ctx.get(dut.i_stream.valid) and ctx.get(dut.i_stream.ready)
            writes += ctx.get(dut.en)
            await ctx.tick()
            cycles += 1
            if taken == rows:
                ctx.set(dut.i_stream.valid, 0)
        assert writes == rows * lanes and cycles == rows * (lanes + 1), \
            f"{rows} rows of {lanes} lanes: {writes} writes in {cycles} cycles"

    run_simulation(dut, lambda: [bench], f"lane_serializer_rate_{lanes}", deadline_cycles=200)


def test_d_pending_register_kept(yosys, tmp_path):
    """With registered direct writes the bank's `d_pending` comes from a flip-flop of its own
    beside the one that gates the queue's writes: both stay through Yosys's ECP5 synthesis
    with the board builds' :func:`hw.target.keep_copies_script` (without it, one)."""
    from amaranth.back import rtlil

    from tests.hw.ecp5_synth import ecp5_flops

    bank = LaneBank(lanes=2, shape=signed(8), words=8, queue_depth=2)
    text = rtlil.convert(bank, name="bank")
    assert ecp5_flops(yosys, tmp_path, text, "bank", keep=False, nets="d_en_r|d_pending_r") == 1
    assert ecp5_flops(yosys, tmp_path, text, "bank", keep=True, nets="d_en_r|d_pending_r") == 2


class _TwoBanks(Elaboratable):
    """Two registered-entry banks written the same rows (as the core's X/Q banks are)."""

    def __init__(self):
        self.banks = [LaneBank(lanes=2, shape=signed(8), words=8, queue_depth=2,
                               ready_registered=True, w_registered=True) for _ in range(2)]
        self.row = Signal(self.banks[0].w_stream.payload.shape())
        self.valid = Signal(2)

    def elaborate(self, platform):
        m = Module()
        for i, bank in enumerate(self.banks):
            m.submodules[f"bank{i}"] = bank
            m.d.comb += [bank.w_stream.payload.eq(self.row),
                         bank.w_stream.valid.eq(self.valid[i])]
        return m


@pytest.mark.parametrize("family", ["ecp5", "ice40"])
def test_entry_register_kept_per_bank_on_ecp5(yosys, tmp_path, family):
    """Banks written the same rows keep an entry register each through Yosys's ECP5 synthesis
    with :func:`hw.target.keep_copies_script` when elaborated for ECP5 (Yosys merges them
    otherwise, and one register then writes every bank's queue); for iCE40 they are merged."""
    from amaranth.back import rtlil

    from tests.hw.ecp5_synth import ecp5_flops

    top = _TwoBanks()
    platform = type("Platform", (), {"family": family, "device": ""})()
    reads = [port for bank in top.banks for port in (bank.r_addr, bank.r_en, bank.r_data)]
    text = rtlil.convert(top, name="top", platform=platform,
                         ports=[top.row.as_value(), top.valid, *reads])
    single = ecp5_flops(yosys, tmp_path, text, "top", keep=True, nets=r".*bank0\.entry_r.*")
    both = ecp5_flops(yosys, tmp_path, text, "top", keep=True, nets=r".*bank\d\.entry_r.*")
    assert single > 0
    assert both == (2 * single if family == "ecp5" else single), (family, single, both)
