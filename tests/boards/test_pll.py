"""PLL settings against the reference tools (icepll, ecppll) and the data-sheet ranges."""
import pytest

from boards.pll import ecp5_pll, ice40_pll


def test_ice40_matches_icepll():
    # icepll -i 12 -o 30: DIVR 0, DIVF 79, DIVQ 5, FILTER_RANGE 1 (VCO 960 MHz)
    pll = ice40_pll(12, 30)
    assert pll.f_out_mhz == 30
    assert {k: pll.params[k] for k in ("DIVR", "DIVF", "DIVQ", "FILTER_RANGE")} == \
        {"DIVR": 0, "DIVF": 79, "DIVQ": 5, "FILTER_RANGE": 1}


def test_ecp5_matches_ecppll():
    # ecppll -i 25 -o 60: CLKI_DIV 5, CLKFB_DIV 12, CLKOP_DIV 10, CLKOP_CPHASE 4 (VCO 600 MHz)
    pll = ecp5_pll(25, 60)
    assert pll.f_out_mhz == 60
    assert {k: pll.params[k] for k in ("CLKI_DIV", "CLKFB_DIV", "CLKOP_DIV", "CLKOP_CPHASE")} \
        == {"CLKI_DIV": 5, "CLKFB_DIV": 12, "CLKOP_DIV": 10, "CLKOP_CPHASE": 4}


@pytest.mark.parametrize("mhz", [16, 24, 30, 36, 42, 48, 60, 72])
def test_ice40_ranges(mhz):
    pll = ice40_pll(12, mhz).check(mhz)
    p = pll.params
    assert 10 <= 12 / (p["DIVR"] + 1) <= 133 and 533 <= pll.f_vco_mhz <= 1066
    assert pll.f_out_mhz == pytest.approx(12 * (p["DIVF"] + 1) / (p["DIVR"] + 1)
                                          / 2 ** p["DIVQ"])


@pytest.mark.parametrize("mhz", [40, 50, 62.5, 75, 100, 125, 150])
def test_ecp5_ranges(mhz):
    pll = ecp5_pll(25, mhz).check(mhz)
    p = pll.params
    assert 400 <= pll.f_vco_mhz <= 800 and 3.125 <= pll.f_pfd_mhz <= 400
    assert pll.f_out_mhz == pytest.approx(25 * p["CLKFB_DIV"] / p["CLKI_DIV"])
    assert pll.f_vco_mhz == pytest.approx(pll.f_out_mhz * p["CLKOP_DIV"])


def test_unreachable_and_invalid():
    with pytest.raises(ValueError, match="cannot make 2000 MHz"):
        ice40_pll(12, 2000).check(2000)
    with pytest.raises(ValueError, match="f_out_mhz"):
        ecp5_pll(25, -1)
    with pytest.raises(ValueError, match="f_in_mhz"):
        ice40_pll(0, 30)
