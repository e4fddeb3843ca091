"""Yosys's ECP5 synthesis up to LUT mapping, for tests of what the netlist keeps."""

import json
import re
import subprocess

from hw.target import keep_copies_script


def ecp5_flops(yosys, tmp_path, rtlil_text: str, top: str, *, keep: bool,
               nets: str | None = None) -> int:
    """Flip-flops (``TRELLIS_FF``) that ``synth_ecp5 -run begin:map_luts`` leaves of the design
    ``rtlil_text`` (top module ``top``), with the board builds' :func:`keep_copies_script`
    or without it; only those driving nets whose names match the regular expression ``nets``
    (all of them without)."""
    (tmp_path / f"{top}.il").write_text(rtlil_text)
    script = keep_copies_script() + ";" if keep else ""
    subprocess.run([yosys, "-q", "-p",
                    f"read_rtlil {top}.il; proc; {script} synth_ecp5 -top {top} "
                    f"-run begin:map_luts; select {top}; write_json -selected {top}.json"],
                   cwd=tmp_path, check=True, timeout=600)
    module = json.loads((tmp_path / f"{top}.json").read_text())["modules"][top]
    flops = [cell for cell in module["cells"].values() if cell["type"] == "TRELLIS_FF"]
    if nets is None:
        return len(flops)
    bits = {bit for name, net in module["netnames"].items() if re.fullmatch(nets, name)
            for bit in net["bits"]}
    return sum(set(cell["connections"]["Q"]) <= bits for cell in flops)
