"""Shared bits of the benchmarks: output folder, tables and JSON."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

__all__ = ["BENCH_DIR", "print_table", "write_json"]

BENCH_DIR = Path(__file__).resolve().parent.parent / "build" / "bench"


def print_table(rows: list[dict], columns: list[str], title: str = "") -> None:
    """Print ``rows`` as a Markdown table with the given ``columns``."""
    if title:
        print(f"\n### {title}\n")
    cells = [[str(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print("| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in cells:
        print("| " + " | ".join(v.ljust(w) for v, w in zip(r, widths)) + " |")


def write_json(name: str, payload: dict) -> Path:
    """Write ``payload`` with a small header to ``build/bench/<name>.json``."""
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    path = BENCH_DIR / f"{name}.json"
    header = {"bench": name, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "python": platform.python_version(), "machine": platform.machine()}
    path.write_text(json.dumps({**header, **payload}, indent=2, default=float))
    print(f"\nwrote {path}")
    return path
