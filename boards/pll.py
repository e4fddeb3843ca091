"""PLL settings for the boards' clocks, computed the way ``icepll`` and ``ecppll`` compute them.

:func:`ice40_pll` (``SB_PLL40_*``, simple feedback) and :func:`ecp5_pll` (``EHXPLLL``, feedback
from ``CLKOP``) search the divider settings allowed by the data sheets and return the one whose
output is closest to the request (ties: the VCO nearest the middle of its range). The result
says what it achieved; :meth:`PllSettings.check` raises if that is too far from the request.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PllSettings", "ice40_pll", "ecp5_pll"]


@dataclass(frozen=True)
class PllSettings:
    """One PLL configuration: ``params`` are the primitive's parameters; ``f_out_mhz`` the
    frequency it produces from ``f_in_mhz``; ``f_vco_mhz`` and ``f_pfd_mhz`` its internals."""

    family: str
    f_in_mhz: float
    f_out_mhz: float
    f_vco_mhz: float
    f_pfd_mhz: float
    params: dict

    def check(self, requested_mhz: float, tolerance: float = 0.01) -> PllSettings:
        """Raise :class:`ValueError` if the output is more than ``tolerance`` (relative) away
        from ``requested_mhz``; return self."""
        if abs(self.f_out_mhz - requested_mhz) > tolerance * requested_mhz:
            raise ValueError(f"the {self.family} PLL cannot make {requested_mhz:g} MHz from "
                             f"{self.f_in_mhz:g} MHz (nearest: {self.f_out_mhz:.3f} MHz)")
        return self


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a positive number of MHz, not {value!r}")


def ice40_pll(f_in_mhz: float, f_out_mhz: float) -> PllSettings:
    """``SB_PLL40_PAD``/``SB_PLL40_CORE`` settings (``DIVR``, ``DIVF``, ``DIVQ``,
    ``FILTER_RANGE``) for simple feedback: ``f_out = f_in * (DIVF+1) / ((DIVR+1) * 2^DIVQ)``,
    with the PFD at 10-133 MHz and the VCO at 533-1066 MHz."""
    _positive("f_in_mhz", f_in_mhz)
    _positive("f_out_mhz", f_out_mhz)
    best = None
    for divr in range(16):
        pfd = f_in_mhz / (divr + 1)
        if not 10 <= pfd <= 133:
            continue
        for divf in range(128):
            vco = pfd * (divf + 1)
            if not 533 <= vco <= 1066:
                continue
            for divq in range(1, 7):
                out = vco / (1 << divq)
                key = (abs(out - f_out_mhz), abs(vco - 800))
                if best is None or key < best[0]:
                    best = (key, divr, divf, divq, pfd, vco, out)
    if best is None:
        raise ValueError(f"no iCE40 PLL setting takes {f_in_mhz:g} MHz in")
    _, divr, divf, divq, pfd, vco, out = best
    filter_range = next(i for i, limit in enumerate((17, 26, 44, 66, 101, 1e9), 1)
                        if pfd < limit)
    return PllSettings("ice40", f_in_mhz, out, vco, pfd,
                       {"DIVR": divr, "DIVF": divf, "DIVQ": divq,
                        "FILTER_RANGE": filter_range, "FEEDBACK_PATH": "SIMPLE"})


def ecp5_pll(f_in_mhz: float, f_out_mhz: float) -> PllSettings:
    """``EHXPLLL`` settings (``CLKI_DIV``, ``CLKFB_DIV``, ``CLKOP_DIV``, ``CLKOP_CPHASE``) for
    feedback from ``CLKOP``: ``f_out = f_in * CLKFB_DIV / CLKI_DIV``, ``f_vco = f_out *
    CLKOP_DIV`` at 400-800 MHz, the PFD at 3.125-400 MHz."""
    _positive("f_in_mhz", f_in_mhz)
    _positive("f_out_mhz", f_out_mhz)
    best = None
    for clki in range(1, 129):
        pfd = f_in_mhz / clki
        if not 3.125 <= pfd <= 400:
            continue
        for clkfb in range(1, 81):
            out = pfd * clkfb
            for clkop in range(1, 129):
                vco = out * clkop
                if not 400 <= vco <= 800:
                    continue
                key = (round(abs(out - f_out_mhz), 9), abs(vco - 600))
                if best is None or key < best[0]:
                    best = (key, clki, clkfb, clkop, pfd, vco, out)
    if best is None:
        raise ValueError(f"no ECP5 PLL setting takes {f_in_mhz:g} MHz in")
    _, clki, clkfb, clkop, pfd, vco, out = best
    return PllSettings("ecp5", f_in_mhz, out, vco, pfd,
                       {"CLKI_DIV": clki, "CLKFB_DIV": clkfb, "CLKOP_DIV": clkop,
                        "CLKOP_CPHASE": clkop // 2 - 1, "CLKOP_FPHASE": 0,
                        "FEEDBK_PATH": "CLKOP"})
