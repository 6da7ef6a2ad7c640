#!/usr/bin/env python3
"""Runs each peer's guarded charge (the files beside this one) against a far side that does not
dedupe, in real processes, and prints what each did and how many charges the far side holds:

  crash after send  the worker is SIGKILLed after the request reached the far side, before its
                    answer is recorded; a retry runs (re-run every 0.5 s while it is refused
                    as still in progress, up to --wait seconds)
  unknown outcome   the request reaches the far side and its answer is lost (perform raises);
                    a retry runs, as above
  overlap           two workers start the same charge at once (a second worker, or a deploy's
                    old and new process) while the request takes 1 s to reach the far side;
                    --trials times (5)

and the durability each runs at by default, read from the store itself (SQLite's
`PRAGMA synchronous` on the library's own connection, Redis' `CONFIG GET appendonly`).

Needs, in this Python: the `exactly` module, exactly-once, aws-lambda-powertools and redis, dbos,
temporalio; and `redis-server` on PATH (started here on a free port with its built-in defaults,
stopped at the end). Temporal's dev server is downloaded by temporalio on first use; where that
download is refused the Temporal rows say "not run here". `--only NAME[,NAME]` runs some peers.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import farside  # noqa: E402

PEERS = {
    "exactly": "exactly_run.py",
    "exactly-with": "exactly_with.py",
    "exactly-once": "exactly_once_peer.py",
    "powertools": "powertools_peer.py",
    "dbos": "dbos_peer.py",
    # The same file with each process its own executor id (DBOS__VMID), as DBOS expects of
    # several processes; "dbos" runs them all as its default id, "local".
    "dbos-ids": "dbos_peer.py",
    "temporal": "temporal_peer.py",
}
# A retry refused with one of these is re-run: the earlier attempt may still be going.
BLOCKED = ("LeaseHeld", "IdempotencyAlreadyInProgressError")


class Run:
    serial = 0

    def __init__(self, peer: str, work: Path, url: str, env: Dict[str, str],
                 distinct_ids: bool = False):
        self.peer, self.work, self.url, self.env = peer, work, url, env
        self.distinct_ids = distinct_ids

    def start(self, fault: Optional[str]) -> subprocess.Popen:
        env = dict(os.environ, **self.env, FAR_SIDE_URL=self.url,
                   PYTHONPATH=str(HERE), PYTHONUNBUFFERED="1")
        env.pop("PEER_FAULT", None)
        if self.distinct_ids:  # DBOS: each process its own executor id, as a fleet is set up
            Run.serial += 1
            env["DBOS__VMID"] = f"worker-{Run.serial}"
        if fault:
            env["PEER_FAULT"] = fault
        return subprocess.Popen([sys.executable, str(HERE / PEERS[self.peer])], cwd=self.work,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def finish(self, p: subprocess.Popen, timeout: float = 60) -> str:
        """What one worker ended with: its RESULT line, its exception's last line, or that it
        was still waiting after `timeout` seconds (then it is killed)."""
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            return f"no end after {timeout:.0f} s (killed)"
        for line in out.splitlines():
            if line.startswith("RESULT "):
                return line[len("RESULT "):].strip()
        last = [ln for ln in err.strip().splitlines() if ln.strip()]
        return f"exit {p.returncode}: {last[-1].strip() if last else '(no output)'}"

    def retry(self, wait: float) -> Tuple[str, float, int]:
        """Runs the charge again until it is not refused as in progress: (its end, seconds
        waited, attempts)."""
        start, n = time.monotonic(), 0
        while True:
            n += 1
            end = self.finish(self.start(None))
            if not any(b in end for b in BLOCKED) or time.monotonic() - start > wait:
                return end, time.monotonic() - start, n
            time.sleep(0.5)


def fresh(work: Path, redis_url: Optional[str]) -> None:
    for f in work.iterdir():
        if f.is_file():
            f.unlink()
    if redis_url:
        import redis

        redis.Redis.from_url(redis_url).flushall()


def scenario(name: str, run: Run, charges: Dict[str, int], wait: float,
             redis_url: Optional[str], trials_n: int = 5) -> Dict[str, Any]:
    fresh(run.work, redis_url)
    charges.clear()
    r: Dict[str, Any] = {}
    if name == "crash_after_send":
        p = run.start("kill_after_send")
        assert p.stdout is not None
        line = p.stdout.readline().strip()
        if line != "sent":
            p.kill()
            r["first"] = f"did not send: {line!r} {p.communicate()[1][-400:]}"
        else:
            p.send_signal(signal.SIGKILL)
            p.communicate()
            r["first"] = "SIGKILLed after the send"
    elif name == "unknown_outcome":
        r["first"] = run.finish(run.start("lose_answer"))
    elif name == "overlap":
        trials = []
        for t in range(trials_n):
            if t:
                fresh(run.work, redis_url)
                charges.clear()
            a, b = run.start("slow"), run.start("slow")
            ends = f"{run.finish(a)} | {run.finish(b)}"
            trials.append(sum(charges.values()))
        r["first"] = f"{ends} (last of {trials_n}; charges in each: {trials})"
        r["overlap_charges"] = trials
    r["charges_before_retry"] = sum(charges.values())
    end, waited, n = run.retry(wait)
    r.update(retry=end, waited_s=round(waited, 1), retries=n, charges=sum(charges.values()))
    return r


def durability(peer: str, work: Path, redis_url: Optional[str]) -> str:
    """The default durability, read from the store the peer's default setup opens."""
    if peer == "exactly-once":
        from exactly_once import Store

        s = Store.sqlite(str(work / "probe.db"))
        level = s._conn.execute("PRAGMA synchronous").fetchone()[0]  # type: ignore[attr-defined]
        mode = s._conn.execute("PRAGMA journal_mode").fetchone()[0]  # type: ignore[attr-defined]
        return f"SQLite journal_mode={mode}, synchronous={['OFF', 'NORMAL', 'FULL', 'EXTRA'][level]}"
    if peer == "powertools" and redis_url:
        import redis

        c = redis.Redis.from_url(redis_url)
        return (f"Redis appendonly={c.config_get('appendonly')['appendonly']}, "
                f"save='{c.config_get('save')['save']}'")
    if peer.startswith("dbos"):
        code = ("import sqlalchemy as sa\n"
                "from dbos import DBOS\n"
                "d = DBOS(config={'name': 'probe', "
                "'system_database_url': 'sqlite:///probe.sqlite'})\n"
                "DBOS.launch()\n"
                "e = d._sys_db.engine\n"
                "with e.connect() as c:\n"
                "    print('SQLite journal_mode=' + c.execute(sa.text('PRAGMA journal_mode'))"
                ".scalar() + ', synchronous=' + ['OFF','NORMAL','FULL','EXTRA']"
                "[c.execute(sa.text('PRAGMA synchronous')).scalar()])\n"
                "DBOS.destroy()\n")
        out = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True,
                             text=True, timeout=60)
        return out.stdout.strip() or f"(not read: {out.stderr.strip().splitlines()[-1:]})"
    if peer == "exactly":
        return "SQLite journal_mode=wal, synchronous=FULL (src/store/prepare.rs; no other setting)"
    return "(not read)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(work: Path) -> Tuple[subprocess.Popen, str]:
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("redis-server is not on PATH (Debian: apt-get install redis-server)")
    port = free_port()
    p = subprocess.Popen([exe, "--port", str(port), "--dir", str(work)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(100):
        try:
            redis.Redis.from_url(url).ping()
            return p, url
        except redis.ConnectionError:
            time.sleep(0.05)
    p.kill()
    raise SystemExit("redis-server did not answer")


def start_temporal() -> Tuple[Any, Optional[str], str]:
    """(environment, address, why not) of a Temporal dev server, downloaded once by
    temporalio; address None when it cannot be had here."""
    import asyncio

    from temporalio.testing import WorkflowEnvironment

    loop = asyncio.new_event_loop()
    try:
        env = loop.run_until_complete(WorkflowEnvironment.start_local())
    except Exception as e:  # noqa: BLE001 - reported as the reason it did not run
        return None, None, f"{type(e).__name__}: {e}"
    return (loop, env), env.client.service_client.config.target_host, ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated peers: " + ",".join(PEERS))
    ap.add_argument("--wait", type=float, default=20.0,
                    help="seconds a retry refused as in progress is re-run")
    ap.add_argument("--trials", type=int, default=5, help="overlap trials per peer")
    ap.add_argument("--json", help="also write every result to this file")
    args = ap.parse_args()
    peers = args.only.split(",") if args.only else list(PEERS)
    root = Path(tempfile.mkdtemp(prefix="exactly-peers-"))
    server, url, charges = farside.serve()
    redis_proc, redis_url = (start_redis(root) if "powertools" in peers else (None, None))
    results: Dict[str, Any] = {}
    try:
        for peer in peers:
            work = root / peer
            work.mkdir()
            env = {"PEER_DB": str(work / "state.db"), "PEER_TTL": "3s"}
            if redis_url:
                env["PEER_REDIS"] = redis_url
            temporal = None
            if peer == "temporal":
                temporal, address, why = start_temporal()
                if address is None:
                    results[peer] = {"not_run": why}
                    print(f"\n{peer}: not run here: {why}")
                    continue
                env["PEER_TEMPORAL"] = address
            run = Run(peer, work, url, env, distinct_ids=peer == "dbos-ids")
            res: Dict[str, Any] = {"durability": durability(peer, work,
                                                            redis_url if peer == "powertools"
                                                            else None)}
            print(f"\n{peer}: default durability: {res['durability']}")
            for name in ("crash_after_send", "unknown_outcome", "overlap"):
                r = scenario(name, run, charges, args.wait,
                             redis_url if peer == "powertools" else None, args.trials)
                res[name] = r
                print(f"  {name:17} first: {r['first']}\n  {'':17} retry: {r['retry']} "
                      f"(after {r['waited_s']} s, {r['retries']} run(s)); far side charged "
                      f"{r['charges_before_retry']}x before the retry, {r['charges']}x after")
            results[peer] = res
            if temporal:
                loop, env_ = temporal
                loop.run_until_complete(env_.shutdown())
    finally:
        server.shutdown()
        if redis_proc:
            redis_proc.terminate()
            redis_proc.wait()
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
