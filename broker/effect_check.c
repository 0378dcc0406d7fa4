/* SPDX-License-Identifier: ISC */
/*
 * effect_check.c: reading effect_begin, effect_complete,
 * effect_extend and effect_resolve requests into a struct effect
 * (effect.c carries them out), and the op table's checks, which read a
 * request the same way and change nothing.  Nothing here touches the
 * segment, the journal, a file or a connection: the fuzzer links this
 * file alone (with fastscan.c, whose fastscan_compact_member reads a
 * complete's result from its line).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "fastscan.h"
#include "idemd.h"

static int	effect_check_op(enum effect_op, json_t *,
		    struct request_error *);

static const char *const begin_keys[] = {
	"op", "id", "client_submission_id", "effect_kind", "request",
	"digest_schema", "request_digest", "lease_ms", "meta", NULL
};

static const char *const complete_keys[] = {
	"op", "id", "client_submission_id", "effect_kind", "fence", "outcome",
	"result", "meta", NULL
};

static const char *const resolve_keys[] = {
	"op", "id", "client_submission_id", "effect_kind", "evidence", "meta",
	NULL
};

static const char *const extend_keys[] = {
	"op", "id", "client_submission_id", "effect_kind", "fence", "lease_ms",
	"meta", NULL
};

static const char *const evidence_keys[] = {
	"observed", "result", "source", NULL
};

void
effect_free(void *arg)
{
	struct effect	*e = arg;

	free(e->result);
	free(e->cold_result);
	free(e);
}

/* 1..128 bytes of 0x21..0x7e (the reserved write_task is the caller's). */
int
effect_kind_valid(const char *kind, size_t length, struct request_error *err)
{
	size_t	i;

	for (i = 0; i < length; i++) {
		if ((unsigned char)kind[i] < 0x21 ||
		    (unsigned char)kind[i] > 0x7e)
			return request_error_set(err, WIRE_INVALID_REQUEST,
			    "effect_kind", "effect_kind must be printable "
			    "ASCII without spaces (byte %zu is 0x%02x)", i,
			    (unsigned char)kind[i]);
	}
	return 0;
}

/* effect_kind: 1..128 bytes of 0x21..0x7e, not the reserved write_task. */
static int
effect_kind_field(json_t *request, struct effect *e,
    struct request_error *err)
{
	const char	*kind;
	size_t		 length;
	int		 rc;

	rc = request_string(request, "effect_kind", "effect_kind", 1,
	    IDEM_MAX_EFFECT_KIND_BYTES, 0, &kind, &length, err);
	if (rc < 0)
		return -1;
	if (rc == 0)
		return request_error_set(err, WIRE_INVALID_REQUEST,
		    "effect_kind", "effect_kind is required");
	if (effect_kind_valid(kind, length, err) != 0)
		return -1;
	if (strcmp(kind, IDEM_EFFECT_KIND_RESERVED) == 0)
		return request_error_set(err, WIRE_INVALID_REQUEST,
		    "effect_kind", "effect_kind \"%s\" is reserved: idem "
		    "performs it itself (op write_task)",
		    IDEM_EFFECT_KIND_RESERVED);
	memcpy(e->kind, kind, length + 1);
	return 0;
}

/* The key and kind every effect op names. */
static int
effect_key(json_t *request, struct effect *e, struct request_error *err)
{
	const char	*id;
	size_t		 n, k;
	int		 rc;

	if ((rc = request_submission_id(request, &id, err)) < 0)
		return -1;
	if (rc == 0)
		return request_error_set(err, WIRE_INVALID_REQUEST,
		    "client_submission_id", "client_submission_id is "
		    "required: effects are idempotent or not offered");
	if (effect_kind_field(request, e, err) != 0)
		return -1;
	/* Both checked for their lengths: copies, not formats. */
	n = strlen(id);
	k = strlen(e->kind);
	if (n >= sizeof e->id || k + 1 + n >= sizeof e->key)
		return request_error_set(err, WIRE_INTERNAL, NULL,
		    "an effect's key longer than its room");
	memcpy(e->id, id, n + 1);
	memcpy(e->key, e->kind, k);
	e->key[k] = SUBTAB_EFFECT_SEPARATOR;
	memcpy(e->key + k + 1, id, n + 1);
	e->key_length = k + 1 + n;
	return 0;
}

static int
meta_field(json_t *request, struct request_error *err)
{
	json_t	*meta = json_object_get(request, "meta");

	if (meta != NULL && !json_is_object(meta))
		return request_error_set(err, WIRE_INVALID_REQUEST, "meta",
		    "meta must be an object");
	return 0;
}

/*
 * result, as stored: its compact serialization, at most the limit.  A
 * complete's top-level result already written as that serialization in
 * its line (fastscan_compact_member) is copied, not dumped again.
 */
static int
result_field(json_t *result, const char *path, struct effect *e,
    struct request_error *err)
{
	const char	*raw;
	size_t		 raw_length;

	e->has_result = result != NULL;
	if (result == NULL)
		result = json_null();
	free(e->result);
	/*
	 * Taken from the line, never dumped, when the line has it in this
	 * form; the worker's parse found it so (e->line_result) and left
	 * null in its place in the tree (request_parse_line).
	 */
	raw = e->line_result;
	raw_length = e->line_result_length;
	if (e->line != NULL && strcmp(path, "result") == 0 && (raw != NULL ||
	    fastscan_compact_member(e->line, e->line_length, "result", &raw,
	    &raw_length))) {
		if ((e->result = malloc(raw_length + 1)) != NULL) {
			memcpy(e->result, raw, raw_length);
			e->result[raw_length] = '\0';
		}
	} else
		e->result = json_dumps(result, JSON_COMPACT | JSON_ENCODE_ANY |
		    JSON_PRESERVE_ORDER);
	if (e->result == NULL)
		return request_error_set(err, WIRE_INTERNAL, NULL,
		    "cannot serialize %s", path);
	e->result_length = strlen(e->result);
	if (e->result_length > IDEM_MAX_EFFECT_RESULT_BYTES)
		return request_error_set(err, WIRE_INVALID_REQUEST, path,
		    "%s is %zu bytes as compact JSON; at most %d", path,
		    e->result_length, IDEM_MAX_EFFECT_RESULT_BYTES);
	return 0;
}

/*
 * lease_ms (begin and extend): 100..86400000, absent or null the default
 * (SPEC.md, "Effects": null is the default, as for every optional member).
 */
static int
lease_field(json_t *request, struct effect *e, struct request_error *err)
{
	json_t	*lease;

	e->lease_ms = IDEM_DEFAULT_LEASE_MS;
	if ((lease = json_object_get(request, "lease_ms")) == NULL ||
	    json_is_null(lease))
		return 0;
	if (!json_is_integer(lease) ||
	    json_integer_value(lease) < IDEM_MIN_LEASE_MS ||
	    json_integer_value(lease) > IDEM_MAX_LEASE_MS)
		return request_error_set(err, WIRE_INVALID_REQUEST,
		    "lease_ms", "lease_ms must be an integer from %d to %d",
		    IDEM_MIN_LEASE_MS, IDEM_MAX_LEASE_MS);
	e->lease_ms = json_integer_value(lease);
	return 0;
}

static int
begin_parse(json_t *request, struct effect *e, struct request_error *err)
{
	json_t		*req;
	const char	*schema, *given;
	char		 where[DIGEST_PATH_BYTES];
	char		 hex[IDEM_DIGEST_HEX_SIZE];
	uint8_t		 given_digest[IDEM_SHA256_BYTES];
	size_t		 length;

	if (request_known_keys(request, "", begin_keys, err) != 0 ||
	    effect_key(request, e, err) != 0 || meta_field(request, err) != 0)
		return -1;
	if (request_string(request, "digest_schema", "digest_schema", 1, 64, 0,
	    &schema, &length, err) < 0)
		return -1;
	if (schema != NULL && strcmp(schema, IDEM_SCHEMA_GENERIC_JSON_V1) != 0)
		return request_error_set(err, WIRE_UNSUPPORTED_SCHEMA,
		    "digest_schema", "digest_schema \"%.64s\" is not supported "
		    "for effects (supported: %s)", schema,
		    IDEM_SCHEMA_GENERIC_JSON_V1);
	if (request_string(request, "request_digest", "request_digest", 64, 64,
	    0, &given, &length, err) < 0)
		return -1;
	if (given != NULL && digest_from_hex(given, given_digest) != 0)
		return request_error_set(err, WIRE_INVALID_REQUEST,
		    "request_digest", "request_digest must be 64 lower-case "
		    "hex digits");
	if (lease_field(request, e, err) != 0)
		return -1;
	if ((req = json_object_get(request, "request")) == NULL)
		return request_error_set(err, WIRE_INVALID_REQUEST, "request",
		    "request is required (any JSON value: what the effect "
		    "will do)");
	if (digest_generic_sha256(e->kind, req, e->digest, &length,
	    where) != 0) {
		switch (errno) {
		case EILSEQ:
			return request_error_set(err, WIRE_INVALID_UTF8,
			    "request", "request%s holds invalid UTF-8", where);
		case EEXIST:
			return request_error_set(err, WIRE_INVALID_REQUEST,
			    "request", "request%s: two member names are equal "
			    "after normalization (CRLF, NFC)", where);
		case EDOM:
			return request_error_set(err, WIRE_INVALID_REQUEST,
			    "request", "request%s: integers beyond +-2^53 have "
			    "no exact JCS form; send them as strings", where);
		case EINVAL:
			return request_error_set(err, WIRE_INVALID_REQUEST,
			    "request", "request%s contains a NUL character",
			    where);
		case ELOOP:
			return request_error_set(err, WIRE_INVALID_REQUEST,
			    "request", "request is nested deeper than %d",
			    IDEM_MAX_JSON_DEPTH);
		}
		return request_error_set(err, WIRE_INTERNAL, NULL,
		    "canonical form: %s", strerror(errno));
	}
	if (length > IDEM_MAX_EFFECT_REQUEST_BYTES)
		return request_error_set(err, WIRE_INVALID_REQUEST, "request",
		    "request is %zu bytes in canonical form; at most %d",
		    length, IDEM_MAX_EFFECT_REQUEST_BYTES);
	if (given != NULL && memcmp(given_digest, e->digest,
	    IDEM_SHA256_BYTES) != 0) {
		digest_to_hex(e->digest, hex);
		return request_error_set(err, WIRE_DIGEST_DISAGREES,
		    "request_digest", "request_digest %s is not the broker's "
		    "generic-json-v1 digest of the request, %s", given, hex);
	}
	return 0;
}

/* "<attempt>-<16 hex>" */
static int
fence_parse(const char *s, uint32_t *attempt, uint64_t *nonce)
{
	char			*end;
	unsigned long long	 a, n;
	size_t			 i;

	if (s[0] < '1' || s[0] > '9')
		return -1;
	errno = 0;
	a = strtoull(s, &end, 10);
	if (errno != 0 || a > UINT32_MAX || *end != '-' || strlen(end + 1) != 16)
		return -1;
	for (i = 1; i <= 16; i++)
		if (!((end[i] >= '0' && end[i] <= '9') ||
		    (end[i] >= 'a' && end[i] <= 'f')))
			return -1;
	n = strtoull(end + 1, NULL, 16);
	*attempt = (uint32_t)a;
	*nonce = n;
	return 0;
}

/* fence (complete and extend): required, the one a proceed gave. */
static int
fence_field(json_t *request, struct effect *e, struct request_error *err)
{
	const char	*fence;
	size_t		 length;
	int		 rc;

	rc = request_string(request, "fence", "fence", 1,
	    IDEM_EFFECT_FENCE_SIZE - 1, 0, &fence, &length, err);
	if (rc < 0)
		return -1;
	if (rc == 0)
		return request_error_set(err, WIRE_INVALID_REQUEST, "fence",
		    "fence is required: the one effect_begin's proceed gave");
	if (fence_parse(fence, &e->fence_attempt, &e->fence_nonce) != 0)
		return request_error_set(err, WIRE_INVALID_REQUEST, "fence",
		    "fence is malformed: a fence is the attempt, \"-\" and 16 "
		    "hex digits, as effect_begin's proceed gave it");
	return 0;
}

static int
complete_parse(json_t *request, struct effect *e, struct request_error *err)
{
	static const char *const outcomes[] = {
		"applied", "not_applied", NULL
	};
	const char	*outcome;
	size_t		 length;
	int		 rc;

	if (request_known_keys(request, "", complete_keys, err) != 0 ||
	    effect_key(request, e, err) != 0 || meta_field(request, err) != 0 ||
	    fence_field(request, e, err) != 0)
		return -1;
	rc = request_string(request, "outcome", "outcome", 1, 16, 0, &outcome,
	    &length, err);
	if (rc < 0)
		return -1;
	if (rc == 0 || !request_one_of(outcome, outcomes))
		return request_error_set(err, WIRE_INVALID_REQUEST, "outcome",
		    "outcome must be \"applied\" or \"not_applied\"");
	e->outcome = strcmp(outcome, "applied") == 0 ? OUTCOME_APPLIED :
	    OUTCOME_NOT_APPLIED;
	return result_field(json_object_get(request, "result"), "result", e,
	    err);
}

static int
extend_parse(json_t *request, struct effect *e, struct request_error *err)
{
	if (request_known_keys(request, "", extend_keys, err) != 0 ||
	    effect_key(request, e, err) != 0 || meta_field(request, err) != 0 ||
	    fence_field(request, e, err) != 0)
		return -1;
	return lease_field(request, e, err);
}

static int
resolve_parse(json_t *request, struct effect *e, struct request_error *err)
{
	static const char *const observed[] = {
		"applied", "not_applied", "unknown", NULL
	};
	json_t		*evidence;
	const char	*value;
	size_t		 length;
	int		 rc;

	if (request_known_keys(request, "", resolve_keys, err) != 0 ||
	    effect_key(request, e, err) != 0 || meta_field(request, err) != 0)
		return -1;
	evidence = json_object_get(request, "evidence");
	if (evidence == NULL || !json_is_object(evidence))
		return request_error_set(err, WIRE_INVALID_REQUEST, "evidence",
		    "evidence must be an object: {observed, result, source}");
	if (request_known_keys(evidence, "evidence", evidence_keys, err) != 0)
		return -1;
	rc = request_string(evidence, "observed", "evidence.observed", 1, 16,
	    0, &value, &length, err);
	if (rc < 0)
		return -1;
	if (rc == 0 || !request_one_of(value, observed))
		return request_error_set(err, WIRE_INVALID_REQUEST,
		    "evidence.observed", "evidence.observed must be "
		    "\"applied\", \"not_applied\" or \"unknown\"");
	e->outcome = strcmp(value, "applied") == 0 ? OUTCOME_APPLIED :
	    strcmp(value, "not_applied") == 0 ? OUTCOME_NOT_APPLIED :
	    OUTCOME_UNKNOWN;
	rc = request_string(evidence, "source", "evidence.source", 1,
	    IDEM_MAX_EVIDENCE_SOURCE_BYTES, 1, &value, &length, err);
	if (rc < 0)
		return -1;
	if (rc == 1 && value != NULL)
		snprintf(e->source, sizeof e->source, "%s", value);
	return result_field(json_object_get(evidence, "result"),
	    "evidence.result", e, err);
}

int
effect_parse(enum effect_op op, json_t *request, struct effect *e,
    struct request_error *err)
{
	switch (op) {
	case EFFECT_BEGIN:
		return begin_parse(request, e, err);
	case EFFECT_COMPLETE:
		return complete_parse(request, e, err);
	case EFFECT_RESOLVE:
		return resolve_parse(request, e, err);
	case EFFECT_EXTEND:
		return extend_parse(request, e, err);
	}
	return -1;
}

/* The op table's checks (optable.c). */
int
effect_begin_check(json_t *request, struct request_error *err)
{
	return effect_check_op(EFFECT_BEGIN, request, err);
}

int
effect_complete_check(json_t *request, struct request_error *err)
{
	return effect_check_op(EFFECT_COMPLETE, request, err);
}

int
effect_resolve_check(json_t *request, struct request_error *err)
{
	return effect_check_op(EFFECT_RESOLVE, request, err);
}

int
effect_extend_check(json_t *request, struct request_error *err)
{
	return effect_check_op(EFFECT_EXTEND, request, err);
}

static int
effect_check_op(enum effect_op op, json_t *request, struct request_error *err)
{
	struct effect	*e;
	int		 rc;

	if ((e = calloc(1, sizeof *e)) == NULL)
		return request_error_set(err, WIRE_INTERNAL, NULL,
		    "out of memory");
	rc = effect_parse(op, request, e, err);
	effect_free(e);
	return rc;
}
