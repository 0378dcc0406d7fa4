#!/bin/sh
# SPDX-License-Identifier: ISC
# contrib/examples/notify_once and idemctl effects / resolve against a
# real idemd: a side effect (a line appended to an outbox file) made safe
# with idem_effect_run, including a kill between the side effect and
# effect_complete.  The verdict is the outbox itself: exactly one line
# per submission id, whatever died when.
set -u
IDEMD=${IDEMD:?set IDEMD to the idemd binary}
IDEMCTL=${IDEMCTL:?set IDEMCTL to the idemctl binary}
NOTIFY=${NOTIFY_ONCE:?set NOTIFY_ONCE to the notify_once example}

. "$(dirname "$0")/lib.sh"
make_tmp effects
root=$tmp/root
outbox=$tmp/outbox

# lines_for ID WANT WHAT: the outbox holds WANT lines for this effect.
lines_for() {
	n=$(grep -c -F -e " $1" "$outbox" 2>/dev/null)
	if [ "${n:-0}" -eq "$2" ]; then
		pass "$3 ($2 line(s))"
	else
		fail "$3: ${n:-0} line(s) for $1 in the outbox, wanted $2"
	fi
}

export IDEM_ROOT="$root"
unset IDEM_SOCKET
mkdir -p "$root" || exit 99
start_broker

# Twice with one id: one line, then reused.
run "$NOTIFY" note-1 "$outbox" "deploy v1.4 done"
expect 0 "first run sends"
contains "$tmp/out" "sent " "first run says sent"
run "$NOTIFY" note-1 "$outbox" "deploy v1.4 done"
expect 0 "second run"
contains "$tmp/out" "reused" "second run is reused"
lines_for "deploy v1.4 done" 1 "one line after two runs"

# Another message under the same id: a conflict, nothing appended.
run "$NOTIFY" note-1 "$outbox" "something else"
expect 1 "other message, same id"
contains "$tmp/err" "digest_mismatch" "the conflict says digest_mismatch"
lines_for "something else" 0 "nothing appended for the conflict"

# The crash window: the line is appended, the tool dies before it
# reports.  While the lease is live (a minute here), a retry waits.
run "$NOTIFY" --lease-ms 60000 --die-after-append note-held "$outbox" "held"
expect 3 "dies after the append (long lease)"
run "$NOTIFY" note-held "$outbox" "held"
expect 75 "retry within the lease"
contains "$tmp/out" "in_progress" "retry within the lease is in_progress"
lines_for "held" 1 "one line while the lease is held"

# The same with a short lease, which then lapses.
run "$NOTIFY" --lease-ms 200 --die-after-append note-2 "$outbox" "pager: disk full"
expect 3 "dies after the append"
lines_for "pager: disk full" 1 "the append happened"

# The lease lapses (time is the event here): outcome_unknown, for ever,
# until evidence settles it; never a second append.
tries=0
while :; do
	run "$NOTIFY" --no-probe note-2 "$outbox" "pager: disk full"
	[ "$rc" -ne 75 ] && break
	tries=$((tries + 1))
	if [ "$tries" -gt 100 ]; then
		fail "the lease did not lapse"
		break
	fi
	sleep 0.1
done
expect 2 "after the lease: outcome_unknown without a probe"
contains "$tmp/out" "outcome_unknown" "the tool says outcome_unknown"
run "$IDEMCTL" effects
expect 1 "idemctl effects with an unknown outcome"
contains "$tmp/out" "note-2" "idemctl effects lists it"
contains "$tmp/out" "outcome_unknown" "idemctl effects shows its state"
lines_for "pager: disk full" 1 "still one line"

# With the probe: it finds the line by its external key and resolves.
run "$NOTIFY" note-2 "$outbox" "pager: disk full"
expect 0 "with the probe"
contains "$tmp/out" "sent recovered" "the probe's evidence commits it"
lines_for "pager: disk full" 1 "still one line after recovery"
run "$NOTIFY" note-2 "$outbox" "pager: disk full"
expect 0 "and then"
contains "$tmp/out" "reused recovered" "later runs reuse the recovered receipt"

# An operator settles one by hand: a begin nobody completed.
run "$NOTIFY" --lease-ms 200 --die-after-append note-3 "$outbox" "hand"
expect 3 "a third dies too"
sleep 0.3
run "$IDEMCTL" effects show outbox.append/v1 note-3
expect 0 "idemctl effects show"
contains "$tmp/out" "outcome_unknown" "show says outcome_unknown"
run "$IDEMCTL" resolve --result '{"by":"operator"}' --source "ops on call" \
    outbox.append/v1 note-3 applied
expect 0 "idemctl resolve applied"
contains "$tmp/out" "committed (recovered)" "resolve committed it"
run "$IDEMCTL" resolve outbox.append/v1 note-3 not_applied
expect 1 "contradicting evidence"
contains "$tmp/err" "already_committed" "is already_committed"
run "$IDEMCTL" effects
expect 0 "idemctl effects with nothing unknown (one lease held)"
contains "$tmp/out" "note-held" "idemctl effects lists the held lease"
contains "$tmp/out" "LEASE_LEFT" "idemctl effects has the time left"
# note-held's 60 s lease, begun seconds ago: 50 to 60 s left (its age
# is a few seconds, so only LEASE_LEFT reads so).
if grep 'note-held' "$tmp/out" | grep -Eq ' (5[0-9]\.[0-9]s|1m00s) '; then
	pass "the held lease's time left is shown"
else
	fail "no time left on the held lease's line"
	sed 's/^/	| /' "$tmp/out"
fi
run "$NOTIFY" note-3 "$outbox" "hand"
contains "$tmp/out" "reused recovered" "the tool reuses the operator's receipt"
lines_for "hand" 1 "one line for the hand-settled effect"

run "$IDEMCTL" stats --prometheus
expect 0 "stats --prometheus"
contains "$tmp/out" "idem_effects_committed_total 3" "prometheus counts the commits"
contains "$tmp/out" "idem_effects_resolved_total 2" "prometheus counts the resolves"

# The journal tells the story offline, and verify is not confused.
run "$IDEMCTL" journal dump
expect 0 "journal dump"
contains "$tmp/out" '"type":"effect"' "journal dump shows effect records"
run "$IDEMCTL" verify
expect 0 "verify with effects in the journal"

finish
