# amaranth: UnusedElaboratable=no
"""hw/softmax.py: bit-exact with golden.softmax.softmax_int on random and adversarial rows."""

import numpy as np
import pytest
from amaranth import Module, Signal
from amaranth.sim import Simulator

import attn
from golden.softmax import softmax_int
from hw.softmax import Softmax, softmax_input_layout, softmax_output_layout
from sim.amaranth_sim import run_stream_unit
from sim.cocotb_runner import BUILD, run_cocotb, simulator_missing, write_verilog
from sim.scoreboard import assert_equal
from sim.streams import pack, unpack


def adversarial_rows(cfg, rng):
    """(scores, mask) rows that stress the corners of the contract."""
    lmax = cfg.max_seq_len
    lo, hi = -(1 << (cfg.score_bits - 1)), (1 << (cfg.score_bits - 1)) - 1
    one = 1 << cfg.score_frac_bits          # 1.0 in score units
    rows = [
        np.full(lmax, int(rng.integers(lo, hi + 1))),          # all equal
        np.full(lmax, lo),                                       # all minimum
        np.full(lmax, hi),                                       # all maximum
        np.array([hi]),                                          # length 1
        np.array([lo]),
        np.where(np.arange(lmax) % 2 == 0, hi, lo),              # alternating extremes
        np.where(np.arange(lmax) % 2 == 0, one, -one),           # alternating signs
        np.concatenate([[lo + 1], np.full(lmax - 1, lo)]),       # one dominant by 1 LSB
        np.concatenate([np.full(lmax - 1, -8 * one), [8 * one]]),  # one dominant, last
        np.arange(lmax) * one // 4 - lmax * one // 8,             # a ramp
        np.array([hi, lo]),                                      # largest difference
    ]
    out = [(r, np.zeros(len(r), dtype=bool)) for r in rows]
    if cfg.masks:
        out += [
            (rows[9], np.ones(lmax, dtype=bool)),                # fully masked
            (np.array([lo]), np.array([True])),                  # fully masked, length 1
            (rows[5], np.arange(lmax) % 2 == 0),                 # the maxima masked
            (rows[9], np.arange(lmax) > lmax // 2),              # causal-style tail mask
            (rows[9], np.arange(lmax) < lmax - 1),               # only the last unmasked
        ]
    return out


def random_rows(cfg, rng, count):
    """Random rows: lengths 1..max_seq_len, scores full-range or with a realistic spread."""
    lo, hi = -(1 << (cfg.score_bits - 1)), (1 << (cfg.score_bits - 1)) - 1
    rows = []
    for k in range(count):
        n = int(rng.integers(1, cfg.max_seq_len + 1))
        if k % 2:
            t = rng.integers(lo, hi + 1, size=n)
        else:
            spread = (1 << cfg.score_frac_bits) * float(rng.choice([0.5, 2.0, 8.0]))
            t = np.clip(np.rint(rng.normal(0, spread, size=n)), lo, hi).astype(np.int64)
        m = rng.random(n) < float(rng.choice([0.0, 0.3, 0.9])) if cfg.masks \
            else np.zeros(n, dtype=bool)
        rows.append((t, m))
    return rows


def make_rows(cfg, seed, count):
    rng = np.random.default_rng(seed)
    return adversarial_rows(cfg, rng) + random_rows(cfg, rng, count)


def expected_probs(cfg, rows):
    return [softmax_int(t, cfg, m).probs for t, m in rows]


def input_payloads(cfg, rows):
    layout = softmax_input_layout(cfg)
    out = []
    for t, m in rows:
        for i, (score, masked) in enumerate(zip(t, m)):
            fields = {"score": int(score), "last": int(i == len(t) - 1)}
            if cfg.masks:
                fields["mask"] = int(masked)
            out.append(pack(layout, fields))
    return out


def check_output(cfg, rows, got):
    """Compare the output beats with golden row by row (probabilities and ``last``)."""
    layout = softmax_output_layout(cfg)
    beats = [unpack(layout, p) for p in got]
    expected = expected_probs(cfg, rows)
    pos = 0
    for k, (probs, (t, m)) in enumerate(zip(expected, rows)):
        row = beats[pos:pos + len(probs)]
        pos += len(probs)
        context = f"row {k} (scores {t.tolist()}, mask {m.astype(int).tolist()})"
        assert_equal(f"probs of {context}", probs, [b["prob"] for b in row])
        assert_equal(f"last of {context}", [0] * (len(probs) - 1) + [1],
                     [b["last"] for b in row])
    assert pos == len(beats)


def run_softmax(cfg, rows, stall_in=0.0, stall_out=0.0, seed=0, name="softmax", **params):
    dut = Softmax(cfg=cfg, **params)
    payloads = input_payloads(cfg, rows)
    slack = 1 / (1 - max(stall_in, stall_out))
    got = run_stream_unit(dut, payloads, len(payloads), name, stall_in=stall_in,
                          stall_out=stall_out, seed=seed,
                          deadline_cycles=int(4 * slack * len(payloads)) + 40 * len(rows) + 500)
    check_output(cfg, rows, got)


TINY = attn.preset("tiny")
CONFIGS = {
    "tiny": TINY,
    "tiny_direct": TINY.replace(exp_mode="direct", score_frac_bits=5, lut_addr_bits=8),
    # narrow everything, no masks, a row length that is not a power of two
    "narrow": TINY.replace(max_seq_len=5, score_bits=8, score_frac_bits=3, lut_addr_bits=2,
                           exp_bits=6, prob_bits=4, masks=False),
    # wide words, the table addressed by only part of the fraction
    "wide": TINY.replace(max_seq_len=12, score_bits=24, score_frac_bits=12, lut_addr_bits=6,
                         exp_bits=22, prob_bits=17),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_bit_exact_configs(name):
    cfg = CONFIGS[name]
    run_softmax(cfg, make_rows(cfg, seed=1, count=50), stall_in=0.2, stall_out=0.2, seed=3,
                name=f"softmax_{name}")


@pytest.mark.parametrize("stall_in,stall_out", [(0, 0), (0.5, 0.5), (0.9, 0.1), (0.1, 0.9)])
def test_bit_exact_stalls(stall_in, stall_out):
    cfg = CONFIGS["tiny"]
    run_softmax(cfg, make_rows(cfg, seed=int(stall_in * 10 + stall_out * 100), count=40),
                stall_in=stall_in, stall_out=stall_out, seed=5,
                name=f"softmax_stalls_{stall_in}_{stall_out}")


def test_small_buffers():
    """The smallest legal buffers and queues: slower, still exact, never deadlocks."""
    cfg = CONFIGS["tiny"]
    run_softmax(cfg, make_rows(cfg, seed=9, count=20), stall_in=0.3, stall_out=0.6, seed=7,
                name="softmax_small_buffers", buffer_depth=cfg.max_seq_len, queue_depth=1)


def test_single_element_config():
    """max_seq_len = 1 with one-entry buffers and queues (zero-width ring pointers)."""
    cfg = TINY.replace(max_seq_len=1)
    rng = np.random.default_rng(13)
    rows = [(np.array([int(rng.integers(-1000, 1000))]), np.array([k % 3 == 0]))
            for k in range(20)]
    run_softmax(cfg, rows, stall_in=0.3, stall_out=0.3, name="softmax_single",
                buffer_depth=1, queue_depth=1)


def test_length_one_rows():
    """Back-to-back single-element rows (each is its own maximum: p = prob_one)."""
    cfg = CONFIGS["tiny"]
    rng = np.random.default_rng(11)
    rows = [(np.array([int(rng.integers(-1000, 1000))]), np.array([k % 5 == 0]))
            for k in range(40)]
    run_softmax(cfg, rows, name="softmax_length_one")


@pytest.mark.parametrize("name", ["tiny", "wide"])
def test_registered_reads_same_cycles(name):
    """``registered_reads`` (the score buffer a :class:`hw.bram.RegisteredMemory`) changes no
    cycle: fed the same beats under the same random stalls, both units take and give the same
    beats in the same cycles, and the registered one's rows equal golden's."""
    cfg = CONFIGS[name]
    rows = make_rows(cfg, seed=23, count=30)
    payloads = input_payloads(cfg, rows)
    m = Module()
    m.submodules.plain = plain = Softmax(cfg=cfg)
    m.submodules.registered = registered = Softmax(cfg=cfg, registered_reads=True)
    valid, payload, ready = Signal(), Signal(len(plain.i_stream.payload.as_value())), Signal()
    for unit in (plain, registered):
        m.d.comb += [unit.i_stream.valid.eq(valid), unit.i_stream.payload.eq(payload),
                     unit.o_stream.ready.eq(ready)]
    rng = np.random.default_rng(29)
    got = []

    async def bench(ctx):
        pos = cycle = 0
        while len(got) < len(payloads):
            cycle += 1
            assert cycle < 20 * len(payloads), "no progress"
            ctx.set(valid, pos < len(payloads) and rng.random() < 0.7)
            ctx.set(payload, payloads[min(pos, len(payloads) - 1)])
            ctx.set(ready, rng.random() < 0.7)
            a = [ctx.get(x) for x in (plain.i_stream.ready, plain.o_stream.valid,
                                      plain.o_stream.payload.as_value())]
            b = [ctx.get(x) for x in (registered.i_stream.ready, registered.o_stream.valid,
                                      registered.o_stream.payload.as_value())]
            assert a == b, f"cycle {cycle}: plain {a}, registered {b}"
            if ctx.get(valid) and a[0]:
                pos += 1
            if a[1] and ctx.get(ready):
                got.append(b[2])
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    check_output(cfg, rows, got)


@pytest.mark.parametrize("name,stall_in,stall_out,params", [
    ("tiny", 0.0, 0.0, {}), ("tiny", 0.5, 0.5, {}), ("wide", 0.1, 0.9, {}),
    ("narrow", 0.9, 0.1, {}),
    ("tiny", 0.2, 0.6, {"buffer_depth": 16, "queue_depth": 2})])
def test_counted_late(name, stall_in, stall_out, params):
    """``counted_late`` (the ingest's counts a cycle late, one entry in reserve): exact under
    stalls, with the smallest buffers it allows too (full buffers, nothing overwritten)."""
    cfg = CONFIGS[name]
    run_softmax(cfg, make_rows(cfg, seed=31, count=30), stall_in=stall_in,
                stall_out=stall_out, seed=37, name=f"softmax_late_{name}",
                counted_late=True, registered_reads=True, **params)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("stall_in,stall_out", [(0, 0), (0.5, 0.5), (0.9, 0.1), (0.1, 0.9)])
def test_bit_exact_sweep(name, stall_in, stall_out):
    cfg = CONFIGS[name]
    run_softmax(cfg, make_rows(cfg, seed=17, count=200), stall_in=stall_in,
                stall_out=stall_out, seed=19, name=f"softmax_sweep_{name}")


# -- parameters --------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,error,message", [
    ({"cfg": "tiny"}, TypeError, "cfg must be an AttnConfig, not 'tiny'"),
    ({"cfg": TINY, "buffer_depth": 4}, ValueError,
     "buffer_depth must be a power of two of at least max_seq_len (8), not 4"),
    ({"cfg": TINY, "buffer_depth": 24}, ValueError,
     "buffer_depth must be a power of two of at least max_seq_len (8), not 24"),
    ({"cfg": TINY, "buffer_depth": 16.0}, TypeError,
     "buffer_depth must be an int or None, not 16.0"),
    ({"cfg": TINY, "queue_depth": 0}, ValueError,
     "queue_depth must be between 1 and 64, not 0"),
    ({"cfg": TINY, "queue_depth": 65}, ValueError,
     "queue_depth must be between 1 and 64, not 65"),
    ({"cfg": TINY, "queue_depth": True}, TypeError, "queue_depth must be an int, not True"),
    ({"cfg": TINY, "registered_reads": 1}, TypeError, "registered_reads must be a bool, not 1"),
    ({"cfg": TINY, "counted_late": None}, TypeError, "counted_late must be a bool, not None"),
    ({"cfg": TINY, "counted_late": True, "queue_depth": 1}, ValueError,
     "counted_late needs a buffer_depth above max_seq_len (8) and a queue_depth of at least 2, "
     "not 32 and 1"),
    ({"cfg": TINY, "counted_late": True, "buffer_depth": 8}, ValueError,
     "counted_late needs a buffer_depth above max_seq_len (8) and a queue_depth of at least 2, "
     "not 8 and 4"),
])
def test_invalid_parameters(kwargs, error, message):
    with pytest.raises(error) as info:
        Softmax(**kwargs)
    assert str(info.value) == message


def test_parameters_are_keyword_only():
    with pytest.raises(TypeError):
        Softmax(TINY)


def test_layouts_follow_config():
    cfg = attn.preset("default")
    assert softmax_input_layout(cfg).size == cfg.score_bits + 2
    assert softmax_input_layout(cfg.replace(masks=False)).size == cfg.score_bits + 1
    assert softmax_output_layout(cfg).size == cfg.prob_bits + 1
    assert Softmax(cfg=cfg).buffer_depth == 128


# -- cocotb on the generated Verilog -----------------------------------------------------------

@pytest.mark.parametrize("sim,count", [("icarus", 12), ("verilator", 60)])
def test_cocotb_default_preset(sim, count):
    """The default preset's Verilog on Icarus and Verilator: adversarial rows plus ``count``
    random rows, under four stall patterns (tests/hw/cocotb_softmax.py)."""
    reason = simulator_missing(sim)
    if reason:
        pytest.skip(reason)
    cfg = attn.preset("default")
    path = write_verilog(Softmax(cfg=cfg), BUILD / "verilog" / "softmax_default.v",
                         name="softmax")
    run_cocotb(sim=sim, verilog_file=path, toplevel="softmax",
               test_module="tests.hw.cocotb_softmax", build_name="softmax_default",
               params={"cfg": cfg.to_dict(), "seed": 23, "count": count})
