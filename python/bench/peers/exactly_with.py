"""exactly (this project), the `with store.effect(…) as e:` form.

SLOT (py-api): this file is a placeholder until the `with` form is merged. The coordinator fills
the marked region with the same guarded charge written as
`with store.effect(…) as e: if e.fresh: e.result = far.charge(e.key, …)` (an observer given),
and count_lines.py counts it then; while this marker stays, it reports the slot as not filled."""
import os

import farside as far  # noqa: F401 - used by the form that fills the slot

DB, TTL = os.environ.get("PEER_DB", "exactly.db"), os.environ.get("PEER_TTL", "10m")

# --- guarded charge ---
# --- end ---
