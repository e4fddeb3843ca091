"""Where the systolic array's DSP blocks go on the die: a floorplan for ECP5 devices.

The ECP5 multipliers sit in a few horizontal rows of DSP sites (on the LFE5U-85F three rows at
``Y = 10, 34, 58`` with 52 MULT18X18D each). Left to itself, nextpnr scatters the array's PEs
over all 156 sites with no regard for who talks to whom: a 12×12 array with registered DSPs
then did not route at all (about 47,000 overused wires, placer wire length 369,000). Pinned
so that neighbours in the array are neighbours on the die, it routes at 135 MHz (wire length
166,000).

:func:`array_sites` maps PE ``(r, c)`` to a site name (nextpnr's ``BEL`` attribute):

* array rows are split into as many contiguous *bands* as the device has DSP rows (the upper
  bands take one more row when they do not divide evenly);
* inside a band the PEs are laid out column by column: the ``n`` rows of column 0, then the
  ``n`` rows of column 1, and so on, centred in the DSP row. Operand ``b`` (flowing down a
  column) goes to the adjacent site, operand ``a`` (flowing along a row) ``n`` sites on, and
  the PEs of one array column share a stretch of every DSP row, so the column's drain runs
  straight down the die.

A device without an entry in :data:`ECP5_DSP_ROWS`, or an array too wide for its DSP rows,
gets no floorplan (``None``): nextpnr places the DSPs itself.
"""

from __future__ import annotations

__all__ = ["ECP5_DSP_ROWS", "array_sites", "ecp5_sites"]

#: DSP rows of ECP5 devices: ``(y of every DSP row, x of every DSP block)``. A block at ``x``
#: holds MULT18X18D sites ``MULT18_0`` at ``x``, ``MULT18_1`` at ``x + 1``, ``MULT18_4`` at
#: ``x + 4`` and ``MULT18_5`` at ``x + 5`` (its two ALU54B sit at ``x + 3`` and ``x + 7``).
#: Read from nextpnr-ecp5's placement of a 144-DSP design (all 156 sites of the 85F).
ECP5_DSP_ROWS = {
    "LFE5U-85F": ((10, 34, 58), (4, 13, 22, 31, 40, 49, 58, 69, 78, 87, 96, 105, 114)),
}
# The 85F die comes as plain, SERDES (UM) and 5G (UM5G) parts with the same fabric.
ECP5_DSP_ROWS["LFE5UM-85F"] = ECP5_DSP_ROWS["LFE5UM5G-85F"] = ECP5_DSP_ROWS["LFE5U-85F"]

_SITE_OFFSETS = (0, 1, 4, 5)   # MULT18X18D z positions inside a DSP block


def ecp5_sites(device: str) -> list | None:
    """The MULT18X18D sites of ``device`` as one list per DSP row, each ordered left to right,
    or ``None`` for a device without an entry in :data:`ECP5_DSP_ROWS`."""
    if device not in ECP5_DSP_ROWS:
        return None
    ys, blocks = ECP5_DSP_ROWS[device]
    return [[f"X{x + z}/Y{y}/MULT18_{z}" for x in blocks for z in _SITE_OFFSETS] for y in ys]


def array_sites(device: str, rows: int, cols: int) -> dict | None:
    """``{(r, c): site}`` for every PE of a ``rows x cols`` array on ``device`` (see the module
    docstring), or ``None`` when the device is unknown or the array does not fit its rows."""
    site_rows = ecp5_sites(device)
    if site_rows is None or rows < 1 or cols < 1:
        return None
    bands = len(site_rows)
    heights = [rows // bands + (1 if b < rows % bands else 0) for b in range(bands)]
    if max(heights) * cols > min(len(row) for row in site_rows):
        return None
    sites = {}
    r = 0
    for band, height in enumerate(heights):
        row = site_rows[band]
        offset = (len(row) - height * cols) // 2
        for j in range(height):
            for c in range(cols):
                sites[(r + j, c)] = row[offset + c * height + j]
        r += height
    return sites
