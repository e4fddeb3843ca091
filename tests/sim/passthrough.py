"""A buffered stream pass-through: the device the harness tests itself on."""

from amaranth import Module, signed
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

LAYOUT = data.StructLayout({"value": signed(12), "last": 1})


class Passthrough(wiring.Component):
    def __init__(self, depth=4):
        self.depth = depth
        super().__init__({"i_stream": In(stream.Signature(LAYOUT)),
                          "o_stream": Out(stream.Signature(LAYOUT))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.queue = queue = fifo.SyncFIFOBuffered(width=LAYOUT.size, depth=self.depth)
        m.d.comb += [
            queue.w_data.eq(self.i_stream.payload.as_value()),
            queue.w_en.eq(self.i_stream.valid),
            self.i_stream.ready.eq(queue.w_rdy),
            self.o_stream.payload.eq(queue.r_data),
            self.o_stream.valid.eq(queue.r_rdy),
            queue.r_en.eq(self.o_stream.ready),
        ]
        return m
