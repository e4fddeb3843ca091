"""What the gateware asks of the platform it is elaborated for (``None`` in simulation)."""

from __future__ import annotations

from amaranth import Instance, Signal

__all__ = ["device", "is_ice40", "is_ecp5", "block_ram_attrs", "KEEP_COPY",
           "keep_copies_script", "keep_copy_on_ecp5", "one_hot_on_ecp5", "global_reset"]

#: Attribute of a signal whose flip-flops are one of several copies of the same value, each
#: next to its own far-apart users (e.g. a read address registered at every bank). Identical
#: flip-flops are merged back into one by Yosys's ``opt_merge``; the board builds run
#: :func:`keep_copies_script` first, which marks them ``keep``.
KEEP_COPY = "attn_keep_copy"


def keep_copies_script() -> str:
    """The Yosys command (for ``script_after_read``) that marks the flip-flops driving a
    :data:`KEEP_COPY` signal ``keep``, so that synthesis leaves each copy in place."""
    return f"setattr -set keep 1 a:{KEEP_COPY} %ci1:+[Q] t:$*dff* %i"


def device(platform) -> str:
    """``platform.device`` in lower case (``"ice40up5k"``, ``"lfe5u-85f"``), ``""`` without
    a platform."""
    return str(getattr(platform, "device", "")).lower()


def is_ice40(platform) -> bool:
    """Whether ``platform`` is a Lattice iCE40 (its device starts with ``iCE40``; Amaranth
    spells that platform's ``family`` ``"iCE40"``, the ECP5's ``"ecp5"``)."""
    return device(platform).startswith("ice40")


def is_ecp5(platform) -> bool:
    """Whether ``platform`` is a Lattice ECP5 (Amaranth's ``family`` ``"ecp5"``)."""
    return getattr(platform, "family", None) == "ecp5"


def block_ram_attrs(platform) -> dict:
    """Memory attributes that ask Yosys for block RAM on iCE40, where it would build a memory of
    a few words from flip-flops and multiplexers (a logic cell per bit); none elsewhere."""
    return {"ram_style": "block"} if is_ice40(platform) else {}


def keep_copy_on_ecp5(platform) -> dict:
    """Signal attributes marking a register :data:`KEEP_COPY` on ECP5 (where the copies sit
    beside users spread over a large die) and nothing elsewhere (the iCE40 presets have no
    flip-flops to spare)."""
    return {KEEP_COPY: 1} if is_ecp5(platform) else {}


def one_hot_on_ecp5(fsm, platform) -> None:
    """On ECP5, ask Yosys to encode the state of ``fsm`` (the object of a finished ``with
    m.FSM() as fsm:`` block) one-hot: each state's decode is then one flip-flop instead of a
    comparison of the binary state. Yosys never recodes an Amaranth FSM by itself (its state
    register has an initial value); with the ``fsm_encoding`` attribute it does, and drops that
    value (it warns of it), so the domain must be reset before it runs: the board tops hold
    ``sync`` in reset until the PLL locks. On the 16x8 ULX3S netlist the host link's deepest
    paths lost a logic level (12.1 to 10.9 ns estimated, :mod:`boards.depth`), the core's
    phase decodes 11.5 to 10.7, for 226 LUTs and 28 flip-flops. Nothing elsewhere (the
    iCE40 presets have no cells to spare; Verilog for other flows keeps the binary state)."""
    if is_ecp5(platform):
        fsm.state.attrs["fsm_encoding"] = "one-hot"


def global_reset(m, platform, reset, name: str):
    """``reset`` (a flip-flop's output) as the reset of a domain with thousands of flip-flops
    across the die: on ECP5 through a global buffer (``DCCA``; nextpnr routes its output on a
    global network, which reaches every slice's LSR input in about 1.7 ns), elsewhere the
    signal itself. (On the 16x8 ULX3S device the core's reset reached its 3,144 flip-flops
    over the general routing, up to 10.1 ns of wire.)"""
    if not is_ecp5(platform):
        return reset
    buffered = Signal(name=f"{name}_global")
    m.submodules[f"{name}_dcca"] = Instance("DCCA", i_CLKI=reset, i_CE=1, o_CLKO=buffered)
    return buffered
