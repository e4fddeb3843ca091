"""Run a layer on an accelerator behind the host link: a flashed board or a co-simulated one.

Both go through the same :class:`attn.host.Device` driver and exchange the same bytes; only
the transport differs (:class:`attn.transport.SerialTransport` for a board,
:class:`attn.transport.SimTransport` around :class:`hw.device.AttentionDevice` for the
co-simulation, UART included)::

    with open_cosim(cfg) as device:            # or open_board("/dev/ttyUSB1", cfg)
        run = run_on_device(device, cfg, model, x_int)
    run.y, run.cycles, run.counters

A run writes the constants, the input and the weights into the device's regions
(:class:`hw.device.DeviceMap`), starts the core, waits for it and reads the output back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from amaranth.lib import data

from .host import Device

__all__ = ["RemoteRun", "run_on_device", "open_cosim", "open_board", "board_config",
           "link_traffic", "COSIM_DIVISOR", "BOARD_BAUD", "MAX_PAYLOAD"]

#: UART clocks per bit of the co-simulated device (the fastest the UART allows).
COSIM_DIVISOR = 4
#: Default baud rate of the board builds.
BOARD_BAUD = 1_000_000
#: The device's frame buffer (:class:`hw.device.AttentionDevice` default), in bytes.
MAX_PAYLOAD = 256


@dataclass
class RemoteRun:
    """What one run on a device gave: output integers, counters and where the time went."""

    y: np.ndarray
    cycles: int
    counters: dict
    seconds: dict = field(default_factory=dict)


def _pack(layout, value) -> int:
    return data.Layout.cast(layout).const(value).as_value().value


def run_on_device(device: Device, cfg, model, x_int, *, causal: bool = False,
                  valid_len: int | None = None, timeout: float | None = None,
                  progress=None) -> RemoteRun:
    """Run ``model`` on ``x_int`` on ``device`` (whose configuration must be ``cfg``).

    ``progress`` (optional) receives one line per step. Raises :class:`attn.host.LinkError`
    subclasses on link problems and :class:`ValueError` for a shape the configuration cannot
    hold.
    """
    from hw.core import COUNTERS
    from hw.core_io import collect_output, core_streams, lanes_layout, param_layout
    from hw.device import DeviceMap

    say = progress or (lambda line: None)
    device.check_config(cfg)
    dmap = DeviceMap(cfg)
    x_int = np.asarray(x_int, dtype=np.int64)
    streams = core_streams(cfg, model, x_int, causal=causal, valid_len=valid_len)
    layouts = {"params": param_layout(cfg), "x": lanes_layout(cfg, cfg.x_bits),
               "w": lanes_layout(cfg, cfg.w_bits)}
    sources = {"params": streams["p"], "x": streams["x"], "w": streams["w"]}
    seconds = {}
    start = time.monotonic()
    for name in ("params", "x", "w"):
        words = dmap.beat_words(name, [_pack(layouts[name], b) for b in sources[name]])
        say(f"writing {len(words)} words to region {name!r}")
        device.write(name, words)
    seconds["load"] = time.monotonic() - start

    start = time.monotonic()
    say("running")
    device.run(_pack(dmap.run_layout, streams["args"]), timeout=timeout)
    seconds["run"] = time.monotonic() - start

    start = time.monotonic()
    shape = streams["shape"]
    spec = dmap.streams["y"]
    count = shape.wpd * shape.seq_len * spec.words_per_beat
    say(f"reading {count} words of region 'y'")
    beats = dmap.word_beats("y", device.read("y", count))
    bits, half = cfg.y_bits, 1 << (cfg.y_bits - 1)
    lanes = [[(((b >> (c * bits)) + half) & ((1 << bits) - 1)) - half for c in range(cfg.cols)]
             for b in beats]
    y = collect_output(cfg, lanes, shape.seq_len, shape.d_model)
    counters = dict(zip(COUNTERS, device.counters(), strict=True))
    seconds["read"] = time.monotonic() - start
    return RemoteRun(y=y, cycles=counters["cycles"], counters=counters, seconds=seconds)


def open_cosim(cfg, *, divisor: int = COSIM_DIVISOR, vcd=None,
               region_registers: bool | None = None) -> Device:
    """A :class:`Device` on :class:`hw.device.AttentionDevice` in the Amaranth simulator,
    reached bit by bit through its UART pins (``region_registers``: the device's)."""
    from hw.device import AttentionDevice

    from .transport import SimTransport

    # the parser timeout must outlast the simulated host's gaps (none) and one byte time
    top = AttentionDevice(cfg, divisor=divisor, timeout_cycles=40 * 10 * divisor,
                          region_registers=region_registers)
    transport = SimTransport(top, divisor=divisor, vcd=vcd)
    return Device(transport, config=cfg)


def open_board(port: str, cfg, *, baud: int = BOARD_BAUD, timeout: float = 2.0) -> Device:
    """A :class:`Device` on a flashed board at serial ``port``."""
    from .transport import SerialTransport

    return Device(SerialTransport(port, baud, timeout=timeout), config=cfg,
                  poll_interval=0.01)


def board_config(port: str, *, baud: int = BOARD_BAUD, timeout: float = 2.0):
    """The configuration of the bitstream on the board at ``port`` (from IDENTIFY)."""
    from .transport import SerialTransport

    with Device(SerialTransport(port, baud, timeout=timeout)) as device:
        return device.info.config


def link_traffic(cfg, seq_len: int, d_model: int, heads: int, *,
                 max_payload: int = MAX_PAYLOAD, status_polls: int = 1) -> dict:
    """Bytes and request/reply round trips :func:`run_on_device` exchanges for one run of the
    shape ``L x D x H`` (after IDENTIFY; ``status_polls`` STATUS requests until the run is
    over). Returns ``to_device``, ``from_device`` (bytes) and ``round_trips``."""
    from hw.core_io import CoreShape
    from hw.device import DeviceMap

    from . import protocol as P

    s = CoreShape(cfg, seq_len, d_model, heads)
    dmap = DeviceMap(cfg)
    request = P.REQUEST_HEADER + P.CRC_BYTES
    reply = P.REPLY_HEADER + P.CRC_BYTES
    beats = {"params": s.proj_tiles + s.out_tiles + 2 * heads, "x": seq_len * s.wpd,
             "w": (s.proj_tiles + s.out_tiles) * d_model}
    to_dev = from_dev = trips = 0
    for name, count in beats.items():
        spec = dmap.streams[name]
        words, size = count * spec.words_per_beat, spec.region.word_bytes
        per_frame = (max_payload - P.WRITE_HEADER) // size
        frames = -(-words // per_frame)
        to_dev += frames * (request + P.WRITE_HEADER) + words * size
        from_dev += frames * reply
        trips += frames
    run_bytes = P.RUN_ARGS_OFFSET + P.run_arg_bytes(dmap.run_layout.size)
    to_dev += request + run_bytes + status_polls * request
    from_dev += reply + status_polls * (reply + P.STATUS_PAYLOAD)
    trips += 1 + status_polls
    spec = dmap.streams["y"]
    words, size = s.wpd * seq_len * spec.words_per_beat, spec.region.word_bytes
    per_frame = max(1, 4096 // size)
    frames = -(-words // per_frame)
    to_dev += frames * (request + P.READ_PAYLOAD) + request        # + COUNTERS
    from_dev += frames * reply + words * size + reply + P.COUNTER_BYTES * len(_counters())
    trips += frames + 1
    return {"to_device": to_dev, "from_device": from_dev, "round_trips": trips}


def _counters():
    from hw.core import COUNTERS
    return COUNTERS
