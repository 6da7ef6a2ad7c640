"""AWS Lambda Powertools' idempotency (aws-lambda-powertools 3.x) with its Redis persistence
layer, outside Lambda. It has no observer hook: the check of the far side is written inside the
function. Counted by count_lines.py; run by run_peers.py."""
import os

import farside as far

REDIS_URL = os.environ.get("PEER_REDIS", "redis://127.0.0.1:6379/0")

# --- guarded charge ---
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.persistence.redis import RedisCachePersistenceLayer

persistence = RedisCachePersistenceLayer(url=REDIS_URL)

@idempotent_function(data_keyword_argument="order", persistence_store=persistence,
                     config=IdempotencyConfig(event_key_jmespath="[id, cents]"))
def charge(order):
    key = f"charge:{order['id']}:{order['cents']}"
    if far.charged(key):  # the observer, by hand
        return "charged"
    return far.charge(key, order["id"], order["cents"])

result = charge(order={"id": "order-42", "cents": 1200})
# --- end ---
print("RESULT", "returned", result)
