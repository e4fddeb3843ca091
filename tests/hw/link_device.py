"""A stand-in device for the host link tests, and a Python model of it.

:class:`AddCore` takes the place of the attention core: RUN ``(count, add)`` reads words
``0 .. count-1`` of region ``input``, adds ``add`` and writes them to region ``output``
(``slow + 2`` cycles per word; it takes a word ``slow + 1`` cycles after reading it, so ``slow``
must cover the link's read latency). :class:`LinkDevice` is HostLink + AddCore (+ UART if a divisor
is given). :class:`LinkModel` predicts, byte for byte, the replies of the device to any request
bytes: the fuzz tests compare the gateware with it.
"""

from __future__ import annotations

from amaranth import Module, ResetInserter, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

import attn
from attn import protocol as P
from hw.hostlink import HostLink, connect_host, host_ports, region_signature

REGIONS = (P.Region("input", 12, 16, writable=True, readable=True),
           P.Region("output", 13, 16, writable=False, readable=True),
           P.Region("scratch", 20, 5, writable=True, readable=False))
RUN_LAYOUT = data.StructLayout({"count": unsigned(5), "add": unsigned(4)})
#: Counters of AddCore: runs started, words written in all runs, cycles of the last run.
COUNTERS = 3
#: Status code of a run whose count exceeds the regions.
STATUS_BAD_COUNT = 1
CONFIG = attn.preset("tiny")


def core_members() -> dict:
    """The ports of a stand-in core, as :class:`LinkDevice` connects them: ``start``/``args``
    from the link, ``busy``/``done``/``status``/``counters`` back, ``src`` reading region
    ``input`` and ``dst`` writing region ``output``."""
    return {
        "start": In(1), "args": In(RUN_LAYOUT),
        "busy": Out(1), "done": Out(1), "status": Out(8),
        "src": Out(region_signature(REGIONS[0])), "dst": Out(region_signature(REGIONS[1])),
        "counters": Out(data.ArrayLayout(32, COUNTERS)),
    }


class AddCore(wiring.Component):
    """The stand-in core (see the module docstring)."""

    def __init__(self, *, slow: int = 1):
        self.slow = slow
        self.depth = REGIONS[0].depth
        super().__init__(core_members())

    def elaborate(self, platform):
        m = Module()
        count = Signal(6)
        add = Signal(4)
        i = Signal(5)
        wait = Signal(range(self.slow + 1))
        runs, words, cycles = self.counters[0], self.counters[1], self.counters[2]
        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [count.eq(self.args.count), add.eq(self.args.add), i.eq(0),
                                 runs.eq(runs + 1), cycles.eq(0), self.status.eq(0)]
                    with m.If(self.args.count > self.depth):
                        m.d.sync += self.status.eq(STATUS_BAD_COUNT)
                        m.next = "DONE"
                    with m.Elif(self.args.count == 0):
                        m.next = "DONE"
                    with m.Else():
                        m.next = "READ"
            with m.State("READ"):
                m.d.comb += [self.busy.eq(1), self.src.r_addr.eq(i), self.src.r_en.eq(1)]
                m.d.sync += [cycles.eq(cycles + 1), wait.eq(self.slow - 1)]
                m.next = "WAIT"
            with m.State("WAIT"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += [cycles.eq(cycles + 1), wait.eq(wait - 1)]
                with m.If(wait == 0):
                    m.next = "WRITE"
            with m.State("WRITE"):
                m.d.comb += [self.busy.eq(1), self.dst.w_addr.eq(i), self.dst.w_en.eq(1),
                             self.dst.w_data.eq(self.src.r_data + add)]
                m.d.sync += [cycles.eq(cycles + 1), words.eq(words + 1), i.eq(i + 1)]
                m.next = "READ"
                with m.If(i + 1 == count):
                    m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += self.done.eq(1)
                m.next = "IDLE"
        return m


class LinkDevice(wiring.Component):
    """HostLink + AddCore (or ``core``, a component with :func:`core_members`); with
    ``divisor`` the ports are the UART pins ``rx``/``tx``, without it the link's byte streams
    ``i_stream``/``o_stream``. ``core_access`` is the link's (e.g. ``{"input": "r", "output":
    "w"}``, as the attention device has them: read-only regions on ECP5 are then read by the
    link on the memory's other port)."""

    def __init__(self, *, divisor: int | None = None, timeout_cycles: int = 64,
                 slow: int | None = None, max_payload: int = 40, config=CONFIG,
                 region_registers=None, core=None, core_access=None):
        self.divisor = divisor
        if slow is None:        # the core's wait covers the link's read latency (3 or 1)
            slow = 2 if region_registers else 1
        self.link = HostLink(config=config, regions=REGIONS, run_layout=RUN_LAYOUT,
                             counters=COUNTERS, timeout_cycles=timeout_cycles,
                             max_payload=max_payload, region_registers=region_registers,
                             core_access=core_access)
        self.core = core if core is not None else AddCore(slow=slow)
        ports = host_ports(divisor)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        m.submodules.link = link = self.link
        m.submodules.core = core = ResetInserter(link.core_reset)(self.core)
        connect_host(m, self, link, self.divisor)
        m.d.comb += [core.start.eq(link.start),
                     core.args.eq(link.run_args), link.busy.eq(core.busy),
                     link.done.eq(core.done), link.status.eq(core.status),
                     link.counters.eq(core.counters)]
        for name, port in (("input", core.src), ("output", core.dst)):
            # the members the link gives the core on the region (all of them by default)
            theirs = link.region_port(name)
            for member in ("r_addr", "r_en", "w_addr", "w_en", "w_data"):
                if hasattr(theirs, member):
                    m.d.comb += getattr(theirs, member).eq(getattr(port, member))
            if hasattr(theirs, "r_data"):
                m.d.comb += port.r_data.eq(theirs.r_data)
        return m


class LinkModel:
    """Byte-exact model of :class:`LinkDevice` at the protocol level (runs finish at once).

    :meth:`feed` takes request bytes (``(byte, framing_error)`` pairs or plain bytes) and
    returns the reply frames they cause; :meth:`quiet` is the line going quiet for longer than
    the timeout (a frame in progress is answered with TIMEOUT or its pending error).
    """

    def __init__(self, device: LinkDevice):
        link = device.link
        self.regions = REGIONS
        self.ident = link.ident
        self.tag = link.tag
        self.max_payload = link.max_payload
        self.slow = device.core.slow
        self.mem = {r.name: [0] * r.depth for r in REGIONS}
        self.errors = self.runs = self.last_status = 0
        self.counters = [0] * COUNTERS
        self._hunt()

    def _hunt(self):
        self.state, self.cmd, self.buf, self.length, self.pending = "HUNT", 0, [], 0, 0
        self.crc = P.CRC_INIT

    def _error(self, status):
        self.errors = (self.errors + 1) & 0xFFFF
        reply = P.encode_reply(self.cmd, status)
        self._hunt()
        return [reply]

    def quiet(self) -> list:
        if self.state == "HUNT":
            return []
        return self._error(self.pending if self.state == "DISCARD" else P.Status.TIMEOUT)

    def feed(self, items) -> list:
        replies = []
        for item in items:
            byte, err = item if isinstance(item, tuple) else (item, False)
            replies += self._byte(byte, err)
        return replies

    def _byte(self, byte, err):
        s = self.state
        if s == "HUNT":
            if byte == P.REQUEST_SYNC and not err:
                self.state = "CMD"
            return []
        if s == "DISCARD":
            return []
        if err:
            self.state, self.pending = "DISCARD", P.Status.FRAMING
            return []
        self.crc = P.crc16(bytes([byte]), self.crc)
        if s == "CMD":
            self.cmd, self.state = byte, "LEN0"
        elif s == "LEN0":
            self.length, self.state = byte, "LEN1"
        elif s == "LEN1":
            self.length |= byte << 8
            if self.length > self.max_payload:
                self.state, self.pending = "DISCARD", P.Status.BAD_LENGTH
            else:
                self.state = "PAYLOAD" if self.length else "CRC0"
        elif s == "PAYLOAD":
            self.buf.append(byte)
            if len(self.buf) == self.length:
                self.state = "CRC0"
        elif s == "CRC0":
            self.state = "CRC1"
        else:
            if self.crc != 0:
                return self._error(P.Status.BAD_CRC)
            return self._execute()
        return []

    def _execute(self):
        cmd, payload, S = self.cmd, bytes(self.buf), P.Status
        if cmd in (P.Command.IDENTIFY, P.Command.STATUS, P.Command.COUNTERS, P.Command.RESET):
            if payload:
                return self._error(S.BAD_LENGTH)
            if cmd == P.Command.IDENTIFY:
                out = self.ident
            elif cmd == P.Command.STATUS:
                out = P.pack_fields(P.STATUS_FIELDS, flags=0, last_status=self.last_status,
                                    runs=self.runs, errors=self.errors)
            elif cmd == P.Command.COUNTERS:
                out = b"".join(c.to_bytes(4, "little") for c in self.counters)
            else:
                self.counters = [0] * COUNTERS
                out = b""
            return self._ok(out)
        if cmd == P.Command.RUN:
            run_bytes = P.RUN_ARGS_OFFSET + P.run_arg_bytes(RUN_LAYOUT.size)
            if len(payload) != run_bytes:
                return self._error(S.BAD_LENGTH)
            if int.from_bytes(payload[:P.TAG_BYTES], "little") != self.tag:
                return self._error(S.BAD_TAG)
            args = int.from_bytes(payload[P.RUN_ARGS_OFFSET:], "little")
            self._run(args & 0x1F, (args >> 5) & 0xF)
            return self._ok(b"")
        if cmd == P.Command.WRITE:
            if len(payload) < P.WRITE_HEADER:
                return self._error(S.BAD_LENGTH)
            f = P.unpack_fields(P.WRITE_FIELDS, payload)
            if f["tag"] != self.tag:
                return self._error(S.BAD_TAG)
            if f["region"] >= len(self.regions) or not self.regions[f["region"]].writable:
                return self._error(S.BAD_REGION)
            region = self.regions[f["region"]]
            if f["address"] + f["count"] > region.depth:
                return self._error(S.BAD_RANGE)
            if len(payload) != P.WRITE_HEADER + f["count"] * region.word_bytes:
                return self._error(S.BAD_LENGTH)
            words = P.unpack_words(payload[P.WRITE_HEADER:], region.width)
            self.mem[region.name][f["address"]:f["address"] + f["count"]] = words
            return self._ok(b"")
        if cmd == P.Command.READ:
            if len(payload) != P.READ_PAYLOAD:
                return self._error(S.BAD_LENGTH)
            f = P.unpack_fields(P.READ_FIELDS, payload)
            if f["region"] >= len(self.regions) or not self.regions[f["region"]].readable:
                return self._error(S.BAD_REGION)
            region = self.regions[f["region"]]
            if f["address"] + f["count"] > region.depth:
                return self._error(S.BAD_RANGE)
            words = self.mem[region.name][f["address"]:f["address"] + f["count"]]
            return self._ok(P.pack_words(words, region.width))
        return self._error(S.BAD_COMMAND)

    def _ok(self, payload):
        reply = P.encode_reply(self.cmd, P.Status.OK, payload)
        self._hunt()
        return [reply]

    def _run(self, count, add):
        self.counters[0] += 1
        depth = self.regions[0].depth
        if count > depth:
            self.last_status, self.counters[2] = STATUS_BAD_COUNT, 0
        else:
            src, dst = self.mem["input"], self.mem["output"]
            for i in range(count):
                dst[i] = (src[i] + add) & ((1 << self.regions[1].width) - 1)
            self.counters[1] += count
            self.counters[2] = count * (self.slow + 2)
            self.last_status = 0
        self.runs = (self.runs + 1) & 0xFFFF

    def run_cycles(self, count) -> int:
        """Cycles AddCore needs for a run of ``count`` words (an upper bound for waits)."""
        return count * (self.slow + 2) + 4
