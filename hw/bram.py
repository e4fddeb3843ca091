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

With ``a_reads`` the write port reads too (a true dual port): ``a_r_data`` is the word at
``w_addr`` two cycles after a cycle without a write (three with ``input_registers``); over a
write it holds (the DP16KD's ``WRITEMODE="NORMAL"``). On ECP5 the blocks are then at most 18
bits wide (a DP16KD reads and writes on one port only up to 18), each with both output
registers: the ULX3S devices' link writes and reads a region on port A, the core reads it on
port B, and neither address has a multiplexer in front of the blocks.

With ``input_registers`` every input (addresses, enables, write data) goes through a register
first: ``r_data`` comes three cycles after the read, a write lands a cycle after it is given.
On ECP5 each block has its own copy of those registers (:data:`hw.target.KEEP_COPY`), placed
beside it: a memory of many blocks spread over the die (the ULX3S devices' weights region, 16
blocks over 50 columns) is then reached by a one-to-one wire from a register per block, not by
one signal fanned out to all of them in the cycle the block takes it.

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

from .target import KEEP_COPY, is_ecp5

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
    r_data : the word read two cycles before, three with ``input_registers`` (see the module
        notes)
    a_r_data : with ``a_reads``, the word at ``w_addr`` two (three) cycles before

    Attributes
    ----------
    memory : amaranth.lib.memory.Memory
        The model memory, for testbenches (``memory.data[i]``); the elaboration for an ECP5
        (:attr:`blocks` > 0) does not use it.
    blocks : int
        DP16KD blocks of the latest elaboration (0 for the model).
    """

    def __init__(self, *, width: int, depth: int, name: str = "mem",
                 input_registers: bool = False, a_reads: bool = False):
        for what, value in (("input_registers", input_registers), ("a_reads", a_reads)):
            if not isinstance(value, bool):
                raise TypeError(f"memory {name!r}: {what} must be a bool, not {value!r}")
        for what, value in (("width", width), ("depth", depth)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"memory {name!r}: {what} must be a positive int, not "
                                 f"{value!r}")
        self.width, self.depth, self.name = width, depth, name
        self.input_registers, self.a_reads = input_registers, a_reads
        abits = max(1, (depth - 1).bit_length())
        self.w_addr = Signal(abits, name=f"{name}_w_addr")
        self.w_data = Signal(width, name=f"{name}_w_data")
        self.w_en = Signal(name=f"{name}_w_en")
        self.r_addr = Signal(abits, name=f"{name}_r_addr")
        self.r_en = Signal(name=f"{name}_r_en")
        self.r_data = Signal(width, name=f"{name}_r_data", reset_less=True)
        self.a_r_data = Signal(width, name=f"{name}_a_r_data", reset_less=True)
        self.memory = Memory(shape=unsigned(width), depth=depth, init=[])
        self.blocks = 0

    def _inputs(self, m, lo=0, bits=None, suffix=""):
        """The inputs as the memory (or its block ``suffix``, which writes ``bits`` data bits
        from ``lo``) sees them: the ports, or with ``input_registers`` registers of them (marked
        as copies for a block). ``w_data`` is the block's share only."""
        bits = self.width - lo if bits is None else bits
        ports = {"w_addr": self.w_addr, "w_data": self.w_data[lo:lo + bits], "w_en": self.w_en,
                 "r_addr": self.r_addr, "r_en": self.r_en}
        if not self.input_registers:
            return ports
        regs = {}
        for key, port in ports.items():
            regs[key] = Signal(len(port), name=f"{self.name}_{key}_q{suffix}", reset_less=True,
                               attrs={KEEP_COPY: 1} if suffix else {})
            m.d.sync += regs[key].eq(port)
        return regs

    def elaborate(self, platform):
        m = Module()
        slice_width = dp16kd_width(self.depth) if is_ecp5(platform) else None
        if slice_width is not None and self.a_reads:
            slice_width = min(slice_width, 18)
        if slice_width is None:
            self.blocks = 0
            m.submodules.memory = self.memory
            wp, rp = self.memory.write_port(), self.memory.read_port(transparent_for=())
            ins = self._inputs(m)
            m.d.comb += [wp.addr.eq(ins["w_addr"]), wp.data.eq(ins["w_data"]),
                         wp.en.eq(ins["w_en"]), rp.addr.eq(ins["r_addr"]),
                         rp.en.eq(ins["r_en"])]
            m.d.sync += self.r_data.eq(rp.data)
            if self.a_reads:
                ap = self.memory.read_port(transparent_for=())
                m.d.comb += [ap.addr.eq(ins["w_addr"]), ap.en.eq(~ins["w_en"])]
                m.d.sync += self.a_r_data.eq(ap.data)
            return m
        self.memory._MustUse__silence = True     # the model, unused here: no warning
        # The address sits at the top of the block's 14 address inputs; at 18 and 36 bits the
        # lowest two or four of the write port are its byte enables.
        shift = 14 - (dict(DP16KD_MODES)[slice_width] - 1).bit_length()
        byte_enables = {18: 2, 36: 4}.get(slice_width, 0)
        outs, a_outs = [], []
        for i, lo in enumerate(range(0, self.width, slice_width)):
            bits = min(slice_width, self.width - lo)
            ins = self._inputs(m, lo, bits, f"_{i}")
            ada = Cat(Const((1 << byte_enables) - 1, shift), ins["w_addr"], Const(0, 14))[:14]
            adb = Cat(Const(0, shift), ins["r_addr"], Const(0, 14))[:14]
            di = Cat(ins["w_data"], Const(0, 36))[:36]
            do = Signal(36, name=f"{self.name}_do{i}")
            a_do = Signal(18, name=f"{self.name}_a_do{i}")
            wide = slice_width == 36      # the data on both ports' buses, A's first
            pins = {"p_DATA_WIDTH_A": slice_width, "p_DATA_WIDTH_B": slice_width,
                    "p_REGMODE_A": "OUTREG" if wide or self.a_reads else "NOREG",
                    "p_REGMODE_B": "OUTREG",
                    "p_WRITEMODE_A": "NORMAL", "p_WRITEMODE_B": "NORMAL",
                    "p_CSDECODE_A": "0b000", "p_CSDECODE_B": "0b000",
                    "p_RESETMODE": "SYNC", "p_ASYNC_RESET_RELEASE": "SYNC", "p_GSR": "DISABLED",
                    "i_CLKA": ClockSignal("sync"), "i_CEA": 1, "i_OCEA": 1, "i_WEA": ins["w_en"],
                    "i_RSTA": 0,
                    "i_CLKB": ClockSignal("sync"), "i_CEB": ins["r_en"], "i_OCEB": 1, "i_WEB": 0,
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
                elif self.a_reads:
                    pins[f"o_DOA{b}"] = a_do[b]
            m.submodules[f"dp16kd{i}"] = Instance("DP16KD", **pins)
            outs.append(do[:bits])
            a_outs.append(a_do[:bits])
        self.blocks = len(outs)
        m.d.comb += self.r_data.eq(Cat(*outs))
        if self.a_reads:
            m.d.comb += self.a_r_data.eq(Cat(*a_outs))
        return m
