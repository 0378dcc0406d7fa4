#!/bin/sh
# SPDX-License-Identifier: ISC
# idemctl against a real idemd on a fresh root: every subcommand, its
# output and its exit status (0 ok, 1 error/conflict/problems, 2 usage,
# 3 unreachable).  Online commands while the broker runs; then, with it
# stopped, verify and journal dump on an intact and on damaged workspaces.
set -u
IDEMD=${IDEMD:?set IDEMD to the idemd binary}
IDEMCTL=${IDEMCTL:?set IDEMCTL to the idemctl binary}

. "$(dirname "$0")/lib.sh"
make_tmp idemctl
root=$tmp/root

# is_json FILE WHAT: every line of FILE is one JSON object.
is_json() {
	if command -v python3 >/dev/null 2>&1; then
		if python3 -c 'import json, sys
for line in open(sys.argv[1]):
    assert isinstance(json.loads(line), dict)' "$1" 2>"$tmp/json.err"; then
			pass "$2"
		else
			fail "$2: not JSON lines: $(tail -1 "$tmp/json.err")"
		fi
	elif grep -v '^{.*}$' "$1" >/dev/null; then
		fail "$2: a line is not a JSON object"
	else
		pass "$2 (checked by shape: no python3)"
	fi
}

export IDEM_ROOT="$root"
unset IDEM_SOCKET

# ---- the broker --------------------------------------------------------

# The first creation loses its worker right after its reservation is
# durable, so that diagnose and show have an unfinished submission.
if [ "${IDEM_FAULT_INJECTION:-yes}" = no ]; then
	echo "SKIP: needs a build with fault injection (configure" \
	    "--enable-fault-injection) for an unfinished submission"
	exit 77
fi
IDEM_CRASH_WORKER_AT=after_reserve_durable
export IDEM_CRASH_WORKER_AT
start_broker
unset IDEM_CRASH_WORKER_AT

# ---- online ------------------------------------------------------------

run "$IDEMCTL" status
expect 0 "status of a running broker"
contains "$tmp/out" "is up" "status says the broker is up"
contains "$tmp/out" "workers   2 running, 0 restarts" "status shows the workers"
contains "$tmp/out" "of 262144 submissions" "status shows the table"

# The worker dies under this call: the outcome is unknown (exit 3).
run "$IDEMCTL" submit --id ctl-crash --sender PM --recipient DEV \
    --subject "Lost answer"
expect 3 "submit whose worker dies after the reservation"
run "$IDEMCTL" diagnose --json --stale-after 1h
expect 0 "diagnose --json, nothing stalled for an hour"
is_json "$tmp/out" "diagnose --json is JSON"
contains "$tmp/out" '"client_submission_id":"ctl-crash"' "diagnose --json lists it"
contains "$tmp/out" '"stalled":false' "diagnose --json has the stalled flag"
run "$IDEMCTL" show ctl-crash
expect 0 "show an unfinished submission"
contains "$tmp/out" "reserved" "show gives the reserved state"
contains "$tmp/out" "not committed" "show says there is no receipt yet"
# Milliseconds have passed since the reservation: 0ms makes it stalled.
run "$IDEMCTL" diagnose --stale-after 0ms
expect 1 "diagnose with a stalled submission"
contains "$tmp/out" "CLIENT_SUBMISSION_ID" "diagnose prints a table"
contains "$tmp/out" "ctl-crash" "diagnose lists the unfinished submission"
contains "$tmp/out" "reserved" "diagnose gives its state"
# The retry the exit status asked for completes it.
run "$IDEMCTL" submit --id ctl-crash --sender PM --recipient DEV \
    --subject "Lost answer"
expect 0 "retry after the lost answer"
contains "$tmp/out" "created, recovered: TASK-" "the retry recovers the creation"
run "$IDEMCTL" status
expect 0 "status after a worker died"
contains "$tmp/out" "1 restart" "status counts the worker restart"

run "$IDEMCTL" submit --id ctl-1 --sender PM --recipient DEV \
    --subject "Fix login" --priority P1 --reference doc/a.md
expect 0 "submit with a new id"
contains "$tmp/out" "created: TASK-" "the first submit is created"
task1=$(sed -n 's/^created: \(TASK-[^ ]*\) .*/\1/p' "$tmp/out")
if [ -f "$root/_lifecycle/inbox/$task1.md" ]; then
	pass "the created task $task1 is in the inbox"
else
	fail "no inbox file for \"$task1\""
fi

run "$IDEMCTL" submit --id ctl-1 --sender PM --recipient DEV \
    --subject "Fix login" --priority P1 --reference doc/a.md
expect 0 "submit again with the same id and task"
contains "$tmp/out" "reused: $task1" "the retry is reused, same task"

run "$IDEMCTL" submit --id ctl-1 --sender PM --recipient DEV \
    --subject "Something else"
expect 1 "submit the same id with another task"
contains "$tmp/err" "conflict (digest_mismatch)" "the conflict names its reason"
contains "$tmp/err" "$task1" "the conflict names the bound task"

run "$IDEMCTL" --json submit --id ctl-1 --sender PM --recipient DEV \
    --subject "Something else"
expect 1 "submit --json of a conflict"
is_json "$tmp/out" "submit --json prints the answer as JSON"
contains "$tmp/out" '"disposition":"conflict"' "submit --json carries the disposition"

# Each task flag sets its member of the task (lists once per use).
run "$IDEMCTL" submit --id ctl-flags --sender PM --recipient DEV \
    --subject "Every flag" --body "The body" --priority P2 \
    --risk-level high --thread-key th-1 --parent "$task1" \
    --reference doc/a.md --reference doc/b.md --depends-on "$task1"
expect 0 "submit with every task flag"
task2=$(sed -n 's/^created: \(TASK-[^ ]*\) .*/\1/p' "$tmp/out")
for member in 'subject: "Every flag"' 'priority: "P2"' \
    'risk_level: "high"' 'thread_key: "th-1"' "parent: \"$task1\"" \
    'references: ["doc/a.md","doc/b.md"]' "depends_on: [\"$task1\"]" \
    'The body'; do
	contains "$root/_lifecycle/inbox/$task2.md" "$member" \
	    "the task file of every flag has $member"
done

run "$IDEMCTL" submit --sender PM --recipient DEV --subject "No id"
expect 0 "legacy submit"
contains "$tmp/out" "legacy: not idempotent" "legacy submit says so"

cat >"$tmp/task.json" <<'EOF'
{"client_submission_id":"ctl-file","task":{"sender":"QA","recipient":"DEV","subject":"From a file","body":"line 1\nline 2"}}
EOF
run "$IDEMCTL" submit --file "$tmp/task.json"
expect 0 "submit --file"
contains "$tmp/out" "created: TASK-" "submit --file creates"
run "$IDEMCTL" submit --file - <"$tmp/task.json"
expect 0 "submit --file - (stdin), same content"
contains "$tmp/out" "reused: " "the same file again is reused"

run "$IDEMCTL" submit --sender PM --subject "no recipient"
expect 2 "submit without --recipient is a usage error"
run "$IDEMCTL" submit --id bad --sender pm --recipient DEV --subject x
expect 1 "submit refused by the broker (role code)"
contains "$tmp/err" "invalid_request" "the refusal names its code"

run "$IDEMCTL" show ctl-1
expect 0 "show a committed submission"
contains "$tmp/out" "$task1" "show names the task"
contains "$tmp/out" "committed" "show gives the state"
contains "$tmp/out" "file_digest" "show prints the receipt"
run "$IDEMCTL" show --json ctl-1
expect 0 "show --json"
is_json "$tmp/out" "show --json is JSON"
run "$IDEMCTL" show no-such-id
expect 1 "show an unknown id"
# Moved by an FCoP tool: show says where it is now.
mv "$root/_lifecycle/inbox/$task1.md" "$root/_lifecycle/active/"
run "$IDEMCTL" show ctl-1
expect 0 "show a moved task"
contains "$tmp/out" "_lifecycle/active/$task1.md" "show gives current_path"
mv "$root/_lifecycle/active/$task1.md" "$root/_lifecycle/inbox/"

run "$IDEMCTL" stats --json
expect 0 "stats --json"
is_json "$tmp/out" "stats --json is JSON"
contains "$tmp/out" '"created":4' "stats counts four creations"
run "$IDEMCTL" stats --prometheus
expect 0 "stats --prometheus"
contains "$tmp/out" "# TYPE idem_created_total counter" "prometheus: TYPE line"
contains "$tmp/out" "# HELP idem_created_total" "prometheus: HELP line"
contains "$tmp/out" "idem_created_total 4" "prometheus: idem_created_total"
contains "$tmp/out" "# TYPE idem_table_used gauge" "prometheus: a gauge"
# Every stat idemd sends is in idemctl's table (libclient/stats.h): none
# is untyped; names follow Prometheus's conventions; no float noise.
if grep -q untyped "$tmp/out"; then
	fail "prometheus: a stat is untyped: $(grep -A1 untyped "$tmp/out" | tail -1)"
else
	pass "prometheus: every stat is typed"
fi
contains "$tmp/out" "# TYPE idem_reused_fast_total counter" "prometheus: reused_fast a counter"
contains "$tmp/out" "# TYPE idem_index_bytes gauge" "prometheus: index_bytes in bytes"
contains "$tmp/out" "# TYPE idem_table_evictions_total counter" "prometheus: evictions a counter"
contains "$tmp/out" "# TYPE idem_result_arena_used_bytes gauge" "prometheus: a _bytes gauge"
contains "$tmp/out" "# TYPE idem_uptime_seconds gauge" "prometheus: uptime in seconds"
if grep -Eq '^idem_uptime_seconds [0-9]+\.[0-9]{3}$' "$tmp/out"; then
	pass "prometheus: uptime with three decimals"
else
	fail "prometheus: uptime: $(grep '^idem_uptime_seconds' "$tmp/out")"
fi
bad=$(grep -v '^#' "$tmp/out" | grep -v '^idem_uptime_seconds ' |
    grep -Ev '^[a-z_]+(\{[^}]*\})? [0-9]+$')
if [ -z "$bad" ]; then
	pass "prometheus: every other value an integer"
else
	fail "prometheus: values not integers: $bad"
fi
bad=$(grep '^# TYPE .* counter$' "$tmp/out" | grep -v '_total counter$')
if [ -z "$bad" ]; then
	pass "prometheus: every counter ends _total"
else
	fail "prometheus: counters without _total: $bad"
fi
run "$IDEMCTL" stats
expect 0 "stats"
contains "$tmp/out" "legacy_created" "stats as text"
if grep -Eq '^uptime_ms +[0-9]+ +ms \(' "$tmp/out"; then
	pass "stats: uptime_ms is in ms, with its duration"
else
	fail "stats: uptime_ms: $(grep uptime "$tmp/out")"
fi
if grep -Eq '^index_bytes +[0-9]+ +bytes$' "$tmp/out"; then
	pass "stats: index_bytes labelled bytes"
else
	fail "stats: index_bytes: $(grep index_bytes "$tmp/out")"
fi

run "$IDEMCTL" diagnose --stale-after 500ms
expect 0 "diagnose with nothing unfinished"
contains "$tmp/out" "no intermediate submissions" "diagnose says nothing is unfinished"
run "$IDEMCTL" diagnose --json --stale-after 5m
expect 0 "diagnose --json"
contains "$tmp/out" '"entries":[]' "diagnose --json has no entries"
run "$IDEMCTL" diagnose --stale-after soon
expect 2 "diagnose with a bad duration"

# Effects in diagnose (as idemctl effects shows them): listed, and one
# whose outcome is unknown, or reserved and stalled, makes it exit 1.
NOTIFY=${NOTIFY_ONCE:?set NOTIFY_ONCE to the notify_once example}
run "$NOTIFY" --lease-ms 60000 --die-after-append ctl-held "$tmp/outbox" held
expect 3 "an effect whose caller dies after the effect (a long lease)"
run "$IDEMCTL" diagnose --stale-after 1h
expect 0 "diagnose with an effect's lease live"
contains "$tmp/out" "EFFECT_KIND" "diagnose prints the effects' table"
contains "$tmp/out" "ctl-held" "diagnose lists the effect"
contains "$tmp/out" "1 unfinished effect (0 outcome_unknown, 1 with a live lease" \
    "diagnose counts the effect"
run "$IDEMCTL" diagnose --stale-after 0ms
expect 1 "diagnose with a stalled effect"
contains "$tmp/out" "1 needing a decision" "diagnose says the effect needs a decision"
run "$NOTIFY" --lease-ms 100 --die-after-append ctl-lapsed "$tmp/outbox" lapsed
expect 3 "an effect whose caller dies (a short lease)"
# The lease lapses (time is the event here).
tries=0
while :; do
	run "$IDEMCTL" diagnose --stale-after 1h
	grep -q "ctl-lapsed.*outcome_unknown" "$tmp/out" && break
	tries=$((tries + 1))
	if [ "$tries" -gt 100 ]; then
		fail "the lease did not lapse"
		break
	fi
	sleep 0.1
done
expect 1 "diagnose with an effect's outcome unknown"
contains "$tmp/out" "idemctl resolve KIND ID" "diagnose says how to settle it"
run "$IDEMCTL" diagnose --json --stale-after 1h
expect 1 "diagnose --json with an effect's outcome unknown"
contains "$tmp/out" '"effect_kind"' "diagnose --json has the effects"
run "$IDEMCTL" resolve outbox.append/v1 ctl-lapsed applied
expect 0 "the unknown effect resolved"
run "$IDEMCTL" diagnose --stale-after 1h
expect 0 "diagnose once it is settled (the live lease left)"

run "$IDEMCTL" status --help
expect 0 "status --help"
contains "$tmp/out" "usage: idemctl status" "status --help prints usage"
for cmd in stats diagnose show submit verify "journal dump"; do
	# shellcheck disable=SC2086
	run "$IDEMCTL" $cmd --help
	expect 0 "$cmd --help"
done
run "$IDEMCTL" frobnicate
expect 2 "an unknown command"

# ---- stop the broker ---------------------------------------------------

stop_broker

run "$IDEMCTL" status
expect 3 "status with the broker down"
contains "$tmp/err" "not reachable" "status says the broker is not reachable"
run "$IDEMCTL" status --json
expect 3 "status --json with the broker down"
contains "$tmp/out" '"up":false' "status --json says up false"
run "$IDEMCTL" submit --id ctl-9 --sender PM --recipient DEV --subject x
expect 3 "submit with the broker down"

# ---- offline: verify and journal dump ----------------------------------

inbox=$root/_lifecycle/inbox
segment=$root/.idem/journal/0000000000000001.jnl
cp "$segment" "$tmp/segment.orig"

run "$IDEMCTL" verify
expect 0 "verify a clean workspace"
contains "$tmp/out" "verify: clean" "verify says clean"
run "$IDEMCTL" verify --json
expect 0 "verify --json"
is_json "$tmp/out" "verify --json is JSON"
# records FILE: the records verify --json counted (checkpoint and journal).
records() {
	r=$(sed -n 's/.*"records":\([0-9][0-9]*\).*/\1/p' "$1")
	c=$(sed -n 's/.*"checkpoint_records":\([0-9][0-9]*\).*/\1/p' "$1")
	echo $(( ${r:-0} + ${c:-0} ))
}
records=$(records "$tmp/out")

# Each reservation keeps who made it (SO_PEERCRED): this shell's uid, and
# the pid of the idemctl that sent it.
run "$IDEMCTL" journal dump
expect 0 "journal dump of a clean journal"
contains "$tmp/out" "\"peer_uid\":$(id -u)," "records name the peer's uid"
if grep '"client_submission_id":"ctl-1"' "$tmp/out" |
    grep -q '"peer_pid":[1-9]'; then
	pass "records name the peer's pid"
else
	fail "no peer pid recorded for ctl-1"
fi

# A task moved to another stage (as FCoP tools do) is not missing.
mv "$inbox/$task1.md" "$root/_lifecycle/done/"
run "$IDEMCTL" verify
expect 0 "verify with a task moved to done/"
mkdir -p "$root/history/2026-01-01/$task1"
mv "$root/_lifecycle/done/$task1.md" "$root/history/2026-01-01/$task1/"
run "$IDEMCTL" verify
expect 0 "verify with a task moved to history/"
mv "$root/history/2026-01-01/$task1/$task1.md" "$inbox/"

# A task idem committed that is gone.
mv "$inbox/$task1.md" "$tmp/"
run "$IDEMCTL" verify
expect 1 "verify with a committed task deleted"
contains "$tmp/out" "$task1" "verify names the missing task"
contains "$tmp/out" "ctl-1" "verify names its submission"
mv "$tmp/$task1.md" "$inbox/"

# A task idem wrote, changed in place.
cp "$inbox/$task1.md" "$tmp/saved.md"
echo "edited" >>"$inbox/$task1.md"
run "$IDEMCTL" verify
expect 1 "verify with an idem task edited in the inbox"
contains "$tmp/out" "file digest" "verify reports the digest"
cp "$tmp/saved.md" "$inbox/$task1.md"

# A TASK file claiming a submission id the journal never saw.
ghost=TASK-20260101-900-PM-to-DEV
sed -e 's/^client_submission_id: .*/client_submission_id: "ghost-id"/' \
    -e "s/^task_id: .*/task_id: \"$ghost\"/" \
    "$inbox/$task1.md" >"$inbox/$ghost.md"
run "$IDEMCTL" verify
expect 1 "verify with a TASK file naming an unknown client_submission_id"
contains "$tmp/out" "$ghost" "verify names the unknown file"
contains "$tmp/out" "ghost-id" "verify names the unknown id"
rm "$inbox/$ghost.md"

# Another FCoP writer's task: listed, not an error.
foreign=TASK-20260101-901-OPS-to-DEV
printf -- '---\nprotocol: "fcop"\nversion: 1\ntype: "TASK"\nsender: "OPS"\nrecipient: "DEV"\n---\nby hand\n' \
    >"$inbox/$foreign.md"
run "$IDEMCTL" verify
expect 0 "verify with a foreign TASK file"
contains "$tmp/out" "foreign" "verify lists foreign files"
contains "$tmp/out" "$foreign" "verify names the foreign file"

# Files FCoP's reference library cannot parse are errors, whoever wrote
# them: a four-digit number (unless idemd runs with --sequence-digits),
# front matter without what FCoP's reader requires, or none at all.
long=TASK-20260101-1000-OPS-to-DEV
cp "$inbox/$foreign.md" "$inbox/$long.md"
run "$IDEMCTL" verify
expect 1 "verify with a four-digit TASK number"
contains "$tmp/out" "$long.md: FCoP tools cannot read it" \
    "verify names the four-digit TASK file"
run "$IDEMCTL" verify --sequence-digits 4
expect 0 "verify --sequence-digits 4 with a four-digit TASK number"
run "$IDEMCTL" verify --sequence-digits 2
expect 2 "verify --sequence-digits out of range"
# Unasked, verify uses the digits idemd last ran with on this root.
cp "$root/.idem/sequence-digits" "$tmp/digits"
printf '4\n' >"$root/.idem/sequence-digits"
run "$IDEMCTL" verify
expect 0 "verify with the four digits idemd recorded"
printf 'x\n' >"$root/.idem/sequence-digits"
run "$IDEMCTL" verify
expect 1 "verify with a sequence-digits file that is not idem's"
contains "$tmp/err" "sequence-digits does not hold" \
    "verify names the sequence-digits file"
mv "$tmp/digits" "$root/.idem/sequence-digits"
mv "$inbox/$long.md" "$root/reports/REPORT-20260101-1000-OPS-to-DEV.md"
run "$IDEMCTL" verify
expect 1 "verify with a four-digit REPORT number"
contains "$tmp/out" "REPORT-20260101-1000-OPS-to-DEV.md: FCoP tools" \
    "verify names the four-digit REPORT file"
rm "$root/reports/REPORT-20260101-1000-OPS-to-DEV.md"
bare=TASK-20260101-902-OPS-to-DEV
printf 'no front matter\n' >"$inbox/$bare.md"
run "$IDEMCTL" verify
expect 1 "verify with a TASK file without front matter"
contains "$tmp/out" "$bare.md: FCoP tools cannot read it: it has no front" \
    "verify names the TASK file without front matter"
printf -- '---\nprotocol: "fcop"\nversion: 2\nsender: "OPS"\nrecipient: "DEV"\n---\n' \
    >"$inbox/$bare.md"
run "$IDEMCTL" verify
expect 1 "verify with a TASK file of another FCoP version"
rm "$inbox/$bare.md"
slot=TASK-20260101-903-OPS-to-DEV.D1
printf -- '---\nprotocol: "fcop"\nversion: 1\nsender: "OPS"\nrecipient: "DEV"\n---\n' \
    >"$inbox/$slot.md"
run "$IDEMCTL" verify
expect 0 "verify with a slot recipient's TASK file"
rm "$inbox/$slot.md"

# A torn tail: a warning, and read-only: the segment is not cut.
printf 'torn' >>"$segment"
size_before=$(wc -c <"$segment")
run "$IDEMCTL" verify
expect 0 "verify with a torn journal tail"
contains "$tmp/out" "torn tail" "verify warns of the torn tail"
size_after=$(wc -c <"$segment")
if [ "$size_before" -eq "$size_after" ]; then
	pass "verify left the torn tail in place (read-only)"
else
	fail "verify changed the segment: $size_before -> $size_after bytes"
fi
cp "$tmp/segment.orig" "$segment"

# A flipped byte inside the first record, valid records after it:
# corruption at offset 32 (the first record, right after the header).
byte=$(od -An -tu1 -j40 -N1 "$segment" | tr -d ' ')
flipped=$(( (byte + 1) % 256 ))
# shellcheck disable=SC2059	# the octal escape must be in the format
printf "\\$(printf '%03o' "$flipped")" |
    dd of="$segment" bs=1 seek=40 conv=notrunc 2>/dev/null
if cmp -s "$segment" "$tmp/segment.orig"; then
	fail "the byte flip did not change the segment"
fi
run "$IDEMCTL" verify
expect 1 "verify with a corrupt journal record"
contains "$tmp/out" "offset 32" "verify names the corrupt offset"
run "$IDEMCTL" journal dump
expect 1 "journal dump of a corrupt journal"
contains "$tmp/err" "offset 32" "journal dump names the corrupt offset"
cp "$tmp/segment.orig" "$segment"

run "$IDEMCTL" journal dump
expect 0 "journal dump"
is_json "$tmp/out" "journal dump prints JSON lines"
lines=$(wc -l <"$tmp/out" | tr -d ' ')
if [ -n "$records" ] && [ "$lines" -eq "$records" ]; then
	pass "journal dump prints one line per record ($lines)"
else
	fail "journal dump printed $lines lines for \"$records\" records"
fi
contains "$tmp/out" '"client_submission_id":"ctl-1"' "the dump has the key"
contains "$tmp/out" '"state":"committed"' "the dump has the state"
contains "$tmp/out" '"client_submission_id":null' "the dump has the legacy task"
contains "$tmp/out" '"peer_pid":' "the dump has the peer"
run "$IDEMCTL" journal dump --text
expect 0 "journal dump --text"
contains "$tmp/out" "SEG:OFFSET" "journal dump --text has a header"
run "$IDEMCTL" --root "$tmp/nowhere" verify
expect 3 "verify of a root that does not exist"
run "$IDEMCTL" journal
expect 2 "journal without a subcommand"

# ---- a checkpointed journal ------------------------------------------------
# Small segments make the broker rotate and checkpoint its table; verify
# and dump must read the checkpoint, then the segments after it.

start_broker --segment-bytes 4096
i=0
while [ $i -lt 30 ]; do
	"$IDEMCTL" submit --id "ckpt-$i" --sender PM --recipient DEV \
	    --subject "checkpointed $i" >/dev/null 2>"$tmp/err" ||
	    fail "submit ckpt-$i: $(cat "$tmp/err")"
	i=$((i + 1))
done
run "$IDEMCTL" submit --id ckpt-0 --sender PM --recipient DEV \
    --subject "checkpointed 0"
expect 0 "a retry after checkpoints"
contains "$tmp/out" "reused" "the retry after checkpoints is reused"
stop_broker
set -- "$root"/.idem/journal/checkpoint-*.snap
if [ -f "$1" ]; then
	pass "the broker wrote a checkpoint"
else
	fail "no checkpoint in $root/.idem/journal"
fi
run "$IDEMCTL" verify --json
expect 0 "verify a checkpointed journal"
contains "$tmp/out" '"checkpoint":' "verify --json names the checkpoint"
records=$(records "$tmp/out")
run "$IDEMCTL" verify
expect 0 "verify a checkpointed journal, as text"
contains "$tmp/out" "checkpoint  " "verify prints the checkpoint"
run "$IDEMCTL" journal dump
expect 0 "journal dump of a checkpointed journal"
is_json "$tmp/out" "journal dump with a checkpoint prints JSON lines"
contains "$tmp/out" '"source":"checkpoint"' "the dump has the checkpoint's records"
contains "$tmp/out" '"client_submission_id":"ckpt-29"' "the dump has the last submission"
lines=$(wc -l <"$tmp/out" | tr -d ' ')
if [ "$lines" -eq "$records" ]; then
	pass "journal dump prints one line per checkpoint and journal record ($lines)"
else
	fail "journal dump printed $lines lines for $records records"
fi

# A damaged checkpoint is damage (exit 1, journal_corrupt), not a file
# that cannot be read (exit 3): the store says which (store_load's
# STORE_CHECKPOINT_CORRUPT), idemctl reads no error text to decide.
ckpt=$1
cp "$ckpt" "$tmp/checkpoint.saved" || exit 99
printf 'XXXXXXXX' | dd of="$ckpt" bs=1 seek=80 conv=notrunc 2>/dev/null ||
    exit 99
run "$IDEMCTL" verify --json
expect 1 "verify with a corrupt checkpoint"
contains "$tmp/out" '"check":"journal_corrupt"' "verify --json reports the corrupt checkpoint"
contains "$tmp/out" '"files":{"checked":false' "verify does not check files past a corrupt checkpoint"
run "$IDEMCTL" verify
expect 1 "verify with a corrupt checkpoint, as text"
contains "$tmp/out" "is corrupt" "verify says the checkpoint is corrupt"
contains "$tmp/out" "CORRUPT" "verify's journal line says CORRUPT"
run "$IDEMCTL" journal dump
expect 1 "journal dump of a corrupt checkpoint"
contains "$tmp/err" "is corrupt" "journal dump says the checkpoint is corrupt"
cp "$tmp/checkpoint.saved" "$ckpt" || exit 99
run "$IDEMCTL" verify
expect 0 "verify once the checkpoint is restored"

# ---- verify where idemd never ran --------------------------------------

# A directory without .idem/ (a mistyped --root): not "clean".
mkdir "$tmp/not-a-workspace"
run "$IDEMCTL" verify --root "$tmp/not-a-workspace"
expect 1 "verify a directory that is not an idem workspace"
contains "$tmp/err" "is not an idem workspace" "verify says it is not a workspace"
contains "$tmp/err" "$tmp/not-a-workspace" "verify names the directory"
if [ -s "$tmp/out" ]; then
	fail "verify of a non-workspace printed a verdict: $(cat "$tmp/out")"
else
	pass "verify of a non-workspace prints no verdict"
fi
# .idem a symlink to a real workspace's: still not this root's state.
mkdir "$tmp/linked"
ln -s "$root/.idem" "$tmp/linked/.idem"
run "$IDEMCTL" verify --root "$tmp/linked"
expect 1 "verify a directory whose .idem is a symlink"
contains "$tmp/err" "is a symlink" "verify says .idem is a symlink"

finish
