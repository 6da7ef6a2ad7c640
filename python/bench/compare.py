#!/usr/bin/env python3
"""exactly (this module) against exactly-once (PyPI), measured in one run on one disk.

Run it in a virtual environment holding both::

    python3 -m venv bench-venv
    bench-venv/bin/pip install --no-deps ./python exactly-once  # the module alone
    bench-venv/bin/python python/bench/compare.py

It prints, with a note on the machine and its load:

1. The per-call cost of a guarded no-op on a SQLite file (a new key each call; perform or the
   guarded function sends nothing), p50 and mean over every timed call of every round, the
   warm-up excluded, each library in a fresh process per round, the rounds interleaved so a
   neighbour's burst of disk work hits every side alike:
   - exactly-once at its default (``Store.sqlite``: WAL, ``synchronous=NORMAL``);
   - exactly-once at ``synchronous=FULL``: it has no setting for it, so this script runs
     ``store._conn.execute("PRAGMA synchronous=FULL")`` on the store's one connection (a
     private attribute, checked by reading the pragma back);
   - exactly, whose only setting is its default: WAL, ``synchronous=FULL``;
   - the Rust library's own lifecycle for the same no-op (``cargo bench``'s ``lifecycle`` part,
     the same steps without Python), so the Python layer's added cost is stated in %.
2. The same crash on both: a process sends a charge to a far side that does not dedupe (it
   counts requests), is SIGKILLed after the send and before the record, and a retry runs.

``--calls``, ``--rounds`` and ``--warmup`` size the measurement; ``--no-rust`` leaves out the Rust
figure (no cargo needed); ``--only perf`` or ``--only crash`` runs one half.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
import farside  # noqa: E402 - the far side that does not dedupe, shared with the peers
SIDES = ["theirs-default", "theirs-full", "ours", "rust"]
LABELS = {
    "theirs-default": "exactly-once, default (synchronous=NORMAL)",
    "theirs-full": "exactly-once, synchronous=FULL (set on _conn)",
    "ours": "exactly (Python), default = synchronous=FULL",
    "rust": "exactly's Rust library alone, synchronous=FULL",
}


# ---------------------------------------------------------------------------------------------
# One side's timed calls, in a process of its own (`compare.py --measure SIDE DB N WARMUP`)


def measure_theirs(db: str, calls: int, warmup: int, sync: str) -> List[float]:
    from exactly_once import Store, once

    store = Store.sqlite(db)
    if sync == "FULL":
        # exactly-once has no setting for it: the store's one connection, by hand.
        store._conn.execute("PRAGMA synchronous=FULL")  # type: ignore[attr-defined]
    level = store._conn.execute("PRAGMA synchronous").fetchone()[0]  # type: ignore[attr-defined]
    if level != {"NORMAL": 1, "FULL": 2}[sync]:
        raise SystemExit(f"exactly-once's connection runs synchronous={level}, not {sync}")

    @once(store, key=lambda i: f"noop:{i}")
    def noop(i: int) -> None:
        return None

    return timed(lambda i: noop(i), calls, warmup)


def ours(db: str) -> Any:
    """This module's guarded no-op on `db`, as a function of the call's number."""
    import exactly

    store = exactly.open(db)
    lease = store.lease("bench", ttl="1h")

    def nothing(key: str) -> None:
        return None

    def call(i: int) -> None:
        out = lease.effect(action="send", target="bench", inputs={"i": str(i)}).run(nothing)
        if out.outcome is not exactly.Kind.DONE:
            raise SystemExit(f"call {i} ended {out.outcome.value}: {out.reason}")

    return call


def measure_ours(db: str, calls: int, warmup: int) -> List[float]:
    return timed(ours(db), calls, warmup)


def timed(call: Any, calls: int, warmup: int) -> List[float]:
    """Each call's µs after `warmup` untimed calls, with the same numbering of keys."""
    for i in range(warmup):
        call(i)
    us = []
    clock = time.perf_counter_ns
    for i in range(warmup, warmup + calls):
        t = clock()
        call(i)
        us.append((clock() - t) / 1000)
    return us


def rust_bench(args: argparse.Namespace) -> str:
    """The path of `cargo bench`'s executable (built if needed)."""
    if args.rust_bench:
        return args.rust_bench
    cargo = shutil.which("cargo")
    if cargo is None:
        raise SystemExit("no cargo on PATH for the Rust figure: install Rust, pass --rust-bench "
                         "PATH, or --no-rust")
    print("building cargo bench's executable (cargo bench --bench exactly --no-run) …",
          file=sys.stderr)
    out = subprocess.run([cargo, "bench", "--bench", "exactly", "--no-run",
                          "--message-format=json"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"cargo bench --no-run failed:\n{out.stderr}")
    for line in out.stdout.splitlines():
        msg = json.loads(line)
        if (msg.get("reason") == "compiler-artifact" and msg.get("executable")
                and "bench" in msg["target"]["kind"]):
            return str(msg["executable"])
    raise SystemExit("cargo bench --no-run named no bench executable")


def run_side(side: str, work: Path, r: int, args: argparse.Namespace,
             bench: Optional[str]) -> List[float]:
    """One round of one side in a fresh process on a fresh file under `work`."""
    db = work / f"{side}-{r}.db"
    for ext in ("", "-wal", "-shm"):
        Path(f"{db}{ext}").unlink(missing_ok=True)
    if side == "rust":
        samples = work / f"rust-{r}.txt"
        env = dict(os.environ, EXACTLY_BENCH_ONLY="lifecycle",
                   EXACTLY_BENCH_LIFECYCLE_DIR=str(work / f"rust-{r}"),
                   EXACTLY_BENCH_LIFECYCLE_N=str(args.calls),
                   EXACTLY_BENCH_LIFECYCLE_WARMUP=str(args.warmup),
                   EXACTLY_BENCH_LIFECYCLE_SAMPLES=str(samples),
                   CARGO_TARGET_DIR=str(work / "cargo-target"))
        env.pop("EXACTLY_BENCH_SMOKE", None)
        out = subprocess.run([str(bench), "--bench"], env=env, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"the Rust lifecycle bench failed:\n{out.stdout}\n{out.stderr}")
        return [float(x) for x in samples.read_text().split()]
    out = subprocess.run([sys.executable, __file__, "--measure", side, str(db),
                          str(args.calls), str(args.warmup)], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{side} failed:\n{out.stdout}\n{out.stderr}")
    return [float(x) for x in json.loads(out.stdout)]


def stats(us: List[float]) -> Dict[str, float]:
    return {"p50": statistics.median(us) / 1000, "mean": statistics.fmean(us) / 1000,
            "p99": sorted(us)[int(len(us) * 0.99)] / 1000}


def perf(args: argparse.Namespace, work: Path) -> Dict[str, Any]:
    sides = [s for s in SIDES if s != "rust" or not args.no_rust]
    bench = rust_bench(args) if "rust" in sides else None
    pooled: Dict[str, List[float]] = {s: [] for s in sides}
    rounds: Dict[str, List[Dict[str, float]]] = {s: [] for s in sides}
    for r in range(args.rounds):
        # Each round starts at another side, so none always runs first or last.
        order = sides[r % len(sides):] + sides[:r % len(sides)]
        for side in order:
            us = run_side(side, work, r, args, bench)
            pooled[side].extend(us)
            rounds[side].append(stats(us))
        print(f"  round {r + 1}/{args.rounds} done, load {loadavg()}", file=sys.stderr)
    print(f"\nPer-call cost of a guarded no-op on SQLite: {args.rounds} rounds x {args.calls} "
          f"calls each, after {args.warmup} warm-up calls per round (ms)")
    print(f"  {'':50} {'p50':>7} {'mean':>7} {'p99':>7}   p50 of each round")
    result: Dict[str, Any] = {}
    for side in sides:
        s = stats(pooled[side])
        result[side] = dict(s, rounds=[round(x["p50"], 3) for x in rounds[side]])
        each = " ".join(f"{x['p50']:.3f}" for x in rounds[side])
        print(f"  {LABELS[side]:50} {s['p50']:7.3f} {s['mean']:7.3f} {s['p99']:7.3f}   {each}")
    unsteady = [LABELS[s] for s in sides
                if max(result[s]["rounds"]) > 1.5 * max(min(result[s]["rounds"]), 1e-9)]
    load = float(loadavg().split()[0] or 0)
    if load > (os.cpu_count() or 1):
        print(f"\n  LOAD {load} ON {os.cpu_count()} CORES: the figures say little; measure again when "
              "`uptime` shows the machine quiet.")
    if unsteady:
        print("\n  THE ROUNDS DISAGREE (p50 of one round over 1.5x another's) for: "
              + "; ".join(unsteady) + ".\n  Something else used the disk or the CPUs: these "
              "figures say little; measure again when `uptime` shows the machine quiet.")
    ours, theirs = result["ours"], result["theirs-full"]
    met = ours["p50"] <= theirs["p50"] and ours["mean"] <= theirs["mean"]
    print(f"\n  equal durability (FULL): ours {ours['p50']:.3f} / {ours['mean']:.3f} ms, theirs "
          f"{theirs['p50']:.3f} / {theirs['mean']:.3f} ms (p50 / mean): goal ours <= theirs: "
          f"{'met' if met else 'MISSED'}")
    d = result["theirs-default"]
    print(f"  each at its default: ours {ours['p50']:.3f} ms (FULL: a commit survives power loss)"
          f", theirs {d['p50']:.3f} ms (NORMAL: a power loss may undo its last commits)")
    if "rust" in result:
        rust = result["rust"]
        p50 = (ours["p50"] / rust["p50"] - 1) * 100
        mean = (ours["mean"] / rust["mean"] - 1) * 100
        result["python_layer_pct"] = {"p50": round(p50, 1), "mean": round(mean, 1)}
        ok = p50 <= 10 and mean <= 10
        print(f"  the Python layer over the Rust lifecycle: +{p50:.1f} % at p50, +{mean:.1f} % "
              f"in the mean (+{(ours['p50'] - rust['p50']) * 1000:.0f} µs at p50): goal <= 10 %: "
              f"{'met' if ok else 'MISSED'}")
    return result


# ---------------------------------------------------------------------------------------------
# The crash after the send, on both


def crash_child(lib: str, db: str, url: str, mode: str) -> None:
    """`compare.py --crash-child LIB DB URL MODE`: MODE `send` charges and waits to be killed
    after the request left; `retry` runs the same charge again and prints what happened."""

    os.environ["FAR_SIDE_URL"] = url
    if mode == "send":  # the far side's client prints "sent" and waits for the SIGKILL
        os.environ["PEER_FAULT"] = "kill_after_send"
    else:
        os.environ.pop("PEER_FAULT", None)

    def charge(key: str) -> str:
        return farside.charge(key, "order-42", 1200)

    def charged(key: str) -> int:
        return farside.charged(key)

    if lib == "ours":
        import exactly

        def observe(key: str) -> Any:
            return exactly.Happened("seen at the far side") if charged(key) else \
                exactly.NOT_HAPPENED

        store = exactly.open(db)
        started = time.monotonic()
        while (lease := store.claim("charges", ttl="3s")) is None:
            time.sleep(0.1)  # the killed worker's lease ends (its ttl and the skew margin)
        waited = time.monotonic() - started
        with lease:
            out = lease.effect(action="charge", target="order-42", inputs={"cents": 1200},
                               observe=observe).run(charge)
        row = store.get(out.key) or {}
        print(json.dumps({"outcome": out.outcome.value, "response": out.response,
                          "state": row.get("state"), "waited_s": round(waited, 1)}))
        return

    from exactly_once import ProbeResult, QuarantinedError, Store, Verdict, check_then_decide, once

    def probe(key: str) -> ProbeResult:
        if charged(key):
            return ProbeResult(Verdict.COMMITTED, "seen at the far side")
        return ProbeResult(Verdict.NOT_COMMITTED)

    store = Store.sqlite(db)
    kw: Dict[str, Any] = {"policy": check_then_decide(probe)} if lib == "theirs-probe" else {}
    guarded = once(store, key="charge:order-42", **kw)(charge)
    try:
        answer: Any = guarded("charge:order-42")
        outcome = "returned"
    except QuarantinedError as e:
        answer, outcome = None, f"raised {type(e).__name__}"
    rec = store.get("charge:order-42")
    print(json.dumps({"outcome": outcome, "response": answer,
                      "state": rec.state.value if rec else None, "waited_s": 0}))


# What each retry is expected to end as (ledger state), and what that means; another end is
# printed as such.
MEANING = {
    "theirs": ("in_flight", "quarantined: every later call raises until the key is released or "
                            "committed by hand"),
    "theirs-probe": ("committed", "its prober saw the charge: back-filled committed, nothing sent"),
    "ours": ("done", "the observer saw the charge: settled done (duplicate), nothing sent"),
}


def meaning(lib: str, r: Dict[str, Any]) -> str:
    state, words = MEANING[lib]
    if r["state"] == state and r["charges"] == 1:
        return words
    return f"UNEXPECTED (expected ledger {state} and 1 charge)"


def crash(work: Path) -> Dict[str, Any]:
    server, url, charges = farside.serve()
    print("\nCrash after the send: a worker charges order-42 at a far side that does not dedupe, "
          "is SIGKILLed\nafter the request left and before its answer is recorded; then a retry "
          "runs the same charge.")
    results = {}
    for lib, what in [("theirs", "exactly-once, default policy (quarantine)"),
                      ("theirs-probe", "exactly-once, check_then_decide(prober)"),
                      ("ours", "exactly, observer given (`observe=`)")]:
        db = work / f"crash-{lib}.db"
        charges.clear()
        child = subprocess.Popen([sys.executable, __file__, "--crash-child", lib, str(db), url,
                                  "send"], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        if line != "sent":
            child.kill()
            raise SystemExit(f"{lib}: the worker did not send (said {line!r})")
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        sent_before = sum(charges.values())
        out = subprocess.run([sys.executable, __file__, "--crash-child", lib, str(db), url,
                              "retry"], capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise SystemExit(f"{lib} retry failed:\n{out.stdout}\n{out.stderr}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        r["charges"] = sum(charges.values())
        r["charges_before_retry"] = sent_before
        results[lib] = r
        waited = f" (after {r['waited_s']} s: the killed worker's lease ended)" \
            if r["waited_s"] else ""
        print(f"  {what}\n    SIGKILLed (exit {child.returncode}) with {sent_before} charge at the "
              f"far side; retry: {r['outcome']}{waited}, response {r['response']!r};\n    ledger "
              f"{r['state']}; far side charged {r['charges']}x: {meaning(lib, r)}")
    server.shutdown()
    return results


# ---------------------------------------------------------------------------------------------


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def machine_note(work: Path) -> Dict[str, Any]:
    cpu = ""
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in
                    Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), "")
    except OSError:
        pass
    fs = subprocess.run(["df", "-T", str(work)], capture_output=True, text=True).stdout
    fs_line = fs.splitlines()[-1].split() if fs else []
    versions = {}
    for dist in ("exactly-once", "exactly-ledger"):
        try:
            from importlib.metadata import version
            versions[dist] = version(dist)
        except Exception:  # noqa: BLE001 - a missing one is shown as such
            versions[dist] = "not installed"
    return {"utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "cpu": cpu,
            "cores": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version(), "dir": str(work),
            "fs": f"{fs_line[1]} on {fs_line[0]}" if len(fs_line) > 1 else "?",
            "versions": versions, "load_before": loadavg()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000, help="timed calls per side and round")
    ap.add_argument("--warmup", type=int, default=300, help="untimed calls first, per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", help="where the SQLite files go (default: a temporary folder)")
    ap.add_argument("--no-rust", action="store_true", help="leave out the Rust lifecycle")
    ap.add_argument("--rust-bench", help="cargo bench's executable, already built")
    ap.add_argument("--only", choices=["perf", "crash"])
    ap.add_argument("--json", help="also write every figure to this file")
    ap.add_argument("--measure", nargs=4, help=argparse.SUPPRESS)
    ap.add_argument("--crash-child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        side, db, n, w = args.measure
        if side == "ours":
            us = measure_ours(db, int(n), int(w))
        else:
            us = measure_theirs(db, int(n), int(w), "FULL" if side == "theirs-full" else "NORMAL")
        print(json.dumps(us))
        return
    if args.crash_child:
        crash_child(*args.crash_child)
        return
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="exactly-compare-"))
    work.mkdir(parents=True, exist_ok=True)
    note = machine_note(work)
    print(f"exactly vs exactly-once, {note['utc']} UTC: {note['cpu']}, {note['cores']} cores, "
          f"Linux {note['kernel']}, Python {note['python']}; files in {note['dir']} ({note['fs']});"
          f"\n  exactly {note['versions']['exactly-ledger']}, exactly-once "
          f"{note['versions']['exactly-once']}; load before {note['load_before']}")
    out: Dict[str, Any] = {"machine": note}
    if args.only in (None, "perf"):
        out["per_call_ms"] = perf(args, work)
    if args.only in (None, "crash"):
        out["crash_after_send"] = crash(work)
    note["load_after"] = loadavg()
    print(f"\nload after {note['load_after']}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
