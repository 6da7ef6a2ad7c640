#!/bin/sh
# The demo's jobs. `exactly run` starts each with EXACTLY_DB, EXACTLY_JOB, EXACTLY_FENCING_TOKEN,
# EXACTLY_RUN_ID and EXACTLY_SCHEDULED_AT set; every effect goes through the real ledger with
# `exactly effect` to a simulated far side (a file that records every request it gets, never
# deduplicating) with latency, lost answers and timeouts.
EX='__EXE__'
DIR='__DIR__'
FAR="$DIR/far-side.log"
rand() { echo $(( $(od -An -N2 -tu2 /dev/urandom) % $1 )); }
seen="grep -q \"^\$EXACTLY_EFFECT_KEY \" '$FAR'"
slot="$EXACTLY_SCHEDULED_AT"
day=$(echo "$slot" | cut -c1-10)
# The slot's second, so that the demo's failures come on a schedule rather than by luck.
sec=$(echo "$slot" | cut -c18-19 | sed 's/^0//')
sec=${sec:-0}

effect() { # effect ACTION TARGET FAR-MODE [exactly effect flags…]
  action=$1 target=$2 mode=$3; shift 3
  "$EX" effect --action "$action" --target "$target" "$@" -- sh "$0" far "$mode" "$action" "$target"
}

case "$1" in
  far) # the far side: latency, then it acts; some answers are lost on the way back
    mode=$2; shift 2
    sleep "0.$(rand 5)"
    case "$mode" in
      flaky) [ "$(rand 100)" -lt 25 ] && exit 75 ;; # refused before sending: nothing happened
    esac
    echo "$EXACTLY_EFFECT_KEY $*" >> "$FAR"
    case "$mode" in
      lossy) [ "$(rand 100)" -lt 40 ] && exit 9 ;;  # acted, but the answer never came back
      lost) [ $((sec / 4 % 3)) -ne 0 ] && exit 9 ;;  # two of three answers lost
    esac
    echo "accepted $(date -u +%H:%M:%S)" ;;
  status-ping) effect ping status-page ok --input slot="$slot" --observe "$seen" ;;
  daily-digest) # keyed by the day, not the run: one digest a day however often it fires
    effect send-digest team@example.com ok --input day="$day" --observe "$seen" ;;
  digest-copy) # the same action registered again under another name: the ledger collapses it
    effect send-digest team@example.com ok --input "day=$day" --observe "$seen" ;;
  invoice) # a person approves each invoice before it is sent
    n=$(( $(echo "$slot" | cut -c18-19 | sed 's/^0//') % 3 + 1 ))
    effect send-invoice "customer-$n" ok --input day="$day" --input amount="$((n * 40)).00 EUR" \
      --needs-approval --terms "invoice customer-$n: $((n * 40)).00 EUR for $day" --observe "$seen"
    rc=$?; [ $rc -eq 4 ] && exit 0; exit $rc ;;  # 4: waiting for a person is not a failed run
  payment-sync) # answers get lost; the observer settles each unknown on the next run
    effect sync-payment ledger ok --input slot="$slot" >/dev/null
    effect capture-payment "card-$(rand 4)" lossy --input slot="$slot" --observe "$seen" ;;
  refund-check) # answers get lost and nothing can observe them: unknowns age until resolved
    effect refund "order-$(rand 50)" lost --input slot="$slot" --observe "exit 2" ;;
  slow-report) sleep "$(( 1 + $(rand 3) )).$(rand 10)"
    effect publish-report dashboard ok --input slot="$slot" ;;
  queue-sync) sleep 1.$(rand 8); effect sync inventory ok --input slot="$slot" ;;
  eod-close) sleep "$(( 2 + $(rand 3) ))"; effect close-books "$day" ok --input slot="$slot" ;;
  leaky-export) # sometimes the process dies right after reserving its effect
    if [ $((sec / 3 % 2)) -eq 0 ]; then export EXACTLY_FAULT=after_claim:kill; fi
    effect export warehouse ok --input slot="$slot" ;;
  sms-reminder) effect sms "+49-151-$(rand 900)" flaky --input slot="$slot" --observe "$seen" ;;
  welcome-email) # the run-keyed bug: a retry after a slow answer makes a new key, so a second
    # welcome goes out (the checklist's rule 3 names it); the facts are the user and the day
    for try in 1 2; do
      at=$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)
      effect send-welcome "user-$(( sec % 4 ))" ok --input attempt_at="$at" --observe "$seen" \
        >/dev/null
    done ;;
  booking-cancel) effect cancel-booking "booking-$(rand 30)" ok --input slot="$slot" --observe "$seen" ;;
  *) echo "demo.sh: unknown job $1" >&2; exit 2 ;;
esac
