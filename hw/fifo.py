"""FIFOs and stream buffers: a FIFO whose storage is placed for the target family, and the
buffers that keep a consumer's ``ready`` out of its producer's logic (used where a handshake
crossed the die on the ULX3S devices)."""

from __future__ import annotations

from amaranth import Mux, Signal, Value
from amaranth.lib import fifo
from amaranth.lib.memory import Memory

from .target import block_ram_attrs

__all__ = ["BlockRAMFIFO", "credit_queue", "register_buffer"]


class BlockRAMFIFO(fifo.SyncFIFOBuffered):
    """An ``amaranth.lib.fifo.SyncFIFOBuffered`` (same ports, same timing) whose storage is a
    block RAM on iCE40.

    Yosys builds a memory of a few words from flip-flops and multiplexers, which on an iCE40
    costs a logic cell per bit (a 3 x 19 bit queue: about 80 cells); the UP5K has block RAMs to
    spare once its SPRAM holds the large regions. Elsewhere the storage is left to Yosys.
    """

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.submodules.storage.attrs.update(block_ram_attrs(platform))
        return m


def register_buffer(m, name, valid, payload, take):
    """A two-entry buffer between a producer (``valid``, ``payload``) and a consumer that
    takes a beat when ``take``. Returns the consumer's ``(valid, payload)`` and the producer's
    ready, all three registers: a beat goes to the output register (``name``) when that is
    free or taken this cycle, else to the spare register, which refills the output register
    first. A cycle more of latency than a skid register (which passes a beat on in its
    cycle), none of throughput.

    The spare register's data loads in every cycle it is empty (only its flag depends on
    ``take``), so ``take``, which may come from far away, drives the output register's enable
    and two flags, not the enable of the spare's bits: on the 16x8 ULX3S device the array's
    result rows (163 bits) waited on the requantizers' ready there (12.5 ns)."""
    main = Signal(payload.shape(), name=name, reset_less=True)
    main_valid = Signal(name=f"{name}_valid")
    spare = Signal(payload.shape(), name=f"{name}_spare", reset_less=True)
    spare_valid = Signal(name=f"{name}_spare_valid")
    with m.If(~spare_valid):
        m.d.sync += spare.eq(payload)
    with m.If(~main_valid | take):
        with m.If(spare_valid):      # (no beat enters while the spare register is full)
            m.d.sync += [main.eq(spare), main_valid.eq(1), spare_valid.eq(0)]
        with m.Else():
            m.d.sync += [main.eq(payload), main_valid.eq(valid)]
    with m.Elif(valid & ~spare_valid):
        m.d.sync += spare_valid.eq(1)
    return main_valid, Value.cast(main), ~spare_valid


def credit_queue(m, name, valid, payload, take, issue, credits):
    """A queue between a producer whose pipeline never stops and a consumer that takes a beat
    when ``take``. The producer issues a beat into its pipeline (``issue``) only while the
    returned ``room`` (a register) is high, which keeps at most ``credits`` beats issued and
    not taken; they come out of the pipeline as ``valid``, ``payload``. The consumer gets the
    oldest queued beat, or while the queue is empty the producer's beat in its own cycle (one
    that is not taken goes in). Behind a pipeline of ``n`` stages a consumer that takes a
    beat every cycle gets one every cycle with ``credits >= n + 2``.

    The beats go into a LUT RAM at its write pointer every cycle (the pointer advances when
    one stays), so ``take`` drives the pointers, the empty flag and the count, not the data's
    enables, and ``room`` comes from the count a cycle before and that cycle's issue (the
    beat taken then is not counted). Returns the consumer's ``(valid, payload)`` and
    ``room``."""
    if not isinstance(credits, int) or credits < 1:
        raise ValueError(f"credit queue {name!r}: credits must be a positive int, not "
                         f"{credits!r}")
    depth = 1 << credits.bit_length()    # > credits: a full queue is not an empty one
    storage = Memory(shape=payload.shape(), depth=depth, init=[])
    m.submodules[name] = storage
    w_ptr = Signal(range(depth), name=f"{name}_w_ptr")
    r_ptr = Signal(range(depth), name=f"{name}_r_ptr")
    w_next, r_next = Signal.like(w_ptr), Signal.like(r_ptr)
    held = Signal(name=f"{name}_held")       # the queue holds a beat (w_ptr != r_ptr)
    wr = storage.write_port()
    rd = storage.read_port(domain="comb")
    m.d.comb += [wr.addr.eq(w_ptr), wr.data.eq(payload), wr.en.eq(valid), rd.addr.eq(r_ptr),
                 w_next.eq(Mux(valid & (held | ~take), w_ptr + 1, w_ptr)),
                 r_next.eq(Mux(held & take, r_ptr + 1, r_ptr))]
    m.d.sync += [w_ptr.eq(w_next), r_ptr.eq(r_next), held.eq(w_next != r_next)]
    out_valid = held | valid
    issued = Signal(range(credits + 1), name=f"{name}_issued")   # issued and not taken
    room = Signal(init=1, name=f"{name}_room")
    m.d.sync += [issued.eq(issued + issue - (out_valid & take)),
                 room.eq(Mux(issue, issued + 1, issued) < credits)]
    return out_valid, Mux(held, Value.cast(rd.data), Value.cast(payload)), room
