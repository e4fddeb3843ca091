"""Host driver of the accelerator: one API for the real board and the simulated one.

::

    from attn.host import Device
    from attn.transport import SerialTransport
    with Device(SerialTransport("/dev/ttyUSB1", 3_000_000), config=attn.preset("icebreaker"),
                run_layout=run_args_layout(cfg)) as dev:
        dev.write("input", x_words)
        dev.run({"seq_len": 64, ...})            # starts, then polls STATUS until done
        y = dev.read("output", 64 * 64, signed=True)
        print(dev.counters())

Opening a :class:`Device` sends IDENTIFY; if ``config`` is given and the bitstream was built
for another configuration, :class:`ConfigMismatch` names the differing fields and nothing is
sent to the device. Every WRITE and RUN carries the interface tag from IDENTIFY, so data made
for another bitstream is refused by the device too (``BAD_TAG``).
"""

from __future__ import annotations

import time

import numpy as np
from amaranth.lib import data

from . import protocol as P

__all__ = ["Device", "LinkError", "DeviceError", "ReplyTimeout", "ConfigMismatch",
           "RunFailed"]


class LinkError(IOError):
    """The link misbehaved: no reply, a garbled reply, or a reply to another command."""


class ReplyTimeout(LinkError):
    """The device did not answer (completely) in time."""


class DeviceError(LinkError):
    """The device answered with an error status.

    Attributes
    ----------
    status : attn.protocol.Status or int
    command : attn.protocol.Command or int
    """

    def __init__(self, command, status):
        self.command = command
        try:
            self.status = P.Status(status)
        except ValueError:
            self.status = status
        name = getattr(self.status, "name", f"status {status:#04x}")
        super().__init__(f"device refused {_name(command)}: {name}")


class ConfigMismatch(LinkError):
    """The bitstream was built for another configuration than the host expects."""


class RunFailed(LinkError):
    """A run ended with a non-zero status code (attribute ``status``)."""

    def __init__(self, status):
        self.status = status
        super().__init__(f"run ended with status {status}")


class Device:
    """The accelerator (or any HostLink device) behind a transport.

    Parameters
    ----------
    transport : attn.transport.Transport
        Where the bytes go.
    config : AttnConfig, optional
        The configuration the host expects; a device with different fields (the name aside)
        raises :class:`ConfigMismatch`.
    run_layout : data.Layout, optional
        Layout of the run arguments, to pass them to :meth:`run` as a dict.
    poll_interval : float
        Seconds between STATUS polls while a run is going (0 for the simulator).

    Members
    -------
    info : attn.protocol.DeviceInfo
        The IDENTIFY reply.

    Raises
    ------
    ConfigMismatch, LinkError
    """

    def __init__(self, transport, *, config=None, run_layout=None, poll_interval: float = 0.0):
        self.transport = transport
        self.run_layout = run_layout
        self.poll_interval = poll_interval
        self.info = self.identify()
        if run_layout is not None:
            width = data.Layout.cast(run_layout).size
            if width != self.info.run_bits:
                raise ConfigMismatch(f"run_layout has {width} bits, the device expects "
                                     f"{self.info.run_bits}")
        if config is not None:
            self.check_config(config)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.transport.close()

    # -- requests --------------------------------------------------------------------------

    def request(self, command: int, payload: bytes = b"") -> bytes:
        """Send one request, return the payload of its OK reply.

        Raises :class:`DeviceError` on an error reply, :class:`ReplyTimeout` if the reply does
        not come, :class:`LinkError` if it is garbled or answers another command.
        """
        self.transport.write(P.encode_request(command, payload))
        parser = P.ReplyParser()
        frames = []
        while not frames:
            chunk = self.transport.read(parser.need())
            if not chunk:
                raise ReplyTimeout(f"no (complete) reply to {_name(command)}")
            try:
                frames = parser.feed(chunk)
            except P.FrameError as exc:
                raise LinkError(f"garbled reply to {_name(command)}: {exc}") from None
        cmd, status, reply = frames[0]
        if cmd != int(command) & 0xFF:
            raise LinkError(f"reply to command {cmd:#04x} while waiting for {_name(command)}")
        if status != P.Status.OK:
            raise DeviceError(command, status)
        return reply

    def resync(self) -> None:
        """Let the device's parser time out and discard whatever is in flight."""
        self.transport.drain()

    def identify(self) -> P.DeviceInfo:
        """The device's interface and configuration (IDENTIFY)."""
        return P.decode_identify(self.request(P.Command.IDENTIFY))

    def check_config(self, config) -> None:
        """Raise :class:`ConfigMismatch` unless the device has the fields of ``config``."""
        mine, theirs = config.to_dict(), self.info.config.to_dict()
        diff = [f"{k}: device {theirs[k]!r}, host {mine[k]!r}" for k in mine
                if k != "name" and mine[k] != theirs[k]]
        if diff:
            raise ConfigMismatch(f"the bitstream was built for configuration "
                                 f"{self.info.config.name!r}, not {config.name!r}; "
                                 + "; ".join(diff))

    def status(self) -> P.LinkStatus:
        """Running / busy flags, last run status, number of runs and of error replies."""
        return P.decode_status(self.request(P.Command.STATUS))

    def counters(self) -> list:
        """The device's performance counters (unsigned 32-bit)."""
        raw = self.request(P.Command.COUNTERS)
        return P.unpack_words(raw, 8 * P.COUNTER_BYTES)

    def reset(self) -> None:
        """Reset the core (regions and the link keep their state)."""
        self.request(P.Command.RESET)

    def write(self, region: str, words, offset: int = 0) -> None:
        """Write ``words`` (integers; negative values as two's complement) at ``offset``."""
        index, reg = self.info.region(region)
        words = [int(w) for w in _flat(words)]
        per_frame = (self.info.max_payload - P.WRITE_HEADER) // reg.word_bytes
        for start in range(0, len(words), per_frame):
            chunk = words[start:start + per_frame]
            self.request(P.Command.WRITE, P.write_payload(
                self.info.tag, index, offset + start, P.pack_words(chunk, reg.width), reg.width))

    def read(self, region: str, count: int, offset: int = 0, *, signed: bool = False) -> list:
        """``count`` words of ``region`` from ``offset`` (two's complement if ``signed``)."""
        index, reg = self.info.region(region)
        per_frame = max(1, 4096 // reg.word_bytes)
        out = []
        for start in range(0, count, per_frame):
            n = min(per_frame, count - start)
            raw = self.request(P.Command.READ, P.read_payload(index, offset + start, n))
            out += P.unpack_words(raw, reg.width, signed=signed)
        return out

    def start(self, args=0) -> None:
        """Start a run (RUN) without waiting; ``args`` is an int or a dict for ``run_layout``."""
        if isinstance(args, dict):
            if self.run_layout is None:
                raise TypeError("run arguments given as a dict need Device(run_layout=...)")
            args = data.Layout.cast(self.run_layout).const(args).as_value().value
        self.request(P.Command.RUN, P.run_payload(self.info.tag, int(args), self.info.run_bits))

    def wait(self, *, timeout: float | None = None) -> P.LinkStatus:
        """Poll STATUS until the core is no longer running; :class:`RunFailed` on a non-zero
        status, :class:`ReplyTimeout` after ``timeout`` seconds (wall clock)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            st = self.status()
            if not st.running and not st.busy:
                if st.last_status:
                    raise RunFailed(st.last_status)
                return st
            if deadline is not None and time.monotonic() > deadline:
                raise ReplyTimeout(f"run still going after {timeout} s")
            if self.poll_interval:
                time.sleep(self.poll_interval)

    def run(self, args=0, *, timeout: float | None = None) -> P.LinkStatus:
        """Start a run and wait for it (see :meth:`start` and :meth:`wait`)."""
        self.start(args)
        return self.wait(timeout=timeout)


def _name(command) -> str:
    try:
        return P.Command(command).name
    except ValueError:
        return f"command {int(command):#04x}"


def _flat(words):
    return np.asarray(words).reshape(-1).tolist()
