#!/bin/sh
# exactly effect --job invoices --token "$TOKEN" --action pay --target acme --input month=2026-11 -- ./pay-fenced.sh
# The far side dedupes by the effect key and refuses a stale fencing token (409: nothing done).
PAY_URL=${PAY_URL:-https://pay.example/transfers}
TRANSFER=${TRANSFER:-transfer.json}
code=$(curl -sS -o /dev/stderr -w '%{http_code}' -X POST "$PAY_URL" \
  -H "Idempotency-Key: $EXACTLY_EFFECT_KEY" \
  -H "Fencing-Token: $EXACTLY_JOB/$EXACTLY_FENCING_TOKEN" \
  -H "Content-Type: application/json" \
  --data-binary @"$TRANSFER")
case "$code" in
  2??) exit 0 ;;      # done (for a repeated key: the far side's stored answer)
  409) exit 75 ;;     # refused as stale: nothing was sent
  *)   exit 1 ;;      # unknown: an observer or a person settles it
esac
