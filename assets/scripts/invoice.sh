#!/bin/sh
# Each invoice needs a person's approval (exit 4 until approved in `exactly top` or with
# `exactly approve KEY`); the approval is consumed once, by the send.
hour=$(echo "$EXACTLY_SCHEDULED_AT" | cut -c1-13)
exec "${EXACTLY_BIN:-exactly}" effect --action send-invoice --target customer-42 --input period="$hour" \
  --input amount="120.00 EUR" --needs-approval --terms "invoice customer-42: 120.00 EUR for $hour" \
  -- sh -c 'echo "$EXACTLY_EFFECT_KEY invoice" >> "${TMPDIR:-/tmp}/invoice-outbox.log"'
