# amaranth: UnusedElaboratable=no
"""hw/fifo.py and hw/target.py: the block-RAM FIFO asks Yosys for block RAM on iCE40 only."""

from amaranth_boards.icebreaker import ICEBreakerPlatform
from amaranth_boards.ulx3s import ULX3S_85F_Platform

from hw.fifo import BlockRAMFIFO
from hw.target import is_ice40


def _storage_attrs(platform):
    m = BlockRAMFIFO(width=12, depth=4).elaborate(platform)
    return m.submodules.storage.attrs


def test_block_ram_on_ice40_only():
    assert _storage_attrs(ICEBreakerPlatform()) == {"ram_style": "block"}
    assert _storage_attrs(ULX3S_85F_Platform()) == {}
    assert _storage_attrs(None) == {}


def test_is_ice40():
    assert is_ice40(ICEBreakerPlatform())
    assert not is_ice40(ULX3S_85F_Platform())
    assert not is_ice40(None)
