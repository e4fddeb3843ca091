"""The device side of the host link: frame parser, command dispatcher, memory regions, replies.

:class:`HostLink` speaks the protocol of :mod:`attn.protocol` over a byte stream (connect it to
:class:`hw.uart.UART`, see :func:`connect_uart`). It owns one ``amaranth.lib.memory.Memory`` per
region and gives the core a read port and a write port on each; it starts the core with run
arguments, watches for ``done``, exposes the core's performance counters to the host and can
reset the core while the link itself keeps running.

A device top looks like this::

    m.submodules.uart = uart = UART(divisor=uart_divisor(48e6, 3e6))
    m.submodules.link = link = HostLink(config=cfg, regions=[...], run_layout=..., counters=4,
                                        timeout_cycles=480_000)
    m.submodules.core = core = ResetInserter(link.core_reset)(Core(...))
    connect_uart(m, uart, link)
    # core <-> link.region_port("input"), link.start / run_args / busy / done / status /
    # counters
"""

from __future__ import annotations

import operator
from functools import reduce

from amaranth import Cat, Module, Mux, Shape, Signal, Value, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from attn.config import AttnConfig
from attn.protocol import (
    COUNTER_BYTES,
    CRC_INIT,
    FLAG_BUSY,
    FLAG_RUNNING,
    MAX_COUNTERS,
    MAX_LENGTH,
    MAX_REGIONS,
    READ_FIELDS,
    READ_PAYLOAD,
    REPLY_SYNC,
    REQUEST_SYNC,
    RUN_ARGS_OFFSET,
    STATUS_FIELDS,
    STATUS_PAYLOAD,
    TAG_BYTES,
    WRITE_FIELDS,
    WRITE_HEADER,
    Command,
    Region,
    Status,
    decode_identify,
    field_offsets,
    identify_payload,
    run_arg_bytes,
)

from .bram import RegisteredMemory
from .crc import crc16_next
from .dsp import times_constant
from .spram import SinglePortMemory, ecp5_slice_width, spram_blocks, spram_plan
from .target import KEEP_COPY, is_ecp5, one_hot_on_ecp5
from .uart import rx_layout

__all__ = ["HostLink", "region_signature", "connect_uart", "host_ports", "connect_host"]


def _addr_bits(depth: int) -> int:
    return max(1, (depth - 1).bit_length())


_ACCESS = ("r", "w", "rw")


def region_signature(region: Region, access: str = "rw") -> wiring.Signature:
    """The core's view of a region: a synchronous read port (``access`` ``"r"``), a write port
    (``"w"``) or both (``"rw"``, the default).

    ``r_data`` holds the word at the ``r_addr`` presented ``latency`` cycles before with ``r_en``
    high (:meth:`HostLink.read_latency`: one cycle, or two with region registers; not
    transparent to a write in the same cycle). A word is written
    at ``w_addr`` in a cycle with ``w_en`` high.
    """
    if access not in _ACCESS:
        raise ValueError(f"region {region.name!r} access must be one of {', '.join(_ACCESS)}, "
                         f"not {access!r}")
    addr = unsigned(_addr_bits(region.depth))
    members = {}
    if "r" in access:
        members.update({"r_addr": Out(addr), "r_en": Out(1), "r_data": In(region.width)})
    if "w" in access:
        members.update({"w_addr": Out(addr), "w_en": Out(1), "w_data": Out(region.width)})
    return wiring.Signature(members)


def _field(head, fields, name):
    offset, size = field_offsets(fields)[name]
    return head[8 * offset:8 * (offset + size)]


class HostLink(wiring.Component):
    """Frame parser and command dispatcher of the host link (protocol: :mod:`attn.protocol`).

    Requests arrive on ``i_stream``, one byte per beat; replies leave on ``o_stream``. The link
    is half duplex: from the end of a request until its reply has been sent it does not take
    bytes (``i_stream.ready`` low). A request is received into a frame buffer and executed only
    after its CRC and every check passed, so a malformed request changes nothing but the error
    count. Each request gets exactly one reply; an error reply carries a :class:`Status` code
    and no payload:

    - CRC mismatch: ``BAD_CRC`` at once;
    - a length field above ``max_payload``, or a UART framing error inside a frame: the rest
      of the frame is dropped until the line has been quiet for ``timeout_cycles``, then
      ``BAD_LENGTH`` / ``FRAMING``;
    - a frame that stops (no byte for ``timeout_cycles``): ``TIMEOUT``, the parser is ready for
      a new frame;
    - unknown command, wrong length for the command, bad region, address range, interface tag
      or a running core: ``BAD_COMMAND``, ``BAD_LENGTH``, ``BAD_REGION``, ``BAD_RANGE``,
      ``BAD_TAG``, ``BUSY``.

    Bytes outside frames that are not :data:`~attn.protocol.REQUEST_SYNC` are ignored.

    The core is started by a one-cycle ``start`` pulse with ``run_args`` (registered, held until
    the next RUN). The link considers the core running from ``start`` until a ``done`` pulse
    (which carries ``status``) or a RESET. The link samples ``busy`` into a register: from the
    cycle after ``start`` until the cycle after ``busy`` falls (or the RESET) the core owns the
    region ports, and while the core runs or owns them WRITE, READ and RUN are refused with
    ``BUSY``. ``busy`` must not rise while the core is not running. RUN replies at once
    ("started"); the host polls STATUS, whose BUSY flag is ``busy`` a cycle before. RESET
    pulses ``core_reset`` for one cycle and clears the running flag; region contents are kept.

    Parameters
    ----------
    config : AttnConfig
        The accelerator configuration, sent whole in the IDENTIFY reply.
    regions : sequence of attn.protocol.Region
        The memory regions (1 to 255, distinct names); the link owns one ``Memory`` each.
    run_layout : shape-castable
        Layout of the run arguments (e.g. :func:`hw.core_io.run_args_layout`); the host sends
        them as ``ceil(width / 8)`` little-endian bytes after the tag.
    counters : int
        Number of 32-bit performance counters (0 to 255), read by COUNTERS.
    timeout_cycles : int
        Cycles without a byte after which a frame in progress is abandoned (choose well above
        one byte time, ``10 * divisor``, and above the gaps the host's USB adapter makes).
    max_payload : int
        Size of the frame buffer: the largest request payload accepted (at least
        ``WRITE_HEADER`` plus one word of the widest writable region, at most 65535).
    core_access : dict or None
        For each region name, the ports the core has on it: ``"r"``, ``"w"`` or ``"rw"``
        (the default for names not given). A port the core does not have costs no multiplexer
        in front of the memory.
    region_registers : bool or None
        Whether every region's read data comes through a register of its own, for the link and
        the core, and every region's addresses, enables and write data go through a register
        before its memory (:meth:`read_latency` 3 instead of 1; a reply takes a word four cycles
        after reading it instead of two; a write lands a cycle later), so that nothing follows a
        block RAM's output in its cycle and no signal fans out to a region's blocks in the
        cycle they take it. The registers are the block RAM's own output register and a copy of
        the input registers at each block on ECP5 (:class:`hw.bram.RegisteredMemory` with
        ``input_registers``; a region the core only reads is a true dual port there, the link on
        port A, the core on port B, with no multiplexer in front of either address, and each
        region takes the link's address from a register of its own), registers in the fabric
        for a region in SPRAM; the frame buffer has an output register as well (a WRITE takes
        four cycles per byte instead of three).
        ``None`` (the default): on ECP5, whose block RAMs take 5.8 ns to present their output
        without it, not on iCE40, where the flip-flops would cost logic cells the iCEBreaker
        does not have. Replies are the same.

    Members
    -------
    i_stream : In(stream.Signature(hw.uart.rx_layout))
        Received bytes (``error``: UART framing error).
    o_stream : Out(stream.Signature(8))
        Reply bytes.
    start : Out(1)
        One-cycle pulse: run the core with ``run_args``.
    run_args : Out(run_layout)
        Arguments of the last RUN.
    busy : In(1)
        The core is working (reported by STATUS; keeps the region ports with the core).
    done : In(1)
        One-cycle pulse: the run ended, with ``status`` (0 = success, by convention).
    status : In(8)
        Status code of the run, valid with ``done``.
    counters : In(data.ArrayLayout(32, counters))
        Performance counters (only if ``counters > 0``); each is sampled as it is sent.
    core_reset : Out(1)
        One-cycle pulse: reset the core (RESET command).
    mem_<name> : In(region_signature(region, access))
        For each region, the core's ports (see :meth:`region_port`).

    Raises
    ------
    TypeError, ValueError
        If a parameter has the wrong type or value; the message names it and the value given.
    """

    def __init__(self, *, config, regions, run_layout, counters: int, timeout_cycles: int,
                 max_payload: int = 256, core_access: dict | None = None,
                 region_registers: bool | None = None):
        if region_registers is not None and not isinstance(region_registers, bool):
            raise TypeError(f"region_registers must be a bool or None, not "
                            f"{region_registers!r}")
        self.region_registers = region_registers
        if not isinstance(config, AttnConfig):
            raise TypeError(f"config must be an AttnConfig, not {config!r}")
        regions = tuple(regions) if isinstance(regions, (list, tuple)) else regions
        if not isinstance(regions, tuple) or not all(isinstance(r, Region) for r in regions):
            raise TypeError(f"regions must be a sequence of Region, not {regions!r}")
        if not 1 <= len(regions) <= MAX_REGIONS:
            raise ValueError(f"regions must hold 1 to {MAX_REGIONS} regions, not "
                             f"{len(regions)}")
        names = [r.name for r in regions]
        if len(set(names)) != len(names):
            raise ValueError(f"regions must have distinct names, not {names!r}")
        try:
            run_bits = Shape.cast(run_layout).width
        except TypeError:
            raise TypeError(f"run_layout must be a shape-castable, not {run_layout!r}") \
                from None
        for name, value, lo, hi in (("counters", counters, 0, MAX_COUNTERS),
                                    ("timeout_cycles", timeout_cycles, 1, (1 << 32) - 1),
                                    ("max_payload", max_payload, 1, MAX_LENGTH)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, not {value!r}")
            if not lo <= value <= hi:
                raise ValueError(f"{name} must be between {lo} and {hi}, not {value!r}")
        need = max([WRITE_HEADER + r.word_bytes for r in regions if r.writable]
                   + [READ_PAYLOAD, RUN_ARGS_OFFSET + run_arg_bytes(run_bits)])
        if max_payload < need:
            raise ValueError(f"max_payload must be at least {need} for these regions and run "
                             f"arguments, not {max_payload!r}")

        core_access = dict(core_access or {})
        unknown = sorted(set(core_access) - set(names))
        if unknown:
            raise ValueError(f"core_access names unknown region(s): {', '.join(unknown)}")
        self.access = {name: core_access.get(name, "rw") for name in names}
        for region in regions:
            region_signature(region, self.access[region.name])     # checks the access
        self.config = config
        self.regions = regions
        self.run_layout = run_layout
        self.run_bits = run_bits
        self.n_counters = counters
        self.timeout_cycles = timeout_cycles
        self.max_payload = max_payload
        self.ident = identify_payload(config, regions, counters, run_bits, max_payload,
                                      timeout_cycles)
        self.tag = decode_identify(self.ident).tag

        ports = {
            "i_stream": In(stream.Signature(rx_layout)),
            "o_stream": Out(stream.Signature(8)),
            "start": Out(1),
            "run_args": Out(run_layout),
            "busy": In(1),
            "done": In(1),
            "status": In(8),
            "core_reset": Out(1),
        }
        #: The region memories by name of the latest elaboration (``amaranth.lib.memory.Memory``;
        #: testbenches may read ``memories[name].data[i]``).
        self.memories = {}
        if counters:
            ports["counters"] = In(data.ArrayLayout(32, counters))
        for region in regions:
            ports[f"mem_{region.name}"] = In(region_signature(region,
                                                              self.access[region.name]))
        super().__init__(ports)

    def read_latency(self, platform) -> int:
        """Cycles from a region port's ``r_addr`` to its ``r_data`` when elaborated for
        ``platform``: 3 with region registers (see ``region_registers``), else 1."""
        registered = (is_ecp5(platform) if self.region_registers is None
                      else self.region_registers)
        return 3 if registered else 1

    def region_port(self, name: str):
        """The core's ports of region ``name`` (an interface of :func:`region_signature`)."""
        return getattr(self, f"mem_{name}")

    def elaborate(self, platform):
        m = Module()
        regions = self.regions
        i_stream, o_stream = self.i_stream, self.o_stream

        # -- storage -----------------------------------------------------------------------
        # With `registered`, every region's read data comes through a register of its own
        # (the DP16KD's output register on ECP5, :class:`hw.bram.RegisteredMemory`), for the
        # link and the core alike, and its inputs through registers of their own (a copy at each
        # DP16KD: on the 16x8 ULX3S device the link's address fanned out to the weights
        # region's 16 blocks across 50 columns, its slowest path at 9b426f6, 14.9 ns): three
        # cycles from address to data, no block RAM output drives more than a wire in its
        # cycle, and no signal more than one block's input. The frame buffer has the output
        # register too (a WRITE then takes four cycles per byte instead of three): on the 8x8
        # ULX3S device its DP16KD's 5.8 ns into the word register were the critical path once
        # the regions had their registers.
        registered = self.read_latency(platform) == 3
        fb_w_addr = Signal(range(self.max_payload))
        fb_w_data = Signal(8)
        fb_w_en = Signal()
        fb_r_addr = Signal(range(self.max_payload))
        if registered:
            m.submodules.frame_buffer = fbuf = RegisteredMemory(
                width=8, depth=self.max_payload, name="frame_buffer")
            m.d.comb += [fbuf.w_addr.eq(fb_w_addr), fbuf.w_data.eq(fb_w_data),
                         fbuf.w_en.eq(fb_w_en), fbuf.r_addr.eq(fb_r_addr), fbuf.r_en.eq(1)]
            fb_r_data = fbuf.r_data
        else:
            m.submodules.frame_buffer = fbuf = Memory(shape=8, depth=self.max_payload,
                                                      init=[])
            fbuf_w, fbuf_r = fbuf.write_port(), fbuf.read_port()
            m.d.comb += [fbuf_w.addr.eq(fb_w_addr), fbuf_w.data.eq(fb_w_data),
                         fbuf_w.en.eq(fb_w_en), fbuf_r.addr.eq(fb_r_addr)]
            fb_r_data = fbuf_r.data
        m.submodules.ident_rom = rom = Memory(shape=8, depth=len(self.ident),
                                              init=list(self.ident))
        rom_r = rom.read_port()

        running = Signal()
        # The region ports' multiplexers and the link's BUSY checks go by `port_sel`, a
        # register: `busy` comes from the far side of the core, and on the 8x8 ULX3S device its
        # gates in front of the weights region's 16 block-RAM addresses, then in front of the
        # command checks, were the critical path. `port_sel` is `running | busy` of the cycle
        # before: the core gets the ports the cycle after `start` (the cycle of `start` is the
        # core's to begin in, not to access them) and keeps them a cycle after `busy` falls.
        # `busy` only rises while `running` is high (a run starts both), so `running |
        # port_sel` covers every cycle `busy` does.
        port_sel = Signal()
        core_owns = Signal()
        m.d.sync += port_sel.eq(running | self.busy)
        m.d.comb += core_owns.eq(running | port_sel)

        # The link's side of every region: one address/data bus, enables per region.
        word_bits = 8 * max([COUNTER_BYTES, STATUS_PAYLOAD] + [r.word_bytes for r in regions])
        # WRITE: the region word being assembled (bytes shift in at the top); replies: the
        # word being sent (bytes shift out at the bottom)
        word = Signal(word_bits)
        # ROM / memory / counter index (an address from a request is only used once the range
        # check has passed, so the largest index it needs is a region's depth)
        ptr = Signal(range(max([r.depth for r in regions] + [len(self.ident),
                                                              self.n_counters]) + 1))
        region_sel = Signal(8)
        link_w_en = Signal()
        link_r_data = Signal(word_bits)
        mem_r_q = []
        # A region the core only reads or only writes is never used by the link and the core
        # in the same cycle: one address serves both, and on an iCE40 UltraPlus the largest
        # such regions go to SPRAM (:mod:`hw.spram`).
        single = {r.name: (r.width, r.depth) for r in regions if self.access[r.name] != "rw"}
        #: Names of the regions in SPRAM in the latest elaboration.
        self.spram_regions = spram_plan(single, spram_blocks(platform))
        self.memories = {}
        on_ecp5 = is_ecp5(platform)             # no SPRAM there; deep regions in slices
        for index, region in enumerate(regions):
            core = self.region_port(region.name)
            access = self.access[region.name]
            abits = _addr_bits(region.depth)
            mine = Signal(name=f"link_writes_{region.name}")
            m.d.comb += mine.eq(link_w_en & (region_sel == index))
            # A WRITE shifts its bytes in from the top of ``word``: the region's word is the
            # top ``word_bytes`` bytes.
            link_data = word[word_bits - 8 * region.word_bytes:][:region.width]
            link_addr = ptr[:abits]
            if registered:
                # a copy of the link's address at each region (`ptr` settles two cycles before
                # a read or a write uses it, see P_LOAD)
                link_addr = Signal(abits, name=f"link_addr_{region.name}", reset_less=True,
                                   attrs={KEEP_COPY: 1})
                m.d.sync += link_addr.eq(ptr[:abits])
            # The memory's ports: the core's while it owns them (`port_sel`), else the link's.
            core_r, core_w = "r" in access, "w" in access
            in_spram = region.name in self.spram_regions
            # A region the core only reads, in DP16KD blocks: the link writes and reads it on
            # port A, the core reads it on port B, no multiplexer in front of either address.
            a_reads = registered and not in_spram and core_r and not core_w
            w_addr = Mux(port_sel, core.w_addr, link_addr) if core_w else link_addr
            w_data = Mux(port_sel, core.w_data, link_data) if core_w else link_data
            w_en = Mux(port_sel, core.w_en, mine) if core_w else mine & ~port_sel
            r_addr = (core.r_addr if a_reads else Mux(port_sel, core.r_addr, link_addr)
                      if core_r else link_addr)
            r_en = (core.r_en if a_reads else Mux(port_sel, core.r_en, 1) if core_r
                    else ~port_sel)
            if registered and not in_spram:
                mem = RegisteredMemory(width=region.width, depth=region.depth,
                                       name=f"region_{region.name}", input_registers=True,
                                       a_reads=a_reads)
                m.submodules[f"region_{region.name}"] = mem
                self.memories[region.name] = mem.memory
                m.d.comb += [mem.w_addr.eq(w_addr), mem.w_data.eq(w_data), mem.w_en.eq(w_en),
                             mem.r_addr.eq(r_addr), mem.r_en.eq(r_en)]
                # the core's word from port B; the link's from port A when it has its own
                core_rd, link_rd = mem.r_data, mem.a_r_data if a_reads else mem.r_data
            elif access == "rw":
                mem = Memory(shape=unsigned(region.width), depth=region.depth, init=[])
                m.submodules[f"region_{region.name}"] = self.memories[region.name] = mem
                wp, rp = mem.write_port(), mem.read_port()
                m.d.comb += [wp.addr.eq(w_addr), wp.data.eq(w_data), wp.en.eq(w_en),
                             rp.addr.eq(r_addr), rp.en.eq(r_en)]
                core_rd = link_rd = rp.data
            else:
                spm = SinglePortMemory(width=region.width, depth=region.depth, spram=in_spram,
                                       name=f"region_{region.name}",
                                       slice_width=ecp5_slice_width(region.depth) if on_ecp5
                                       else None)
                m.submodules[f"region_{region.name}"] = spm
                if spm.memory is not None:
                    self.memories[region.name] = spm.memory
                spm_in = {"addr": r_addr if core_r else w_addr, "r_en": r_en, "w_data": w_data,
                          "w_en": w_en}
                for key, value in spm_in.items():
                    port = getattr(spm, key)
                    if registered:              # in SPRAM: the input registers in the fabric
                        reg = Signal(len(port), name=f"{region.name}_{key}_q", reset_less=True)
                        m.d.sync += reg.eq(value)
                        value = reg
                    m.d.comb += port.eq(value)
                core_rd = link_rd = spm.r_data
                if registered:                  # ... and the output register
                    r_q = Signal(region.width, name=f"link_r_{region.name}", reset_less=True)
                    m.d.sync += r_q.eq(spm.r_data)
                    core_rd = link_rd = r_q
            if core_r:
                m.d.comb += core.r_data.eq(core_rd)
            mem_r_q.append(link_rd)
        # The selected region's read data goes to a register (`link_r_q`) that a reply takes
        # a word from (P_LOAD) after the read (P_WAIT, and P_WAIT2 to P_WAIT4 with
        # `registered`). With `registered` each region's word first goes to a register of
        # its own, zero unless its region is selected, and `link_r_q` takes their OR: on the
        # 16x8 ULX3S device the regions' words crossed the die to one multiplexer and on to
        # `link_r_q` in one cycle (12.5 ns).
        if registered:
            parts = []
            for index, rdata in enumerate(mem_r_q):
                picked = Signal(name=f"link_r_pick_{index}")
                part = Signal(word_bits, name=f"link_r_part_{index}", reset_less=True)
                m.d.sync += [picked.eq(region_sel == index), part.eq(Mux(picked, rdata, 0))]
                parts.append(part)
            m.d.comb += link_r_data.eq(reduce(operator.or_, parts))
        else:
            with m.Switch(region_sel):
                for index, rdata in enumerate(mem_r_q):
                    with m.Case(index):
                        m.d.comb += link_r_data.eq(rdata)
        link_r_q = Signal(word_bits)
        m.d.sync += link_r_q.eq(link_r_data)

        # -- request state -----------------------------------------------------------------
        cmd = Signal(8)
        length = Signal(16)
        idx = Signal(range(self.max_payload + 1))
        # payload bytes after the one being received: the last is the one at 0 (a zero test,
        # not `idx + 1 == length`'s adder and comparison before the state)
        rx_left = Signal(range(self.max_payload + 1))
        head_bytes = max(WRITE_HEADER, READ_PAYLOAD, RUN_ARGS_OFFSET + run_arg_bytes(
            self.run_bits))
        head = Signal(8 * head_bytes)
        crc_rx = Signal(16, init=CRC_INIT)
        crc_rx_next = Signal(16)
        crc_hi_ok = Signal()
        crc_lo = Signal(8)
        m.d.comb += crc_rx_next.eq(crc16_next(crc_rx, i_stream.payload.data))
        timer = Signal(range(self.timeout_cycles + 1))
        timed_out = Signal()
        m.d.comb += timed_out.eq(timer == self.timeout_cycles)
        pending = Signal(8)                 # error code of a frame being discarded

        # -- reply state -------------------------------------------------------------------
        r_status = Signal(8)
        r_len = Signal(16)
        words_left = Signal(16)
        wb = Signal(4)                      # bytes per word of the payload source
        byte_no = Signal(4)
        src = Signal(3)
        SRC_ROM, SRC_MEM, SRC_CNT, SRC_STATUS = range(4)
        # The reply CRC takes each byte a cycle after it was sent (the CRC's XOR network stays
        # off the paths into the byte sent). Every reply has a cycle (P_NEXT) between its last
        # payload byte and its CRC.
        crc_tx = Signal(16, init=CRC_INIT)
        crc_tx_en = Signal()
        sent = Signal(8)
        sent_crc = Signal()
        m.d.sync += [sent.eq(o_stream.payload),
                     sent_crc.eq(o_stream.valid & o_stream.ready & crc_tx_en)]
        with m.If(sent_crc):
            m.d.sync += crc_tx.eq(crc16_next(crc_tx, sent))

        last_status = Signal(8)
        runs = Signal(16)
        errors = Signal(16)
        status_word = Signal(8 * STATUS_PAYLOAD)
        # the BUSY flag from a register of `busy` (a cycle late: it falls as `running` does
        # or after): `busy` comes from across the die, and on the 16x8 ULX3S device its gates
        # beside the reply's word multiplexer pulled the link's state decode there and back
        # (fsm_state -> `word`, 12.8 ns)
        busy_flag = Signal()
        m.d.sync += busy_flag.eq(self.busy)
        m.d.comb += [
            _field(status_word, STATUS_FIELDS, "flags").eq(
                Mux(running, FLAG_RUNNING, 0) | Mux(busy_flag, FLAG_BUSY, 0)),
            _field(status_word, STATUS_FIELDS, "last_status").eq(last_status),
            _field(status_word, STATUS_FIELDS, "runs").eq(runs),
            _field(status_word, STATUS_FIELDS, "errors").eq(errors),
        ]

        # -- the core ------------------------------------------------------------------------
        m.d.sync += [self.start.eq(0), self.core_reset.eq(0)]
        with m.If(self.done & running):
            m.d.sync += [running.eq(0), last_status.eq(self.status), runs.eq(runs + 1)]

        # -- reads for the reply payload and for WRITE ------------------------------------------
        # The ROM reads at a copy of `ptr` of the cycle before: P_LOAD samples its word at least
        # three cycles after `ptr` last moved (on the 16x8 ULX3S device `ptr`, used all over
        # the link, reached the ROM's logic through 14.8 ns).
        rom_addr = Signal.like(ptr, name="rom_addr")
        m.d.sync += rom_addr.eq(ptr)
        m.d.comb += [rom_r.addr.eq(rom_addr), fb_r_addr.eq(idx)]

        def reply(m, status, *, payload_len=0, source=None, words=0, bytes_per_word=1):
            m.d.sync += [r_status.eq(status), r_len.eq(payload_len), words_left.eq(words),
                         wb.eq(bytes_per_word)]
            if source is not None:
                m.d.sync += src.eq(source)
            m.next = "R_SYNC"

        count_error = Signal()
        m.d.sync += count_error.eq(0)
        with m.If(count_error):
            m.d.sync += errors.eq(errors + 1)

        def error(m, status, *, clear=True):
            # (`clear=False` while a frame is received: HUNT has cleared the reply's length
            # and words, and the receive states' conditions stay out of their enables - on
            # the 16x8 ULX3S device the state -> a byte taken -> the length's enable was the
            # slowest path at seed 2, 11.1 ns)
            m.d.sync += [r_status.eq(status), count_error.eq(1)]
            if clear:
                m.d.sync += [r_len.eq(0), words_left.eq(0)]
            m.next = "R_SYNC"

        # A byte is taken in the receive states, each of which is ready for one: there `valid`
        # alone says it is taken (the state decode stays out of the enables of `head`, the
        # state and the CRC; on the 16x8 ULX3S netlist `fsm_state -> take -> head` was the
        # link's deepest family, 6 to 7 levels).
        take = i_stream.valid
        byte = i_stream.payload.data

        # Per-region constants for the request in ``head`` (WRITE and READ put the region
        # number in different places: ``region_sel`` is loaded with the right one below).
        w_region = _field(head, WRITE_FIELDS, "region")
        w_addr = _field(head, WRITE_FIELDS, "address")
        w_count = _field(head, WRITE_FIELDS, "count")
        w_tag = _field(head, WRITE_FIELDS, "tag")
        r_region = _field(head, READ_FIELDS, "region")
        r_addr = _field(head, READ_FIELDS, "address")
        r_count = _field(head, READ_FIELDS, "count")
        run_tag = head[:8 * TAG_BYTES]
        run_args = head[8 * RUN_ARGS_OFFSET:8 * RUN_ARGS_OFFSET + self.run_bits]

        # WRITE and READ share one region lookup, one range check and one byte count: the
        # command picks the fields (it is known from the second byte of the frame on).
        # cmd == READ, a register set with cmd (off the path of the range and length checks)
        is_read = Signal()
        sel = Signal(8)
        count = Signal(len(w_count))
        addr = Signal(max(len(w_addr), len(r_addr)))
        m.d.comb += [sel.eq(Mux(is_read, r_region, w_region)),
                     count.eq(Mux(is_read, r_count, w_count)),
                     addr.eq(Mux(is_read, r_addr, w_addr))]
        ok_w = Signal()
        ok_r = Signal()
        depth = Signal(17)
        nb = Signal(4)                       # bytes per word of the region
        with m.Switch(sel):
            for index, region in enumerate(regions):
                with m.Case(index):
                    m.d.comb += [ok_w.eq(region.writable), ok_r.eq(region.readable),
                                 depth.eq(region.depth), nb.eq(region.word_bytes)]
        # count * nb: one sum of shifted copies per word size the regions have (a `*` would
        # take a DSP; a general shift-and-add over the bits of nb takes three adders)
        nbytes = Signal(len(count) + len(nb))
        with m.Switch(nb):
            for size in sorted({r.word_bytes for r in regions}):
                with m.Case(size):
                    m.d.comb += nbytes.eq(times_constant(count, size))
        # The region's word size, depth and the request's byte count are registered in state
        # SIZE, the checks on them in DECODE, so that EXEC only combines flags and no path
        # runs from the region lookup through the byte count to a compare.
        nb_q = Signal.like(nb)
        depth_q = Signal.like(depth)
        nbytes_q = Signal.like(nbytes)
        run_length = RUN_ARGS_OFFSET + run_arg_bytes(self.run_bits)
        checks = {
            "w_short": length < WRITE_HEADER,
            "w_tag": w_tag != self.tag,
            "w_region": (sel >= len(regions)) | ~ok_w,
            "range": addr + count > depth_q,
            "w_length": length != WRITE_HEADER + nbytes_q,
            "w_empty": count == 0,
            "r_length": length != READ_PAYLOAD,
            "r_region": (sel >= len(regions)) | ~ok_r,
            "r_long": nbytes_q > MAX_LENGTH,
            "run_length": length != run_length,
            "run_tag": run_tag != self.tag,
            "nonempty": length != 0,
        }
        bad = {name: Signal(name=f"check_{name}") for name in checks}
        ident_len = len(self.ident)

        with m.FSM() as fsm:
            # -- receive a frame ----------------------------------------------------------
            rx_states = ("HUNT", "CMD", "LEN0", "LEN1", "PAYLOAD", "CRC0", "CRC1", "DISCARD")
            with m.State("HUNT"):
                m.d.comb += i_stream.ready.eq(1)
                m.d.sync += [timer.eq(0), crc_rx.eq(CRC_INIT), cmd.eq(0), is_read.eq(0),
                             r_len.eq(0), words_left.eq(0)]
                with m.If(take & ~i_stream.payload.error & (byte == REQUEST_SYNC)):
                    m.next = "CMD"
            for state in rx_states[1:-1]:
                with m.State(state):
                    m.d.comb += i_stream.ready.eq(1)
                    m.d.sync += timer.eq(timer + 1)
                    with m.If(take):
                        m.d.sync += [timer.eq(0), crc_rx.eq(crc_rx_next)]
                        with m.If(i_stream.payload.error):
                            m.d.sync += pending.eq(Status.FRAMING)
                            m.next = "DISCARD"
                        with m.Else():
                            if state == "CMD":
                                m.d.sync += [cmd.eq(byte), is_read.eq(byte == Command.READ)]
                                m.next = "LEN0"
                            elif state == "LEN0":
                                m.d.sync += length[:8].eq(byte)
                                m.next = "LEN1"
                            elif state == "LEN1":
                                full = Cat(length[:8], byte)
                                m.d.sync += [length[8:].eq(byte), idx.eq(0),
                                             rx_left.eq(full - 1)]
                                with m.If(full > self.max_payload):
                                    m.d.sync += pending.eq(Status.BAD_LENGTH)
                                    m.next = "DISCARD"
                                with m.Elif(full == 0):
                                    m.next = "CRC0"
                                with m.Else():
                                    m.next = "PAYLOAD"
                            elif state == "PAYLOAD":
                                m.d.comb += [fb_w_addr.eq(idx), fb_w_data.eq(byte),
                                             fb_w_en.eq(1)]
                                with m.Switch(idx):
                                    for i in range(head_bytes):
                                        with m.Case(i):
                                            m.d.sync += head[8 * i:8 * i + 8].eq(byte)
                                m.d.sync += [idx.eq(idx + 1), rx_left.eq(rx_left - 1)]
                                with m.If(rx_left == 0):
                                    m.next = "CRC0"
                            elif state == "CRC0":
                                # The CRC is sent high byte first: compare it byte by byte
                                # with the CRC of the body (same as a zero residue).
                                m.d.sync += [crc_hi_ok.eq(byte == crc_rx[8:]),
                                             crc_lo.eq(crc_rx[:8])]
                                m.next = "CRC1"
                            else:
                                with m.If(crc_hi_ok & (byte == crc_lo)):
                                    m.next = "SIZE"
                                with m.Else():
                                    error(m, Status.BAD_CRC, clear=False)
                    with m.Elif(timed_out):
                        error(m, Status.TIMEOUT, clear=False)
            with m.State("DISCARD"):
                m.d.comb += i_stream.ready.eq(1)
                m.d.sync += timer.eq(timer + 1)
                with m.If(take):
                    m.d.sync += timer.eq(0)
                with m.Elif(timed_out):
                    error(m, pending, clear=False)

            # -- check and execute ----------------------------------------------------------
            with m.State("SIZE"):
                m.d.sync += [nb_q.eq(nb), depth_q.eq(depth), nbytes_q.eq(nbytes)]
                m.next = "DECODE"
            with m.State("DECODE"):
                m.d.sync += [bad[name].eq(cond) for name, cond in checks.items()]
                # a READ that passes its checks replies with this length (any other reply
                # sets its own in EXEC)
                m.d.sync += r_len.eq(nbytes_q)
                m.next = "EXEC"
            with m.State("EXEC"):
                m.d.sync += ptr.eq(0)
                with m.Switch(cmd):
                    with m.Case(Command.IDENTIFY):
                        with m.If(bad["nonempty"]):
                            error(m, Status.BAD_LENGTH)
                        with m.Else():
                            reply(m, Status.OK, payload_len=ident_len, source=SRC_ROM,
                                  words=ident_len, bytes_per_word=1)
                    with m.Case(Command.STATUS):
                        with m.If(bad["nonempty"]):
                            error(m, Status.BAD_LENGTH)
                        with m.Else():
                            reply(m, Status.OK, payload_len=STATUS_PAYLOAD, source=SRC_STATUS,
                                  words=1, bytes_per_word=STATUS_PAYLOAD)
                    with m.Case(Command.COUNTERS):
                        with m.If(bad["nonempty"]):
                            error(m, Status.BAD_LENGTH)
                        with m.Else():
                            reply(m, Status.OK, payload_len=COUNTER_BYTES * self.n_counters,
                                  source=SRC_CNT, words=self.n_counters,
                                  bytes_per_word=COUNTER_BYTES)
                    with m.Case(Command.RESET):
                        with m.If(bad["nonempty"]):
                            error(m, Status.BAD_LENGTH)
                        with m.Else():
                            m.d.sync += [self.core_reset.eq(1), running.eq(0)]
                            reply(m, Status.OK)
                    with m.Case(Command.RUN):
                        with m.If(bad["run_length"]):
                            error(m, Status.BAD_LENGTH)
                        with m.Elif(bad["run_tag"]):
                            error(m, Status.BAD_TAG)
                        with m.Elif(core_owns):
                            error(m, Status.BUSY)
                        with m.Else():
                            m.d.sync += [self.start.eq(1), Value.cast(self.run_args).eq(run_args),
                                         running.eq(1)]
                            reply(m, Status.OK)
                    with m.Case(Command.WRITE):
                        m.d.sync += [region_sel.eq(w_region), ptr.eq(w_addr),
                                     idx.eq(WRITE_HEADER), words_left.eq(w_count),
                                     wb.eq(nb_q), byte_no.eq(0)]
                        with m.If(bad["w_short"]):
                            error(m, Status.BAD_LENGTH)
                        with m.Elif(bad["w_tag"]):
                            error(m, Status.BAD_TAG)
                        with m.Elif(bad["w_region"]):
                            error(m, Status.BAD_REGION)
                        with m.Elif(bad["range"]):
                            error(m, Status.BAD_RANGE)
                        with m.Elif(bad["w_length"]):
                            error(m, Status.BAD_LENGTH)
                        with m.Elif(core_owns):
                            error(m, Status.BUSY)
                        with m.Elif(bad["w_empty"]):
                            reply(m, Status.OK)
                        with m.Else():
                            m.next = "W_ISSUE"
                    with m.Case(Command.READ):
                        m.d.sync += [region_sel.eq(r_region), ptr.eq(r_addr)]
                        with m.If(bad["r_length"]):
                            error(m, Status.BAD_LENGTH)
                        with m.Elif(bad["r_region"]):
                            error(m, Status.BAD_REGION)
                        with m.Elif(bad["range"]):
                            error(m, Status.BAD_RANGE)
                        with m.Elif(bad["r_long"]):
                            error(m, Status.BAD_LENGTH)
                        with m.Elif(core_owns):
                            error(m, Status.BUSY)
                        with m.Else():
                            m.d.sync += [r_status.eq(Status.OK), words_left.eq(r_count),
                                         wb.eq(nb_q), src.eq(SRC_MEM)]
                            m.next = "R_SYNC"
                    with m.Default():
                        error(m, Status.BAD_COMMAND)

            # -- WRITE: frame buffer -> region, word by word -----------------------------------
            # ``idx`` walks the frame buffer, ``ptr`` the region.
            with m.State("W_ISSUE"):            # the frame buffer sees ``idx`` in this cycle
                m.next = "W_WAIT" if registered else "W_TAKE"
            if registered:
                with m.State("W_WAIT"):         # ... its byte is in its output register next
                    m.next = "W_TAKE"
            with m.State("W_TAKE"):
                m.d.sync += [word.eq(Cat(word[8:], fb_r_data)),
                             byte_no.eq(byte_no + 1), idx.eq(idx + 1)]
                m.next = "W_ISSUE"
                with m.If(byte_no + 1 == wb):
                    m.next = "W_STORE"
            with m.State("W_STORE"):
                m.d.comb += link_w_en.eq(1)
                m.d.sync += [ptr.eq(ptr + 1), words_left.eq(words_left - 1), byte_no.eq(0)]
                m.next = "W_ISSUE"
                with m.If(words_left == 1):
                    m.d.sync += [r_status.eq(Status.OK), r_len.eq(0), words_left.eq(0)]
                    m.next = "R_SYNC"

            # -- send the reply ---------------------------------------------------------------
            def send(value, next_state, *, crc=True):
                m.d.comb += [o_stream.valid.eq(1), o_stream.payload.eq(value),
                             crc_tx_en.eq(crc)]
                with m.If(o_stream.ready):
                    m.next = next_state

            with m.State("R_SYNC"):
                m.d.sync += crc_tx.eq(CRC_INIT)
                send(REPLY_SYNC, "R_CMD", crc=False)
            with m.State("R_CMD"):
                send(cmd, "R_STATUS")
            with m.State("R_STATUS"):
                send(r_status, "R_LEN0")
            with m.State("R_LEN0"):
                send(r_len[:8], "R_LEN1")
            with m.State("R_LEN1"):
                send(r_len[8:], "P_NEXT")
            with m.State("P_NEXT"):             # the read ports see ``ptr`` in this cycle
                m.d.sync += byte_no.eq(0)
                m.next = "P_WAIT"
                with m.If(words_left == 0):
                    m.next = "R_CRC0"
            with m.State("P_WAIT"):             # the word read is in ``link_r_q`` next cycle
                m.next = "P_WAIT2" if registered else "P_LOAD"
            if registered:                      # ... or: the region's input registers hold
                with m.State("P_WAIT2"):        # the address, its output register the word
                    m.next = "P_WAIT3"
                with m.State("P_WAIT3"):        # ... its region's register
                    m.next = "P_WAIT4"
                with m.State("P_WAIT4"):
                    m.next = "P_LOAD"
            # The word to send (a ROM byte, a region word, the status or a counter) is sampled
            # into ``word`` and shifted out of it a byte at a time: a counter changing meanwhile
            # is never sent half old, half new, and the byte on the line comes from a register,
            # with the payload's byte select off the path out of the region's block RAMs.
            # The next word's address is set here, two cycles before the next P_NEXT at the
            # earliest (with `registered` the regions' copies of `ptr` take it a cycle later).
            with m.State("P_LOAD"):
                m.d.sync += ptr.eq(ptr + 1)
                with m.Switch(src):
                    with m.Case(SRC_ROM):
                        m.d.sync += word.eq(rom_r.data)
                    with m.Case(SRC_MEM):
                        m.d.sync += word.eq(link_r_q)
                    with m.Case(SRC_STATUS):
                        m.d.sync += word.eq(status_word)
                    if self.n_counters:
                        with m.Case(SRC_CNT):
                            m.d.sync += word.eq(self.counters[ptr[:8]])
                m.next = "P_BYTES"
            with m.State("P_BYTES"):
                send(word[:8], "P_BYTES")
                with m.If(o_stream.ready):
                    m.d.sync += [word.eq(word >> 8), byte_no.eq(byte_no + 1)]
                    with m.If(byte_no + 1 == wb):
                        m.d.sync += words_left.eq(words_left - 1)
                        m.next = "P_NEXT"
            with m.State("R_CRC0"):
                send(crc_tx[8:], "R_CRC1", crc=False)
            with m.State("R_CRC1"):
                send(crc_tx[:8], "HUNT", crc=False)
        one_hot_on_ecp5(fsm, platform)
        return m


def connect_uart(m, uart, link) -> None:
    """Connect a :class:`hw.uart.UART` to a :class:`HostLink` in module ``m``."""
    wiring.connect(m, uart.o_stream, link.i_stream)
    wiring.connect(m, link.o_stream, uart.i_stream)



def host_ports(divisor: int | None) -> dict:
    """Ports of a device top on the host side: the UART pins ``rx``/``tx`` with a ``divisor``,
    the link's byte streams ``i_stream``/``o_stream`` without one."""
    from .uart import rx_layout
    if divisor is None:
        return {"i_stream": In(stream.Signature(rx_layout)), "o_stream": Out(stream.Signature(8))}
    return {"rx": In(1, init=1), "tx": Out(1, init=1)}


def connect_host(m, top, link, divisor: int | None) -> None:
    """Connect ``top``'s :func:`host_ports` to ``link`` (through a UART with a divisor)."""
    if divisor is None:
        wiring.connect(m, wiring.flipped(top.i_stream), link.i_stream)
        wiring.connect(m, link.o_stream, wiring.flipped(top.o_stream))
        return
    from .uart import UART
    m.submodules.uart = uart = UART(divisor=divisor)
    connect_uart(m, uart, link)
    m.d.comb += [uart.rx.eq(top.rx), top.tx.eq(uart.tx)]
