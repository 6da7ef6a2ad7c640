#!/bin/sh
# Run by `exactly run` (EXACTLY_DB, EXACTLY_JOB, EXACTLY_FENCING_TOKEN, EXACTLY_RUN_ID and
# EXACTLY_SCHEDULED_AT are set). The effect is keyed by the day it reports on — a fact — so a
# retry, a restart or a second scheduler cannot send a second digest for the same day.
day=$(echo "$EXACTLY_SCHEDULED_AT" | cut -c1-10)
exec "${EXACTLY_BIN:-exactly}" effect --action send-digest --target team@example.com --input day="$day" \
  --observe 'grep -q "$EXACTLY_EFFECT_KEY" "${TMPDIR:-/tmp}/digest-outbox.log"' \
  -- sh -c 'echo "$EXACTLY_EFFECT_KEY digest for '"$day"'" >> "${TMPDIR:-/tmp}/digest-outbox.log"; echo queued'
