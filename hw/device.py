"""The whole accelerator behind its host link: UART, :class:`~hw.hostlink.HostLink`, the
attention core, and the bridge between the link's memory regions and the core's streams.

The host loads a run into four regions and starts it with RUN (arguments: the core's
:func:`~hw.core_io.run_args_layout`):

========  ===========  =====================================================================
region    host access  contents
========  ===========  =====================================================================
params    write/read   the ``p_stream`` beats of :func:`hw.core_io.core_streams`
x         write/read   the ``x_stream`` beats (the layer input)
w         write/read   the ``w_stream`` beats (all weights of the layer: they stay resident)
y         read         the ``o_stream`` beats (the layer output), written by the run
========  ===========  =====================================================================

A beat wider than :data:`attn.protocol.MAX_WORD_BITS` spans ``words_per_beat`` consecutive
words, least significant word first (:class:`DeviceMap`). Every region is as deep as the
largest shape of the configuration needs; a preset whose weights exceed the protocol's 65,536
words per region cannot be built into a device (``ValueError`` names the region).

On RUN the bridge checks the arguments (``1 <= L <= Lmax``, ``1 <= H <= Hmax``,
``D = H * head_dim <= Dmax``, ``valid_len <= L``): bad ones end the run at once with
:data:`STATUS_BAD_ARGS` instead of starting the core. Otherwise it restarts the region readers
at word 0, starts the core and streams the regions into it at up to one beat per cycle; the
output goes to ``y`` from word 0. The run ends (``done``, status :data:`STATUS_OK`) when the
core's ``busy`` falls; :data:`STATUS_OVERFLOW` if the core produced more output than ``y``
holds (the excess is dropped, never written out of bounds). The performance counters are the
core's (:data:`hw.core.COUNTERS`). RESET resets the bridge, and the core, the region readers
and the writer a cycle later (their reset is a register); the regions keep their contents.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import (
    Cat,
    ClockDomain,
    ClockSignal,
    DomainRenamer,
    Module,
    Mux,
    ResetInserter,
    ResetSignal,
    Signal,
)
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from attn import protocol as P

from .core import COUNTERS, AttentionCore
from .core_io import lanes_layout, param_layout, run_args_layout
from .fifo import BlockRAMFIFO
from .hostlink import HostLink, connect_host, host_ports, region_signature
from .target import global_reset, is_ice40

__all__ = ["DeviceMap", "StreamRegion", "RegionReader", "RegionWriter", "AttentionDevice",
           "STATUS_OK", "STATUS_BAD_ARGS", "STATUS_OVERFLOW"]

#: Status codes of a run (STATUS ``last_status``).
STATUS_OK = 0
STATUS_BAD_ARGS = 1
STATUS_OVERFLOW = 2


def _ceil_div(a, b):
    return -(-a // b)


@dataclass(frozen=True)
class StreamRegion:
    """One core stream stored in one region: ``beat_bits`` per beat, ``words_per_beat``
    words of ``region.width`` bits per beat."""

    region: P.Region
    beat_bits: int
    words_per_beat: int

    def to_words(self, beats) -> list:
        """Split packed beats (non-negative ints of ``beat_bits``) into region words."""
        width, mask = self.region.width, (1 << self.region.width) - 1
        return [(beat >> (i * width)) & mask
                for beat in beats for i in range(self.words_per_beat)]

    def to_beats(self, words) -> list:
        """Join region words back into packed beats."""
        k, width = self.words_per_beat, self.region.width
        if len(words) % k:
            raise ValueError(f"{len(words)} words of region {self.region.name!r} are not "
                             f"whole beats of {k}")
        return [sum(int(words[j + i]) << (i * width) for i in range(k))
                for j in range(0, len(words), k)]


class DeviceMap:
    """How the runs of ``cfg`` are laid out in the device's regions (host and gateware)."""

    STREAMS = ("params", "x", "w", "y")

    def __init__(self, cfg):
        self.cfg = cfg
        beats = {"params": 0, "x": 0, "w": 0, "y": 0}
        C, lmax = cfg.cols, cfg.max_seq_len
        for d_model in range(1, cfg.max_d_model + 1):
            for heads in range(1, min(cfg.max_heads, d_model) + 1):
                if d_model % heads:
                    continue
                wph = _ceil_div(d_model // heads, C)
                wpd = _ceil_div(d_model, C)
                tiles = 3 * heads * wph + wpd
                for name, count in (("params", tiles + 2 * heads), ("w", tiles * d_model),
                                    ("x", lmax * wpd), ("y", lmax * wpd)):
                    beats[name] = max(beats[name], count)
        bits = {"params": param_layout(cfg).size, "x": lanes_layout(cfg, cfg.x_bits).size,
                "w": lanes_layout(cfg, cfg.w_bits).size,
                "y": lanes_layout(cfg, cfg.y_bits).size}
        self.streams = {}
        for name in self.STREAMS:
            k = _ceil_div(bits[name], P.MAX_WORD_BITS)
            depth = beats[name] * k
            if depth > 1 << 16:
                raise ValueError(f"configuration {cfg.name!r} needs {depth} words in region "
                                 f"{name!r}, more than the protocol's {1 << 16}; lower "
                                 f"max_d_model / max_seq_len for a device build")
            region = P.Region(name, _ceil_div(bits[name], k), depth,
                              writable=name != "y", readable=True)
            self.streams[name] = StreamRegion(region, bits[name], k)
        self.regions = tuple(s.region for s in self.streams.values())
        self.run_layout = run_args_layout(cfg)

    def region_bits(self) -> int:
        """Total bits of the region memories."""
        return sum(r.width * r.depth for r in self.regions)

    def beat_words(self, name: str, beats) -> list:
        """Split packed beats of stream ``name`` into its region's words."""
        return self.streams[name].to_words(beats)

    def word_beats(self, name: str, words) -> list:
        """Join words of stream ``name``'s region back into packed beats."""
        return self.streams[name].to_beats(words)


class RegionReader(wiring.Component):
    """Streams a region out from word 0, one beat of ``words_per_beat`` words per beat.

    ``latency`` (1, 2 or 3) is the memory's, cycles from ``r_addr`` to ``r_data``
    (:meth:`~hw.hostlink.HostLink.read_latency`). With ``read_always`` the memory's ``r_en`` is
    held high and the words read but not asked for are ignored: nothing of the reader's flow
    control reaches the memory (the ECP5 regions' read enables are copied to every block RAM;
    the 8x8 ULX3S device's slowest path at 9b426f6 ran from the queue's level to them).

    ``registered`` (0, 1 or 2; ``True`` is 1, the default) is how many registers every word
    read from the memory goes through first (``latency + registered`` cycles from address to
    data), so the memory's slow output (about 6 ns on an ECP5 DP16KD without its own output
    register) drives one short wire, not the way across the die to the core; with 2 the second
    register can sit by the core and the first by the memory. With 0 the memory's output goes
    straight into the beat (for the iCE40, which has no cells to spare, or behind a memory with
    an output register).

    With ``queued`` (the default), one beat per ``words_per_beat`` cycles while the consumer is
    ready: behind a queue (8 beats with any register, 4 without) for 1 or 2 words per beat, one
    output register for more (one beat per ``max(2 + latency + registered, words_per_beat)``
    cycles). With ``queued=False`` always the output register, for a stream whose rate does not
    matter (the constants, one beat per tile). ``restart`` (a cycle pulse) goes back to word 0
    and drops what was fetched. Reading stops at the end of the region.
    """

    def __init__(self, spec: StreamRegion, *, queued: bool = True, registered: int = 1,
                 latency: int = 1, read_always: bool = False):
        if registered not in (0, 1, 2):
            raise ValueError(f"registered must be 0, 1 or 2 registers, not {registered!r}")
        if latency not in (1, 2, 3):
            raise ValueError(f"latency must be 1, 2 or 3 cycles, not {latency!r}")
        self.spec, self.queued, self.registered = spec, queued, int(registered)
        self.latency, self.read_always = latency, bool(read_always)
        super().__init__({
            "mem": Out(region_signature(spec.region, "r")),
            "o_stream": Out(stream.Signature(spec.beat_bits)),
            "restart": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        spec, region = self.spec, self.spec.region
        k, width = spec.words_per_beat, region.width
        addr = Signal(range(region.depth + 1))
        # A word goes through the memory (read `latency` cycles before), then the `registered`
        # stages; the last is `pending`, `part`, `data` (the memory's output with none).
        in_mem = Signal()                      # a word was read last cycle
        mem_part = Signal(range(k))            # index of that word in its beat
        stages = [(in_mem, mem_part, None)]
        for i in range(1, self.latency):       # ... and is in the memory's output register
            (prev_valid, prev_part, _), valid_i = stages[-1], Signal(name=f"in_mem_{i}")
            part_i = Signal(range(k), name=f"mem_part_{i}")
            m.d.sync += [valid_i.eq(prev_valid & ~self.restart), part_i.eq(prev_part)]
            stages.append((valid_i, part_i, None))
        stages[-1] = (*stages[-1][:2], self.mem.r_data)
        for i in range(self.registered):
            valid, part_i = Signal(name=f"pending_{i}"), Signal(range(k), name=f"part_{i}")
            data_i = Signal(width, name=f"data_{i}", reset_less=True)
            prev_valid, prev_part, prev_data = stages[-1]
            m.d.sync += [valid.eq(prev_valid & ~self.restart), part_i.eq(prev_part),
                         data_i.eq(prev_data)]
            stages.append((valid, part_i, data_i))
        pending, part, data = stages[-1]
        in_flight = sum(valid for valid, _, _ in stages)
        issue_part = Signal(range(k))          # index in its beat of the word read now
        assembled = Signal(width * max(1, k - 1), reset_less=True)
        issue = Signal()
        more = Signal()
        m.d.comb += [
            more.eq((addr < region.depth) & ~self.restart),
            self.mem.r_addr.eq(addr[:len(self.mem.r_addr)]),
            self.mem.r_en.eq(1 if self.read_always else issue),
        ]
        if self.queued and k < 3:
            # A beat every cycle or every other one: a queue that the words in flight (in the
            # memory's output and in `data`) and the one read now must fit in.
            depth = 8 if self.registered + self.latency > 1 else 4
            m.submodules.queue = queue = ResetInserter(self.restart)(
                BlockRAMFIFO(width=spec.beat_bits, depth=depth))
            m.d.comb += [issue.eq(more & (queue.level + in_flight < depth)),
                         self.o_stream.valid.eq(queue.r_rdy),
                         self.o_stream.payload.eq(queue.r_data),
                         queue.r_en.eq(self.o_stream.ready)]
            w_data, w_en = queue.w_data, queue.w_en
        else:
            # One output register. The last word of a beat is read only while the register is
            # empty and neither being filled nor about to be (no last word in the memory's
            # output or a register before the last), so it always finds the register free;
            # with a consumer that is always ready the register is free again two cycles after
            # it filled.
            out = Signal(spec.beat_bits, reset_less=True)
            out_valid = Signal()
            w_data = Signal(spec.beat_bits)
            w_en = Signal()
            last_in_flight = Cat(valid & (p == k - 1) for valid, p, _ in stages[:-1]).any()
            m.d.comb += [issue.eq(more & ((issue_part != k - 1)
                                          | ~(out_valid | w_en | last_in_flight))),
                         self.o_stream.valid.eq(out_valid),
                         self.o_stream.payload.eq(out)]
            with m.If(self.o_stream.ready):
                m.d.sync += out_valid.eq(0)
            with m.If(w_en):
                m.d.sync += [out.eq(w_data), out_valid.eq(1)]
            with m.If(self.restart):
                m.d.sync += out_valid.eq(0)
        if k == 1:
            m.d.comb += [w_data.eq(data), w_en.eq(pending)]
        else:
            # Words arrive in order: word p of a beat goes to its own slot of `assembled`, and
            # the last word goes straight from `data` into the queue or register beside the
            # others (no shifter between the memory and the beat).
            with m.If(pending):
                for p in range(k - 1):
                    with m.If(part == p):
                        m.d.sync += assembled[width * p:width * (p + 1)].eq(data)
            m.d.comb += [w_data.eq(Cat(assembled[:width * (k - 1)], data)),
                         w_en.eq(pending & (part == k - 1))]
            with m.If(issue):
                m.d.sync += [mem_part.eq(issue_part),
                             issue_part.eq(Mux(issue_part == k - 1, 0, issue_part + 1))]
        with m.If(issue):
            m.d.sync += addr.eq(addr + 1)
        m.d.sync += in_mem.eq(issue)
        with m.If(self.restart):
            m.d.sync += [addr.eq(0), issue_part.eq(0)]
        return m


class RegionWriter(wiring.Component):
    """Writes a stream into a region from word 0 (``restart`` goes back to word 0).

    Beats beyond the region are taken and dropped; ``overflow`` stays high until ``restart``.
    ``words`` counts the words written.

    With ``registered`` (the default) the memory's address, data and write enable come from
    registers: a word is written the cycle after it is taken, and the path from the core's
    result rows ends at a register beside the writer, not across the die at the region's block
    RAM (on the 8x4 ULX3S device that path was the critical one). Without, the word is written
    the cycle it is taken (for the iCE40, which has no cells to spare).
    """

    def __init__(self, spec: StreamRegion, *, registered: bool = True):
        self.spec, self.registered = spec, registered
        super().__init__({
            "mem": Out(region_signature(spec.region, "w")),
            "i_stream": In(stream.Signature(spec.beat_bits)),
            "restart": In(1),
            "overflow": Out(1),
            "words": Out(range(spec.region.depth + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        spec, region = self.spec, self.spec.region
        k, width = spec.words_per_beat, region.width
        part = Signal(range(k))
        last = Signal()
        w_addr = Signal.like(self.mem.w_addr, reset_less=True)
        w_data = Signal.like(self.mem.w_data, reset_less=True)
        w_en = Signal()
        stage = m.d.sync if self.registered else m.d.comb
        stage += [self.mem.w_addr.eq(w_addr), self.mem.w_data.eq(w_data),
                  self.mem.w_en.eq(w_en)]
        m.d.comb += [last.eq(part == k - 1),
                     self.i_stream.ready.eq(last),
                     w_addr.eq(self.words[:len(self.mem.w_addr)]),
                     w_data.eq(self.i_stream.payload >> (width * part))]
        with m.If(self.i_stream.valid):
            if k > 1:
                m.d.sync += part.eq(Mux(last, 0, part + 1))
            with m.If(self.words < region.depth):
                m.d.comb += w_en.eq(1)
                m.d.sync += self.words.eq(self.words + 1)
            with m.Else():
                m.d.sync += self.overflow.eq(1)
        with m.If(self.restart):
            m.d.sync += [part.eq(0), self.words.eq(0), self.overflow.eq(0)]
        return m


class AttentionDevice(wiring.Component):
    """HostLink + bridge + :class:`~hw.core.AttentionCore` (+ UART with ``divisor``).

    Parameters
    ----------
    cfg : AttnConfig
        The configuration; the IDENTIFY reply carries it whole.
    divisor : int or None
        UART clocks per bit (:func:`hw.uart.uart_divisor`). With a divisor the ports are the
        UART pins ``rx``/``tx``; without, the link's byte streams ``i_stream``/``o_stream``.
    timeout_cycles : int
        The link's frame timeout (see :class:`~hw.hostlink.HostLink`).
    max_payload : int
        The link's frame buffer in bytes.
    region_registers : bool or None
        The link's (:class:`~hw.hostlink.HostLink`): ``None`` has them on ECP5 only; ``True``
        in simulation runs the ULX3S's read timing.

    Members
    -------
    rx, tx or i_stream, o_stream
        The host side.
    running : Out(1)
        A run is in progress (for an LED).
    """

    def __init__(self, cfg, *, divisor: int | None = None, timeout_cycles: int = 100_000,
                 max_payload: int = 256, region_registers: bool | None = None):
        self.cfg = cfg
        self.map = DeviceMap(cfg)
        self.divisor = divisor
        self.core = AttentionCore(cfg)
        self.link = HostLink(config=cfg, regions=self.map.regions, run_layout=self.map.run_layout,
                             counters=len(COUNTERS), timeout_cycles=timeout_cycles,
                             max_payload=max_payload, region_registers=region_registers,
                             core_access={name: "w" if name == "y" else "r"
                                          for name in DeviceMap.STREAMS})
        ports = host_ports(divisor)
        ports["running"] = Out(1)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        m.submodules.link = link = self.link
        connect_host(m, self, link, self.divisor)

        # The core, the region readers and the writer run in a domain of their own, "core",
        # on the same clock, whose reset is a register: the board's reset or the link's RESET
        # pulse, one cycle later. Their reset inputs then hang off a flip-flop, not an OR of
        # the two (on the 16x8 ULX3S device that OR sat mid-die, 8.6 ns of wire from the
        # board's reset and 11.1 ns from the far reset inputs: the slowest path, 20.9 ns). On
        # ECP5 that flip-flop drives them through a global buffer (`global_reset`).
        core_rst = Signal(init=1, reset_less=True)
        m.d.sync += core_rst.eq(link.core_reset | ResetSignal("sync"))
        m.domains.core = cd_core = ClockDomain("core", local=True)
        m.d.comb += [cd_core.clk.eq(ClockSignal("sync")),
                     cd_core.rst.eq(global_reset(m, platform, core_rst, "core_rst"))]
        in_core = DomainRenamer("core")
        m.submodules.core = core = in_core(self.core)
        readers = {}
        latency = link.read_latency(platform)
        for name in ("params", "x", "w"):
            # Every word read goes through `registers` registers: one for the weights and the
            # layer input, two for the constants (they go into the core's memory once per run:
            # no queue for them). On ECP5 the first is the block RAM's output register
            # (:class:`hw.bram.RegisteredMemory`; without it the params region's DP16KD, 55 rows
            # from its register, was the 8x8 ULX3S device's critical path, and a second
            # register in the fabric did not help); there the memory's read enable is held high
            # (`read_always`), as its copies at every block would otherwise hang off the
            # reader's flow control. On an iCE40 the memory's output is fast enough and the
            # cells are scarce: none.
            registers = 0 if is_ice40(platform) else 2 if name == "params" else 1
            in_memory = 1 if latency > 1 else 0
            readers[name] = in_core(RegionReader(
                self.map.streams[name], queued=name != "params", latency=latency,
                registered=max(0, registers - in_memory), read_always=latency > 1))
            m.submodules[f"read_{name}"] = readers[name]
            wiring.connect(m, readers[name].mem, link.region_port(name))
        m.submodules.write_y = writer = in_core(RegionWriter(
            self.map.streams["y"], registered=not is_ice40(platform)))
        wiring.connect(m, writer.mem, link.region_port("y"))
        m.d.comb += [
            core.p_stream.valid.eq(readers["params"].o_stream.valid),
            core.p_stream.payload.eq(readers["params"].o_stream.payload),
            readers["params"].o_stream.ready.eq(core.p_stream.ready),
            core.x_stream.valid.eq(readers["x"].o_stream.valid),
            core.x_stream.payload.eq(readers["x"].o_stream.payload),
            readers["x"].o_stream.ready.eq(core.x_stream.ready),
            core.w_stream.valid.eq(readers["w"].o_stream.valid),
            core.w_stream.payload.eq(readers["w"].o_stream.payload),
            readers["w"].o_stream.ready.eq(core.w_stream.ready),
            writer.i_stream.valid.eq(core.o_stream.valid),
            writer.i_stream.payload.eq(core.o_stream.payload.y),
            core.o_stream.ready.eq(writer.i_stream.ready),
            link.counters.eq(core.counters),
        ]

        # run control: check the arguments, restart the bridge, start the core, wait for it
        # The checks take two registered steps (H * head_dim is a product), so the start
        # pulse is acted on two cycles later; run_args hold from start until the next RUN.
        args = link.run_args
        product = Signal(len(args.head_dim) + len(args.heads))
        ok = Signal()
        checking = Signal(2)     # the start pulse, delayed by one and by two cycles
        # H * head_dim as a sum of head_dim shifted by H's set bits: adders beside the check.
        # As a `*` Yosys made it a MULT18X18D without registers, which nextpnr put far from
        # both registers (11.5 ns on the 8x8 ULX3S device, as slow as its slowest path).
        m.d.sync += [product.eq(sum(Mux(args.heads[i], args.head_dim << i, 0)
                                    for i in range(len(args.heads)))),
                     ok.eq((args.seq_len >= 1) & (args.seq_len <= cfg.max_seq_len)
                           & (args.heads >= 1) & (args.heads <= cfg.max_heads)
                           & (args.d_model >= 1) & (args.d_model <= cfg.max_d_model)
                           & (product == args.d_model) & (args.valid_len <= args.seq_len)),
                     checking.eq(Cat(link.start, checking[0]))]
        launching = Signal()     # core.start offered, not yet taken
        launched = Signal()      # the core has taken start
        for unit in (*readers.values(), writer):
            m.d.comb += unit.restart.eq(link.start)
        m.d.comb += [core.start.valid.eq(launching), core.start.payload.eq(args),
                     link.busy.eq(checking.any() | launching | launched | core.busy),
                     self.running.eq(launching | launched)]
        m.d.sync += link.done.eq(0)
        with m.If(checking[1]):
            with m.If(ok):
                m.d.sync += launching.eq(1)
            with m.Else():
                m.d.sync += [link.done.eq(1), link.status.eq(STATUS_BAD_ARGS)]
        with m.If(launching & core.start.ready):
            m.d.sync += [launching.eq(0), launched.eq(1)]
        with m.If(launched & ~core.busy):
            m.d.sync += [launched.eq(0), link.done.eq(1),
                         link.status.eq(Mux(writer.overflow, STATUS_OVERFLOW, STATUS_OK))]
        with m.If(link.core_reset):
            m.d.sync += [launching.eq(0), launched.eq(0), checking.eq(0)]
        return m
