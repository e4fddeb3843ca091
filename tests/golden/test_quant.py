"""golden/quant.py against exact rational arithmetic."""

from fractions import Fraction

import numpy as np
import pytest

from golden.quant import (
    matmul_exact,
    quantize,
    quantize_multiplier,
    requantize,
    round_shift,
    saturate,
    symmetric_scale,
)


def _round_ref(x: int, shift: int, rounding: str) -> int:
    value = Fraction(x, 2 ** shift)
    floor = value.numerator // value.denominator
    rest = value - floor
    if rest > Fraction(1, 2):
        return floor + 1
    if rest < Fraction(1, 2):
        return floor
    return floor + 1 if rounding == "half_up" or floor % 2 else floor


@pytest.mark.parametrize("rounding", ["half_up", "half_even"])
def test_round_shift_matches_exact_rounding(rounding):
    xs = np.arange(-70, 71)
    for shift in range(0, 6):
        got = round_shift(xs, shift, rounding)
        assert list(got) == [_round_ref(int(x), shift, rounding) for x in xs]


def test_round_shift_ties():
    assert list(round_shift([-3, -1, 1, 3, 5], 1, "half_up")) == [-1, 0, 1, 2, 3]
    assert list(round_shift([-3, -1, 1, 3, 5], 1, "half_even")) == [-2, 0, 0, 2, 2]


def test_round_shift_per_channel_shifts():
    got = round_shift([[5, 5, 5]], np.array([0, 1, 2]), "half_even")
    assert got.tolist() == [[5, 2, 1]]


def test_round_shift_rejects_bad_arguments():
    with pytest.raises(ValueError, match="shift must be non-negative"):
        round_shift(1, -1, "half_up")
    with pytest.raises(ValueError, match="rounding must be 'half_up' or 'half_even', not 'up'"):
        round_shift(1, 1, "up")


def test_requantize_saturates():
    assert requantize([10_000, -10_000, 100], 3, 2, 8, "half_up").tolist() == [127, -128, 75]


def test_saturate_bounds():
    assert saturate([-200, -128, 127, 200], 8).tolist() == [-128, -128, 127, 127]


@pytest.mark.parametrize("real", [1e-9, 0.000123, 0.3, 0.5, 0.999999, 1.0, 7.77, 1234.5])
def test_quantize_multiplier_is_normalized_and_close(real):
    mult, shift = quantize_multiplier(real, 16, 63)
    assert 2 ** 15 <= mult < 2 ** 16
    assert 0 <= shift <= 63
    assert abs(mult / 2 ** shift - real) <= real * 2 ** -16


def test_quantize_multiplier_edges():
    assert quantize_multiplier(0.0, 16, 40) == (0, 0)
    mult, shift = quantize_multiplier(1e-20, 16, 40)   # below the smallest normalized value
    assert shift == 40 and mult == round(1e-20 * 2 ** 40)
    mult, shift = quantize_multiplier(0.99999999, 8, 40)   # rounds up to the next power of 2
    assert mult < 256 and mult / 2 ** shift == pytest.approx(1.0)
    with pytest.raises(ValueError, match="too large for 16-bit multipliers"):
        quantize_multiplier(2.0 ** 20, 16, 40)
    with pytest.raises(ValueError, match="finite and >= 0"):
        quantize_multiplier(float("nan"), 16, 40)


def test_symmetric_scale_and_quantize():
    s = symmetric_scale(np.array([127.0, 0.0]), 8)
    assert s.tolist() == [1.0, 1.0]
    assert quantize([0.5, 1.5, -300.0], 1.0, 8).tolist() == [0, 2, -128]


@pytest.mark.parametrize("bits", [8, 30])   # 30 bits forces the int64 path
def test_matmul_exact_matches_python_integers(bits):
    rng = np.random.default_rng(bits)
    a = rng.integers(-(2 ** (bits - 1)), 2 ** (bits - 1), (3, 17))
    b = rng.integers(-(2 ** (bits - 1)), 2 ** (bits - 1), (17, 4))
    expected = [[sum(int(a[i, k]) * int(b[k, j]) for k in range(17)) for j in range(4)]
                for i in range(3)]
    assert matmul_exact(a, b).tolist() == expected
