"""A block RAM whose read data comes through an output register: on ECP5 the DP16KD's own.

An ECP5 DP16KD without its output register (Yosys's mapping of an ``amaranth.lib.memory``
memory never uses it) drives its data 5.6-5.8 ns after the clock; the ULX3S devices' slowest
paths started there, however close the next flip-flop. With ``REGMODE="OUTREG"`` the data comes
0.96 ns after the clock (nextpnr's timing, same netlist otherwise), a cycle later.
:class:`RegisteredMemory` is that memory, and elsewhere (other FPGAs, simulation, ``attn
verilog``) an ``amaranth.lib.memory.Memory`` with a register after its read port, the same cycle
for cycle:

- one write port and one read port on the same clock;
- ``r_data`` is the word at ``r_addr`` two cycles after a cycle with ``r_en`` high (the
  memory's read latch takes it a cycle later, the output register the cycle after); between
  reads it holds. A read of the address being written in the same cycle gives the old word.
- the output register is not reset (the DP16KD's is cleared only by its ``RST`` input, tied
  low): after reset ``r_data`` holds its last value.

On ECP5 the memory is built from DP16KD blocks of one data width each, at their full depth
(36 bits x 512 words down to 1 bit x 16,384, :func:`dp16kd_width`), side by side: no multiplexer
after them. At 36 bits the block is what Yosys makes of a ``PDPW16KD``: port A writes (data on
``DIA`` and ``DIB``), port B reads (data out on ``DOA`` and ``DOB``), both output
registers on. A memory of more than 16,384 words is left to Yosys (the model, with the register
in the fabric).
"""

from __future__ import annotations

from amaranth import Cat, ClockSignal, Const, Elaboratable, Instance, Module, Signal, unsigned
from amaranth.lib.memory import Memory

from .target import is_ecp5

__all__ = ["DP16KD_MODES", "RegisteredMemory", "dp16kd_width"]

#: The ECP5 DP16KD's data widths and the words it holds at each (18 Kbit with the 9th bits).
DP16KD_MODES = ((36, 512), (18, 1024), (9, 2048), (4, 4096), (2, 8192), (1, 16384))


def dp16kd_width(depth: int) -> int | None:
    """The widest DP16KD data width (36 down to 1) that holds ``depth`` words in one block;
    ``None`` above 16,384 words."""
    return next((w for w, d in DP16KD_MODES if depth <= d), None)


class RegisteredMemory(Elaboratable):
    """``width`` x ``depth`` memory with a write port, a read port and an output register.

    Members (signals)
    -----------------
    w_addr, w_data, w_en : write ``w_data`` at ``w_addr`` this cycle
    r_addr, r_en : read ``r_addr`` this cycle
    r_data : the word read two cycles before (see the module notes)

    Attributes
    ----------
    memory : amaranth.lib.memory.Memory
        The model memory, for testbenches (``memory.data[i]``); the elaboration for an ECP5
        (:attr:`blocks` > 0) does not use it.
    blocks : int
        DP16KD blocks of the latest elaboration (0 for the model).
    """

    def __init__(self, *, width: int, depth: int, name: str = "mem"):
        for what, value in (("width", width), ("depth", depth)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"memory {name!r}: {what} must be a positive int, not "
                                 f"{value!r}")
        self.width, self.depth, self.name = width, depth, name
        abits = max(1, (depth - 1).bit_length())
        self.w_addr = Signal(abits, name=f"{name}_w_addr")
        self.w_data = Signal(width, name=f"{name}_w_data")
        self.w_en = Signal(name=f"{name}_w_en")
        self.r_addr = Signal(abits, name=f"{name}_r_addr")
        self.r_en = Signal(name=f"{name}_r_en")
        self.r_data = Signal(width, name=f"{name}_r_data", reset_less=True)
        self.memory = Memory(shape=unsigned(width), depth=depth, init=[])
        self.blocks = 0

    def elaborate(self, platform):
        m = Module()
        slice_width = dp16kd_width(self.depth) if is_ecp5(platform) else None
        if slice_width is None:
            self.blocks = 0
            m.submodules.memory = self.memory
            wp, rp = self.memory.write_port(), self.memory.read_port(transparent_for=())
            m.d.comb += [wp.addr.eq(self.w_addr), wp.data.eq(self.w_data), wp.en.eq(self.w_en),
                         rp.addr.eq(self.r_addr), rp.en.eq(self.r_en)]
            m.d.sync += self.r_data.eq(rp.data)
            return m
        self.memory._MustUse__silence = True     # the model, unused here: no warning
        # The address sits at the top of the block's 14 address inputs; at 18 and 36 bits the
        # lowest two or four of the write port are its byte enables.
        shift = 14 - (dict(DP16KD_MODES)[slice_width] - 1).bit_length()
        byte_enables = {18: 2, 36: 4}.get(slice_width, 0)
        ada = Cat(Const((1 << byte_enables) - 1, shift), self.w_addr, Const(0, 14))[:14]
        adb = Cat(Const(0, shift), self.r_addr, Const(0, 14))[:14]
        outs = []
        for i, lo in enumerate(range(0, self.width, slice_width)):
            bits = min(slice_width, self.width - lo)
            di = Cat(self.w_data[lo:lo + bits], Const(0, 36))[:36]
            do = Signal(36, name=f"{self.name}_do{i}")
            wide = slice_width == 36      # the data on both ports' buses, A's first
            pins = {"p_DATA_WIDTH_A": slice_width, "p_DATA_WIDTH_B": slice_width,
                    "p_REGMODE_A": "OUTREG" if wide else "NOREG", "p_REGMODE_B": "OUTREG",
                    "p_WRITEMODE_A": "NORMAL", "p_WRITEMODE_B": "NORMAL",
                    "p_CSDECODE_A": "0b000", "p_CSDECODE_B": "0b000",
                    "p_RESETMODE": "SYNC", "p_ASYNC_RESET_RELEASE": "SYNC", "p_GSR": "DISABLED",
                    "i_CLKA": ClockSignal("sync"), "i_CEA": 1, "i_OCEA": 1, "i_WEA": self.w_en,
                    "i_RSTA": 0,
                    "i_CLKB": ClockSignal("sync"), "i_CEB": self.r_en, "i_OCEB": 1, "i_WEB": 0,
                    "i_RSTB": 0}
            for b in range(3):
                pins[f"i_CSA{b}"] = pins[f"i_CSB{b}"] = 0
            for b in range(14):
                pins[f"i_ADA{b}"], pins[f"i_ADB{b}"] = ada[b], adb[b]
            for b in range(18):
                pins[f"i_DIA{b}"], pins[f"i_DIB{b}"] = di[b], (di[18 + b] if wide else 0)
                pins[f"o_DOB{b}"] = do[18 + b] if wide else do[b]
                if wide:
                    pins[f"o_DOA{b}"] = do[b]
            m.submodules[f"dp16kd{i}"] = Instance("DP16KD", **pins)
            outs.append(do[:bits])
        self.blocks = len(outs)
        m.d.comb += self.r_data.eq(Cat(*outs))
        return m
