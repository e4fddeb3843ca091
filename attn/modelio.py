"""Reading models and inputs, writing outputs: the file formats of the ``attn`` command.

MODEL files hold a PyTorch ``nn.MultiheadAttention`` state dict with PyTorch's key names and
layout: ``in_proj_weight`` (3D x D), ``in_proj_bias`` (3D), ``out_proj.weight`` (D x D),
``out_proj.bias`` (D), plus ``num_heads`` (``.npz``; a ``.pt`` state dict needs torch and
``num_heads`` from the file or ``--heads``). QUANTIZED model files, written by ``attn import``,
are ``.npz`` files with a ``format`` key; :mod:`attn.importer` reads and writes them.

INPUT files (``.npz``) hold ``x`` (L x D float) and optionally ``mask`` (L x L bool, True =
masked, as PyTorch's boolean ``attn_mask``), ``key_padding_mask`` (L bool, True = padding) and
``causal`` (bool scalar).

Every problem raises :class:`InputError` with a one-line message naming the file and the key.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from golden import FloatMHA, make_mask

__all__ = ["InputError", "load_model", "load_input", "save_npz_atomic", "MODEL_KEYS"]

MODEL_KEYS = ("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias")


class InputError(Exception):
    """A malformed file or argument; the message is meant for the user, on one line."""


def _open_npz(path: Path, what: str) -> dict:
    if not path.exists():
        raise InputError(f"{what} file {path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(f"{what} file {path} is not a readable .npz file ({exc})") from None


def _load_pt(path: Path) -> dict:
    try:
        import torch
    except ImportError:
        raise InputError(f"{path}: reading .pt files needs PyTorch "
                         f"(pip install -e '.[torch]'), or save the state dict as .npz") \
            from None
    if not path.exists():
        raise InputError(f"model file {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for corrupt files
        raise InputError(f"model file {path} is not a readable PyTorch file ({exc})") from None
    if not isinstance(state, dict):
        raise InputError(f"model file {path} must hold a state dict, not {type(state).__name__}")
    return {key: (value.detach().cpu().numpy() if hasattr(value, "detach") else value)
            for key, value in state.items()}


def load_model(path, heads: int | None = None) -> FloatMHA:
    """Read a MODEL file; ``heads`` overrides or supplies ``num_heads``."""
    path = Path(path)
    data = _load_pt(path) if path.suffix == ".pt" else _open_npz(path, "model")
    missing = [key for key in MODEL_KEYS if key not in data]
    if missing:
        raise InputError(f"model file {path} is missing key(s) {', '.join(missing)} "
                         f"(expected an nn.MultiheadAttention state dict)")
    if heads is None:
        if "num_heads" not in data:
            raise InputError(f"model file {path} has no num_heads; pass --heads")
        raw = np.asarray(data["num_heads"])
        if raw.shape != () or raw.dtype.kind not in "iu":
            raise InputError(f"model file {path}: num_heads must be an integer scalar, "
                             f"not {raw!r}")
        heads = int(raw)
    arrays = {}
    for key in MODEL_KEYS:
        arr = np.asarray(data[key])
        if arr.dtype.kind not in "fiu":
            raise InputError(f"model file {path}: {key} must be numeric, not {arr.dtype}")
        arrays[key] = arr.astype(np.float64)
    try:
        return FloatMHA(arrays["in_proj_weight"], arrays["in_proj_bias"],
                        arrays["out_proj.weight"], arrays["out_proj.bias"], num_heads=heads)
    except ValueError as exc:
        raise InputError(f"model file {path}: {exc}") from None


def load_input(path, d_model: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Read an INPUT file; returns ``x`` (L x D float64) and the combined mask (or ``None``)."""
    path = Path(path)
    data = _open_npz(path, "input")
    if "x" not in data:
        raise InputError(f"input file {path} has no key 'x' (L x D array)")
    x = np.asarray(data["x"])
    if x.dtype.kind not in "fiu":
        raise InputError(f"input file {path}: x must be numeric, not {x.dtype}")
    if x.ndim != 2 or x.shape[1] != d_model or x.shape[0] < 1:
        raise InputError(f"input file {path}: x must have shape (L, {d_model}) with L >= 1, "
                         f"not {x.shape}")
    x = x.astype(np.float64)
    if not np.all(np.isfinite(x)):
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(x))[0])
        raise InputError(f"input file {path}: x contains NaN or infinity (first at {bad})")
    seq_len = x.shape[0]
    mask = np.zeros((seq_len, seq_len), dtype=bool)
    if "mask" in data:
        m = np.asarray(data["mask"])
        if m.shape != (seq_len, seq_len) or not (m.dtype == bool or m.dtype.kind in "iu"
                                                 and np.isin(m, (0, 1)).all()):
            raise InputError(f"input file {path}: mask must be a boolean ({seq_len}, "
                             f"{seq_len}) array, not {m.dtype} {m.shape}")
        mask |= m.astype(bool)
    if "key_padding_mask" in data:
        m = np.asarray(data["key_padding_mask"])
        if m.shape != (seq_len,) or not (m.dtype == bool or m.dtype.kind in "iu"
                                         and np.isin(m, (0, 1)).all()):
            raise InputError(f"input file {path}: key_padding_mask must be a boolean "
                             f"({seq_len},) array, not {m.dtype} {m.shape}")
        mask |= m.astype(bool)[None, :]
    if "causal" in data:
        c = np.asarray(data["causal"])
        if c.shape != () or c.dtype.kind not in "biu":
            raise InputError(f"input file {path}: causal must be a boolean scalar")
        if bool(c):
            mask |= make_mask(seq_len, causal=True)
    return x, (mask if mask.any() else None)


def save_npz_atomic(path, **arrays) -> None:
    """Write ``arrays`` to ``path`` (.npz) so that a failure leaves no partial file."""
    path = Path(path)
    if path.suffix != ".npz":
        raise InputError(f"output file {path} must end in .npz")
    if not path.parent.is_dir():
        raise InputError(f"output folder {path.parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".npz", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
