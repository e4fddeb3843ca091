"""What the gateware asks of the platform it is elaborated for (``None`` in simulation)."""

from __future__ import annotations

__all__ = ["is_ice40"]


def is_ice40(platform) -> bool:
    """Whether ``platform`` is a Lattice iCE40 (``platform.device`` starts with ``iCE40``;
    Amaranth spells that platform's ``family`` ``"iCE40"``, the ECP5's ``"ecp5"``)."""
    return str(getattr(platform, "device", "")).lower().startswith("ice40")
