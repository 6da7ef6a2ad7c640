#!/usr/bin/env python3
"""Instructions per guarded no-op: this module's call against the Rust library's lifecycle,
counted by valgrind's callgrind, which counts the same whatever the machine's load.

Each side runs under callgrind twice, with N and 2N calls after the same warm-up (the call
compare.py times, in a plain loop here, and ``cargo bench``'s ``lifecycle`` part); the
difference over N is one call's instructions, start-up and warm-up cancelled out::

    target/bench-venv/bin/python python/bench/callgrind.py --calls 1000

``--rust-bench PATH`` names ``cargo bench``'s executable (else it is built, as compare.py does);
``--only ours`` counts one side. Needs ``valgrind`` on the PATH.

Python's runs share one hash seed (``PYTHONHASHSEED=0`` unless set): with a random seed each
start-up hashes differently and costs up to about a million instructions more or less, which
the N and 2N runs then do not cancel (±1k a call at ``--calls 500``).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import compare  # noqa: E402 - its `--measure` and its bench executable


def counted(cmd: List[str], env: Dict[str, str], out: Path) -> int:
    """The instructions callgrind counted in `cmd`, every thread and child included."""
    r = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        "--trace-children=no", *cmd], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} under callgrind failed:\n{r.stdout}\n{r.stderr}")
    for line in out.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {out}")


def side(name: str, calls: int, warmup: int, work: Path, bench: str) -> float:
    counts = []
    for n in (calls, 2 * calls):
        db = work / f"{name}-{n}.db"
        env = dict(os.environ)
        if name == "rust":
            env.update(EXACTLY_BENCH_ONLY="lifecycle", EXACTLY_BENCH_LIFECYCLE_N=str(n),
                       EXACTLY_BENCH_LIFECYCLE_WARMUP=str(warmup),
                       EXACTLY_BENCH_LIFECYCLE_DIR=str(work / f"rust-{n}"),
                       CARGO_TARGET_DIR=str(work / "cargo-target"))
            env.pop("EXACTLY_BENCH_SMOKE", None)
            cmd = [bench, "--bench"]
        else:
            env.setdefault("PYTHONHASHSEED", "0")  # the same start-up in both runs: see above
            cmd = [sys.executable, __file__, "--loop", str(db), str(n), str(warmup)]
        counts.append(counted(cmd, env, work / f"{name}-{n}.out"))
    return (counts[1] - counts[0]) / calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=1000, help="N: the runs make N and 2N calls")
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--rust-bench", help="cargo bench's executable, already built")
    ap.add_argument("--only", choices=["ours", "rust"])
    ap.add_argument("--loop", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.loop:
        # compare.py's call, untimed: neither its clock nor its samples' JSON is counted.
        db, n, warmup = args.loop
        call = compare.ours(db)
        for i in range(int(warmup) + int(n)):
            call(i)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on the PATH")
    sides = [args.only] if args.only else ["ours", "rust"]
    bench = compare.rust_bench(args) if "rust" in sides else ""
    work = Path(tempfile.mkdtemp(prefix="exactly-callgrind-"))
    try:
        got = {s: side(s, args.calls, args.warmup, work, bench) for s in sides}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for s in sides:
        print(f"{compare.LABELS[s]:50} {got[s] / 1000:8.1f}k instructions a call")
    if len(sides) == 2:
        print(f"the Python layer over the Rust lifecycle: "
              f"+{(got['ours'] / got['rust'] - 1) * 100:.1f} % in instructions")


if __name__ == "__main__":
    main()
