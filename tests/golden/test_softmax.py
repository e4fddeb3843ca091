"""golden/softmax.py: table, lookup and the integer softmax contract."""

import math

import numpy as np
import pytest

from attn import preset
from golden.softmax import exp_lookup, exp_table, log_base_factor, softmax_int
from tests.golden.scalar_model import softmax_row

CONFIGS = {
    "default": preset("default"),
    "coarse_exp2": preset("default").replace(lut_addr_bits=5, exp_bits=10, prob_bits=8),
    "direct": preset("default").replace(exp_mode="direct", lut_addr_bits=11,
                                        score_frac_bits=6, prob_bits=8),
    "tiny": preset("tiny"),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_table_is_in_range_and_decreasing(name):
    cfg = CONFIGS[name]
    table = exp_table(cfg)
    assert table.shape == (cfg.lut_size,)
    assert table.max() <= cfg.exp_max and table.min() >= 0
    assert np.all(np.diff(table) <= 0)


def test_table_of_full_fraction_starts_at_exp_max():
    cfg = preset("default")
    assert cfg.lut_addr_bits == cfg.score_frac_bits
    assert exp_table(cfg)[0] == cfg.exp_max
    half = exp_table(cfg)[cfg.lut_size // 2]
    assert half == round(cfg.exp_max * 2 ** -0.5)


@pytest.mark.parametrize("name", ["default", "direct"])
def test_lookup_tracks_the_exponential(name):
    cfg = CONFIGS[name]
    diff = np.arange(0, 12 << cfg.score_frac_bits)
    got = exp_lookup(diff, cfg)
    ideal = cfg.exp_max * np.exp(-diff / 2 ** cfg.score_frac_bits / log_base_factor(cfg))
    assert np.all(np.abs(got - ideal) <= 1 + ideal * 2 ** -(cfg.lut_addr_bits - 1))
    assert exp_lookup([10 ** 6], cfg)[0] == 0   # far below the table: exactly zero


@pytest.mark.parametrize("name", list(CONFIGS))
def test_matches_the_scalar_model_on_random_rows(name):
    cfg = CONFIGS[name]
    rng = np.random.default_rng(1)
    table = exp_table(cfg)
    lim = 1 << (cfg.score_bits - 1)
    for trial in range(200):
        n = int(rng.integers(1, cfg.max_seq_len + 1))
        spread = [4, 1 << cfg.score_frac_bits, 8 << cfg.score_frac_bits, lim][trial % 4]
        t = np.clip(rng.integers(-spread, spread, n), -lim, lim - 1)
        m = rng.random(n) < 0.2
        tr = softmax_int(t, cfg, m)
        e, s, p = softmax_row(t.tolist(), m.tolist(), cfg, table)
        assert tr.exp.tolist() == e and int(tr.row_sum) == s and tr.probs.tolist() == p


@pytest.mark.parametrize("name", list(CONFIGS))
def test_adversarial_rows(name):
    cfg = CONFIGS[name]
    n = cfg.max_seq_len
    lo, hi = -(1 << (cfg.score_bits - 1)), (1 << (cfg.score_bits - 1)) - 1
    one = cfg.prob_one
    # all equal: every probability the same, total within n/2 of one
    p = softmax_int(np.full(n, 123), cfg).probs
    assert len(set(p.tolist())) == 1 and abs(int(p.sum()) - one) <= (n + 1) // 2
    # one dominant: exactly one
    t = np.full(n, lo)
    t[n // 2] = hi
    assert softmax_int(t, cfg).probs.tolist() == [one if j == n // 2 else 0 for j in range(n)]
    # all minimum: like all equal
    assert softmax_int(np.full(n, lo), cfg).probs.tolist() == p.tolist()
    # length one
    assert softmax_int([lo], cfg).probs.tolist() == [one]
    # fully masked: zeros, no division by zero
    tr = softmax_int(np.arange(n), cfg, np.ones(n, bool))
    assert tr.probs.tolist() == [0] * n and int(tr.row_sum) == 0
    # masked elements are ignored by the maximum
    t = np.array([hi] + [0] * (n - 1))
    m = np.array([True] + [False] * (n - 1))
    assert softmax_int(t, cfg, m).probs[1:].tolist() == softmax_int(t[1:], cfg).probs.tolist()
    # alternating signs
    t = np.array([(-1) ** j * 100 for j in range(n)])
    p = softmax_int(t, cfg).probs
    assert len(set(p[0::2].tolist())) == 1 and len(set(p[1::2].tolist())) <= 1


def test_probabilities_sum_to_one_within_the_bound():
    cfg = preset("default")
    rng = np.random.default_rng(3)
    t = rng.integers(-4000, 4000, (500, cfg.max_seq_len))
    m = rng.random(t.shape) < 0.3
    tr = softmax_int(t, cfg, m)
    n = (~m).sum(-1)
    dev = np.abs(tr.probs.sum(-1) - cfg.prob_one)
    assert np.all(dev <= (n + 1) // 2)


def test_rejects_out_of_range_scores():
    cfg = preset("tiny")
    with pytest.raises(ValueError, match="scores must be 18-bit signed integers"):
        softmax_int([1 << 17], cfg)


def test_accuracy_against_float_softmax_of_the_same_scores():
    """The unit's own error at the default config, 8-bit output: at most one LSB."""
    cfg = preset("default").replace(prob_bits=8)
    rng = np.random.default_rng(7)
    t = np.rint(rng.normal(0, 3, (2000, 64)) * 2 ** cfg.score_frac_bits * math.log2(math.e))
    p = softmax_int(t.astype(np.int64), cfg).probs
    x = t / 2 ** cfg.score_frac_bits / log_base_factor(cfg)
    ref = np.exp(x - x.max(-1, keepdims=True))
    ref /= ref.sum(-1, keepdims=True)
    assert np.abs(p - ref * cfg.prob_one).max() <= 1.0
