"""The ECP5 DSP floorplan of the systolic array (hw.floorplan) and its use by the array."""

import re

import pytest
from amaranth.back import verilog

from hw.floorplan import ECP5_DSP_ROWS, array_sites, ecp5_sites
from hw.systolic import SystolicArray

SITE = re.compile(r"X(\d+)/Y(\d+)/MULT18_([0145])")


def _xy(site):
    x, y, _ = SITE.fullmatch(site).groups()
    return int(x), int(y)


def test_85f_has_its_156_dsp_sites():
    rows = ecp5_sites("LFE5U-85F")
    sites = [s for row in rows for s in row]
    assert len(sites) == len(set(sites)) == 156
    for row in rows:                                    # one y per row, left to right
        xy = [_xy(s) for s in row]
        assert len({y for _, y in xy}) == 1
        assert [x for x, _ in xy] == sorted(x for x, _ in xy)
    assert ecp5_sites("LFE5UM5G-85F") == rows
    assert ecp5_sites("LFE5U-25F") is None


@pytest.mark.parametrize("rows,cols", [(12, 12), (16, 8), (8, 8), (1, 1), (3, 5), (12, 13)])
def test_array_sites_keep_neighbours_together(rows, cols):
    sites = array_sites("LFE5U-85F", rows, cols)
    assert sorted(sites) == [(r, c) for r in range(rows) for c in range(cols)]
    assert len(set(sites.values())) == rows * cols           # one PE per site
    order = {s: (band, i) for band, row in enumerate(ecp5_sites("LFE5U-85F"))
             for i, s in enumerate(row)}
    bands = len(ECP5_DSP_ROWS["LFE5U-85F"][0])
    height = -(-rows // bands)                               # rows in the tallest band
    for (r, c), site in sites.items():
        band, i = order[site]
        if c + 1 < cols:                     # `a` flows right: same band, one column on
            band_right, i_right = order[sites[(r, c + 1)]]
            assert band_right == band and 0 < i_right - i <= height
        if r + 1 < rows:                     # `b` flows down: next site, or the next band
            band_down, i_down = order[sites[(r + 1, c)]]
            assert (band_down, i_down) == (band, i + 1) or band_down == band + 1


@pytest.mark.parametrize("device,rows,cols", [
    ("LFE5U-85F", 3, 53),        # a band of one row is wider than a DSP row
    ("LFE5U-85F", 40, 4),        # 14 rows x 4 columns per band > 52 sites
    ("LFE5U-45F", 4, 4),         # no table for this device
    ("LFE5U-85F", 0, 4),
])
def test_no_floorplan_when_it_does_not_apply(device, rows, cols):
    assert array_sites(device, rows, cols) is None


class _Ecp5:
    family = "ecp5"
    device = "LFE5U-85F"


def _verilog(array, platform):
    return verilog.convert(array, platform=platform)


def test_array_pins_its_dsps_on_a_known_ecp5_device():
    array = SystolicArray(rows=2, cols=3, a_bits=8, b_bits=8, acc_bits=20,
                          dsp="ecp5_registered")
    text = _verilog(array, _Ecp5())
    placed = re.findall(r'\(\* BEL = "([^"]+)" \*\)', text)
    assert sorted(placed) == sorted(array_sites("LFE5U-85F", 2, 3).values())
    assert array.dsp_sites(_Ecp5()) == array_sites("LFE5U-85F", 2, 3)

    free = SystolicArray(rows=2, cols=3, a_bits=8, b_bits=8, acc_bits=20,
                         dsp="ecp5_registered", floorplan=False)
    assert free.dsp_sites(_Ecp5()) is None
    assert "BEL" not in _verilog(free, _Ecp5())
    inferred = SystolicArray(rows=2, cols=3, a_bits=8, b_bits=8, acc_bits=20)
    assert inferred.dsp_sites(_Ecp5()) is None
    assert array.dsp_sites(None) is None
