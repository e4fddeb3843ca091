"""Byte transports of the host link: a real serial port, or the device in the simulator.

Both have the same three methods, so :class:`attn.host.Device` works over either:

- ``write(data)``: send bytes to the device;
- ``read(n)``: up to ``n`` bytes from the device (fewer only if it stops answering);
- ``drain()``: discard input until the line has been quiet for longer than the device's parser
  timeout (used to resynchronize after an error);

plus ``close()``. :class:`SimTransport` runs a device top with UART pins in the Amaranth
simulator and exchanges the same bytes bit by bit over its ``rx``/``tx`` pins.
"""

from __future__ import annotations

from collections import deque

__all__ = ["Transport", "SerialTransport", "SimTransport", "TransportError"]


class TransportError(IOError):
    """The transport cannot be opened or used."""


class Transport:
    """Interface of a byte transport (see the module docstring)."""

    def write(self, data: bytes) -> None:
        raise NotImplementedError

    def read(self, n: int) -> bytes:
        raise NotImplementedError

    def drain(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class SerialTransport(Transport):
    """A serial port through pyserial (e.g. the FTDI UART of an iCEBreaker or ULX3S).

    Parameters
    ----------
    port : str
        Device name (``/dev/ttyUSB1``, ``COM3``) or a pyserial URL (``loop://``).
    baud : int
        Baud rate; the bitstream's UART divisor must match it.
    timeout : float
        Seconds :meth:`read` waits for the bytes asked for.
    quiet : float
        Seconds of silence after which :meth:`drain` returns; must exceed the device's parser
        timeout (``timeout_cycles`` / clock frequency).
    """

    def __init__(self, port: str, baud: int, *, timeout: float = 1.0, quiet: float = 0.05):
        try:
            import serial
        except ImportError:
            raise TransportError("SerialTransport needs pyserial: pip install pyserial") \
                from None
        if not isinstance(baud, int) or baud <= 0:
            raise ValueError(f"baud must be a positive int, not {baud!r}")
        self.timeout = timeout
        self.quiet = quiet
        try:
            self._port = serial.serial_for_url(port, baudrate=baud, timeout=timeout)
        except serial.SerialException as exc:
            raise TransportError(f"cannot open serial port {port!r}: {exc}") from None

    def write(self, data: bytes) -> None:
        self._port.write(bytes(data))
        self._port.flush()

    def read(self, n: int) -> bytes:
        return bytes(self._port.read(n))

    def drain(self) -> None:
        self._port.timeout = self.quiet
        try:
            while self._port.read(4096):
                pass
        finally:
            self._port.timeout = self.timeout
        self._port.reset_input_buffer()

    def close(self) -> None:
        self._port.close()


class SimTransport(Transport):
    """The device in the Amaranth simulator, reached through its UART pins.

    A background testbench plays the host's UART: it sends the written bytes on the device's
    ``rx`` pin and decodes the device's ``tx`` pin, bit by bit at ``divisor`` clocks per bit.
    :meth:`read` advances the simulation until the bytes asked for have arrived, or until
    nothing has moved on the line for ``quiet_cycles``.

    Parameters
    ----------
    device : wiring.Component
        Device top with a 1-bit input ``rx`` and output ``tx`` (its UART's pins).
    divisor : int
        Clocks per bit of the device's UART.
    quiet_cycles : int, optional
        How long :meth:`read` waits without line activity before it gives up, and how long
        :meth:`drain` lets the line stay quiet; default 64 byte times. Must exceed the device's
        parser timeout for :meth:`drain` to resynchronize it.
    period : float
        Clock period in seconds (only scales the VCD file).
    vcd : str or path, optional
        Write the waveforms of the whole session to this file (closed by :meth:`close`).

    Members
    -------
    cycles : int
        Clock cycles simulated so far.
    """

    def __init__(self, device, *, divisor: int, quiet_cycles: int | None = None,
                 period: float = 1e-8, vcd=None):
        from amaranth.sim import Simulator

        from sim.uart import uart_receive, uart_send

        if not isinstance(divisor, int) or divisor < 2:
            raise ValueError(f"divisor must be an int of at least 2, not {divisor!r}")
        self.divisor = divisor
        self.period = period
        self.quiet_cycles = quiet_cycles if quiet_cycles is not None else 64 * 10 * divisor
        self.cycles = 0
        self._to_device = deque()
        self._from_device = bytearray()
        self._activity = 0           # cycle of the last bit sent or received
        self._sim = sim = Simulator(device)
        sim.add_clock(period)

        async def host_tx(ctx):
            ctx.set(device.rx, 1)
            while True:
                if self._to_device:
                    await uart_send(ctx, device.rx, self._to_device.popleft(), divisor)
                    self._activity = self.cycles
                else:
                    for _ in range(divisor):
                        await ctx.tick()

        async def host_rx(ctx):
            while True:
                byte, _stop = await uart_receive(ctx, device.tx, divisor)
                self._from_device.append(byte)
                self._activity = self.cycles

        sim.add_testbench(host_tx, background=True)
        sim.add_testbench(host_rx, background=True)
        self._vcd = None
        if vcd is not None:
            self._vcd = sim.write_vcd(str(vcd))
            self._vcd.__enter__()

    def _run(self, cycles: int) -> None:
        self.cycles += cycles
        self._sim.run_until(self.cycles * self.period)

    def step(self, cycles: int) -> None:
        """Advance the simulation by ``cycles`` clock cycles."""
        self._run(cycles)

    def write(self, data: bytes) -> None:
        self._to_device.extend(bytes(data))
        self._activity = self.cycles

    def read(self, n: int) -> bytes:
        chunk = 10 * self.divisor * 4
        while len(self._from_device) < n:
            if self.cycles - self._activity > self.quiet_cycles and not self._to_device:
                break
            self._run(chunk)
        out = bytes(self._from_device[:n])
        del self._from_device[:n]
        return out

    def drain(self) -> None:
        self._activity = self.cycles
        while self._to_device or self.cycles - self._activity <= self.quiet_cycles:
            self._run(10 * self.divisor * 4)
        self._from_device.clear()

    def close(self) -> None:
        if self._vcd is not None:
            self._vcd.__exit__(None, None, None)
            self._vcd = None
