"""FIFOs whose storage is placed for the target family."""

from __future__ import annotations

from amaranth.lib import fifo

from .target import block_ram_attrs

__all__ = ["BlockRAMFIFO"]


class BlockRAMFIFO(fifo.SyncFIFOBuffered):
    """An ``amaranth.lib.fifo.SyncFIFOBuffered`` (same ports, same timing) whose storage is a
    block RAM on iCE40.

    Yosys builds a memory of a few words from flip-flops and multiplexers, which on an iCE40
    costs a logic cell per bit (a 3 x 19 bit queue: about 80 cells); the UP5K has block RAMs to
    spare once its SPRAM holds the large regions. Elsewhere the storage is left to Yosys.
    """

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.submodules.storage.attrs.update(block_ram_attrs(platform))
        return m
