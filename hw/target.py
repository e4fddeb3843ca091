"""What the gateware asks of the platform it is elaborated for (``None`` in simulation)."""

from __future__ import annotations

__all__ = ["device", "is_ice40", "is_ecp5", "block_ram_attrs", "KEEP_COPY",
           "keep_copies_script", "keep_copy_on_ecp5"]

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
