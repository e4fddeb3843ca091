"""The whole device (UART, host link, bridge, core) through the host driver, against golden/;
the region readers and writer on their own; malformed frames on the real device."""
import random

import pytest
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from attn import preset
from attn import protocol as P
from attn.host import DeviceError, RunFailed
from attn.remote import open_cosim, run_on_device
from hw.bram import RegisteredMemory
from hw.core_io import core_streams
from hw.device import (
    STATUS_BAD_ARGS,
    AttentionDevice,
    DeviceMap,
    RegionReader,
    RegionWriter,
    StreamRegion,
)
from sim.amaranth_sim import run_simulation
from sim.scoreboard import assert_equal
from sim.streams import Pattern, get_all, put_all
from tests.hw.test_core import layer

# -- the region map --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tiny", "default", "icebreaker", "icebreaker_mini",
                                  "ulx3s_8x4"])
def test_map_round_trip(name):
    dmap = DeviceMap(preset(name))
    rng = random.Random(1)
    for stream_name, spec in dmap.streams.items():
        assert spec.region.width <= P.MAX_WORD_BITS
        assert spec.region.width * spec.words_per_beat >= spec.beat_bits
        beats = [rng.getrandbits(spec.beat_bits) for _ in range(7)]
        words = dmap.beat_words(stream_name, beats)
        assert len(words) == 7 * spec.words_per_beat
        assert all(0 <= w < 1 << spec.region.width for w in words)
        assert dmap.word_beats(stream_name, words) == beats


def test_map_holds_largest_shape():
    cfg = preset("tiny")
    dmap = DeviceMap(cfg)
    qm, xi, _ = layer(cfg, cfg.max_seq_len, cfg.max_d_model, 1)
    s = core_streams(cfg, qm, xi)
    for name, beats in (("params", s["p"]), ("x", s["x"]), ("w", s["w"])):
        spec = dmap.streams[name]
        assert len(beats) * spec.words_per_beat <= spec.region.depth


def test_map_too_large():
    with pytest.raises(ValueError, match="region 'w'"):
        DeviceMap(preset("ulx3s"))


# -- readers and writers -------------------------------------------------------------------------

class _ReaderBench(wiring.Component):
    """A reader on a memory of ``contents``: an ``amaranth.lib.memory.Memory`` (latency 1) or
    a :class:`hw.bram.RegisteredMemory` (latency 2, or 3 with its input registers)."""

    def __init__(self, spec, contents, queued=True, registered=True, latency=1,
                 read_always=False):
        self.spec, self.contents, self.latency = spec, contents, latency
        self.reader = RegionReader(spec, queued=queued, registered=registered, latency=latency,
                                   read_always=read_always)
        super().__init__({"o_stream": Out(stream.Signature(spec.beat_bits)), "restart": In(1)})

    def elaborate(self, platform):
        from amaranth import Module
        m = Module()
        region = self.spec.region
        m.submodules.reader = reader = self.reader
        if self.latency > 1:
            m.submodules.mem = mem = RegisteredMemory(width=region.width, depth=region.depth,
                                                      input_registers=self.latency == 3)
            mem.memory.init = self.contents
            m.d.comb += [mem.r_addr.eq(reader.mem.r_addr), mem.r_en.eq(reader.mem.r_en),
                         reader.mem.r_data.eq(mem.r_data)]
        else:
            m.submodules.mem = mem = Memory(shape=region.width, depth=region.depth,
                                            init=self.contents)
            rd = mem.read_port()
            m.d.comb += [rd.addr.eq(reader.mem.r_addr), rd.en.eq(reader.mem.r_en),
                         reader.mem.r_data.eq(rd.data)]
        m.d.comb += reader.restart.eq(self.restart)
        wiring.connect(m, reader.o_stream, wiring.flipped(self.o_stream))
        return m


# (latency 3: the ECP5 regions, whose read enable the reader holds high)
_LATENCIES = [(1, 0, False), (1, 1, False), (1, 2, False), (2, 0, False), (2, 1, False),
              (3, 0, True), (3, 1, True), (3, 1, False)]


@pytest.mark.parametrize("latency,registered,read_always", _LATENCIES)
@pytest.mark.parametrize("queued", [True, False])
# (long stalls: a beat the output register still holds when the next word arrives)
@pytest.mark.parametrize("words_per_beat,stall", [(1, 0.0), (1, 0.5), (1, 0.8), (2, 0.3),
                                                  (2, 0.8), (3, 0.0), (3, 0.4), (4, 0.6),
                                                  (5, 0.2)])
def test_reader(words_per_beat, stall, queued, latency, registered, read_always):
    width = 10
    spec = StreamRegion(P.Region("r", width, 12 * words_per_beat), width * words_per_beat - 3,
                        words_per_beat)
    rng = random.Random(words_per_beat)
    contents = [rng.getrandbits(width) for _ in range(spec.region.depth)]
    beats = [b & ((1 << spec.beat_bits) - 1) for b in spec.to_beats(contents)]
    dut = _ReaderBench(spec, contents, queued, registered, latency, read_always)
    got = []

    def benches():
        async def bench(ctx):
            # a restart in the middle: the stream starts over from word 0
            got.extend(await get_all(ctx, dut.o_stream, 5, Pattern(stall, 3)))
            ctx.set(dut.restart, 1)
            await ctx.tick()
            ctx.set(dut.restart, 0)
            got.extend(await get_all(ctx, dut.o_stream, 12, Pattern(stall, 4)))
        return [bench]

    run_simulation(dut, benches,
                   f"reader_{words_per_beat}_{stall}_{queued}_{latency}_{registered}_"
                   f"{read_always}",
                   deadline_cycles=2000)
    assert_equal("reader beats", beats[:5] + beats, got)


@pytest.mark.parametrize("latency,registered,read_always", _LATENCIES)
@pytest.mark.parametrize("queued", [True, False])
@pytest.mark.parametrize("words_per_beat", [1, 2, 3, 4, 6])
def test_reader_rate(words_per_beat, queued, latency, registered, read_always):
    """With a consumer that is always ready, a beat every ``words_per_beat`` cycles behind the
    queue (1 or 2 words per beat), at least every 2 + ``latency + registered`` behind the
    output register."""
    width = 8
    spec = StreamRegion(P.Region("r", width, 16 * words_per_beat), width * words_per_beat,
                        words_per_beat)
    contents = list(range(spec.region.depth))
    dut = _ReaderBench(spec, contents, queued, registered, latency, read_always)
    cycles = []

    def benches():
        async def bench(ctx):
            await get_all(ctx, dut.o_stream, 16, cycles=cycles)
        return [bench]

    run_simulation(dut, benches,
                   f"reader_rate_{words_per_beat}_{queued}_{latency}_{registered}_"
                   f"{read_always}",
                   deadline_cycles=500)
    gaps = {b - a for a, b in zip(cycles[1:], cycles[2:])}
    expected = (words_per_beat if queued and words_per_beat < 3
                else max(2 + latency + registered, words_per_beat))
    assert gaps == {expected}, f"cycles between beats: {sorted(gaps)}"


def test_reader_registers_checked():
    spec = StreamRegion(P.Region("r", 8, 4), 8, 1)
    with pytest.raises(ValueError, match="registered must be 0, 1 or 2"):
        RegionReader(spec, registered=3)
    with pytest.raises(ValueError, match="latency must be 1, 2 or 3 cycles, not 4"):
        RegionReader(spec, latency=4)


@pytest.mark.parametrize("registered", [True, False])
@pytest.mark.parametrize("words_per_beat", [1, 2])
def test_writer_overflow(words_per_beat, registered):
    width = 8
    spec = StreamRegion(P.Region("y", width, 4 * words_per_beat, writable=False),
                        width * words_per_beat, words_per_beat)
    writer = RegionWriter(spec, registered=registered)
    beats = [random.Random(5).getrandbits(spec.beat_bits) for _ in range(6)]
    written = {}

    def benches():
        async def producer(ctx):
            await put_all(ctx, writer.i_stream, beats, Pattern(0.3, 1))

        async def monitor(ctx):
            for _ in range(60):
                if ctx.get(writer.mem.w_en):
                    written[ctx.get(writer.mem.w_addr)] = ctx.get(writer.mem.w_data)
                await ctx.tick()
        return [producer, monitor]

    run_simulation(writer, benches, f"writer_{words_per_beat}_{registered}",
                   deadline_cycles=500)
    expect = dict(enumerate(spec.to_words(beats[:4])))
    assert written == expect          # 4 beats fit, the other 2 are dropped, never out of range


# -- the whole device ----------------------------------------------------------------------------

def test_device_run_cosim():
    """Two runs through the UART, a bad RUN in between; each output equals golden."""
    cfg = preset("tiny")
    with open_cosim(cfg) as device:
        assert device.info.config.to_dict() == cfg.to_dict()
        for seq_len, d_model, heads, causal in ((4, 8, 2, False), (5, 6, 1, True)):
            qm, xi, expected = layer(cfg, seq_len, d_model, heads, seed=seq_len, causal=causal)
            run = run_on_device(device, cfg, qm, xi, causal=causal)
            assert_equal(f"device output y ({seq_len}x{d_model}x{heads})", expected.y, run.y)
            assert run.cycles > 0 and run.counters["array_beats"] > 0
            # heads that do not divide D: refused by the device itself, which stays usable
            with pytest.raises(RunFailed, match=f"status {STATUS_BAD_ARGS}"):
                device.run(pack_args(cfg, seq_len=3, d_model=6, heads=4, head_dim=1, causal=0,
                                     valid_len=3))
            # H * head_dim = 40 = 8 + 32: equal to D = 8 only if the product wrapped at D's
            # 5 bits
            with pytest.raises(RunFailed, match=f"status {STATUS_BAD_ARGS}"):
                device.run(pack_args(cfg, seq_len=3, d_model=8, heads=2, head_dim=20, causal=0,
                                     valid_len=3))


def test_device_run_cosim_region_registers():
    """The ULX3S's read timing in simulation: every region's data through a register of its
    own (the block RAM's on ECP5), two cycles from address to data for the link and the region
    readers; the output equals golden."""
    cfg = preset("tiny")
    with open_cosim(cfg, region_registers=True) as device:
        qm, xi, expected = layer(cfg, 5, 8, 2, seed=11, causal=True, valid_len=4)
        run = run_on_device(device, cfg, qm, xi, causal=True, valid_len=4)
        assert_equal("device output y (region registers)", expected.y, run.y)
        # the regions the core reads, read back by the link (a word three cycles after its
        # address): what was written
        words = [(i * 2654435761) % (1 << 31) for i in range(6)]
        device.write("x", words)
        assert device.read("x", 6) == words


def test_device_run_cosim_icebreaker_mini():
    """The iCEBreaker's preset (2x1 array, 8-bit activations, two quotient bits per divider
    stage) through the UART: its largest shape with masks equals golden."""
    cfg = preset("icebreaker_mini")
    with open_cosim(cfg) as device:
        qm, xi, expected = layer(cfg, 8, 16, 2, seed=3, causal=True, valid_len=6)
        run = run_on_device(device, cfg, qm, xi, causal=True, valid_len=6)
        assert_equal("device output y (icebreaker_mini)", expected.y, run.y)


def pack_args(cfg, **args):
    return DeviceMap(cfg).run_layout.const(args).as_value().value


def test_device_malformed_frames():
    """Corrupted, truncated, mis-tagged and out-of-range WRITEs of the weights are refused and
    change nothing: a run on the weights loaded before them is still exact."""
    cfg = preset("tiny")
    qm, xi, expected = layer(cfg, 4, 8, 2, seed=11)
    rng = random.Random(2)
    with open_cosim(cfg) as device:
        run_on_device(device, cfg, qm, xi)              # loads the regions
        index, region = device.info.region("w")
        words = P.pack_words([rng.getrandbits(region.width) for _ in range(4)], region.width)
        good = P.encode_request(P.Command.WRITE, P.write_payload(device.info.tag, index, 0,
                                                                 words, region.width))
        statuses = []
        for trial in range(24):
            kind = trial % 4
            if kind == 0:                                  # corrupted byte
                frame = bytearray(good)
                frame[rng.randrange(4, len(frame))] ^= 1 << rng.randrange(8)
            elif kind == 1:                                # wrong tag
                frame = P.encode_request(P.Command.WRITE, P.write_payload(
                    device.info.tag ^ 1, index, 0, words, region.width))
            elif kind == 2:                                # out of range
                frame = P.encode_request(P.Command.WRITE, P.write_payload(
                    device.info.tag, index, region.depth - 2, words, region.width))
            else:                                          # unknown region
                frame = P.encode_request(P.Command.WRITE, P.write_payload(
                    device.info.tag, 9, 0, words, region.width))
            device.transport.write(bytes(frame))
            parser = P.ReplyParser()
            replies = []
            while not replies:
                chunk = device.transport.read(parser.need())
                assert chunk, f"no reply to malformed frame {trial}"
                replies = parser.feed(chunk)
            statuses.append(replies[0][1])
        assert all(s != P.Status.OK for s in statuses), statuses
        # the weights are untouched: RUN with what is in the regions
        device.run(pack_args(cfg, **core_streams(cfg, qm, xi)["args"]))
        spec = DeviceMap(cfg).streams["y"]
        raw = device.read("y", 16 * spec.words_per_beat)
        fresh = run_on_device(device, cfg, qm, xi)
        assert_equal("device output after malformed frames", expected.y, fresh.y)
        assert raw == device.read("y", 16 * spec.words_per_beat)
        with pytest.raises(DeviceError, match="BAD_RANGE"):
            device.read("y", spec.region.depth + 1)


def test_device_reset_mid_run():
    """RESET while a run is going (the core, readers and writer reset a cycle after the link,
    from their register) stops it: the status shows neither running nor busy, and the next
    run is exact."""
    cfg = preset("tiny")
    qm, xi, expected = layer(cfg, 8, 16, 2, seed=5)
    with open_cosim(cfg) as device:
        run_on_device(device, cfg, qm, xi)              # loads the regions
        device.start(pack_args(cfg, **core_streams(cfg, qm, xi)["args"]))
        assert device.status().busy                     # still going ...
        device.reset()                                  # ... until RESET
        st = device.status()
        assert not st.running and not st.busy
        fresh = run_on_device(device, cfg, qm, xi)
        assert_equal("device output after a reset mid-run", expected.y, fresh.y)


def test_device_ports():
    for divisor, ports in ((4, {"rx", "tx", "running"}),
                           (None, {"i_stream", "o_stream", "running"})):
        dev = AttentionDevice(preset("tiny"), divisor=divisor)
        assert ports <= set(dev.signature.members)
        dev.core._MustUse__silence = dev.link._MustUse__silence = True     # not elaborated


def test_link_traffic_is_exact():
    """The byte count the benchmarks use for transfer time equals what crosses the UART."""
    from attn.remote import link_traffic

    cfg = preset("tiny")
    qm, xi, expected = layer(cfg, 6, 12, 2, seed=4)
    with open_cosim(cfg) as device:
        sent, received = [], []
        write, read = device.transport.write, device.transport.read
        device.transport.write = lambda data: (sent.append(len(data)), write(data))[1]
        device.transport.read = lambda n: (lambda b: (received.append(len(b)), b)[1])(read(n))
        polls = []
        status = device.status
        device.status = lambda: (polls.append(1), status())[1]
        run = run_on_device(device, cfg, qm, xi)
    assert_equal("device output y", expected.y, run.y)
    traffic = link_traffic(cfg, 6, 12, 2, status_polls=len(polls))
    assert traffic["to_device"] == sum(sent) and traffic["from_device"] == sum(received)
    assert traffic["round_trips"] == len(sent)
