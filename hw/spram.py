"""Single-port memories for the iCE40 UltraPlus SPRAM, and which regions go there.

The iCE40UP5K has four ``SB_SPRAM256KA`` blocks of 16 bits x 16,384 words (256 Kbit each, as
much as 64 of its block RAMs) next to its 30 block RAMs. Yosys does not map an
``amaranth.lib.memory.Memory`` to them (they cannot be initialized, and Amaranth memories always
are), so :class:`SinglePortMemory` instantiates them on an UltraPlus and is a ``Memory`` with one
address everywhere else, with the same behaviour cycle for cycle:

- one address for reads and writes, one operation per cycle;
- ``r_data`` is the word at the address of the previous cycle in which ``r_en`` was high and
  ``w_en`` low (a write cycle does not read); between reads it holds (the SPRAM's chip select
  is low). The SPRAM leaves its output undefined after a write, so callers must not use
  ``r_data`` after a write until they read again; the ``Memory`` model holds it.

:func:`spram_plan` chooses the memories that go to SPRAM: the ones that save the most block
RAM per SPRAM block, while blocks remain.

On ECP5 a deep memory can be cut into bit slices (``slice_width``, from :func:`ecp5_slice_width`)
that each fit one DP16KD block at its full depth. Yosys would rather build it from fewer blocks
at their widest, stacked in depth, with a multiplexer after them on the path out of the memory
(9 blocks in a row for the 4,410-word weights region, which set the ULX3S's fmax).
"""

from __future__ import annotations

from amaranth import Cat, ClockSignal, Elaboratable, Instance, Module, Signal, unsigned
from amaranth.lib.memory import Memory

from .bram import DP16KD_MODES, dp16kd_width
from .target import device

__all__ = ["SPRAM_WIDTH", "SPRAM_DEPTH", "spram_blocks", "spram_plan", "SinglePortMemory",
           "ebr_blocks", "ecp5_slice_width"]

SPRAM_WIDTH = 16
SPRAM_DEPTH = 16384


#: SPRAM blocks of the iCE40 devices that have any (the UltraPlus parts).
_ICE40_SPRAM = {"ice40up5k": 4, "ice40up3k": 4}


def spram_blocks(platform) -> int:
    """SPRAM blocks of ``platform``: 4 on an iCE40UP5K / UP3K, 0 elsewhere (or without one)."""
    return _ICE40_SPRAM.get(device(platform), 0)


def ebr_blocks(width: int, depth: int) -> int:
    """iCE40 block RAMs (4 Kbit, 256 x 16 .. 2048 x 2) a ``width`` x ``depth`` memory takes."""
    best = None
    for w, d in ((16, 256), (8, 512), (4, 1024), (2, 2048)):
        n = -(-width // w) * -(-depth // d)
        best = n if best is None else min(best, n)
    return best


def ecp5_slice_width(depth: int) -> int | None:
    """The widest DP16KD data width that holds ``depth`` words in one block, for a memory that
    would otherwise be stacked in depth (more than 512 words); ``None`` for 512 words or fewer
    (no stacking) or more than 16,384 (stacked at any width)."""
    return None if depth <= DP16KD_MODES[0][1] else dp16kd_width(depth)


def spram_plan(memories: dict, blocks: int) -> set:
    """Names of the memories to put in SPRAM.

    ``memories`` maps a name to ``(width, depth)``; only memories of at most 16,384 words are
    candidates. They are taken in order of block RAMs saved per SPRAM block (then by name),
    each taking ``ceil(width / 16)`` of the ``blocks``, while they fit.
    """
    candidates = []
    for name, (width, depth) in memories.items():
        if depth > SPRAM_DEPTH:
            continue
        need = -(-width // SPRAM_WIDTH)
        candidates.append((-ebr_blocks(width, depth) / need, name, need))
    chosen = set()
    for _, name, need in sorted(candidates):
        if need <= blocks:
            chosen.add(name)
            blocks -= need
    return chosen


class SinglePortMemory(Elaboratable):
    """``width`` x ``depth`` memory with one address; in SPRAM when ``spram`` is true.

    Members (signals)
    -----------------
    addr : unsigned(ceil(log2(depth)))
    w_en, w_data : write ``w_data`` at ``addr`` this cycle
    r_en : read ``addr`` this cycle (ignored in a write cycle)
    r_data : the word read (see the module notes)

    ``slice_width`` (not with ``spram``) builds the memory from ``ceil(width / slice_width)``
    memories of ``slice_width`` bits, the same cycle for cycle.

    Attributes
    ----------
    memory : amaranth.lib.memory.Memory or None
        The model memory (``None`` in SPRAM or in slices), for testbenches (``memory.data[i]``).
    """

    def __init__(self, *, width: int, depth: int, spram: bool = False, name: str = "mem",
                 slice_width: int | None = None):
        if spram and depth > SPRAM_DEPTH:
            raise ValueError(f"memory {name!r} has {depth} words, more than an SPRAM's "
                             f"{SPRAM_DEPTH}")
        if slice_width is not None and (spram or not 1 <= slice_width):
            raise ValueError(f"memory {name!r}: slice_width must be a positive width of a "
                             f"memory not in SPRAM, not {slice_width!r}")
        self.width, self.depth, self.spram, self.name = width, depth, spram, name
        self.slice_width = slice_width if slice_width is not None and slice_width < width else None
        self.addr = Signal(max(1, (depth - 1).bit_length()), name=f"{name}_addr")
        self.w_en = Signal(name=f"{name}_w_en")
        self.w_data = Signal(width, name=f"{name}_w_data")
        self.r_en = Signal(name=f"{name}_r_en")
        self.r_data = Signal(width, name=f"{name}_r_data")
        self.memory = None if spram or self.slice_width else Memory(
            shape=unsigned(width), depth=depth, init=[])

    def elaborate(self, platform):
        m = Module()
        if not self.spram:
            step = self.slice_width or self.width
            outs = []
            for i, lo in enumerate(range(0, self.width, step)):
                bits = min(step, self.width - lo)
                if self.slice_width:
                    mem = Memory(shape=unsigned(bits), depth=self.depth, init=[])
                    m.submodules[f"memory{i}"] = mem
                else:
                    m.submodules.memory = mem = self.memory
                wp, rp = mem.write_port(), mem.read_port()
                m.d.comb += [wp.addr.eq(self.addr), wp.data.eq(self.w_data[lo:lo + bits]),
                             wp.en.eq(self.w_en),
                             rp.addr.eq(self.addr), rp.en.eq(self.r_en & ~self.w_en)]
                outs.append(rp.data)
            m.d.comb += self.r_data.eq(Cat(*outs))
            return m
        address = Signal(14, name=f"{self.name}_address")
        m.d.comb += address.eq(self.addr)
        outs = []
        for i in range(-(-self.width // SPRAM_WIDTH)):
            data_in = Signal(SPRAM_WIDTH, name=f"{self.name}_in{i}")
            data_out = Signal(SPRAM_WIDTH, name=f"{self.name}_out{i}")
            m.d.comb += data_in.eq(self.w_data[SPRAM_WIDTH * i:SPRAM_WIDTH * (i + 1)])
            m.submodules[f"spram{i}"] = Instance(
                "SB_SPRAM256KA",
                i_ADDRESS=address, i_DATAIN=data_in, i_MASKWREN=0b1111,
                i_WREN=self.w_en, i_CHIPSELECT=self.w_en | self.r_en,
                i_CLOCK=ClockSignal("sync"), i_STANDBY=0, i_SLEEP=0, i_POWEROFF=1,
                o_DATAOUT=data_out)
            outs.append(data_out)
        m.d.comb += self.r_data.eq(Cat(*outs)[:self.width])
        return m

