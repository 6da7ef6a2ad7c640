"""python/bench/compare.py, the comparison with exactly-once, still runs: a smoke test at tiny
sizes. Its figures are not checked (they mean nothing at 20 calls); what is checked is that both
libraries ran and that, in its crash after the send, each ended as described."""
import os
import subprocess
import sys

COMPARE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "compare.py")


def test_the_comparison_with_exactly_once_runs(tmp_path):
    r = subprocess.run([sys.executable, COMPARE, "--no-rust", "--calls", "20", "--warmup", "5",
                        "--rounds", "1", "--dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "exactly-once, synchronous=FULL" in r.stdout, r.stdout
    assert r.stdout.count("far side charged 1x") == 3, r.stdout
    assert "UNEXPECTED" not in r.stdout, r.stdout
