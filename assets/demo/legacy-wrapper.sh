#!/bin/sh
# Adoption path 1 in the demo: an old cron job wrapped with `exactly lease claim` + `exactly
# effect`. Its export overruns the 1s lease, so when a second host's copy takes the lease over,
# this copy's late write is fenced — refused, counted, never sent.
EX='__EXE__'
DIR='__DIR__'
OWNER=$1
TOKEN=$("$EX" lease claim --job legacy-export --for 1s --owner "$OWNER") || exit 0
sleep "$2"   # the export takes longer than its lease
"$EX" effect --job legacy-export --token "$TOKEN" --action export-csv --target sftp-archive \
  --input minute="$(date -u +%Y-%m-%dT%H:%M)" -- sh "$DIR/demo.sh" far ok export-csv sftp-archive
"$EX" lease release --job legacy-export --token "$TOKEN" 2>/dev/null
exit 0
