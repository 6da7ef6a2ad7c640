#!/bin/sh
# Adoption path 1: wrap an existing cron job.   crontab:  0 7 * * *  /path/to/wrap-cron.sh
# The lease makes a second copy (another host, a retry, "run now") go back to sleep; the effect
# key makes a second attempt at the same fact collapse into the first.
set -u
JOB=daily-digest
TOKEN=$(exactly lease claim --job "$JOB" --for 15m) || exit 0   # exit 3: someone else holds it
exactly effect --job "$JOB" --token "$TOKEN" \
  --action send-digest --target team@example.com --input day="$(date -u +%F)" \
  --observe 'grep -q "$EXACTLY_EFFECT_KEY" /tmp/digest-outbox.log' \
  -- sh -c 'echo "$EXACTLY_EFFECT_KEY digest" >> /tmp/digest-outbox.log'
rc=$?
exactly lease release --job "$JOB" --token "$TOKEN" || rc=3   # 3: fenced, our lease was taken over
exit $rc
