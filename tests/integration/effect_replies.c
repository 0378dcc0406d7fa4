/* SPDX-License-Identifier: ISC */
/*
 * effect_replies.c: the checks of every reply the effect ops give, over
 * a raw connection to a broker on either store (effect_replies.h; run
 * by tests/integration/test_effect_replies on the local store and
 * tests/cluster/test_cluster_replies on PostgreSQL).  For every
 * disposition and state SPEC.md lists (proceed, an extension,
 * in_progress, conflict with each reason, released, committed, a
 * retried complete, reused by the fast path and by the full one,
 * resolved, outcome_unknown refused and stored, recovered, the
 * tombstone of a compacted receipt), each reply is jansson's compact
 * dump of its own parse with SPEC.md's members in their order; and one
 * effect's receipt is the same bytes in every reply and view that shows
 * it (get_submission).  With ids of every scalar kind or none, ids and
 * kinds that need escapes, and results of every JSON type: escapes, raw
 * UTF-8, nesting, whitespace in the request, numbers at their ends, and
 * sizes on both sides of the fast path's store up to 60 KB.
 *
 * The broker writes these replies as text (broker/effect.c,
 * broker/replytext.c); before issue #33 it dumped jansson trees.  With
 * IDEM_REPLY_TRANSCRIPT=FILE every reply checked here is appended to
 * FILE, one a line, in an order that does not depend on timing: run a
 * test once with IDEMD=<another idemd> and once without, mask the fences
 * and times, and compare (doc/testing.md gives the command): the bytes
 * of two builds, side by side.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "effect_replies.h"
#include "harness.h"

/* Past a lease of 100 ms (the least), polled every 20 ms. */
#define SHORT_LEASE_MS	100
#define LAPSE_WAIT_MS	5000
/* A retry of a complete the arena refused meanwhile (table_full). */
#define FULL_RETRY_MS	2
#define FULL_RETRIES	5000

/* A reply's members in order; "id" only where the request had one. */
static const char *const proceed_members[] = { "ok", "id", "disposition",
    "idempotent", "client_submission_id", "effect_kind", "attempt", "fence",
    "external_key", "digest_schema", "request_digest", "lease_ms",
    "lease_expires_at", NULL };
static const char *const extend_members[] = { "ok", "id",
    "lease_expires_at", NULL };
static const char *const refusal_members[] = { "ok", "id", "disposition",
    "action_taken", "error", "existing", NULL };
static const char *const error_members[] = { "code", "message",
    "retryable", NULL };
static const char *const error_reason_members[] = { "code", "reason",
    "message", "retryable", NULL };
static const char *const existing_members[] = { "client_submission_id",
    "effect_kind", "state", "digest_schema", "request_digest", "attempt",
    "external_key", NULL };
static const char *const existing_lease_members[] = {
    "client_submission_id", "effect_kind", "state", "digest_schema",
    "request_digest", "attempt", "external_key", "lease_expires_at", NULL };
static const char *const state_members[] = { "ok", "id", "action_taken",
    "state", "attempt", "external_key", NULL };
static const char *const committed_members[] = { "ok", "id",
    "action_taken", "idempotent", "state", "receipt", NULL };
static const char *const recovered_members[] = { "ok", "id",
    "action_taken", "idempotent", "recovered", "state", "receipt", NULL };
static const char *const reused_members[] = { "ok", "id", "disposition",
    "action_taken", "idempotent", "state", "receipt", NULL };
static const char *const reused_recovered_members[] = { "ok", "id",
    "disposition", "action_taken", "idempotent", "recovered", "state",
    "receipt", NULL };
static const char *const receipt_members[] = { "client_submission_id",
    "effect_kind", "digest_schema", "request_digest", "external_key",
    "attempt", "result", "state", "committed_at", NULL };

/* Request ids of every scalar kind, and none (NULL). */
static const char *const ids[] = { "0", "-9223372036854775807", "1.5",
    "1e300", "null", "true", "false", "\"\"",
    "\"\\u00e9\\u2028 \\\" \\\\ \\/ \\n\\t\\u0001\\u007f\"", NULL };
#define NIDS	((int)(sizeof ids / sizeof ids[0]))
/* Ids and kinds (printable ASCII) that need escapes, or none. */
static const char *const names[] = { "plain", "q\\\"uote", "back\\\\slash",
    "!#$%&'()*+,-./:;<=>?@[]^_`{|}~" };
#define NNAMES	((int)(sizeof names / sizeof names[0]))

/* Results (raw JSON, as sent); the large ones are made by result_of. */
static const char *const results[] = {
	"null", "true", "false", "0", "-1", "9223372036854775807",
	"-9223372036854775808", "0.1", "1e-7", "-1.5e300", "-0.0", "\"\"",
	"\"\\u00e9\\ud83d\\ude00 \\\"\\\\\\/\\b\\f\\n\\r\\t\\u001f\\u007f\"",
	"\"\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80 \\u2028\\u2029\"",
	"[]", "{}", "[1,{\"a\":[null,{\"\":\"\"}]},[[[[]]]]]",
	"{\"z\":1,\"a\":2,\"m\":{\"y\":[true,false]},\"\xc3\xa9\":\"\\n\"}",
	"{ \"b\" : [ 1 , 2.50 , -3E2 ] ,\t\"a\" : \"x\" }",
	NULL
};
#define NRESULTS	((int)(sizeof results / sizeof results[0]) - 1)
/* Result pads: under and over the fast path's 4 KiB store, and large. */
static const size_t pads[] = { 3500, 5000, 60000 };
#define NPADS	((int)(sizeof pads / sizeof pads[0]))

/* Appended to $IDEM_REPLY_TRANSCRIPT, one a line, if it is set. */
static void
transcript(const char *reply)
{
	const char	*path = getenv("IDEM_REPLY_TRANSCRIPT");
	FILE		*f;

	if (path == NULL || *path == '\0')
		return;
	if ((f = fopen(path, "a")) == NULL)
		fail_msg("%s: cannot append", path);
	fprintf(f, "%s\n", reply);
	fclose(f);
}

/* members of object, in order ("id" skipped if has_id is 0). */
static void
assert_members(json_t *object, const char *const *members, int has_id,
    const char *reply)
{
	const char	*key;
	json_t		*v;
	int		 i = 0;

	if (!json_is_object(object))
		fail_msg("not an object in %s", reply);
	json_object_foreach(object, key, v) {
		if (!has_id && members[i] != NULL &&
		    strcmp(members[i], "id") == 0)
			i++;
		if (members[i] == NULL || strcmp(key, members[i]) != 0)
			fail_msg("member %d is %s, want %s: %s", i, key,
			    members[i] != NULL ? members[i] : "none", reply);
		i++;
	}
	if (!has_id && members[i] != NULL && strcmp(members[i], "id") == 0)
		i++;
	if (members[i] != NULL)
		fail_msg("no member %s: %s", members[i], reply);
}

/*
 * reply is jansson's dump of its own parse (compact, in order: no byte
 * written another way) and holds the members named; transcribed.  The
 * parse, to free.
 */
static json_t *
janssons(const char *reply, const char *const *members, int has_id)
{
	json_t	*r = json_loads(reply, JSON_ALLOW_NUL, NULL);
	char	*again;

	if (r == NULL)
		fail_msg("does not parse: %s", reply);
	again = json_dumps(r, JSON_COMPACT | JSON_PRESERVE_ORDER);
	assert_non_null(again);
	if (strcmp(again, reply) != 0)
		fail_msg("not jansson's bytes:\n%s\n%s", reply, again);
	free(again);
	if (members != NULL)
		assert_members(r, members, has_id, reply);
	transcript(reply);
	return r;
}

/* A refusal: its disposition, error (code, reason) and existing facts. */
static void
assert_refusal(const char *reply, int has_id, const char *disposition,
    const char *code, const char *reason, const char *const *existing)
{
	json_t	*r = janssons(reply, refusal_members, has_id), *error;

	assert_string_equal(harness_str(r, "disposition"), disposition);
	error = json_object_get(r, "error");
	assert_members(error, reason != NULL ? error_reason_members :
	    error_members, 1, reply);
	assert_string_equal(harness_str(error, "code"), code);
	if (reason != NULL)
		assert_string_equal(harness_str(error, "reason"), reason);
	if (existing == NULL)
		assert_true(json_is_null(json_object_get(r, "existing")));
	else
		assert_members(json_object_get(r, "existing"), existing, 1,
		    reply);
	json_decref(r);
}

/*
 * A reply with a receipt (members; the receipt's): its receipt's bytes
 * (after "receipt": to the reply's last '}'), malloc'd.
 */
static char *
receipt_of(const char *reply, const char *const *members, int has_id,
    const char *const *receipt)
{
	json_t	*r = janssons(reply, members, has_id);

	assert_members(json_object_get(r, "receipt"), receipt, 1, reply);
	json_decref(r);
	return harness_receipt_bytes(reply);
}

/* A line: {"op":op, ["id":id,] members}; malloc'd. */
static char *
line_of(const char *op, const char *id, const char *fmt, ...)
{
	va_list	 ap;
	char	*members, *line, idm[256] = "";

	va_start(ap, fmt);
	if (vasprintf(&members, fmt, ap) == -1)
		fail_msg("vasprintf");
	va_end(ap);
	if (id != NULL)
		snprintf(idm, sizeof idm, "\"id\":%s,", id);
	if (asprintf(&line, "{\"op\":\"%s\",%s%s}", op, idm, members) == -1)
		fail_msg("asprintf");
	free(members);
	return line;
}

static char *
exchange(int fd, char *line)
{
	char	*reply = harness_raw_exchange(fd, line);

	free(line);
	return reply;
}

static char *
begin_line(const char *id, const char *csid, const char *kind,
    const char *request, int lease_ms, int reordered)
{
	if (reordered)
		return line_of("effect_begin", id, "\"request\":%s,"
		    "\"lease_ms\":%d,\"effect_kind\":\"%s\","
		    "\"client_submission_id\":\"%s\"", request, lease_ms, kind,
		    csid);
	return line_of("effect_begin", id, "\"client_submission_id\":\"%s\","
	    "\"effect_kind\":\"%s\",\"request\":%s,\"lease_ms\":%d", csid,
	    kind, request, lease_ms);
}

static char *
complete_line(const char *id, const char *csid, const char *kind,
    const char *fence, const char *outcome, const char *result)
{
	if (result == NULL)
		return line_of("effect_complete", id,
		    "\"client_submission_id\":\"%s\",\"effect_kind\":"
		    "\"%s\",\"fence\":\"%s\",\"outcome\":\"%s\"", csid,
		    kind, fence, outcome);
	return line_of("effect_complete", id, "\"client_submission_id\":\"%s\","
	    "\"effect_kind\":\"%s\",\"fence\":\"%s\",\"outcome\":\"%s\","
	    "\"result\":%s", csid, kind, fence, outcome, result);
}

/* A complete, retried while the arena waits for the index (table_full). */
static char *
complete_exchange(int fd, char *line)
{
	char	*reply;
	int	 i;

	for (i = 0;; i++) {
		reply = harness_raw_exchange(fd, line);
		if (strstr(reply, "\"code\":\"table_full\"") == NULL ||
		    i >= FULL_RETRIES)
			break;
		free(reply);
		usleep(FULL_RETRY_MS * 1000);
	}
	free(line);
	return reply;
}

static char *
extend_line(const char *id, const char *csid, const char *kind,
    const char *fence)
{
	return line_of("effect_extend", id, "\"client_submission_id\":\"%s\","
	    "\"effect_kind\":\"%s\",\"fence\":\"%s\",\"lease_ms\":60000", csid,
	    kind, fence);
}

static char *
resolve_line(const char *id, const char *csid, const char *kind,
    const char *observed, const char *result)
{
	return line_of("effect_resolve", id, "\"client_submission_id\":\"%s\","
	    "\"effect_kind\":\"%s\",\"evidence\":{\"observed\":\"%s\"%s%s,"
	    "\"source\":\"probe \\u00e9\"}", csid, kind, observed,
	    result != NULL ? ",\"result\":" : "", result != NULL ? result : "");
}

/* The proceed's fence (checked and transcribed), malloc'd. */
static char *
fence_of(const char *reply, int has_id)
{
	json_t	*r = janssons(reply, proceed_members, has_id);
	char	*fence;

	assert_string_equal(harness_str(r, "disposition"), "proceed");
	assert_non_null(fence = strdup(harness_str(r, "fence")));
	json_decref(r);
	return fence;
}

/* get_submission: a view that holds receipt byte for byte. */
static void
assert_view_holds(int fd, const char *id, const char *csid,
    const char *kind, const char *receipt)
{
	char	*reply;
	json_t	*r;

	reply = exchange(fd, line_of("get_submission", id,
	    "\"client_submission_id\":\"%s\",\"effect_kind\":\"%s\"", csid,
	    kind));
	r = janssons(reply, NULL, id != NULL);
	json_decref(r);
	if (strstr(reply, receipt) == NULL)
		fail_msg("the view's receipt is not %s: %s", receipt, reply);
	free(reply);
}

/* {"pad":"xxx..."}: n bytes of 'x', malloc'd. */
static char *
result_of(size_t n)
{
	char	*r = malloc(n + 16);

	assert_non_null(r);
	memcpy(r, "{\"pad\":\"", 8);
	memset(r + 8, 'x', n);
	memcpy(r + 8 + n, "\"}", 3);
	return r;
}

/*
 * One effect through every answer but the lapse: proceed, extend,
 * in_progress, conflicts, released, proceed again, committed and its
 * retries, reused (stored order: fast when it fits; reordered: full),
 * resolve of a committed effect; the receipt the same bytes throughout.
 */
static void
one_effect(int fd, int j, const char *result)
{
	const char	*id = ids[j % NIDS], *kind = names[(j + 1) % NNAMES];
	char		 csid[64], request[32], *reply, *fence, *receipt;
	char		*again, *line;
	int		 has_id = id != NULL;

	snprintf(csid, sizeof csid, "%s-%d", names[j % NNAMES], j);
	snprintf(request, sizeof request, "{\"n\":%d}", j);
	fence = fence_of(reply = exchange(fd, begin_line(id, csid, kind,
	    request, 30000, 0)), has_id);
	free(reply);
	reply = exchange(fd, extend_line(id, csid, kind, fence));
	json_decref(janssons(reply, extend_members, has_id));
	free(reply);
	reply = exchange(fd, begin_line(id, csid, kind, request, 30000, 1));
	assert_refusal(reply, has_id, "in_progress", "in_progress", NULL,
	    existing_lease_members);
	free(reply);
	reply = exchange(fd, begin_line(id, csid, kind, "{\"n\":-1}", 30000,
	    0));
	assert_refusal(reply, has_id, "conflict", "conflict",
	    "digest_mismatch", existing_lease_members);
	free(reply);
	reply = complete_exchange(fd, complete_line(id, csid, kind,
	    "1-0000000000000000", "applied", result));
	assert_refusal(reply, has_id, "conflict", "conflict", "stale_fence",
	    existing_lease_members);
	free(reply);
	/* Released, then the same answer again without acting. */
	reply = exchange(fd, complete_line(id, csid, kind, fence,
	    "not_applied", NULL));
	json_decref(janssons(reply, state_members, has_id));
	assert_non_null(strstr(reply, "\"action_taken\":true,"
	    "\"state\":\"released\""));
	free(reply);
	reply = exchange(fd, complete_line(id, csid, kind, fence,
	    "not_applied", NULL));
	json_decref(janssons(reply, state_members, has_id));
	assert_non_null(strstr(reply, "\"action_taken\":false,"
	    "\"state\":\"released\""));
	free(reply);
	reply = exchange(fd, extend_line(id, csid, kind, fence));
	assert_refusal(reply, has_id, "conflict", "conflict",
	    "no_reservation", existing_members);
	free(reply);
	free(fence);
	/* Attempt 2, committed. */
	line = begin_line(id, csid, kind, request, 30000, 0);
	fence = fence_of(reply = harness_raw_exchange(fd, line), has_id);
	free(reply);
	reply = complete_exchange(fd, complete_line(id, csid, kind, fence,
	    "applied", result));
	receipt = receipt_of(reply, committed_members, has_id,
	    receipt_members);
	free(reply);
	reply = complete_exchange(fd, complete_line(id, csid, kind, fence,
	    "applied", result));
	again = receipt_of(reply, committed_members, has_id, receipt_members);
	assert_string_equal(again, receipt);
	assert_non_null(strstr(reply, "\"action_taken\":false,"));
	free(again);
	free(reply);
	reply = exchange(fd, complete_line(id, csid, kind, fence, "applied",
	    "\"another\""));
	assert_refusal(reply, has_id, "conflict", "conflict",
	    "already_committed", existing_members);
	free(reply);
	reply = exchange(fd, extend_line(id, csid, kind, fence));
	assert_refusal(reply, has_id, "conflict", "conflict",
	    "already_committed", existing_members);
	free(reply);
	free(fence);
	/* Reused: in the begin's bytes (stored at the commit), reordered. */
	reply = harness_raw_exchange(fd, line);
	again = receipt_of(reply, reused_members, has_id, receipt_members);
	assert_string_equal(again, receipt);
	free(again);
	free(line);
	again = reply;
	reply = exchange(fd, begin_line(id, csid, kind, request, 30000, 1));
	assert_string_equal(reply, again);
	json_decref(janssons(reply, reused_members, has_id));
	free(again);
	free(reply);
	reply = complete_exchange(fd, resolve_line(id, csid, kind, "applied",
	    result));
	again = receipt_of(reply, committed_members, has_id, receipt_members);
	assert_string_equal(again, receipt);
	free(again);
	free(reply);
	reply = exchange(fd, resolve_line(id, csid, kind, "not_applied",
	    NULL));
	assert_refusal(reply, has_id, "conflict", "conflict",
	    "already_committed", existing_members);
	free(reply);
	assert_view_holds(fd, id, csid, kind, receipt);
	/* A key never begun. */
	reply = exchange(fd, complete_line(id, csid, "never.begun/v1",
	    "1-0000000000000000",
	    "applied", result));
	assert_refusal(reply, has_id, "conflict", "conflict",
	    "no_reservation", NULL);
	free(reply);
	free(receipt);
}

/*
 * One effect whose lease lapses: outcome_unknown (refused), stored by
 * resolve unknown, refused again, then recovered by resolve applied:
 * committed and reused with recovered:true.
 */
static void
one_lapse(int fd, int j, const char *result)
{
	const char	*id = ids[j % NIDS], *kind = names[(j + 2) % NNAMES];
	struct timespec	 pause = { 0, 20 * 1000 * 1000 };
	char		 csid[64], request[32], *reply, *fence, *receipt;
	char		*again, *line;
	int		 has_id = id != NULL, waited;

	snprintf(csid, sizeof csid, "lapse-%s-%d", names[j % NNAMES], j);
	snprintf(request, sizeof request, "[%d]", j);
	line = begin_line(id, csid, kind, request, SHORT_LEASE_MS, 0);
	fence = fence_of(reply = harness_raw_exchange(fd, line), has_id);
	free(reply);
	free(fence);
	for (waited = 0;; waited += 20) {
		reply = exchange(fd, begin_line(id, csid, kind, request,
		    SHORT_LEASE_MS, 1));
		if (strstr(reply, "\"disposition\":\"outcome_unknown\"") !=
		    NULL)
			break;
		if (strstr(reply, "\"disposition\":\"in_progress\"") == NULL)
			fail_msg("%s: %s", csid, reply);
		free(reply);
		if (waited >= LAPSE_WAIT_MS)
			fail_msg("the lease did not lapse in %d ms",
			    LAPSE_WAIT_MS);
		/* The lease is time itself: nothing else to wait on. */
		nanosleep(&pause, NULL);
	}
	assert_refusal(reply, has_id, "outcome_unknown", "outcome_unknown",
	    NULL, existing_lease_members);
	free(reply);
	reply = exchange(fd, resolve_line(id, csid, kind, "unknown", NULL));
	json_decref(janssons(reply, state_members, has_id));
	assert_non_null(strstr(reply, "\"action_taken\":true,"
	    "\"state\":\"outcome_unknown\""));
	free(reply);
	reply = exchange(fd, resolve_line(id, csid, kind, "unknown", NULL));
	json_decref(janssons(reply, state_members, has_id));
	assert_non_null(strstr(reply, "\"action_taken\":false,"));
	free(reply);
	reply = exchange(fd, begin_line(id, csid, kind, request,
	    SHORT_LEASE_MS, 1));
	assert_refusal(reply, has_id, "outcome_unknown", "outcome_unknown",
	    NULL, existing_members);
	free(reply);
	reply = complete_exchange(fd, resolve_line(id, csid, kind, "applied",
	    result));
	receipt = receipt_of(reply, recovered_members, has_id,
	    receipt_members);
	free(reply);
	reply = harness_raw_exchange(fd, line);
	again = receipt_of(reply, reused_recovered_members, has_id,
	    receipt_members);
	assert_string_equal(again, receipt);
	free(again);
	free(reply);
	free(line);
	assert_view_holds(fd, id, csid, kind, receipt);
	free(receipt);
}

void
effect_replies_answers(int fd)
{
	char		*result;
	int		 j, k;

	for (j = 0; j < NRESULTS; j++)
		one_effect(fd, j, results[j]);
	for (k = 0; k < NPADS; k++) {
		result = result_of(pads[k]);
		one_effect(fd, j + k, result);
		free(result);
	}
}

void
effect_replies_lapses(int fd)
{
	char		*result;
	int		 j;

	/* Every id, a result of each kind; and the largest. */
	for (j = 0; j < NIDS; j++)
		one_lapse(fd, j, results[(j * 2) % NRESULTS]);
	result = result_of(pads[NPADS - 1]);
	one_lapse(fd, j, result);
	free(result);
}

/* begin and complete applied (not transcribed: their count varies). */
static char *
commit(int fd, const char *csid, const char *result)
{
	char	*fence, *reply;
	json_t	*r;

	reply = exchange(fd, begin_line("1", csid, "k/v1", "{}", 30000, 0));
	assert_non_null(r = json_loads(reply, 0, NULL));
	if (json_object_get(r, "fence") == NULL)
		fail_msg("%s: %s", csid, reply);
	assert_non_null(fence = strdup(harness_str(r, "fence")));
	json_decref(r);
	free(reply);
	reply = complete_exchange(fd, complete_line("2", csid, "k/v1", fence,
	    "applied", result));
	free(fence);
	return reply;
}

/*
 * The tombstone of a compacted receipt whose result's bytes the arena
 * reused: reused with receipt_pruned and the result's digest, in the
 * reply and in get_submission's view alike.  The arena's least size (one
 * 64 KiB record) and a checkpoint on every 4 KiB journal segment: the
 * target is indexed, compacted and its bytes reused within a few dozen
 * effects, while the table (512) keeps its entry.
 */
static const char *const reused_pruned_members[] = { "ok", "id",
    "disposition", "action_taken", "idempotent", "receipt_pruned", "state",
    "receipt", NULL };
static const char *const pruned_receipt_members[] = {
    "client_submission_id", "effect_kind", "digest_schema",
    "request_digest", "external_key", "attempt", "result_digest", "state",
    "committed_at", NULL };
#define COMPACT_FILLERS		400
#define COMPACT_BIG_PAD		3000
const char *const effect_replies_compact_args[] = { "--capacity", "512",
    "--result-bytes", "65552", "--segment-bytes", "4096", NULL };

void
effect_replies_tombstone(struct broker *b, int fd)
{
	char		 csid[32], *result, *reply, *receipt;
	int		 i, base;

	free(commit(fd, "target", "{\"sent\":\"\\u00e9\"}"));
	base = harness_log_count(b, " new in the index");
	for (i = 0; i < COMPACT_FILLERS &&
	    harness_log_count(b, " new in the index") < base + 2; i++) {
		snprintf(csid, sizeof csid, "fill-%d", i);
		free(commit(fd, csid, "1"));
	}
	harness_wait_log(b, " new in the index", base + 2,
	    20000 * (int)harness_slowdown());
	harness_compact_now(b);
	result = result_of(COMPACT_BIG_PAD);
	for (i = 0; i < COMPACT_FILLERS; i++) {
		snprintf(csid, sizeof csid, "big-%d", i);
		free(commit(fd, csid, result));
		reply = exchange(fd, begin_line("3", "target", "k/v1", "{}",
		    30000, 1));
		if (strstr(reply, "\"receipt_pruned\":true") != NULL)
			break;
		free(reply);
	}
	assert_true(i < COMPACT_FILLERS);
	free(result);
	receipt = receipt_of(reply, reused_pruned_members, 1,
	    pruned_receipt_members);
	free(reply);
	assert_view_holds(fd, "4", "target", "k/v1", receipt);
	free(receipt);
}
