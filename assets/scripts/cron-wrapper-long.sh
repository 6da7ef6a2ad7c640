#!/bin/sh
# The cron wrapper for a command that may outlast its lease: a background loop renews the lease
# while the command runs and is stopped when it ends. Same exit rules as cron-wrapper.sh.
set -u
if [ -z "${EXACTLY:-}" ]; then             # as cron-wrapper.sh finds it
    for EXACTLY in "${HOME:-}/.cargo/bin/exactly" /usr/local/bin/exactly exactly; do
        command -v "$EXACTLY" >/dev/null && break
    done
fi
export EXACTLY_DB="${EXACTLY_DB:-/var/lib/exactly/exactly.db}"
SEND=${SEND:-/usr/local/bin/export-ledger.sh}
OBSERVE=${OBSERVE:-/usr/local/bin/export-was-done.sh}
LEASE=${LEASE:-5m}                 # renewed every RENEW_EVERY seconds: keep it a few times longer
RENEW_EVERY=${RENEW_EVERY:-60}
JOB=ledger-export

TOKEN=$("$EXACTLY" lease claim --job "$JOB" --for "$LEASE")
rc=$?
[ "$rc" -eq 3 ] && exit 0          # someone else holds the lease and runs it
[ "$rc" -ne 0 ] && exit "$rc"

# Renew until stopped; a refused renewal (exit 3: fenced) ends the loop, and the command's
# later writes are refused by its stale token. sleep's output goes nowhere, so a sleep left
# behind by the kill below does not keep cron waiting on the job's output.
(
    while sleep "$RENEW_EVERY" >/dev/null 2>&1; do
        "$EXACTLY" lease renew --job "$JOB" --token "$TOKEN" --for "$LEASE" || exit
    done
) &
RENEWER=$!
trap 'kill "$RENEWER" 2>/dev/null' EXIT

"$EXACTLY" effect --job "$JOB" --token "$TOKEN" \
    --action export-ledger --target s3://ledger-archive --input date="$(date -u +%F)" \
    --observe "$OBSERVE \"\$EXACTLY_EFFECT_KEY\"" \
    -- "$SEND"
rc=$?
kill "$RENEWER" 2>/dev/null
wait "$RENEWER" 2>/dev/null
"$EXACTLY" lease release --job "$JOB" --token "$TOKEN"
released=$?
[ "$rc" -eq 0 ] && rc=$released
exit "$rc"
