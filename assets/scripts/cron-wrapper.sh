#!/bin/sh
# Wraps a cron job in a lease and an effect key.   crontab:  0 7 * * *  /usr/local/bin/cron-wrapper.sh
# cron runs it from $HOME with a bare PATH, so every path below is absolute. A second copy (another
# host, a retry, "run now") exits 0 without running; the same day's digest is sent once.
set -u
# exactly where `cargo install` puts it (first, as in a login shell's PATH), else /usr/local/bin.
if [ -z "${EXACTLY:-}" ]; then
    for EXACTLY in "${HOME:-}/.cargo/bin/exactly" /usr/local/bin/exactly exactly; do
        command -v "$EXACTLY" >/dev/null && break
    done
fi
export EXACTLY_DB="${EXACTLY_DB:-/var/lib/exactly/exactly.db}"
SEND=${SEND:-/usr/local/bin/send-digest.sh}                # the command that has the effect
OBSERVE=${OBSERVE:-/usr/local/bin/digest-was-sent.sh}      # exit 0 sent, 1 not sent, other: can't tell
JOB=daily-digest

TOKEN=$("$EXACTLY" lease claim --job "$JOB" --for 15m)
rc=$?
[ "$rc" -eq 3 ] && exit 0          # 3 alone: someone else holds the lease and runs it
[ "$rc" -ne 0 ] && exit "$rc"      # anything else (the database cannot be used, …) is a failure

"$EXACTLY" effect --job "$JOB" --token "$TOKEN" \
    --action send-digest --target team@example.com --input date="$(date -u +%F)" \
    --observe "$OBSERVE \"\$EXACTLY_EFFECT_KEY\"" \
    -- "$SEND"
rc=$?                              # 0 done or already done; non-zero: cron reports it
"$EXACTLY" lease release --job "$JOB" --token "$TOKEN"
released=$?
[ "$rc" -eq 0 ] && rc=$released    # 3: fenced, a newer lease took over mid-run
exit "$rc"
