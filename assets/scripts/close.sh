#!/bin/sh
# The end-of-day close for the business day of the firing.
day=$(echo "$EXACTLY_SCHEDULED_AT" | cut -c1-10)
exec "${EXACTLY_BIN:-exactly}" effect --action close-books --target general-ledger --input day="$day" \
  -- sh -c 'echo "$EXACTLY_EFFECT_KEY closed" >> "${TMPDIR:-/tmp}/close-outbox.log"'
