"""The host driver end to end through the co-simulated UART (same bytes as on a board), and the
serial transport on pyserial's loopback."""

import numpy as np
import pytest
from amaranth.lib import data

import attn
from attn import protocol as P
from attn.host import ConfigMismatch, Device, DeviceError, ReplyTimeout, RunFailed
from attn.transport import SerialTransport, SimTransport
from tests.hw.link_device import CONFIG, COUNTERS, REGIONS, RUN_LAYOUT, LinkDevice

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

DIVISOR = 4


def open_device(slow=1, **kwargs):
    hw = LinkDevice(divisor=DIVISOR, timeout_cycles=40 * DIVISOR, slow=slow)
    transport = SimTransport(hw, divisor=DIVISOR)
    return Device(transport, run_layout=RUN_LAYOUT, **kwargs), hw


def test_end_to_end():
    dev, hw = open_device(config=CONFIG)
    info = dev.info
    assert info.config == CONFIG and info.regions == REGIONS and info.counters == COUNTERS
    assert info.tag == hw.link.tag and info.run_bits == RUN_LAYOUT.size

    rng = np.random.default_rng(7)
    x = rng.integers(-2048, 2048, 16)
    dev.write("input", x)                       # 16 words: two frames of max_payload 40
    assert dev.read("input", 16, signed=True) == x.tolist()
    assert dev.read("input", 5, offset=11, signed=True) == x[11:].tolist()

    status = dev.run({"count": 12, "add": 9})
    assert (status.runs, status.last_status, status.errors) == (1, 0, 0)
    expected = [(int(v) % 4096 + 9) for v in x[:12]] + [0] * 4
    assert dev.read("output", 16) == expected
    assert dev.counters() == [1, 12, 12 * (1 + 2)]

    dev.reset()
    assert dev.counters() == [0, 0, 0]
    assert dev.read("output", 16) == expected          # regions survive a core reset
    dev.run({"count": 2, "add": 1})
    assert dev.read("output", 3) == [int(v) % 4096 + 1 for v in x[:2]] + [expected[2]]
    assert dev.status().runs == 2


def test_errors_leave_the_device_usable():
    dev, hw = open_device()
    with pytest.raises(DeviceError, match="device refused WRITE: BAD_REGION") as exc:
        dev.write("output", [1])
    assert exc.value.status == P.Status.BAD_REGION
    with pytest.raises(DeviceError, match="READ: BAD_RANGE"):
        dev.read("input", 2, offset=15)
    with pytest.raises(DeviceError, match="READ: BAD_REGION"):
        dev.read("scratch", 1)
    with pytest.raises(RunFailed, match="run ended with status 1"):
        dev.run({"count": 17, "add": 0})
    # A truncated frame: the device answers TIMEOUT once its parser timer runs out.
    dev.transport.write(P.encode_request(P.Command.READ, P.read_payload(0, 0, 1))[:5])
    dev.resync()
    # Data for another bitstream (another interface tag) is refused.
    tag = dev.info.tag
    with pytest.raises(DeviceError, match="RUN: BAD_TAG"):
        dev.request(P.Command.RUN, P.run_payload(tag ^ 1, 1, RUN_LAYOUT.size))
    with pytest.raises(DeviceError, match="command 0x77: BAD_COMMAND"):
        dev.request(0x77)
    dev.write("input", [1, 2, 3])
    dev.run({"count": 3, "add": 1})
    assert dev.read("output", 3) == [2, 3, 4]
    # 6 error replies so far: the TIMEOUT one was discarded by resync.
    assert dev.status().errors == 6


def test_busy_and_wait():
    dev, hw = open_device(slow=2000)
    dev.write("input", [5, 6])
    dev.start({"count": 2, "add": 1})
    st = dev.status()
    assert st.running and st.busy
    with pytest.raises(DeviceError, match="WRITE: BUSY"):
        dev.write("input", [0])
    assert dev.wait().runs == 1
    assert dev.read("output", 2) == [6, 7]


def test_config_mismatch():
    hw = LinkDevice(divisor=DIVISOR)
    other = attn.preset("default")
    with pytest.raises(ConfigMismatch, match=r"built for configuration 'tiny', not 'default'; "
                                             r"max_seq_len: device 8, host 64"):
        Device(SimTransport(hw, divisor=DIVISOR), config=other)
    # The name alone does not matter.
    Device(SimTransport(LinkDevice(divisor=DIVISOR), divisor=DIVISOR),
           config=CONFIG.replace(name="custom"))


def test_run_layout_mismatch():
    hw = LinkDevice(divisor=DIVISOR)
    with pytest.raises(ConfigMismatch, match="run_layout has 8 bits, the device expects 9"):
        Device(SimTransport(hw, divisor=DIVISOR),
               run_layout=data.StructLayout({"count": 8}))


def test_no_device_times_out():
    transport = SerialTransport("loop://", 115200, timeout=0.05, quiet=0.01)
    with transport:
        # The loopback echoes the request, which is not a reply: the driver gives up.
        with pytest.raises(ReplyTimeout, match="no \\(complete\\) reply to IDENTIFY"):
            Device(transport)


def test_serial_transport_loopback():
    with SerialTransport("loop://", 3_000_000, timeout=0.05, quiet=0.01) as transport:
        transport.write(b"\x01\x02\x03")
        assert transport.read(2) == b"\x01\x02"
        transport.drain()
        assert transport.read(1) == b""
    with pytest.raises(ValueError, match="baud must be a positive int, not 0"):
        SerialTransport("loop://", 0)
