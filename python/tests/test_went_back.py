"""Issue 39: a holder handed a fencing token lower than one it was handed before for the same job
(the database went back: a failover that lost commits, with the guard off) stops that job's work.
The database is made to go back as the Rust unit test of the rule does: a real SQLite file whose
job_lease rows lose their last claims."""
import sqlite3

import pytest

import exactly


def test_a_claim_handed_a_lower_token_than_before_is_refused(tmp_path, uid):
    db = str(tmp_path / "went-back.db")
    store = exactly.open(db)
    job = f"went-back-{uid}"
    try:
        tokens = []
        for _ in range(2):
            lease = store.claim(job, ttl="1m")
            assert lease is not None
            tokens.append(lease.token)
            lease.release()
        assert tokens[1] > tokens[0], tokens
        # The database loses its last claims, as after a failover without the guard.
        raw = sqlite3.connect(db)
        with raw:
            raw.execute("UPDATE job_lease SET fencing_token = 0")
        raw.close()
        with pytest.raises(exactly.StoreError, match=f"lower than {tokens[1]}"):
            store.claim(job, ttl="1m")
    finally:
        store.close()
