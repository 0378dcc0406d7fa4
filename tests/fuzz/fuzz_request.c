/* SPDX-License-Identifier: ISC */
/*
 * fuzz_request.c: libFuzzer target for one request line, as a worker
 * reads it off the socket (the bytes before the first LF).
 *
 * It calls request_check_line(), which parses and validates exactly as a
 * worker does (for write_task and write_report: every field, the
 * normalization and the digest) without touching any state, and checks:
 *
 *   - it returns 0 or -1 and never crashes or leaks (ASan, UBSan, LSan);
 *   - on -1, err.code is a wire error code of SPEC.md, one that a check
 *     without state can give, not retryable, and err.field is empty or a
 *     whole dotted path (valid UTF-8, no control characters, no empty
 *     segment, not cut short by its buffer);
 *   - reply_error(&err, NULL) serializes with json_dumps and reads back
 *     holding exactly the code, message, field and retryable of err;
 *   - for write_task and write_report, the broker accepts the line if
 *     and only if an independent reading of SPEC.md's field tables
 *     (spec_accepts below) does: a differential check of the validator;
 *   - the worker's parse (request_parse_line, request_tree.c) and
 *     request_parse refuse the same lines with the same error, and
 *     otherwise give the same tree (compared as dumps, member order and
 *     number types included), but for an effect_complete's compact
 *     result, which the worker's parse leaves null and names in the
 *     line: those bytes are the whole parse's result dumped compact.
 *
 * Nothing here can call into the worker: the target links the files
 * that read requests (request.c, reply.c, the ops' *_check.c) and the
 * store, and no worker file, so such a call would not link.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <utf8proc.h>

#include "digest.h"
#include "idemd.h"

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);
static void	check_worker_parse(const char *, size_t);

#define FUZZ_CHECK(cond) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "fuzz_request: invariant failed at %s:%d: %s\n", \
		    __FILE__, __LINE__, #cond);				\
		abort();						\
	}								\
} while (0)

static const char *const wire_codes[] = {
#define X(name, code)	code,
	IDEM_ERROR_CODES(X)
#undef X
	NULL
};

/*
 * What a check that changes no state can answer.  The others need the
 * table, the disk or the connection (too_large is the reader's, before
 * a line exists); "internal" is only for running out of memory.
 */
static const char *const check_codes[] = {
	"invalid_json", "invalid_utf8", "invalid_request", "unknown_op",
	"unsupported_schema", "digest_disagrees", NULL
};

static int
listed(const char *s, const char *const *list)
{
	for (; *list != NULL; list++)
		if (strcmp(s, *list) == 0)
			return 1;
	return 0;
}

/* A JSON string's value equals s, byte for byte (NULs included). */
static int
json_string_is(json_t *v, const char *s, size_t length)
{
	return json_is_string(v) && json_string_length(v) == length &&
	    memcmp(json_string_value(v), s, length) == 0;
}

static int
utf8_valid(const char *s, size_t length)
{
	const utf8proc_uint8_t	*p = (const utf8proc_uint8_t *)s;
	utf8proc_int32_t	 c;
	utf8proc_ssize_t	 n;
	size_t			 i;

	for (i = 0; i < length; i += n)
		if ((n = utf8proc_iterate(p + i, length - i, &c)) <= 0)
			return 0;
	return 1;
}

/* Empty, or segments separated by dots, none empty, none truncated. */
static int
dotted_path_valid(const char *field, size_t size)
{
	size_t	length = strlen(field), i;

	if (length == 0)
		return 1;
	if (length >= size - 1)		/* snprintf may have cut it */
		return 0;
	if (!utf8_valid(field, length))
		return 0;
	if (field[0] == '.' || field[length - 1] == '.')
		return 0;
	for (i = 0; i < length; i++) {
		unsigned char c = (unsigned char)field[i];

		if (c < 0x20 || c == 0x7f)
			return 0;
		if (c == '.' && field[i + 1] == '.')
			return 0;
	}
	return 1;
}

static void
check_error_reply(const struct request_error *err)
{
	json_t		*reply, *back, *error, *v;
	json_error_t	 jerr;
	const char	*code;
	char		*text;

	FUZZ_CHECK(err->code < WIRE_ERROR_COUNT);	/* set, and a code */
	code = wire_error_name(err->code);
	FUZZ_CHECK(listed(code, wire_codes));
	FUZZ_CHECK(listed(code, check_codes));
	FUZZ_CHECK(err->retryable == 0);
	FUZZ_CHECK(memchr(err->message, '\0', sizeof err->message) != NULL);
	FUZZ_CHECK(memchr(err->field, '\0', sizeof err->field) != NULL);
	FUZZ_CHECK(dotted_path_valid(err->field, sizeof err->field));

	reply = reply_error(err, NULL);
	FUZZ_CHECK(reply != NULL);
	text = json_dumps(reply, JSON_COMPACT);
	FUZZ_CHECK(text != NULL);
	FUZZ_CHECK(strchr(text, '\n') == NULL);	/* one line on the wire */
	back = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	FUZZ_CHECK(back != NULL);
	FUZZ_CHECK(json_is_false(json_object_get(back, "ok")));
	FUZZ_CHECK(json_is_false(json_object_get(back, "action_taken")));
	FUZZ_CHECK(json_object_get(back, "id") == NULL);
	error = json_object_get(back, "error");
	FUZZ_CHECK(json_is_object(error));
	FUZZ_CHECK(json_string_is(json_object_get(error, "code"), code,
	    strlen(code)));
	/* The message and field must survive, not be dropped silently. */
	FUZZ_CHECK(json_string_is(json_object_get(error, "message"),
	    err->message, strlen(err->message)));
	v = json_object_get(error, "field");
	if (err->field[0] == '\0')
		FUZZ_CHECK(v == NULL);
	else
		FUZZ_CHECK(json_string_is(v, err->field, strlen(err->field)));
	FUZZ_CHECK(json_is_boolean(json_object_get(error, "retryable")));
	FUZZ_CHECK(json_is_true(json_object_get(error, "retryable")) ==
	    (err->retryable != 0));
	json_decref(back);
	free(text);
	json_decref(reply);
}

/* ---- SPEC.md's field tables, read independently of the broker --------- */

/* ^[A-Z][A-Z0-9_]*(-[A-Z0-9_]+)*$, at most 16 characters. */
static int
spec_role(json_t *v)
{
	const char	*s;
	size_t		 n, i;
	int		 after_dash = 0;

	if (!json_is_string(v))
		return 0;
	s = json_string_value(v);
	n = json_string_length(v);
	if (n < 1 || n > 16 || !(s[0] >= 'A' && s[0] <= 'Z'))
		return 0;
	for (i = 1; i < n; i++) {
		if (s[i] == '-') {
			if (after_dash)
				return 0;
			after_dash = 1;
			continue;
		}
		if (!((s[i] >= 'A' && s[i] <= 'Z') ||
		    (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return 0;
		after_dash = 0;
	}
	return !after_dash;
}

/* A recipient: a role code, or an FCoP slot: two role codes joined by ".". */
static int
spec_recipient(json_t *v)
{
	const char	*s, *dot;
	json_t		*part;
	int		 ok;

	if (!json_is_string(v))
		return 0;
	s = json_string_value(v);
	dot = memchr(s, '.', json_string_length(v));
	if (dot == NULL)
		return spec_role(v);
	part = json_stringn(s, (size_t)(dot - s));
	ok = spec_role(part);
	json_decref(part);
	part = json_stringn(dot + 1, json_string_length(v) - (size_t)(dot -
	    s) - 1);
	ok = ok && spec_role(part);
	json_decref(part);
	return ok;
}

/* A string of min..max bytes without NUL (absent: ok if optional). */
static int
spec_string(json_t *v, size_t min, size_t max)
{
	size_t	n;

	if (!json_is_string(v))
		return 0;
	n = json_string_length(v);
	return n >= min && n <= max &&
	    memchr(json_string_value(v), '\0', n) == NULL;
}

static int
spec_one_of(json_t *v, const char *const *allowed)
{
	for (; *allowed != NULL; allowed++)
		if (json_string_is(v, *allowed, strlen(*allowed)))
			return 1;
	return 0;
}

static int
spec_only_keys(json_t *object, const char *const *allowed)
{
	const char	*key;
	json_t		*v;

	json_object_foreach(object, key, v) {
		if (!listed(key, allowed))
			return 0;
	}
	return 1;
}

/* client_submission_id: absent or null (legacy), or 1..200 of 0x21..0x7e. */
static int
spec_submission_id(json_t *request)
{
	json_t		*v = json_object_get(request, "client_submission_id");
	const char	*s;
	size_t		 n, i;

	if (v == NULL || json_is_null(v))
		return 1;
	if (!spec_string(v, 1, 200))
		return 0;
	s = json_string_value(v);
	n = json_string_length(v);
	for (i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
			return 0;
	return 1;
}

/* "No string anywhere in a request may contain U+0000" (names: jansson). */
static int
spec_has_nul(json_t *v)
{
	const char	*key;
	json_t		*member;
	size_t		 i;

	if (json_is_string(v))
		return memchr(json_string_value(v), '\0',
		    json_string_length(v)) != NULL;
	if (json_is_array(v)) {
		json_array_foreach(v, i, member)
			if (spec_has_nul(member))
				return 1;
	}
	if (json_is_object(v)) {
		json_object_foreach(v, key, member)
			if (spec_has_nul(member))
				return 1;
	}
	return 0;
}

static int
spec_meta(json_t *request)
{
	json_t	*meta = json_object_get(request, "meta");

	return meta == NULL || json_is_object(meta);
}

/*
 * An optional field of "task": absent and null both mean its default
 * ("null for an optional field means its default"), so both read as NULL.
 */
static json_t *
spec_optional(json_t *task, const char *key)
{
	json_t	*v = json_object_get(task, key);

	return json_is_null(v) ? NULL : v;
}

static int
spec_list(json_t *task, const char *key, const char **items, size_t *count)
{
	json_t	*list = spec_optional(task, key), *item;
	size_t	 i;

	*count = 0;
	if (list == NULL)
		return 1;
	if (!json_is_array(list) || json_array_size(list) > 256)
		return 0;
	json_array_foreach(list, i, item) {
		if (!spec_string(item, 1, 256))
			return 0;
		items[i] = json_string_value(item);
	}
	*count = json_array_size(list);
	return 1;
}

static int
spec_write_task(json_t *request)
{
	static const char *const top[] = { "op", "id", "client_submission_id",
	    "digest_schema", "request_digest", "task", "meta", NULL };
	static const char *const fields[] = { "sender", "recipient",
	    "subject", "body", "priority", "risk_level", "thread_key",
	    "parent", "references", "depends_on", NULL };
	static const char *const priorities[] = { "P0", "P1", "P2", "P3",
	    NULL };
	static const char *const risks[] = { "low", "medium", "high",
	    "irreversible", NULL };
	static const char	*refs[256], *deps[256];
	struct idem_task	 t;
	json_t			*task, *v;
	char			 digest[IDEM_DIGEST_HEX_SIZE];
	size_t			 i;

	if (!spec_only_keys(request, top) || !spec_submission_id(request) ||
	    !spec_meta(request))
		return 0;
	v = json_object_get(request, "digest_schema");
	if (v != NULL && !json_string_is(v, "write-task-v1", 13))
		return 0;
	task = json_object_get(request, "task");
	if (!json_is_object(task) || !spec_only_keys(task, fields))
		return 0;
	memset(&t, 0, sizeof t);
	if (!spec_role(json_object_get(task, "sender")) ||
	    !spec_recipient(json_object_get(task, "recipient")) ||
	    !spec_string(json_object_get(task, "subject"), 1, 1024))
		return 0;
	t.sender = json_string_value(json_object_get(task, "sender"));
	t.recipient = json_string_value(json_object_get(task, "recipient"));
	t.subject = json_string_value(json_object_get(task, "subject"));
	if ((v = spec_optional(task, "body")) != NULL) {
		if (!spec_string(v, 0, 524288))
			return 0;
		t.body = json_string_value(v);
	}
	if ((v = spec_optional(task, "priority")) != NULL) {
		if (!spec_one_of(v, priorities))
			return 0;
		t.priority = json_string_value(v);
	}
	if ((v = spec_optional(task, "risk_level")) != NULL) {
		if (!spec_one_of(v, risks))
			return 0;
		t.risk_level = json_string_value(v);
	}
	if ((v = spec_optional(task, "thread_key")) != NULL) {
		if (!spec_string(v, 1, 256))
			return 0;
		t.thread_key = json_string_value(v);
	}
	if ((v = spec_optional(task, "parent")) != NULL) {
		if (!spec_string(v, 1, 256))
			return 0;
		t.parent = json_string_value(v);
	}
	if (!spec_list(task, "references", refs, &t.references_count) ||
	    !spec_list(task, "depends_on", deps, &t.depends_on_count))
		return 0;
	t.references = refs;
	t.depends_on = deps;

	if ((v = json_object_get(request, "request_digest")) == NULL)
		return 1;
	if (!json_is_string(v) || json_string_length(v) != 64)
		return 0;
	for (i = 0; i < 64; i++) {
		char c = json_string_value(v)[i];

		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return 0;
	}
	if (idem_task_digest(&t, digest) != 0)
		return 0;
	return memcmp(digest, json_string_value(v), 64) == 0;
}

/* TASK-YYYYMMDD-NNN-SENDER-to-RECIPIENT (NNN: three digits or more). */
static int
spec_task_id(json_t *v)
{
	const char	*s, *p, *end;
	size_t		 n, i;
	json_t		*role;
	int		 ok = 0;

	if (!spec_string(v, 1, IDEM_MAX_TASK_ID_BYTES))
		return 0;
	s = json_string_value(v);
	n = json_string_length(v);
	end = s + n;
	if (n < 5 || memcmp(s, "TASK-", 5) != 0)
		return 0;
	p = s + 5;
	for (i = 0; i < 8; i++, p++)
		if (p >= end || *p < '0' || *p > '9')
			return 0;
	if (p >= end || *p++ != '-')
		return 0;
	for (i = 0; p < end && *p >= '0' && *p <= '9'; i++, p++)
		;
	if (i < 3 || p >= end || *p++ != '-')
		return 0;
	/* Role codes hold no lower case: split at the one "-to-". */
	for (i = 0; p + i + 4 <= end; i++) {
		if (memcmp(p + i, "-to-", 4) != 0)
			continue;
		role = json_stringn(p, i);
		ok = spec_role(role);
		json_decref(role);
		role = json_stringn(p + i + 4, end - (p + i + 4));
		ok = ok && spec_recipient(role);
		json_decref(role);
		return ok;
	}
	return 0;
}

static int
spec_write_report(json_t *request)
{
	static const char *const top[] = { "op", "id", "task_id",
	    "client_submission_id", "report", "meta", NULL };
	static const char *const fields[] = { "sender", "recipient",
	    "status", "body", NULL };
	static const char *const statuses[] = { "done", "blocked",
	    "in_progress", "aborted", NULL };
	json_t	*report, *v;

	if (!spec_only_keys(request, top) ||
	    !spec_task_id(json_object_get(request, "task_id")) ||
	    !spec_submission_id(request) || !spec_meta(request))
		return 0;
	report = json_object_get(request, "report");
	if (!json_is_object(report) || !spec_only_keys(report, fields))
		return 0;
	if (!spec_role(json_object_get(report, "sender")))
		return 0;
	if ((v = json_object_get(report, "recipient")) != NULL &&
	    !spec_role(v))
		return 0;
	if ((v = json_object_get(report, "status")) != NULL &&
	    !spec_one_of(v, statuses))
		return 0;
	if ((v = json_object_get(report, "body")) != NULL &&
	    !spec_string(v, 0, 524288))
		return 0;
	return 1;
}

/* ---- Effects (SPEC.md, "Effects") ---------------------------------------- */

/* client_submission_id is required for effects: 1..200 of 0x21..0x7e. */
static int
spec_effect_key(json_t *request)
{
	json_t		*kind = json_object_get(request, "effect_kind");
	const char	*s;
	size_t		 n, i;

	if (json_object_get(request, "client_submission_id") == NULL ||
	    json_is_null(json_object_get(request, "client_submission_id")) ||
	    !spec_submission_id(request) || !spec_string(kind, 1, 128) ||
	    json_string_is(kind, "write_task", 10))
		return 0;
	s = json_string_value(kind);
	n = json_string_length(kind);
	for (i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
			return 0;
	return 1;
}

/* A result as stored: its compact JSON, at most 64 KiB. */
static int
spec_result(json_t *v)
{
	char	*text;
	size_t	 n;

	if (v == NULL)
		return 1;
	if ((text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY |
	    JSON_PRESERVE_ORDER)) == NULL)
		return 0;
	n = strlen(text);
	free(text);
	return n <= 65536;
}

static int
spec_lower_hex64(json_t *v)
{
	size_t	i;

	if (!json_is_string(v) || json_string_length(v) != 64)
		return 0;
	for (i = 0; i < 64; i++) {
		char c = json_string_value(v)[i];

		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return 0;
	}
	return 1;
}

static int
spec_effect_begin(json_t *request)
{
	static const char *const top[] = { "op", "id", "client_submission_id",
	    "effect_kind", "request", "digest_schema", "request_digest",
	    "lease_ms", "meta", NULL };
	uint8_t		 sum[IDEM_SHA256_BYTES];
	char		 hex[IDEM_DIGEST_HEX_SIZE], *canonical;
	size_t		 length;
	json_t		*v, *req;

	if (!spec_only_keys(request, top) || !spec_effect_key(request) ||
	    !spec_meta(request))
		return 0;
	v = json_object_get(request, "digest_schema");
	if (v != NULL && !json_string_is(v, "generic-json-v1", 15))
		return 0;
	/* Absent or null: the default (SPEC.md, "Effects"). */
	v = json_object_get(request, "lease_ms");
	if (v != NULL && !json_is_null(v) && (!json_is_integer(v) ||
	    json_integer_value(v) < 100 || json_integer_value(v) > 86400000))
		return 0;
	if ((req = json_object_get(request, "request")) == NULL)
		return 0;
	if (digest_generic_canonical(json_string_value(json_object_get(request,
	    "effect_kind")), req, &canonical, &length, NULL) != 0)
		return 0;
	digest_sha256(canonical, length, sum);
	free(canonical);
	if (length > 512 * 1024)
		return 0;
	if ((v = json_object_get(request, "request_digest")) == NULL)
		return 1;
	if (!spec_lower_hex64(v))
		return 0;
	digest_to_hex(sum, hex);
	return memcmp(hex, json_string_value(v), 64) == 0;
}

/* "<attempt>-<16 lower hex>", attempt 1..2^32-1 without leading zero. */
static int
spec_fence(json_t *v)
{
	const char	*s, *dash;
	size_t		 n, i;
	uint64_t	 attempt = 0;

	if (!spec_string(v, 1, 31))
		return 0;
	s = json_string_value(v);
	n = json_string_length(v);
	if ((dash = memchr(s, '-', n)) == NULL || dash == s || s[0] == '0' ||
	    (size_t)(s + n - dash - 1) != 16)
		return 0;
	for (i = 0; s + i < dash; i++) {
		if (s[i] < '0' || s[i] > '9')
			return 0;
		attempt = attempt * 10 + (uint64_t)(s[i] - '0');
		if (attempt > UINT32_MAX)
			return 0;
	}
	for (i = 1; i <= 16; i++)
		if (!((dash[i] >= '0' && dash[i] <= '9') ||
		    (dash[i] >= 'a' && dash[i] <= 'f')))
			return 0;
	return 1;
}

static int
spec_effect_complete(json_t *request)
{
	static const char *const top[] = { "op", "id", "client_submission_id",
	    "effect_kind", "fence", "outcome", "result", "meta", NULL };
	static const char *const outcomes[] = { "applied", "not_applied",
	    NULL };

	return spec_only_keys(request, top) && spec_effect_key(request) &&
	    spec_meta(request) && spec_fence(json_object_get(request,
	    "fence")) && spec_one_of(json_object_get(request, "outcome"),
	    outcomes) && spec_result(json_object_get(request, "result"));
}

static int
spec_effect_extend(json_t *request)
{
	static const char *const top[] = { "op", "id", "client_submission_id",
	    "effect_kind", "fence", "lease_ms", "meta", NULL };
	json_t	*v;

	if (!spec_only_keys(request, top) || !spec_effect_key(request) ||
	    !spec_meta(request) || !spec_fence(json_object_get(request,
	    "fence")))
		return 0;
	/* Absent or null: the default (SPEC.md, "Effects"). */
	v = json_object_get(request, "lease_ms");
	return v == NULL || json_is_null(v) || (json_is_integer(v) &&
	    json_integer_value(v) >= 100 && json_integer_value(v) <= 86400000);
}

static int
spec_effect_resolve(json_t *request)
{
	static const char *const top[] = { "op", "id", "client_submission_id",
	    "effect_kind", "evidence", "meta", NULL };
	static const char *const keys[] = { "observed", "result", "source",
	    NULL };
	static const char *const observed[] = { "applied", "not_applied",
	    "unknown", NULL };
	json_t	*evidence = json_object_get(request, "evidence"), *source;

	if (!spec_only_keys(request, top) || !spec_effect_key(request) ||
	    !spec_meta(request) || !json_is_object(evidence) ||
	    !spec_only_keys(evidence, keys) ||
	    !spec_one_of(json_object_get(evidence, "observed"), observed))
		return 0;
	source = json_object_get(evidence, "source");
	if (source != NULL && !json_is_null(source) &&
	    !spec_string(source, 1, 256))
		return 0;
	return spec_result(json_object_get(evidence, "result"));
}

/*
 * 1 if SPEC.md accepts the request, 0 if not, -1 if the line is not a
 * JSON object (the broker's parser decides that; not compared here).
 */
static int
spec_accepts(const char *line, size_t length)
{
	static const char *const other_ops[] = { "hello", "get_submission",
	    "diagnose", "stats", NULL };
	json_error_t	 jerr;
	json_t		*request, *id, *op;
	int		 rc;

	request = json_loadb(line, length, JSON_REJECT_DUPLICATES |
	    JSON_ALLOW_NUL, &jerr);
	if (request == NULL)
		return -1;
	if (!json_is_object(request)) {
		json_decref(request);
		return -1;
	}
	id = json_object_get(request, "id");
	op = json_object_get(request, "op");
	if (id != NULL && (json_is_object(id) || json_is_array(id)))
		rc = 0;
	else if (spec_has_nul(request))
		rc = 0;
	else if (json_string_is(op, "write_task", 10))
		rc = spec_write_task(request);
	else if (json_string_is(op, "write_report", 12))
		rc = spec_write_report(request);
	else if (json_string_is(op, "effect_begin", 12))
		rc = spec_effect_begin(request);
	else if (json_string_is(op, "effect_complete", 15))
		rc = spec_effect_complete(request);
	else if (json_string_is(op, "effect_resolve", 14))
		rc = spec_effect_resolve(request);
	else if (json_string_is(op, "effect_extend", 13))
		rc = spec_effect_extend(request);
	else
		rc = spec_one_of(op, other_ops);
	json_decref(request);
	return rc;
}

static char *
fuzz_dump(json_t *tree)
{
	char	*s;

	s = json_dumps(tree, JSON_COMPACT | JSON_PRESERVE_ORDER |
	    JSON_ENCODE_ANY);
	FUZZ_CHECK(s != NULL);
	return s;
}

static void
check_worker_parse(const char *line, size_t size)
{
	struct request_error	 err_whole, err_lean;
	json_t			*whole, *lean;
	const char		*raw;
	size_t			 raw_length;
	char			*a, *b;

	memset(&err_whole, 0, sizeof err_whole);
	memset(&err_lean, 0, sizeof err_lean);
	whole = request_parse(line, size, &err_whole);
	lean = request_parse_line(line, size, &raw, &raw_length, &err_lean);
	FUZZ_CHECK((whole == NULL) == (lean == NULL));
	if (whole == NULL) {
		FUZZ_CHECK(err_whole.code == err_lean.code);
		FUZZ_CHECK(strcmp(err_whole.message, err_lean.message) == 0);
		FUZZ_CHECK(strcmp(err_whole.field, err_lean.field) == 0);
		return;
	}
	if (raw != NULL) {
		/*
		 * In the line, null in the tree; the bytes named are the
		 * result as stored: jansson's compact dump of the result.
		 */
		FUZZ_CHECK(raw >= line && raw + raw_length <= line + size);
		FUZZ_CHECK(json_is_null(json_object_get(lean, "result")));
		a = fuzz_dump(json_object_get(whole, "result"));
		FUZZ_CHECK(strlen(a) == raw_length &&
		    memcmp(a, raw, raw_length) == 0);
		free(a);
		json_object_set_new(whole, "result", json_null());
	}
	a = fuzz_dump(whole);
	b = fuzz_dump(lean);
	FUZZ_CHECK(strcmp(a, b) == 0);
	free(a);
	free(b);
	json_decref(whole);
	json_decref(lean);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct request_error	 err;
	const char		*line = (const char *)data;
	const uint8_t		*lf;
	int			 rc, spec;

	/* A worker hands over the bytes before the LF. */
	if ((lf = memchr(data, '\n', size)) != NULL)
		size = (size_t)(lf - data);

	check_worker_parse(line, size);
	memset(&err, 0xa5, sizeof err);		/* nothing read unset */
	err.code = WIRE_ERROR_COUNT;		/* no code: never set */
	rc = request_check_line(line, size, &err);
	FUZZ_CHECK(rc == 0 || rc == -1);
	if (rc == -1)
		check_error_reply(&err);

	spec = spec_accepts(line, size);
	if (spec == -1) {
		FUZZ_CHECK(rc == -1);
		return 0;
	}
	if (rc == -1 && err.code == WIRE_INVALID_JSON)
		FUZZ_CHECK(!"invalid_json for a line that is a JSON object");
	if (spec != (rc == 0)) {
		fprintf(stderr, "fuzz_request: SPEC.md %s the request, the "
		    "broker %s it%s%s%s\n", spec ? "accepts" : "rejects",
		    rc == 0 ? "accepts" : "rejects", rc == 0 ? "" : " (",
		    rc == 0 ? "" : err.message, rc == 0 ? "" : ")");
		abort();
	}
	return 0;
}
