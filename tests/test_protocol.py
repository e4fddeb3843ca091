"""Protocol constants, CRC, frame encode/decode, payloads and the IDENTIFY description."""

import binascii
import random

import pytest

import attn
from attn import protocol as P


@pytest.mark.parametrize("data,crc", [
    (b"123456789", 0x29B1),          # the catalogue check value of CRC-16/CCITT-FALSE
    (b"", 0xFFFF),
    (b"A", 0xB915),
])
def test_crc16_known_values(data, crc):
    assert P.crc16(data) == crc


def test_crc16_matches_binascii():
    # binascii.crc_hqx is an independent implementation of the same polynomial.
    rng = random.Random(0)
    for _ in range(100):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(100)))
        assert P.crc16(data) == binascii.crc_hqx(data, P.CRC_INIT)


def test_crc_check_constant_and_incremental():
    assert P.crc16(b"123456789") == P.CRC_CHECK
    assert P.crc16(b"6789", P.crc16(b"12345")) == P.CRC_CHECK


def test_crc_residue_zero_over_frame():
    rng = random.Random(1)
    for _ in range(50):
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
        frame = P.encode_request(rng.randrange(256), body)
        assert P.crc16(frame[1:]) == 0     # what the gateware checks


def test_request_layout_bytes():
    frame = P.encode_request(P.Command.READ, b"\x01\x02")
    assert frame[:P.REQUEST_HEADER] == bytes([P.REQUEST_SYNC, 0x11, 2, 0])
    assert frame[4:6] == b"\x01\x02"
    assert int.from_bytes(frame[6:], "big") == P.crc16(frame[1:6])
    assert P.decode_request(frame) == (0x11, b"\x01\x02")


def test_reply_roundtrip_and_parser():
    frames = [P.encode_reply(1, 0, b"hello"), P.encode_reply(0x11, P.Status.BAD_RANGE),
              P.encode_reply(0x30, 0, bytes(300))]
    assert P.decode_reply(frames[0]) == (1, 0, b"hello")
    parser = P.ReplyParser()
    stream = b"\x00\x13" + b"".join(frames)
    got = []
    for i in range(0, len(stream), 7):           # fed in odd-sized pieces
        got += parser.feed(stream[i:i + 7])
    assert got == [P.decode_reply(f) for f in frames]
    assert parser.skipped == 2


@pytest.mark.parametrize("mutate,match", [
    (lambda f: f[:-1], "does not match"),
    (lambda f: f[:5] + bytes([f[5] ^ 1]) + f[6:], "CRC mismatch"),
    (lambda f: b"\x00" + f[1:], "not a reply"),
])
def test_decode_reply_rejects(mutate, match):
    frame = P.encode_reply(1, 0, b"abc")
    with pytest.raises(P.FrameError, match=match):
        P.decode_reply(mutate(frame))


def test_payload_too_long():
    with pytest.raises(ValueError, match="exceeds the 16-bit length field"):
        P.encode_request(1, bytes(P.MAX_LENGTH + 1))


def test_field_tables():
    assert P.WRITE_HEADER == 9 and P.READ_PAYLOAD == 5 and P.STATUS_PAYLOAD == 6
    assert P.field_offsets(P.WRITE_FIELDS)["count"] == (7, 2)
    payload = P.write_payload(0xDEADBEEF, 2, 0x1234, P.pack_words([1, 2], 12), 12)
    assert P.unpack_fields(P.WRITE_FIELDS, payload) == {
        "tag": 0xDEADBEEF, "region": 2, "address": 0x1234, "count": 2}
    assert P.read_payload(1, 2, 3) == bytes([1, 2, 0, 3, 0])
    with pytest.raises(ValueError, match="address = 65536 does not fit in 2 byte"):
        P.read_payload(0, 65536, 1)


@pytest.mark.parametrize("width", [1, 7, 8, 12, 16, 20, 33, 64])
def test_words_roundtrip(width):
    rng = random.Random(width)
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    words = [rng.randint(lo, hi) for _ in range(20)]
    raw = P.pack_words(words, width)
    assert len(raw) == 20 * P.word_bytes(width)
    assert P.unpack_words(raw, width, signed=True) == words
    assert P.unpack_words(raw, width) == [w % (1 << width) for w in words]


def test_pack_words_range():
    with pytest.raises(ValueError, match="word 4096 does not fit in 12 bits"):
        P.pack_words([4096], 12)
    with pytest.raises(ValueError, match="word -2049 does not fit in 12 bits"):
        P.pack_words([-2049], 12)


def test_run_payload():
    assert P.run_payload(0x01020304, 0x1AB, 9) == bytes([4, 3, 2, 1, 0xAB, 0x01])
    with pytest.raises(ValueError, match="do not fit in 9 bits"):
        P.run_payload(0, 512, 9)


def test_region_validation():
    with pytest.raises(ValueError, match="region name must be an identifier.*'1x'"):
        P.Region("1x", 8, 4)
    with pytest.raises(ValueError, match="region 'x' width must be between 1 and 64, not 65"):
        P.Region("x", 65, 4)
    with pytest.raises(ValueError, match="region 'x' depth must be between 1 and 65536, not 0"):
        P.Region("x", 8, 0)
    with pytest.raises(TypeError, match="region 'x' writable must be a bool, not 1"):
        P.Region("x", 8, 4, writable=1)


@pytest.mark.parametrize("name", list(attn.PRESETS))
def test_config_roundtrip(name):
    cfg = attn.preset(name)
    decoded, offset = P.decode_config(P.config_bytes(cfg))
    assert decoded == cfg and offset == len(P.config_bytes(cfg))


def test_identify_roundtrip_and_tag():
    cfg = attn.preset("tiny")
    regions = [P.Region("a", 12, 16), P.Region("b", 20, 300, writable=False)]
    blob = P.identify_payload(cfg, regions, 3, 9, 64, 1000)
    info = P.decode_identify(blob)
    assert info.config == cfg and info.regions == tuple(regions)
    assert (info.counters, info.run_bits, info.max_payload, info.timeout_cycles) == \
        (3, 9, 64, 1000)
    assert info.region("b") == (1, regions[1])
    with pytest.raises(KeyError, match="no region 'c'; the device has a, b"):
        info.region("c")
    # Any change of configuration or interface changes the tag.
    tags = {info.tag,
            P.decode_identify(P.identify_payload(cfg.replace(x_bits=8), regions, 3, 9, 64,
                                                 1000)).tag,
            P.decode_identify(P.identify_payload(cfg, regions[:1], 3, 9, 64, 1000)).tag,
            P.decode_identify(P.identify_payload(cfg, regions, 4, 9, 64, 1000)).tag}
    assert len(tags) == 4
    assert '"max_seq_len": 8' in P.description_json(info)


@pytest.mark.parametrize("mutate,match", [
    (lambda b: b"XTTN" + b[4:], "does not start with"),
    (lambda b: b[:4] + bytes([P.VERSION + 1]) + b[5:], "protocol version 2"),
    (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "tag does not match"),
])
def test_identify_rejects(mutate, match):
    blob = P.identify_payload(attn.preset("tiny"), [P.Region("a", 8, 4)], 0, 8, 32, 100)
    with pytest.raises(P.FrameError, match=match):
        P.decode_identify(mutate(blob))


def test_status_decode():
    raw = P.pack_fields(P.STATUS_FIELDS, flags=P.FLAG_BUSY, last_status=7, runs=300, errors=2)
    assert P.decode_status(raw) == P.LinkStatus(False, True, 7, 300, 2)
    with pytest.raises(P.FrameError, match="STATUS reply has 5 bytes"):
        P.decode_status(raw[:5])
