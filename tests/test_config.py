"""AttnConfig: validation messages, derived widths, presets."""

import dataclasses

import numpy as np
import pytest

from attn import PRESETS, AttnConfig, preset
from golden.quant import matmul_exact, qmax, qmin


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_are_valid_and_round_trip(name):
    cfg = preset(name)
    assert cfg.name == name
    assert AttnConfig.from_dict(cfg.to_dict()) == cfg


def test_unknown_preset_lists_choices():
    with pytest.raises(ValueError, match=r"unknown preset 'huge'; choose one of tiny, default"):
        preset("huge")


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        preset("tiny").rows = 3


@pytest.mark.parametrize("changes,error,message", [
    (dict(rows=0), ValueError, r"rows must be between 1 and 64, not 0"),
    (dict(cols=2.0), TypeError, r"cols must be an int, not 2.0"),
    (dict(x_bits=True), TypeError, r"x_bits must be an int, not True"),
    (dict(w_bits=1), ValueError, r"w_bits must be between 2 and 18, not 1"),
    (dict(max_seq_len=0), ValueError, r"max_seq_len must be between 1 and 4096, not 0"),
    (dict(exp_mode="exp10"), ValueError, r"exp_mode must be one of exp2, direct, not 'exp10'"),
    (dict(rounding="down"), ValueError, r"rounding must be one of half_up, half_even"),
    (dict(dsp="xilinx"), ValueError, r"dsp must be one of infer, ecp5_registered, not 'xilinx'"),
    (dict(params_ram="spram"), ValueError, r"params_ram must be one of lut, block, not 'spram'"),
    (dict(masks=1), TypeError, r"masks must be a bool, not 1"),
    (dict(name=3), TypeError, r"name must be a str, not 3"),
    (dict(max_heads=32, max_d_model=16), ValueError,
     r"max_heads \(32\) must not exceed max_d_model \(16\)"),
    (dict(score_bits=12, score_frac_bits=12, lut_addr_bits=6), ValueError,
     r"score_frac_bits \(12\) must be less than score_bits \(12\)"),
    (dict(lut_addr_bits=9), ValueError,
     r"lut_addr_bits \(9\) must not exceed score_frac_bits \(8\) in exp2 mode"),
    (dict(qkv_bits=19), ValueError, r"qkv_bits must be between 2 and 18, not 19"),
    (dict(mult_bits=31, max_d_model=4096), ValueError, r"acc_bits \(\d+\) \+ mult_bits \(31\)"),
    (dict(softmax_units=3), ValueError,
     r"softmax_units \(3\) must be 0 or a power of two dividing rows \(4\)"),
    (dict(softmax_units=8), ValueError,
     r"softmax_units \(8\) must be 0 or a power of two dividing rows \(4\)"),
    (dict(softmax_units=-1), ValueError, r"softmax_units must be between 0 and 64, not -1"),
    (dict(bank_writers=3), ValueError,
     r"bank_writers \(3\) must be 0 or a power of two up to max\(rows, cols\) \(4\)"),
    (dict(bank_writers=8), ValueError,
     r"bank_writers \(8\) must be 0 or a power of two up to max\(rows, cols\) \(4\)"),
    (dict(requant_units=3), ValueError,
     r"requant_units \(3\) must be 0 or a power of two dividing cols \(4\)"),
    (dict(requant_units=8), ValueError,
     r"requant_units \(8\) must be 0 or a power of two dividing cols \(4\)"),
    (dict(score_slots=3), ValueError,
     r"score_slots \(3\) must be 0 or a power of two from 2 to 8"),
    (dict(score_slots=1), ValueError,
     r"score_slots \(1\) must be 0 or a power of two from 2 to 8"),
    (dict(score_slots=16), ValueError, r"score_slots must be between 0 and 8, not 16"),
    (dict(address_stages=1), ValueError,
     r"address_stages \(1\) must be 0 unless dsp is ecp5_registered \(dsp='infer'"),
    (dict(address_stages=3, dsp="ecp5_registered"), ValueError,
     r"address_stages must be between 0 and 2, not 3"),
])
def test_invalid_parameters_are_named(changes, error, message):
    with pytest.raises(error, match=message):
        preset("default").replace(**changes)


@pytest.mark.parametrize("rows,cols,units,count", [
    (4, 4, 0, 1), (8, 4, 0, 1), (8, 8, 0, 2), (16, 8, 0, 4), (2, 64, 0, 2), (8, 4, 2, 2),
    (8, 4, 8, 8),
])
def test_softmax_unit_count(rows, cols, units, count):
    """0 picks one unit per 32 PEs (a power of two, at most rows); otherwise the field."""
    cfg = preset("default").replace(rows=rows, cols=cols, softmax_units=units)
    assert cfg.softmax_unit_count == count


@pytest.mark.parametrize("rows,cols,writers,count", [
    (1, 1, 0, 1), (2, 1, 0, 2), (8, 8, 0, 2), (16, 8, 0, 2), (8, 8, 8, 8), (2, 4, 4, 4),
])
def test_bank_writer_count(rows, cols, writers, count):
    """0 picks two serializers (one for a 1x1 array); otherwise the field."""
    cfg = preset("default").replace(rows=rows, cols=cols, bank_writers=writers)
    assert cfg.bank_writer_count == count


@pytest.mark.parametrize("rows,cols,units,count", [
    (2, 2, 0, 1), (4, 4, 0, 2), (2, 1, 0, 1), (8, 4, 0, 4), (8, 8, 0, 4), (16, 8, 0, 4),
    (16, 8, 8, 8), (8, 4, 1, 1),
])
def test_requant_unit_count(rows, cols, units, count):
    """0 picks enough requantizers for a tile's results every 8 cycles, at most 4 and at most
    cols; otherwise the field."""
    cfg = preset("default").replace(rows=rows, cols=cols, requant_units=units)
    assert cfg.requant_unit_count == count


@pytest.mark.parametrize("rows,cols,slots,count", [
    (2, 1, 0, 2), (4, 4, 0, 2), (8, 4, 0, 2), (8, 8, 0, 4), (16, 8, 0, 4), (4, 4, 8, 8),
    (8, 8, 2, 2),
])
def test_score_slot_count(rows, cols, slots, count):
    """0 picks four slots on arrays of 64 PEs or more, two on smaller ones; otherwise the
    field."""
    cfg = preset("default").replace(rows=rows, cols=cols, score_slots=slots)
    assert cfg.score_slot_count == count


@pytest.mark.parametrize("rows,cols,dsp,stages,count", [
    (4, 4, "infer", 0, 0), (16, 8, "infer", 0, 0), (8, 8, "ecp5_registered", 0, 1),
    (16, 8, "ecp5_registered", 0, 2), (2, 2, "ecp5_registered", 2, 2),
    (16, 8, "ecp5_registered", 1, 1),
])
def test_address_stage_count(rows, cols, dsp, stages, count):
    """0 picks none with inferred multipliers; with the ECP5's registered DSPs two on arrays
    of more than 64 PEs, one on the others; otherwise the field."""
    cfg = preset("default").replace(rows=rows, cols=cols, dsp=dsp, address_stages=stages)
    assert cfg.address_stage_count == count


def test_from_dict_rejects_unknown_fields():
    with pytest.raises(ValueError, match="unknown configuration field"):
        AttnConfig.from_dict({"rows": 2, "colums": 3})


def test_direct_mode_allows_large_tables():
    cfg = preset("default").replace(exp_mode="direct", lut_addr_bits=11, score_frac_bits=6)
    assert cfg.lut_size == 2048


@pytest.mark.parametrize("name", list(PRESETS))
def test_accumulator_cannot_overflow(name):
    """The worst case of every stage, computed exactly, fits acc_bits."""
    cfg = preset(name)
    d, length = cfg.max_d_model, cfg.max_seq_len
    lo, hi = qmin(cfg.acc_bits), qmax(cfg.acc_bits)
    bias = qmin(cfg.bias_bits)

    def worst(a_bits, b_bits, k, with_bias):
        a = np.full((1, k), qmin(a_bits))
        b = np.full((1, k), qmin(b_bits))
        return int(matmul_exact(a, b.T)[0, 0]) + (abs(bias) if with_bias else 0)

    for a_bits, b_bits, k, with_bias in ((cfg.x_bits, cfg.w_bits, d, True),
                                         (cfg.qkv_bits, cfg.qkv_bits, d, False),
                                         (cfg.head_bits, cfg.w_bits, d, True)):
        assert lo <= -worst(a_bits, b_bits, k, with_bias) and worst(a_bits, b_bits, k,
                                                                    with_bias) <= hi
    pv = (cfg.prob_one + (length + 1) // 2) * 2 ** (cfg.qkv_bits - 1)
    assert -pv >= lo
    # and the width is tight: one bit less would not hold the largest stage
    tight = max(worst(cfg.x_bits, cfg.w_bits, d, True), worst(cfg.qkv_bits, cfg.qkv_bits, d,
                                                              False),
                worst(cfg.head_bits, cfg.w_bits, d, True), pv)
    assert tight > qmax(cfg.acc_bits - 1)


def test_sum_bits_hold_a_full_row():
    cfg = preset("default")
    assert cfg.max_seq_len * cfg.exp_max < 2 ** cfg.sum_bits
    assert cfg.max_seq_len * cfg.exp_max >= 2 ** (cfg.sum_bits - 1)


def test_check_shape_messages():
    cfg = preset("tiny")
    cfg.check_shape(8, 16, 2)
    with pytest.raises(ValueError, match=r"sequence length L = 9 is outside 1..8 of config 'tiny'"):
        cfg.check_shape(9, 16, 2)
    with pytest.raises(ValueError, match=r"model width D = 17 is outside 1..16"):
        cfg.check_shape(8, 17, 2)
    with pytest.raises(ValueError, match=r"heads H = 0 is outside 1..2"):
        cfg.check_shape(8, 16, 0)
    with pytest.raises(ValueError, match=r"D = 15 is not divisible by heads H = 2"):
        cfg.check_shape(8, 15, 2)


def test_fitted_takes_the_shape():
    cfg = preset("default").fitted(6, 384, 12)
    assert (cfg.max_seq_len, cfg.max_d_model, cfg.max_heads) == (6, 384, 12)
    assert cfg.name == "fitted" and cfg.x_bits == preset("default").x_bits
