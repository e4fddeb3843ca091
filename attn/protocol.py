"""The host link protocol: the one source of truth for the gateware and the host driver.

Every constant of the protocol (sync bytes, command and status codes, header offsets, the CRC
polynomial) is defined here once. ``hw/hostlink.py`` builds the device side from these names and
``attn/host.py`` speaks them; ``docs/protocol.md`` explains them.

Frames (all multi-byte integers little endian, except the CRC, which is sent high byte first)::

    request : REQUEST_SYNC | cmd | len_lo | len_hi | payload[len] | crc_hi | crc_lo
    reply   : REPLY_SYNC | cmd | status | len_lo | len_hi | payload[len] | crc_hi | crc_lo

The CRC is CRC-16/CCITT-FALSE (polynomial 0x1021, initial value 0xFFFF, no reflection, no final
XOR; check value 0x29B1) over every byte after the sync byte up to the end of the payload.
Because the CRC is sent high byte first, running the CRC over the whole frame after the sync byte
(CRC bytes included) leaves 0.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import struct
from dataclasses import dataclass
from enum import IntEnum

__all__ = [
    "VERSION", "REQUEST_SYNC", "REPLY_SYNC", "CRC_POLY", "CRC_INIT", "CRC_CHECK",
    "REQUEST_HEADER", "REPLY_HEADER", "CRC_BYTES", "MAX_LENGTH", "TAG_BYTES",
    "WRITE_FIELDS", "READ_FIELDS", "STATUS_FIELDS", "FLAG_RUNNING", "FLAG_BUSY",
    "REGION_WRITABLE", "REGION_READABLE", "RUN_ARGS_OFFSET", "field_offsets", "pack_fields",
    "unpack_fields",
    "WRITE_HEADER", "READ_PAYLOAD", "STATUS_PAYLOAD", "COUNTER_BYTES", "MAX_WORD_BITS",
    "MAX_REGIONS", "MAX_COUNTERS", "IDENT_MAGIC",
    "Command", "Status", "Region", "DeviceInfo", "LinkStatus",
    "crc16", "word_bytes", "encode_request", "encode_reply", "decode_reply",
    "decode_request", "FrameError", "ReplyParser", "config_bytes", "decode_config",
    "identify_payload", "decode_identify", "ident_tag", "pack_words", "unpack_words",
    "write_payload", "read_payload", "run_payload", "run_arg_bytes", "decode_status",
    "description_json",
]

#: Protocol version, the first byte after the magic of the IDENTIFY reply.
VERSION = 1
#: First byte of every request frame (host to device).
REQUEST_SYNC = 0xA5
#: First byte of every reply frame (device to host).
REPLY_SYNC = 0x5A
#: CRC-16/CCITT-FALSE parameters.
CRC_POLY = 0x1021
CRC_INIT = 0xFFFF
#: CRC of the ASCII bytes ``b"123456789"`` (the catalogue's check value).
CRC_CHECK = 0x29B1
CRC_BYTES = 2
#: Bytes before the payload: sync, cmd, len_lo, len_hi.
REQUEST_HEADER = 4
#: Bytes before the payload: sync, cmd, status, len_lo, len_hi.
REPLY_HEADER = 5
#: Largest value of the 16-bit length field.
MAX_LENGTH = 0xFFFF
#: Bytes of the interface tag that WRITE and RUN payloads begin with.
TAG_BYTES = 4
#: Fields (name, bytes) at the start of a WRITE payload; the packed words follow.
WRITE_FIELDS = (("tag", TAG_BYTES), ("region", 1), ("address", 2), ("count", 2))
#: Fields of a READ payload.
READ_FIELDS = (("region", 1), ("address", 2), ("count", 2))
#: Fields of the STATUS reply payload.
STATUS_FIELDS = (("flags", 1), ("last_status", 1), ("runs", 2), ("errors", 2))
#: Bits of the STATUS ``flags`` byte.
FLAG_RUNNING = 0x01
FLAG_BUSY = 0x02
#: Bits of a region's ``flags`` byte in the IDENTIFY reply.
REGION_WRITABLE = 0x01
REGION_READABLE = 0x02


def field_offsets(fields) -> dict:
    """``{name: (offset, size)}`` of a field table such as :data:`WRITE_FIELDS`."""
    out, offset = {}, 0
    for name, size in fields:
        out[name] = (offset, size)
        offset += size
    return out


def _fields_size(fields) -> int:
    return sum(size for _, size in fields)


def pack_fields(fields, **values) -> bytes:
    """Little-endian bytes of a field table with the given values (all fields required)."""
    out = bytearray()
    for name, size in fields:
        value = values.pop(name)
        if not 0 <= value < (1 << (8 * size)):
            raise ValueError(f"{name} = {value} does not fit in {size} byte(s)")
        out += int(value).to_bytes(size, "little")
    if values:
        raise TypeError(f"unknown field(s) {', '.join(values)}")
    return bytes(out)


def unpack_fields(fields, data: bytes) -> dict:
    """Inverse of :func:`pack_fields` (``data`` may be longer than the fields)."""
    return {name: int.from_bytes(data[offset:offset + size], "little")
            for name, (offset, size) in field_offsets(fields).items()}


#: Bytes of the WRITE payload before the words.
WRITE_HEADER = _fields_size(WRITE_FIELDS)
#: Bytes of a READ payload.
READ_PAYLOAD = _fields_size(READ_FIELDS)
#: Bytes of the STATUS reply payload.
STATUS_PAYLOAD = _fields_size(STATUS_FIELDS)
#: Offset of the run arguments in a RUN payload (after the tag).
RUN_ARGS_OFFSET = TAG_BYTES
#: Bytes per performance counter in the COUNTERS reply.
COUNTER_BYTES = 4
#: Limits of a region description (words are sent in ``ceil(width / 8)`` bytes).
MAX_WORD_BITS = 64
MAX_REGIONS = 255
MAX_COUNTERS = 255
#: First bytes of the IDENTIFY reply.
IDENT_MAGIC = b"ATTN"


class Command(IntEnum):
    """Request command codes (the reply echoes the code of the request it answers)."""

    #: Reply: the interface description (:func:`identify_payload`). Payload: none.
    IDENTIFY = 0x01
    #: Reply: :data:`STATUS_PAYLOAD` bytes (:func:`decode_status`). Payload: none.
    STATUS = 0x02
    #: Payload: :func:`write_payload`. Reply: OK, no payload, after the words are written.
    WRITE = 0x10
    #: Payload: :func:`read_payload`. Reply: ``count`` words of the region.
    READ = 0x11
    #: Payload: :func:`run_payload`. Reply: OK (started) at once; poll STATUS for the end.
    RUN = 0x20
    #: Reply: every performance counter, :data:`COUNTER_BYTES` each. Payload: none.
    COUNTERS = 0x30
    #: Resets the core (not the link, not the regions); clears a running flag. Payload: none.
    RESET = 0x40


class Status(IntEnum):
    """Reply status codes. Any code but ``OK`` comes with an empty payload."""

    OK = 0x00
    #: The frame's CRC did not match.
    BAD_CRC = 0x01
    #: The length field is larger than the device's buffer or wrong for the command.
    BAD_LENGTH = 0x02
    #: The frame stopped before its end (no byte for the device's timeout).
    TIMEOUT = 0x03
    #: Unknown command code.
    BAD_COMMAND = 0x04
    #: No such region, or the region is not writable (WRITE) / readable (READ).
    BAD_REGION = 0x05
    #: The address range is outside the region.
    BAD_RANGE = 0x06
    #: The payload's interface tag is not this device's: it was made for another configuration.
    BAD_TAG = 0x07
    #: The core is running: WRITE, READ and RUN are refused until it is done (or RESET).
    BUSY = 0x08
    #: A UART framing error (stop bit 0) inside the frame.
    FRAMING = 0x09


# -- CRC -----------------------------------------------------------------------------------------

def _crc_table() -> tuple:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ CRC_POLY if crc & 0x8000 else crc << 1) & 0xFFFF
        table.append(crc)
    return tuple(table)


_CRC_TABLE = _crc_table()


def crc16(data: bytes, crc: int = CRC_INIT) -> int:
    """CRC-16/CCITT-FALSE of ``data``, continuing from ``crc``."""
    for byte in bytes(data):
        crc = ((crc << 8) & 0xFFFF) ^ _CRC_TABLE[(crc >> 8) ^ byte]
    return crc


# -- frames --------------------------------------------------------------------------------------

class FrameError(ValueError):
    """A byte string is not a well-formed frame; the message says why."""


def _check_length(payload) -> bytes:
    payload = bytes(payload)
    if len(payload) > MAX_LENGTH:
        raise ValueError(f"payload of {len(payload)} bytes exceeds the 16-bit length field")
    return payload


def encode_request(cmd: int, payload: bytes = b"") -> bytes:
    """The request frame of command ``cmd`` with ``payload``."""
    payload = _check_length(payload)
    body = bytes([int(cmd) & 0xFF]) + struct.pack("<H", len(payload)) + payload
    return bytes([REQUEST_SYNC]) + body + struct.pack(">H", crc16(body))


def encode_reply(cmd: int, status: int, payload: bytes = b"") -> bytes:
    """The reply frame to command ``cmd`` with ``status`` and ``payload``."""
    payload = _check_length(payload)
    body = bytes([int(cmd) & 0xFF, int(status) & 0xFF]) + struct.pack("<H", len(payload)) \
        + payload
    return bytes([REPLY_SYNC]) + body + struct.pack(">H", crc16(body))


def decode_request(frame: bytes) -> tuple:
    """``(cmd, payload)`` of a complete request frame; raises :class:`FrameError`."""
    frame = bytes(frame)
    if len(frame) < REQUEST_HEADER + CRC_BYTES or frame[0] != REQUEST_SYNC:
        raise FrameError(f"not a request frame: {frame.hex()}")
    length = struct.unpack_from("<H", frame, 2)[0]
    if len(frame) != REQUEST_HEADER + length + CRC_BYTES:
        raise FrameError(f"request length field {length} does not match {len(frame)} bytes")
    if crc16(frame[1:]) != 0:
        raise FrameError(f"request CRC mismatch: {frame.hex()}")
    return frame[1], frame[REQUEST_HEADER:REQUEST_HEADER + length]


def decode_reply(frame: bytes) -> tuple:
    """``(cmd, status, payload)`` of a complete reply frame; raises :class:`FrameError`."""
    frame = bytes(frame)
    if len(frame) < REPLY_HEADER + CRC_BYTES or frame[0] != REPLY_SYNC:
        raise FrameError(f"not a reply frame: {frame.hex()}")
    length = struct.unpack_from("<H", frame, 3)[0]
    if len(frame) != REPLY_HEADER + length + CRC_BYTES:
        raise FrameError(f"reply length field {length} does not match {len(frame)} bytes")
    if crc16(frame[1:]) != 0:
        raise FrameError(f"reply CRC mismatch: {frame.hex()}")
    return frame[1], frame[2], frame[REPLY_HEADER:REPLY_HEADER + length]


class ReplyParser:
    """Incremental splitter of a device-to-host byte stream into reply frames.

    Bytes before a :data:`REPLY_SYNC` are skipped (counted in :attr:`skipped`). :meth:`feed`
    returns the frames completed by the new bytes, each as ``(cmd, status, payload)``; a frame
    with a bad CRC raises :class:`FrameError`.
    """

    def __init__(self):
        self._buf = bytearray()
        self.skipped = 0

    def need(self) -> int:
        """Bytes still missing for the frame in progress (at least 1)."""
        if not self._buf:
            return REPLY_HEADER + CRC_BYTES
        if len(self._buf) < REPLY_HEADER:
            return REPLY_HEADER + CRC_BYTES - len(self._buf)
        length = struct.unpack_from("<H", self._buf, 3)[0]
        return max(1, REPLY_HEADER + length + CRC_BYTES - len(self._buf))

    def feed(self, data: bytes) -> list:
        frames = []
        for byte in bytes(data):
            if not self._buf and byte != REPLY_SYNC:
                self.skipped += 1
                continue
            self._buf.append(byte)
            if len(self._buf) >= REPLY_HEADER:
                length = struct.unpack_from("<H", self._buf, 3)[0]
                if len(self._buf) == REPLY_HEADER + length + CRC_BYTES:
                    frame, self._buf = bytes(self._buf), bytearray()
                    frames.append(decode_reply(frame))
        return frames


# -- regions and words ---------------------------------------------------------------------------

_REGION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")


@dataclass(frozen=True)
class Region:
    """One memory region of the device, as the host sees it.

    Parameters
    ----------
    name : str
        Identifier (letters, digits, ``_``; at most 32 characters).
    width : int
        Bits per word, 1 to :data:`MAX_WORD_BITS`; words travel in :func:`word_bytes` bytes,
        little endian. Values are unsigned bit patterns (the host driver masks signed values).
    depth : int
        Number of words, 1 to 65536 (addresses are 16 bits).
    writable, readable : bool
        Whether the host may WRITE / READ the region (the core may always do both).
    """

    name: str
    width: int
    depth: int
    writable: bool = True
    readable: bool = True

    def __post_init__(self):
        if not isinstance(self.name, str) or not _REGION_NAME.match(self.name):
            raise ValueError(f"region name must be an identifier of at most 32 characters, "
                             f"not {self.name!r}")
        for field, lo, hi in (("width", 1, MAX_WORD_BITS), ("depth", 1, 1 << 16)):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"region {self.name!r} {field} must be an int, not {value!r}")
            if not lo <= value <= hi:
                raise ValueError(f"region {self.name!r} {field} must be between {lo} and {hi}, "
                                 f"not {value!r}")
        for field in ("writable", "readable"):
            if not isinstance(getattr(self, field), bool):
                raise TypeError(f"region {self.name!r} {field} must be a bool, not "
                                f"{getattr(self, field)!r}")

    @property
    def word_bytes(self) -> int:
        return word_bytes(self.width)


def word_bytes(width: int) -> int:
    """Bytes that carry one word of ``width`` bits: ``ceil(width / 8)``."""
    return (width + 7) // 8


def pack_words(words, width: int) -> bytes:
    """Words (integers; negative values are taken modulo ``2**width``) as little-endian bytes.

    Raises :class:`ValueError` if a word does not fit in ``width`` bits (signed or unsigned).
    """
    nb = word_bytes(width)
    out = bytearray()
    for word in words:
        word = int(word)
        if not -(1 << (width - 1)) <= word < (1 << width):
            raise ValueError(f"word {word} does not fit in {width} bits")
        out += (word & ((1 << width) - 1)).to_bytes(nb, "little")
    return bytes(out)


def unpack_words(data: bytes, width: int, signed: bool = False) -> list:
    """Inverse of :func:`pack_words`: unsigned words, or two's complement if ``signed``."""
    nb = word_bytes(width)
    if len(data) % nb:
        raise ValueError(f"{len(data)} bytes is not a whole number of {nb}-byte words")
    words = []
    for i in range(0, len(data), nb):
        word = int.from_bytes(data[i:i + nb], "little") & ((1 << width) - 1)
        if signed and word >> (width - 1):
            word -= 1 << width
        words.append(word)
    return words


# -- identification ------------------------------------------------------------------------------

def config_bytes(cfg) -> bytes:
    """The fields of an :class:`attn.AttnConfig`, in declaration order, as bytes.

    Encoding: the field count (1 byte), then per field: ``b"i"`` + int32 for an int,
    ``b"b"`` + 1 byte for a bool, ``b"s"`` + length byte + ASCII for a str.
    """
    out = bytearray([len(dataclasses.fields(cfg))])
    for field in dataclasses.fields(cfg):
        value = getattr(cfg, field.name)
        if isinstance(value, bool):
            out += b"b" + bytes([value])
        elif isinstance(value, int):
            out += b"i" + struct.pack("<i", value)
        else:
            text = str(value).encode("ascii")
            out += b"s" + bytes([len(text)]) + text
    return bytes(out)


def decode_config(data: bytes, offset: int = 0) -> tuple:
    """``(AttnConfig, next_offset)`` from :func:`config_bytes`; raises :class:`FrameError`.

    The field count and types must match this version of :class:`attn.AttnConfig`.
    """
    from .config import AttnConfig
    fields = dataclasses.fields(AttnConfig)
    try:
        count = data[offset]
        offset += 1
        if count != len(fields):
            raise FrameError(f"device configuration has {count} fields, this host knows "
                             f"{len(fields)}: update the host software or the bitstream")
        values = {}
        for field in fields:
            kind = data[offset:offset + 1]
            offset += 1
            if kind == b"b":
                values[field.name] = bool(data[offset])
                offset += 1
            elif kind == b"i":
                values[field.name] = struct.unpack_from("<i", data, offset)[0]
                offset += 4
            elif kind == b"s":
                n = data[offset]
                values[field.name] = data[offset + 1:offset + 1 + n].decode("ascii")
                offset += 1 + n
            else:
                raise FrameError(f"bad type {kind!r} of configuration field {field.name!r}")
        return AttnConfig(**values), offset
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise FrameError(f"truncated configuration in IDENTIFY reply ({exc})") from None


def ident_tag(description: bytes) -> int:
    """The 32-bit interface tag of an interface description (first 4 bytes of its SHA-256)."""
    return int.from_bytes(hashlib.sha256(description).digest()[:TAG_BYTES], "little")


def _description(cfg, regions, counters: int, run_bits: int, max_payload: int,
                 timeout_cycles: int) -> bytes:
    out = bytearray()
    out += struct.pack("<HIBHB", max_payload, timeout_cycles, counters, run_bits, len(regions))
    for region in regions:
        name = region.name.encode("ascii")
        flags = REGION_WRITABLE * region.writable | REGION_READABLE * region.readable
        out += struct.pack("<BIBB", region.width, region.depth, flags, len(name)) + name
    out += config_bytes(cfg)
    return bytes(out)


def identify_payload(cfg, regions, counters: int, run_bits: int, max_payload: int,
                     timeout_cycles: int) -> bytes:
    """The IDENTIFY reply payload of a device (built into its ROM).

    ``IDENT_MAGIC | VERSION | tag(4) | description`` where the description holds the frame
    buffer size, the parser timeout, the counter count, the width of the run arguments, the
    regions and the whole configuration (:func:`config_bytes`), and ``tag`` is
    :func:`ident_tag` of the description. The host sends the tag back in every WRITE and RUN.
    """
    desc = _description(cfg, regions, counters, run_bits, max_payload, timeout_cycles)
    return IDENT_MAGIC + bytes([VERSION]) + struct.pack("<I", ident_tag(desc)) + desc


@dataclass(frozen=True)
class DeviceInfo:
    """Decoded IDENTIFY reply (see :func:`identify_payload`)."""

    version: int
    tag: int
    config: object
    regions: tuple
    counters: int
    run_bits: int
    max_payload: int
    timeout_cycles: int

    def region(self, name: str) -> tuple:
        """``(index, Region)`` of the region called ``name``; :class:`KeyError` lists them."""
        for index, region in enumerate(self.regions):
            if region.name == name:
                return index, region
        raise KeyError(f"no region {name!r}; the device has "
                       f"{', '.join(r.name for r in self.regions)}")


def decode_identify(payload: bytes) -> DeviceInfo:
    """Decode and check an IDENTIFY reply payload; raises :class:`FrameError`."""
    payload = bytes(payload)
    head = len(IDENT_MAGIC) + 1 + TAG_BYTES
    if payload[:len(IDENT_MAGIC)] != IDENT_MAGIC or len(payload) < head:
        raise FrameError(f"IDENTIFY reply does not start with {IDENT_MAGIC!r}: "
                         f"{payload[:16].hex()}")
    version = payload[len(IDENT_MAGIC)]
    if version != VERSION:
        raise FrameError(f"device speaks protocol version {version}, this host {VERSION}")
    tag = struct.unpack_from("<I", payload, len(IDENT_MAGIC) + 1)[0]
    desc = payload[head:]
    if ident_tag(desc) != tag:
        raise FrameError("IDENTIFY reply tag does not match its description")
    try:
        max_payload, timeout, counters, run_bits, n = struct.unpack_from("<HIBHB", desc, 0)
        offset = struct.calcsize("<HIBHB")
        regions = []
        for _ in range(n):
            width, depth, flags, nlen = struct.unpack_from("<BIBB", desc, offset)
            offset += struct.calcsize("<BIBB")
            name = desc[offset:offset + nlen].decode("ascii")
            offset += nlen
            regions.append(Region(name, width, depth, bool(flags & REGION_WRITABLE),
                                  bool(flags & REGION_READABLE)))
    except (struct.error, UnicodeDecodeError) as exc:
        raise FrameError(f"truncated IDENTIFY reply ({exc})") from None
    cfg, offset = decode_config(desc, offset)
    if offset != len(desc):
        raise FrameError(f"{len(desc) - offset} unexpected bytes at the end of IDENTIFY reply")
    return DeviceInfo(version, tag, cfg, tuple(regions), counters, run_bits, max_payload,
                      timeout)


# -- payloads ------------------------------------------------------------------------------------

def write_payload(tag: int, region: int, address: int, data: bytes, width: int) -> bytes:
    """WRITE payload: :data:`WRITE_FIELDS` then the packed words (:func:`pack_words`)."""
    nb = word_bytes(width)
    if len(data) % nb:
        raise ValueError(f"{len(data)} bytes is not a whole number of {nb}-byte words")
    return pack_fields(WRITE_FIELDS, tag=tag, region=region, address=address,
                       count=len(data) // nb) + bytes(data)


def read_payload(region: int, address: int, count: int) -> bytes:
    """READ payload: :data:`READ_FIELDS`."""
    return pack_fields(READ_FIELDS, region=region, address=address, count=count)


def run_arg_bytes(run_bits: int) -> int:
    """Bytes of the run arguments in a RUN payload."""
    return word_bytes(run_bits)


def run_payload(tag: int, args: int, run_bits: int) -> bytes:
    """RUN payload: the tag, then the run arguments (an integer bit pattern) little endian."""
    if not 0 <= args < (1 << run_bits):
        raise ValueError(f"run arguments {args:#x} do not fit in {run_bits} bits")
    return tag.to_bytes(TAG_BYTES, "little") + args.to_bytes(run_arg_bytes(run_bits), "little")


@dataclass(frozen=True)
class LinkStatus:
    """Decoded STATUS reply: core running/busy, the last run's status code, the number of runs
    finished and of error replies sent (both 16-bit, wrapping)."""

    running: bool
    busy: bool
    last_status: int
    runs: int
    errors: int


def decode_status(payload: bytes) -> LinkStatus:
    if len(payload) != STATUS_PAYLOAD:
        raise FrameError(f"STATUS reply has {len(payload)} bytes, not {STATUS_PAYLOAD}")
    f = unpack_fields(STATUS_FIELDS, payload)
    return LinkStatus(bool(f["flags"] & FLAG_RUNNING), bool(f["flags"] & FLAG_BUSY),
                      f["last_status"], f["runs"], f["errors"])


def description_json(info: DeviceInfo) -> str:
    """Human-readable JSON of a :class:`DeviceInfo` (for logs and the command line)."""
    return json.dumps({"version": info.version, "tag": f"{info.tag:08x}",
                       "config": info.config.to_dict(),
                       "regions": [dataclasses.asdict(r) for r in info.regions],
                       "counters": info.counters, "run_bits": info.run_bits,
                       "max_payload": info.max_payload,
                       "timeout_cycles": info.timeout_cycles}, indent=2)
