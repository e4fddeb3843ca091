"""What the command lines of :mod:`boards.depth`, :mod:`boards.merges` and :mod:`boards.slack`
share."""

from __future__ import annotations

import json
from pathlib import Path


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` to ``path`` (its folder made if missing) as indented JSON, and say so."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {path}")
