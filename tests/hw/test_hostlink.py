"""HostLink: directed requests and error cases, a byte-level fuzz and a UART-level fuzz.

Every test compares the gateware's reply bytes with :class:`tests.hw.link_device.LinkModel`
byte for byte, and the region memories with the model's at the end (nothing written out of
bounds, nothing written by a malformed request). The directed cases also assert the status
code the specification (docs/protocol.md) demands, so the model is checked too.
"""

import random

import pytest
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.sim import Simulator

import attn
from attn import protocol as P
from hw.hostlink import HostLink
from sim.amaranth_sim import run_simulation
from sim.streams import Pattern, stream_put
from sim.uart import uart_receive, uart_send

from .link_device import COUNTERS, REGIONS, RUN_LAYOUT, LinkDevice, LinkModel, core_members

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

S = P.Status
C = P.Command


# -- request generators (items are (byte, framing_error) pairs) --------------------------------

def frame(cmd, payload=b""):
    return [(b, False) for b in P.encode_request(cmd, payload)]


def raw(data):
    return [(b, False) for b in data]


def valid_request(rng, tag):
    kind = rng.choice(["identify", "status", "counters", "write", "write", "read", "read",
                       "run", "run", "reset"])
    if kind == "identify":
        return frame(C.IDENTIFY)
    if kind == "status":
        return frame(C.STATUS)
    if kind == "counters":
        return frame(C.COUNTERS)
    if kind == "reset":
        return frame(C.RESET)
    if kind == "write":
        index = rng.choice([0, 2])
        region = REGIONS[index]
        count = rng.randrange(0, min(region.depth, 3) + 1)
        addr = rng.randrange(0, region.depth - count + 1)
        words = [rng.randrange(1 << region.width) for _ in range(count)]
        return frame(C.WRITE, P.write_payload(tag, index, addr, P.pack_words(words,
                                                                            region.width),
                                              region.width))
    if kind == "read":
        index = rng.choice([0, 1])
        region = REGIONS[index]
        count = rng.randrange(0, region.depth + 1)
        addr = rng.randrange(0, region.depth - count + 1)
        return frame(C.READ, P.read_payload(index, addr, count))
    count = rng.choice([rng.randrange(0, 17), rng.randrange(17, 32)])
    return frame(C.RUN, P.run_payload(tag, count | rng.randrange(16) << 5, RUN_LAYOUT.size))


def semantic_error(rng, tag):
    """Requests with a correct CRC and wrong content."""
    kind = rng.choice(["cmd", "length", "region", "range", "tag", "run"])
    if kind == "cmd":
        cmd = rng.choice([c for c in range(256) if c not in set(C)])
        return frame(cmd, bytes(rng.randrange(256) for _ in range(rng.randrange(6))))
    if kind == "length":
        cmd = rng.choice(list(C))
        return frame(cmd, bytes(rng.randrange(256) for _ in range(rng.randrange(1, 12))))
    if kind in ("region", "range"):
        index = rng.randrange(0, 6) if kind == "region" else rng.randrange(3)
        depth = REGIONS[index].depth if index < len(REGIONS) else 16
        count = rng.choice([rng.randrange(4), rng.randrange(65536), depth, depth + 1])
        # Just past the end, anywhere, or wrapping around the 16-bit address space.
        addr = rng.choice([max(0, depth - count + 1), rng.randrange(20), rng.randrange(65536),
                           65535]) & 0xFFFF
        if rng.random() < 0.5:
            return frame(C.READ, P.read_payload(index, addr, count))
        width = REGIONS[index].width if index < len(REGIONS) else 8
        words = P.pack_words([rng.randrange(1 << width) for _ in range(min(count, 2))], width)
        payload = P.pack_fields(P.WRITE_FIELDS, tag=tag, region=index, address=addr,
                                count=count) + words
        return frame(C.WRITE, payload)
    if kind == "tag":
        bad = tag ^ (1 << rng.randrange(32))
        if rng.random() < 0.5:
            return frame(C.RUN, P.run_payload(bad, 3, RUN_LAYOUT.size))
        return frame(C.WRITE, P.write_payload(bad, 0, 0, P.pack_words([1], 12), 12))
    return frame(C.RUN, bytes(rng.randrange(256) for _ in range(rng.choice([0, 4, 5, 7]))))


def corrupted(rng, tag, *, keep_length=False):
    items = valid_request(rng, tag)
    positions = [i for i in range(len(items)) if not (keep_length and i in (2, 3))]
    i = rng.choice(positions)
    items[i] = (items[i][0] ^ (1 << rng.randrange(8)), False)
    return items


def truncated(rng, tag):
    items = valid_request(rng, tag)
    return items[:rng.randrange(1, len(items))]


def framing(rng, tag):
    items = valid_request(rng, tag)
    i = rng.randrange(1, len(items))
    items[i] = (items[i][0], True)
    return items


def garbage(rng, tag):
    return raw([P.REQUEST_SYNC] + [rng.randrange(256) for _ in range(rng.randrange(0, 40))])


def oversize(rng, tag, max_payload):
    length = rng.randrange(max_payload + 1, 65536)
    return raw([P.REQUEST_SYNC, rng.randrange(256), length & 0xFF, length >> 8]
               + [rng.randrange(256) for _ in range(rng.randrange(0, 30))])


def fuzz_burst(rng, tag, max_payload, *, uart=False):
    """One burst of request bytes. ``uart=True`` leaves out bursts that would send bytes after
    a complete frame (the UART drops those while the link replies; the byte-level stream
    waits)."""
    kinds = ["valid", "semantic", "corrupt", "truncate", "framing", "oversize"]
    if not uart:
        kinds.append("garbage")
    kind = rng.choice(kinds)
    if kind == "valid":
        return valid_request(rng, tag)
    if kind == "semantic":
        return semantic_error(rng, tag)
    if kind == "corrupt":
        return corrupted(rng, tag, keep_length=uart)
    if kind == "truncate":
        return truncated(rng, tag)
    if kind == "framing":
        return framing(rng, tag)
    if kind == "oversize":
        return oversize(rng, tag, max_payload)
    return garbage(rng, tag)


# -- byte-level driver ---------------------------------------------------------------------------

def run_bytes(dut, bursts, name, *, stall=0.0):
    """Feed ``bursts`` to ``dut``'s byte streams; compare every reply and the memories with the
    model. Between bursts the line is quiet until the expected replies are out."""
    model = LinkModel(dut)
    expected = []
    for burst in bursts:
        before = model.runs
        replies = model.feed(burst) + model.quiet()
        expected.append((b"".join(replies), model.runs != before))
    received = bytearray()
    finished = []
    cycles = sum(len(b) + len(e) for b, (e, _) in zip(bursts, expected)) * 4 \
        + len(bursts) * (dut.link.timeout_cycles + 100) + 2000

    def benches():
        async def host(ctx):
            done = 0
            for index, (burst, (reply, ran)) in enumerate(zip(bursts, expected)):
                for byte, err in burst:
                    await stream_put(ctx, dut.i_stream, byte | err << 8)
                done += len(reply)
                waited, seen = 0, len(received)
                while len(received) < done and waited < dut.link.timeout_cycles + 200:
                    await ctx.tick()
                    waited = 0 if len(received) != seen else waited + 1
                    seen = len(received)
                got = bytes(received[done - len(reply):done])
                assert got == reply, (f"burst {index} {bytes(b for b, _ in burst).hex()}: "
                                      f"expected reply {reply.hex()}, got {got.hex()}")
                await ctx.tick().repeat(model.run_cycles(32) if ran else 4)
            await ctx.tick().repeat(dut.link.timeout_cycles + 50)
            assert len(received) == done, f"unexpected extra bytes {received[done:].hex()}"
            for region in REGIONS:
                mem = dut.link.memories[region.name]
                got = [ctx.get(mem.data[i]) for i in range(region.depth)]
                assert got == model.mem[region.name], \
                    f"region {region.name}: expected {model.mem[region.name]}, got {got}"
            finished.append(True)

        async def collector(ctx):
            pattern = Pattern(stall, seed=3)
            while not finished:
                idle = pattern.idle_cycles()
                ctx.set(dut.o_stream.ready, 0)
                if idle:
                    await ctx.tick().repeat(idle)
                ctx.set(dut.o_stream.ready, 1)
                _, _, valid, byte = await ctx.tick().sample(dut.o_stream.valid,
                                                            dut.o_stream.payload)
                if valid:
                    received.append(byte)
        return [host, collector]

    run_simulation(dut, benches, name, deadline_cycles=cycles)
    return model


# -- directed cases ------------------------------------------------------------------------------

def directed_cases(tag):
    w = lambda *a: frame(C.WRITE, P.write_payload(tag, *a))         # noqa: E731
    ok_write = w(0, 3, P.pack_words([5, 4095, 7], 12), 12)
    cases = {
        "identify": ([frame(C.IDENTIFY)], [S.OK]),
        "write_read": ([ok_write, frame(C.READ, P.read_payload(0, 0, 16))], [S.OK, S.OK]),
        "run_read_counters": ([ok_write, frame(C.RUN, P.run_payload(tag, 8 | 2 << 5, 9)),
                               frame(C.STATUS), frame(C.READ, P.read_payload(1, 0, 16)),
                               frame(C.COUNTERS)], [S.OK] * 5),
        "run_bad_count_then_reset": ([frame(C.RUN, P.run_payload(tag, 20, 9)),
                                      frame(C.STATUS), frame(C.RESET), frame(C.COUNTERS)],
                                     [S.OK] * 4),
        "bad_crc": ([raw(P.encode_request(C.STATUS)[:-1] + b"\x00")], [S.BAD_CRC]),
        "bad_length_identify": ([frame(C.IDENTIFY, b"\x00")], [S.BAD_LENGTH]),
        "bad_length_oversize": ([raw([P.REQUEST_SYNC, C.WRITE, 0xFF, 0x00] + [1] * 60)],
                                [S.BAD_LENGTH]),
        "bad_length_write_count": ([frame(C.WRITE, P.pack_fields(
            P.WRITE_FIELDS, tag=tag, region=0, address=0, count=3) + bytes(4))],
            [S.BAD_LENGTH]),
        "truncated": ([frame(C.READ, P.read_payload(0, 0, 1))[:6]], [S.TIMEOUT]),
        "truncated_after_sync": ([raw([P.REQUEST_SYNC])], [S.TIMEOUT]),
        "unknown_command": ([frame(0x99)], [S.BAD_COMMAND]),
        "write_not_writable": ([w(1, 0, P.pack_words([1], 13), 13)], [S.BAD_REGION]),
        "read_not_readable": ([frame(C.READ, P.read_payload(2, 0, 1))], [S.BAD_REGION]),
        "no_such_region": ([frame(C.READ, P.read_payload(3, 0, 1))], [S.BAD_REGION]),
        "write_out_of_range": ([w(0, 15, P.pack_words([1, 2], 12), 12)], [S.BAD_RANGE]),
        "write_wraps_16_bits": ([frame(C.WRITE, P.pack_fields(
            P.WRITE_FIELDS, tag=tag, region=2, address=0xFFFF, count=2) + bytes(6))],
            [S.BAD_RANGE]),
        "read_out_of_range": ([frame(C.READ, P.read_payload(1, 10, 7))], [S.BAD_RANGE]),
        "write_other_config": ([frame(C.WRITE, P.write_payload(tag ^ 1, 0, 0, b"\x01\x00",
                                                               12))], [S.BAD_TAG]),
        "run_other_config": ([frame(C.RUN, P.run_payload(tag ^ 0x80000000, 1, 9))],
                             [S.BAD_TAG]),
        "framing_error": ([[(P.REQUEST_SYNC, False), (C.STATUS, True), (0, False)]],
                          [S.FRAMING]),
        "garbage_between": ([raw(b"\x00\x13\x37"), frame(C.STATUS)], [S.OK]),
    }
    return cases


@pytest.mark.parametrize("stall", [0.0, 0.4])
@pytest.mark.parametrize("case", list(directed_cases(0)))
def test_directed(case, stall):
    dut = LinkDevice()
    bursts, statuses = directed_cases(dut.link.tag)[case]
    model = LinkModel(dut)
    got = []
    for burst in bursts:
        got += [P.decode_reply(r)[1] for r in model.feed(burst) + model.quiet()]
    assert got == [int(s) for s in statuses], f"model statuses {got}"
    run_bytes(dut, bursts, f"hostlink_{case}_{stall}", stall=stall)


def test_directed_values():
    """A few results checked against hand-computed values, not only the model."""
    dut = LinkDevice()
    tag = dut.link.tag
    bursts = [frame(C.WRITE, P.write_payload(tag, 0, 0, P.pack_words([10, 20, 4095], 12), 12)),
              frame(C.RUN, P.run_payload(tag, 3 | 7 << 5, 9)),
              frame(C.READ, P.read_payload(1, 0, 4)), frame(C.COUNTERS)]
    model = run_bytes(dut, bursts, "hostlink_values")
    assert model.mem["output"][:4] == [17, 27, 4102, 0]
    assert model.counters == [1, 3, 3 * (1 + 2)]


async def _request(ctx, dut, cmd, payload=b""):
    """Send one request on ``dut``'s byte streams; returns its reply as (status, payload)."""
    for byte in P.encode_request(cmd, payload):
        await stream_put(ctx, dut.i_stream, byte)
    parser = P.ReplyParser()
    ctx.set(dut.o_stream.ready, 1)
    frames = []
    while not frames:
        _, _, valid, byte = await ctx.tick().sample(dut.o_stream.valid, dut.o_stream.payload)
        if valid:
            frames = parser.feed(bytes([byte]))
    return frames[0][1:]


def test_busy_while_running():
    """A slow core: WRITE, READ and RUN are refused while it runs, STATUS reports it."""
    dut = LinkDevice(slow=400)
    tag = dut.link.tag
    got = []

    def benches():
        async def host(ctx):
            async def request(cmd, payload=b""):
                got.append(await _request(ctx, dut, cmd, payload))
            await request(C.RUN, P.run_payload(tag, 4, 9))
            await request(C.STATUS)
            await request(C.WRITE, P.write_payload(tag, 0, 0, b"\x01\x00", 12))
            await request(C.READ, P.read_payload(0, 0, 1))
            await request(C.RUN, P.run_payload(tag, 4, 9))
            await request(C.RESET)
            await request(C.STATUS)
            await request(C.READ, P.read_payload(0, 0, 1))
        return [host]

    run_simulation(dut, benches, "hostlink_busy", deadline_cycles=5000)
    status = P.decode_status(got[1][1])
    assert status.running and status.busy
    assert [g[0] for g in got] == [S.OK, S.OK, S.BUSY, S.BUSY, S.BUSY, S.OK, S.OK, S.OK]
    after = P.decode_status(got[6][1])
    assert not after.running and not after.busy and after.runs == 0 and after.errors == 3


class _WindowCore(wiring.Component):
    """A core that writes region ``output`` at the edges of its ownership window: word 6 in
    the cycle of ``start`` (not its cycle yet), word 7 the cycle after (its first), word 8 in
    the cycle after ``busy`` fell (the run is not done yet), word 9 the cycle after ``done``
    (its last), word 10 the cycle after that (the link's again). Each word is ``args.add``
    plus its address."""

    def __init__(self):
        super().__init__(core_members())

    def elaborate(self, platform):
        m = Module()
        add = Signal(4)
        dst = self.dst

        def write(addr, base=add):
            m.d.comb += [dst.w_addr.eq(addr), dst.w_en.eq(1), dst.w_data.eq(base + addr)]

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += add.eq(self.args.add)
                    write(6, self.args.add)
                    m.next = "FIRST"
            with m.State("FIRST"):
                m.d.comb += self.busy.eq(1)
                write(7)
                m.next = "LAST"
            with m.State("LAST"):
                write(8)
                m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += self.done.eq(1)
                m.next = "AFTER"
            with m.State("AFTER"):
                write(9)
                m.next = "LATER"
            with m.State("LATER"):
                write(10)
                m.next = "IDLE"
        return m


def test_ownership_window():
    """The core owns the region ports from the cycle after ``start`` until the cycle after
    ``done`` (``port_sel``, a register of ``running | busy``): its writes then land at its
    addresses; in the cycle of ``start`` and two cycles after ``done`` they do not (those
    cycles are the link's)."""

    dut = LinkDevice(core=_WindowCore())
    got = []

    def benches():
        async def host(ctx):
            for cmd, payload in ((C.RUN, P.run_payload(dut.link.tag, 1 | 5 << 5, 9)),
                                 (C.READ, P.read_payload(1, 0, 16))):
                got.append(await _request(ctx, dut, cmd, payload))
        return [host]

    run_simulation(dut, benches, "hostlink_ownership", deadline_cycles=3000)
    assert [g[0] for g in got] == [S.OK, S.OK]
    words = P.unpack_words(got[1][1], REGIONS[1].width)
    assert words[6:11] == [0, 5 + 7, 5 + 8, 5 + 9, 0], \
        f"output words 6-10 {words[6:11]}: expected only the core's writes from the cycle " \
        "after start (7) to the cycle after done (9) to land"


# -- fuzz ----------------------------------------------------------------------------------------

def fuzz_bursts(dut, count, seed, *, uart=False):
    rng = random.Random(seed)
    tag = dut.link.tag
    bursts = [fuzz_burst(rng, tag, dut.link.max_payload, uart=uart) for _ in range(count)]
    # Afterwards a correct load, run and read-back must work.
    bursts += [frame(C.WRITE, P.write_payload(tag, 0, 0, P.pack_words(list(range(8)), 12), 12)),
               frame(C.WRITE, P.write_payload(tag, 0, 8, P.pack_words(list(range(8, 16)), 12),
                                              12)),
               frame(C.RUN, P.run_payload(tag, 16 | 1 << 5, 9)), frame(C.STATUS),
               frame(C.READ, P.read_payload(1, 0, 16))]
    return bursts


def _check_fuzz_tail(model):
    # The gateware matched the model throughout; check that the model did the right thing.
    assert model.mem["input"] == list(range(16))
    assert model.mem["output"] == list(range(1, 17))
    assert model.last_status == 0


@pytest.mark.parametrize("seed,count,registers,access", [
    (1, 500, None, None), (2, 500, None, None), (3, 500, True, None),
    (4, 500, True, {"input": "r", "output": "w"})])
def test_fuzz_bytes(seed, count, registers, access):
    """Random frames; with ``registers`` the ECP5 link (registers before and after every
    region's memory); with ``access`` the core only reads ``input`` (the link reads it on the
    memory's write port) and only writes ``output``."""
    dut = LinkDevice(region_registers=registers, core_access=access)
    model = run_bytes(dut, fuzz_bursts(dut, count, seed), f"hostlink_fuzz_{seed}", stall=0.2)
    _check_fuzz_tail(model)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(10, 14))
def test_fuzz_bytes_long(seed):
    dut = LinkDevice()
    model = run_bytes(dut, fuzz_bursts(dut, 1500, seed), f"hostlink_fuzz_long_{seed}",
                      stall=0.2)
    _check_fuzz_tail(model)


def uart_device(divisor=4):
    return LinkDevice(divisor=divisor, timeout_cycles=40 * divisor)


def run_uart(dut, bursts):
    """The same comparison as :func:`run_bytes` through the device's UART pins (bit level)."""
    divisor = dut.divisor
    model = LinkModel(dut)
    expected = []
    for burst in bursts:
        before = model.runs
        expected.append((b"".join(model.feed(burst) + model.quiet()), model.runs != before))
    received = bytearray()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    failures = []
    finished = []

    async def host(ctx):
        ctx.set(dut.rx, 1)
        await ctx.tick().repeat(4)
        done = 0
        for index, (burst, (reply, ran)) in enumerate(zip(bursts, expected)):
            for byte, err in burst:
                await uart_send(ctx, dut.rx, byte, divisor, stop_bit=0 if err else 1)
            done += len(reply)
            waited, seen = 0, len(received)
            # Give up when nothing has arrived for the parser timeout plus 20 byte times.
            while len(received) < done and waited < dut.link.timeout_cycles + 200 * divisor:
                await ctx.tick().repeat(divisor)
                waited = 0 if len(received) != seen else waited + divisor
                seen = len(received)
            got = bytes(received[done - len(reply):done])
            if got != reply:
                failures.append(f"burst {index} {bytes(b for b, _ in burst).hex()}: expected "
                                f"{reply.hex()}, got {got.hex()}")
                return
            await ctx.tick().repeat(model.run_cycles(32) if ran else 4 * divisor)
        await ctx.tick().repeat(dut.link.timeout_cycles + 20 * divisor)
        if len(received) != done:
            failures.append(f"unexpected extra bytes {received[done:].hex()}")
        for region in REGIONS:
            mem = dut.link.memories[region.name]
            got = [ctx.get(mem.data[i]) for i in range(region.depth)]
            if got != model.mem[region.name]:
                failures.append(f"region {region.name}: expected {model.mem[region.name]}, "
                                f"got {got}")
        finished.append(True)

    async def peer(ctx):
        while True:
            byte, _ = await uart_receive(ctx, dut.tx, divisor)
            received.append(byte)

    sim.add_testbench(host)
    sim.add_testbench(peer, background=True)
    sim.run()
    assert not failures, failures[0]
    assert finished
    return model


@pytest.mark.parametrize("seed,count", [(5, 20)])
def test_fuzz_uart(seed, count):
    dut = uart_device()
    model = run_uart(dut, fuzz_bursts(dut, count, seed, uart=True))
    _check_fuzz_tail(model)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [20, 21])
def test_fuzz_uart_long(seed):
    dut = uart_device()
    model = run_uart(dut, fuzz_bursts(dut, 200, seed, uart=True))
    _check_fuzz_tail(model)


# -- parameters ----------------------------------------------------------------------------------

def _link(**changes):
    params = dict(config=attn.preset("tiny"), regions=REGIONS, run_layout=RUN_LAYOUT,
                  counters=COUNTERS, timeout_cycles=100, max_payload=64)
    params.update(changes)
    return HostLink(**params)


@pytest.mark.parametrize("changes,exc,match", [
    ({"config": {}}, TypeError, r"config must be an AttnConfig, not \{\}"),
    ({"regions": "x"}, TypeError, r"regions must be a sequence of Region, not 'x'"),
    ({"regions": []}, ValueError, r"regions must hold 1 to 255 regions, not 0"),
    ({"regions": [REGIONS[0], REGIONS[0]]}, ValueError, r"regions must have distinct names"),
    ({"run_layout": "abc"}, TypeError, r"run_layout must be a shape-castable, not 'abc'"),
    ({"counters": 256}, ValueError, r"counters must be between 0 and 255, not 256"),
    ({"counters": 1.5}, TypeError, r"counters must be an int, not 1.5"),
    ({"timeout_cycles": 0}, ValueError, r"timeout_cycles must be between 1 and \d+, not 0"),
    ({"max_payload": 10}, ValueError, r"max_payload must be at least 12 for these regions"),
    ({"region_registers": 1}, TypeError, r"region_registers must be a bool or None, not 1"),
])
def test_parameter_errors(changes, exc, match):
    with pytest.raises(exc, match=match):
        _link(**changes)


def test_ports():
    link = _link()
    assert link.tag == P.decode_identify(link.ident).tag
    assert len(link.region_port("scratch").w_data) == 20
    assert len(link.region_port("input").r_addr) == 4
    assert link.signature.members["counters"].shape.length == COUNTERS
    assert "counters" not in _link(counters=0).signature.members


@pytest.mark.parametrize("timeout", [20, 75])
def test_timeout_cycles(timeout):
    """A truncated frame is answered ``timeout_cycles`` (plus at most 2) after its last byte."""
    dut = LinkDevice(timeout_cycles=timeout)
    marks = {}

    def benches():
        async def host(ctx):
            for byte in (P.REQUEST_SYNC, C.READ, 5):
                await stream_put(ctx, dut.i_stream, byte)
            marks["last"] = marks["cycle"] = 0
            ctx.set(dut.o_stream.ready, 1)
            while not ctx.get(dut.o_stream.valid):
                await ctx.tick()
                marks["cycle"] += 1
            payload = []
            parser = P.ReplyParser()
            while not payload:
                _, _, valid, byte = await ctx.tick().sample(dut.o_stream.valid,
                                                            dut.o_stream.payload)
                if valid:
                    payload = parser.feed(bytes([byte]))
            assert payload[0][:2] == (C.READ, S.TIMEOUT)
        return [host]

    run_simulation(dut, benches, f"hostlink_timeout_{timeout}", deadline_cycles=timeout + 200)
    assert timeout <= marks["cycle"] <= timeout + 2, marks
