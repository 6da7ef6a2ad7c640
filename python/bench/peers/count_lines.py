#!/usr/bin/env python3
"""Counts the lines of each peer's guarded charge: the lines between `# --- guarded charge ---`
and `# --- end ---` (imports of the library, its setup, the observer, the guarded call),
without blank and comment-only lines. The far side's client (farside.py) and each file's
harness around the markers are the same for all and not counted. `--json` prints the counts."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Dict, Optional

HERE = Path(__file__).resolve().parent
PEERS = {
    "exactly (run)": "exactly_run.py",
    "exactly (with)": "exactly_with.py",
    "exactly-once": "exactly_once_peer.py",
    "Powertools (Redis)": "powertools_peer.py",
    "DBOS (SQLite)": "dbos_peer.py",
    "Temporal": "temporal_peer.py",
}


def count(path: Path) -> Optional[int]:
    """The counted lines of `path`, or None for a slot not yet filled."""
    text = path.read_text()
    if "SLOT (py-api)" in text:
        return None
    inside, n = False, 0
    for line in text.splitlines():
        s = line.strip()
        if s == "# --- guarded charge ---":
            inside = True
        elif s == "# --- end ---":
            return n
        elif inside and s and not s.startswith("#"):
            n += 1
    raise SystemExit(f"{path.name}: no `# --- end ---` marker")


def main() -> None:
    counts: Dict[str, Optional[int]] = {k: count(HERE / f) for k, f in PEERS.items()}
    if "--json" in sys.argv:
        print(json.dumps(counts))
        return
    for k, n in counts.items():
        print(f"{k:20} {'slot not filled' if n is None else n:>4}  {PEERS[k]}")


if __name__ == "__main__":
    main()
