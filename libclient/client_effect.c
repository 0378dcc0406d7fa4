/* SPDX-License-Identifier: ISC */
/*
 * client_effect.c: the effect ledger's calls of idem.h (SPEC.md,
 * "Effects"): effect_begin, effect_complete, effect_extend and
 * effect_resolve on client.c's connection (idem_effect_run over them:
 * client_effect_run.c).  An answer must agree with its request and its
 * own ok: a proceed carries its fence, external_key and attempt, a key
 * it names is the request's, an applied report's answer is the receipt
 * (client_effect_coherent), or it is a protocol error that closes the
 * connection.  An answer is checked and read without a tree
 * (replyscan.c): its
 * receipt and result are the bytes the broker sent (issue #33: a tree
 * of the whole answer was most of a retry's client time).
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "idem.h"
#include "protocol.h"
#include "client_int.h"
#include "jsonbytes.h"
#include "replyscan.h"

/* What an effect op's disposition is to this library; NONE: not one. */
static const enum idem_effect_disposition
    client_effect_dispositions[CLIENT_DISPOSITION_COUNT] = {
	[CLIENT_DISPOSITION_PROCEED] = IDEM_EFFECT_PROCEED,
	[CLIENT_DISPOSITION_REUSED] = IDEM_EFFECT_REUSED,
	[CLIENT_DISPOSITION_CONFLICT] = IDEM_EFFECT_CONFLICT,
	[CLIENT_DISPOSITION_IN_PROGRESS] = IDEM_EFFECT_IN_PROGRESS,
	[CLIENT_DISPOSITION_OUTCOME_UNKNOWN] = IDEM_EFFECT_OUTCOME_UNKNOWN,
};

/* ---- Effects ------------------------------------------------------------- */

void
idem_effect_clear(struct idem_effect *e)
{
	free(e->receipt);
	free(e->result);
	memset(e, 0, sizeof *e);
}

/* A JSON value from the caller's text (NULL: null). */
static json_t *
client_json_text(const char *text, const char *field, struct idem_error *err)
{
	json_error_t	 jerr;
	json_t		*v;

	if (text == NULL)
		return json_null();
	if ((v = json_loads(text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
	    &jerr)) == NULL) {
		client_error(err, IDEM_E_ARGUMENT, "%s is not JSON: %s", field,
		    jerr.text);
		snprintf(err->field, sizeof err->field, "%s", field);
	}
	return v;
}

/* A request {op, client_submission_id, effect_kind}. */
static json_t *
client_effect_request(enum idem_op_code op, const char *id, const char *kind,
    struct idem_error *err)
{
	json_t	*request;

	if (id == NULL || kind == NULL) {
		client_error(err, IDEM_E_ARGUMENT,
		    "client_submission_id and effect_kind are required");
		return NULL;
	}
	if ((request = client_request_new(op, NULL, NULL, NULL, id,
	    err)) == NULL)
		return NULL;
	if (client_set(request, "effect_kind", client_string(kind,
	    "effect_kind", err), err) != 0) {
		json_decref(request);
		return NULL;
	}
	return request;
}

/* A request {op, client_submission_id, effect_kind, fence}: a holder's. */
static json_t *
client_effect_fenced(enum idem_op_code op, const char *id, const char *kind,
    const char *fence, struct idem_error *err)
{
	json_t	*request;

	if (fence == NULL) {
		client_error(err, IDEM_E_ARGUMENT, "fence is required");
		return NULL;
	}
	if ((request = client_effect_request(op, id, kind, err)) == NULL)
		return NULL;
	if (client_set(request, "fence", client_string(fence, "fence", err),
	    err) != 0) {
		json_decref(request);
		return NULL;
	}
	return request;
}

/*
 * ---- An answer's members, read by name ----------------------------------
 *
 * The decode reads about a dozen members of each object it is given
 * (the answer, its existing, its receipt).  One find a name walks the
 * whole list: 34 walks an effect, a sixth of the client's instructions
 * (issue #33, clinew).  Instead one pass over the list takes each
 * member whose key is one of the names below, by a switch on the key's
 * length.  An object with an escaped key or more members than listed
 * is read by replyscan_find a name, as before: both give the same
 * member, since the check refuses an object with two equal keys
 * (test_libidem_decode holds them to each other).
 */
#define CLIENT_FACTS(X)							\
	X(OK, "ok")							\
	X(DISPOSITION, "disposition")					\
	X(ACTION_TAKEN, "action_taken")					\
	X(RECOVERED, "recovered")					\
	X(EXISTING, "existing")						\
	X(ERROR, "error")						\
	X(FENCE, "fence")						\
	X(EXTERNAL_KEY, "external_key")					\
	X(STATE, "state")						\
	X(REQUEST_DIGEST, "request_digest")				\
	X(LEASE_EXPIRES_AT, "lease_expires_at")				\
	X(COMMITTED_AT, "committed_at")					\
	X(ATTEMPT, "attempt")						\
	X(RESULT, "result")						\
	X(CLIENT_SUBMISSION_ID, "client_submission_id")			\
	X(EFFECT_KIND, "effect_kind")

enum client_fact {
#define CLIENT_FACT_ENUM(sym, name)	CLIENT_FACT_##sym,
	CLIENT_FACTS(CLIENT_FACT_ENUM)
#undef CLIENT_FACT_ENUM
	CLIENT_FACT_COUNT
};

static const char *const client_fact_names[CLIENT_FACT_COUNT] = {
#define CLIENT_FACT_NAME(sym, name)	[CLIENT_FACT_##sym] = name,
	CLIENT_FACTS(CLIENT_FACT_NAME)
#undef CLIENT_FACT_NAME
};

/* An object's members the decode reads; NULL where absent. */
struct client_facts {
	const struct replyscan_member	*m[CLIENT_FACT_COUNT];
	struct replyscan_member		 found[CLIENT_FACT_COUNT];
};

/*
 * Which of the names an unescaped key is, or -1: its length picks the
 * one to three names it may be (a name missing here is read as absent;
 * test_libidem_decode's escaped keys, read by name, would differ).
 */
static int
client_fact_of(const char *key, size_t length)
{
#define CLIENT_FACT_IS(sym)						\
	if (memcmp(key, client_fact_names[CLIENT_FACT_##sym], length) == 0) \
		return CLIENT_FACT_##sym
	switch (length) {
	case 2:
		CLIENT_FACT_IS(OK);
		break;
	case 5:
		CLIENT_FACT_IS(STATE);
		CLIENT_FACT_IS(FENCE);
		CLIENT_FACT_IS(ERROR);
		break;
	case 6:
		CLIENT_FACT_IS(RESULT);
		break;
	case 7:
		CLIENT_FACT_IS(ATTEMPT);
		break;
	case 8:
		CLIENT_FACT_IS(EXISTING);
		break;
	case 9:
		CLIENT_FACT_IS(RECOVERED);
		break;
	case 11:
		CLIENT_FACT_IS(DISPOSITION);
		CLIENT_FACT_IS(EFFECT_KIND);
		break;
	case 12:
		CLIENT_FACT_IS(ACTION_TAKEN);
		CLIENT_FACT_IS(EXTERNAL_KEY);
		CLIENT_FACT_IS(COMMITTED_AT);
		break;
	case 14:
		CLIENT_FACT_IS(REQUEST_DIGEST);
		break;
	case 16:
		CLIENT_FACT_IS(LEASE_EXPIRES_AT);
		break;
	case 20:
		CLIENT_FACT_IS(CLIENT_SUBMISSION_ID);
		break;
	}
	return -1;
#undef CLIENT_FACT_IS
}

/* obj's members the decode reads into f (obj must outlive f). */
static void
client_facts_of(const struct replyscan_object *obj, struct client_facts *f)
{
	const struct replyscan_member	*m = obj->members;
	size_t				 i;
	int				 fact;

	memset(f->m, 0, sizeof f->m);
	for (i = 0; i < obj->count && !obj->overflow; i++, m++) {
		if (m->key_escaped)
			break;
		if ((fact = client_fact_of(m->key, m->key_length)) >= 0)
			f->m[fact] = m;
	}
	if (i == obj->count && !obj->overflow)
		return;
	/* An escaped key, or members past the list: name by name. */
	for (fact = 0; fact < CLIENT_FACT_COUNT; fact++)
		f->m[fact] = replyscan_find(obj, client_fact_names[fact],
		    &f->found[fact]) ? &f->found[fact] : NULL;
}

/* A member absent (m NULL) or null. */
static int
client_scan_absent(const struct replyscan_member *m)
{
	return m == NULL || (m->value_length == 4 &&
	    memcmp(m->value, "null", 4) == 0);
}

/* client_copy's rules on member key's bytes: absent or null gives "". */
static int
client_scan_copy(const struct replyscan_member *m, const char *key,
    char *out, size_t size, int required, struct idem_error *err)
{
	long	n;

	out[0] = '\0';
	if (client_scan_absent(m)) {
		if (!required)
			return 0;
		client_error(err, IDEM_E_PROTOCOL, "response lacks %s", key);
		return -1;
	}
	if ((n = replyscan_string(m->value, m->value_length, out, size)) < 0 ||
	    (size_t)n >= size) {
		out[0] = '\0';
		client_error(err, IDEM_E_PROTOCOL,
		    "response %s is not a string of under %zu bytes", key,
		    size);
		return -1;
	}
	return 0;
}

/* A member that is true; absent or anything else is not. */
static int
client_scan_true(const struct replyscan_member *m)
{
	return m != NULL && m->value_length == 4 &&
	    memcmp(m->value, "true", 4) == 0;
}

/* client_bool's rules: absent is false, anything but a boolean refused. */
static int
client_scan_bool(const struct replyscan_member *m, const char *key,
    int *out, struct idem_error *err)
{
	*out = 0;
	if (m == NULL)
		return 0;
	if (m->value_length == 4 && memcmp(m->value, "true", 4) == 0)
		*out = 1;
	else if (m->value_length != 5 || memcmp(m->value, "false", 5) != 0) {
		client_error(err, IDEM_E_PROTOCOL,
		    "response %s is not a boolean", key);
		return -1;
	}
	return 0;
}

/* A member that is an object, listed into obj; 0 if it is not one. */
static int
client_scan_object(const struct replyscan_member *m,
    struct replyscan_object *obj)
{
	return m != NULL && replyscan_members(m->value, m->value_length, obj);
}

/* The facts of an answer (its top level, existing, or receipt) into out. */
static int
client_effect_facts(const struct client_facts *f, struct idem_effect *out,
    struct idem_error *err)
{
	const struct replyscan_member	*m;
	int64_t				 attempt = 0;

	if (client_scan_copy(f->m[CLIENT_FACT_FENCE], "fence", out->fence,
	    sizeof out->fence, 0, err) != 0 ||
	    client_scan_copy(f->m[CLIENT_FACT_EXTERNAL_KEY], "external_key",
	    out->external_key, sizeof out->external_key, 0, err) != 0 ||
	    client_scan_copy(f->m[CLIENT_FACT_STATE], "state", out->state,
	    sizeof out->state, 0, err) != 0 ||
	    client_scan_copy(f->m[CLIENT_FACT_REQUEST_DIGEST],
	    "request_digest", out->request_digest,
	    sizeof out->request_digest, 0, err) != 0 ||
	    client_scan_copy(f->m[CLIENT_FACT_LEASE_EXPIRES_AT],
	    "lease_expires_at", out->lease_expires_at,
	    sizeof out->lease_expires_at, 0, err) != 0 ||
	    client_scan_copy(f->m[CLIENT_FACT_COMMITTED_AT], "committed_at",
	    out->committed_at, sizeof out->committed_at, 0, err) != 0)
		return -1;
	if ((m = f->m[CLIENT_FACT_ATTEMPT]) != NULL &&
	    replyscan_integer(m->value, m->value_length, &attempt) != 0) {
		client_error(err, IDEM_E_PROTOCOL,
		    "response attempt is not an integer");
		return -1;
	}
	if (attempt > 0)
		out->attempt = (unsigned)attempt;
	return 0;
}

/* A member's bytes as they stand in the answer (malloc'd into *copy). */
static int
client_effect_text(const struct replyscan_member *m, char **copy,
    struct idem_error *err)
{
	if ((*copy = malloc(m->value_length + 1)) == NULL) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		return -1;
	}
	memcpy(*copy, m->value, m->value_length);
	(*copy)[m->value_length] = '\0';
	return 0;
}

/*
 * As long as the longest error code protocol.h names (its NUL too): a
 * union of one array per code, each its name's size.
 */
union client_effect_codes {
#define CLIENT_EFFECT_CODE(code, name)	char code[sizeof name];
	IDEM_ERROR_CODES(CLIENT_EFFECT_CODE)
#undef CLIENT_EFFECT_CODE
};

/* client_wire_error on an answer's bytes. */
static void
client_effect_wire_error(const struct client_facts *response,
    struct idem_error *err)
{
	struct replyscan_object	error;
	struct replyscan_member	m;
	/*
	 * The longest known code and one byte more: a longer code (newer
	 * than this library) is cut, but still longer than any known one,
	 * so it matches none and is kept as unknown (its cut name in the
	 * message), never taken for a known code it begins with.
	 */
	char			code[sizeof (union client_effect_codes) + 1];
	char			message[sizeof err->message];
	char			field[sizeof err->field];
	char			reason[sizeof err->reason];
	int			has_message, has_field, has_reason, retryable;

	if (!client_scan_object(response->m[CLIENT_FACT_ERROR], &error) ||
	    !replyscan_find(&error, "code", &m) ||
	    replyscan_string(m.value, m.value_length, code, sizeof code) < 0) {
		client_error(err, IDEM_E_PROTOCOL,
		    "error response without an error code");
		return;
	}
	has_message = replyscan_find(&error, "message", &m) &&
	    replyscan_string(m.value, m.value_length, message,
	    sizeof message) >= 0;
	has_field = replyscan_find(&error, "field", &m) &&
	    replyscan_string(m.value, m.value_length, field,
	    sizeof field) >= 0;
	has_reason = replyscan_find(&error, "reason", &m) &&
	    replyscan_string(m.value, m.value_length, reason,
	    sizeof reason) >= 0;
	retryable = replyscan_find(&error, "retryable", &m) &&
	    client_scan_true(&m);
	client_wire_error_of(code, has_message ? message : NULL,
	    retryable, has_field ? field : NULL,
	    has_reason ? reason : NULL, err);
}

/*
 * What the request said that its answer must agree with (NULL for
 * idem_effect_parse, which has no request): the key, whether it was an
 * extension, and whether it reported the effect applied (its answer is
 * then the receipt).
 */
struct client_expect {
	const char	*id;
	const char	*kind;
	int		 extend;
	int		 applied;
};

/*
 * A key member the answer (or its receipt) names must be the request's:
 * an answer about another key is an answer to another request.
 */
static int
client_effect_same(const struct replyscan_member *m, const char *key,
    const char *want, struct idem_error *err)
{
	char	got[256];
	long	n;

	if (want == NULL || client_scan_absent(m))
		return 0;
	n = replyscan_string(m->value, m->value_length, got, sizeof got);
	if (n < 0 || (size_t)n >= sizeof got || strcmp(got, want) != 0) {
		client_error(err, IDEM_E_PROTOCOL,
		    "the answer's %s is not the request's %s", key, want);
		return -1;
	}
	return 0;
}

static int
client_effect_keys(const struct client_facts *f,
    const struct client_expect *x, struct idem_error *err)
{
	if (x == NULL)
		return 0;
	return client_effect_same(f->m[CLIENT_FACT_CLIENT_SUBMISSION_ID],
	    "client_submission_id", x->id, err) != 0 ||
	    client_effect_same(f->m[CLIENT_FACT_EFFECT_KIND], "effect_kind",
	    x->kind, err) != 0 ? -1 : 0;
}

/*
 * An answer's disposition must agree with its ok and carry what it
 * promises: proceed (ok) its fence, external_key and an attempt from 1;
 * reused (ok) its receipt; conflict, in_progress and outcome_unknown
 * are refusals (not ok); an applied report's commit (ok) its receipt.
 * Anything else would have the caller perform, or trust, what the
 * broker did not say.
 */
static int
client_effect_coherent(const struct idem_effect *out, int ok,
    int has_disposition, int has_receipt, const struct client_expect *x,
    struct idem_error *err)
{
	const char	*wrong = NULL;

	switch (out->disposition) {
	case IDEM_EFFECT_PROCEED:
		if (!ok)
			wrong = "a refusal that says proceed";
		else if (out->fence[0] == '\0' || out->external_key[0] == '\0' ||
		    out->attempt < 1)
			wrong = "proceed without fence, external_key or an "
			    "attempt from 1";
		break;
	case IDEM_EFFECT_REUSED:
		if (!ok || !has_receipt)
			wrong = "reused without ok or a receipt";
		break;
	case IDEM_EFFECT_CONFLICT:
	case IDEM_EFFECT_IN_PROGRESS:
		if (ok)
			wrong = "a success whose disposition is a refusal";
		break;
	case IDEM_EFFECT_OUTCOME_UNKNOWN:
		if (ok && has_disposition)
			wrong = "a success whose disposition is a refusal";
		break;
	case IDEM_EFFECT_COMMITTED:
		if (x != NULL && x->applied && !has_receipt)
			wrong = "an applied effect committed without a receipt";
		break;
	default:
		break;
	}
	if (wrong == NULL)
		return 0;
	client_error(err, IDEM_E_PROTOCOL, "%s", wrong);
	return -1;
}

/*
 * Any effect op's answer (response, its members read by name; receipt,
 * its receipt's members as the check listed them, text NULL if it has
 * none) into
 * out; 0 if it is one the op may give.  A receipt's result is absent
 * from a pruned receipt (its tombstone has result_digest instead): then
 * out->result stays NULL.  The receipt and its result are their bytes
 * as sent: the broker writes them as jansson's compact dump
 * (replytext.c).
 */
static int
client_effect_answer(const struct client_facts *response,
    const struct replyscan_object *receipt, const struct client_expect *x,
    struct idem_effect *out, struct idem_error *err)
{
	struct replyscan_object		 inner;
	struct client_facts		 facts;
	struct replyscan_member		 text;
	const struct replyscan_member	*m;
	enum client_disposition		 code;
	char				 disposition[32];
	long				 n = -1;
	int				 has_disposition, has_receipt;
	int				 ok;

	ok = client_scan_true(response->m[CLIENT_FACT_OK]);
	if ((m = response->m[CLIENT_FACT_DISPOSITION]) != NULL)
		n = replyscan_string(m->value, m->value_length, disposition,
		    sizeof disposition);
	/* None of the broker's dispositions is so long: not cut, refused. */
	if (n >= (long)sizeof disposition) {
		client_error(err, IDEM_E_PROTOCOL,
		    "response's disposition is too long (%ld bytes)", n);
		return -1;
	}
	has_disposition = n >= 0;
	if (client_effect_keys(response, x, err) != 0 ||
	    client_scan_bool(response->m[CLIENT_FACT_ACTION_TAKEN],
	    "action_taken", &out->action_taken, err) != 0 ||
	    client_scan_bool(response->m[CLIENT_FACT_RECOVERED], "recovered",
	    &out->recovered, err) != 0 ||
	    client_effect_facts(response, out, err) != 0)
		return -1;
	if (client_scan_object(response->m[CLIENT_FACT_EXISTING], &inner)) {
		client_facts_of(&inner, &facts);
		if (client_effect_facts(&facts, out, err) != 0)
			return -1;
	}
	if ((has_receipt = receipt->text != NULL)) {
		client_facts_of(receipt, &facts);
		if (client_effect_keys(&facts, x, err) != 0 ||
		    client_effect_facts(&facts, out, err) != 0)
			return -1;
	}
	if (has_disposition) {
		if ((code = client_disposition(disposition)) !=
		    CLIENT_DISPOSITION_NONE)
			out->disposition = client_effect_dispositions[code];
	} else if (ok) {
		if (strcmp(out->state, "committed") == 0)
			out->disposition = IDEM_EFFECT_COMMITTED;
		else if (strcmp(out->state, "released") == 0)
			out->disposition = IDEM_EFFECT_RELEASED;
		else if (strcmp(out->state, "outcome_unknown") == 0)
			out->disposition = IDEM_EFFECT_OUTCOME_UNKNOWN;
	}
	if (has_receipt) {
		text.value = receipt->text;
		text.value_length = receipt->length;
		if (client_effect_text(&text, &out->receipt, err) != 0)
			return -1;
		if ((m = facts.m[CLIENT_FACT_RESULT]) != NULL &&
		    client_effect_text(m, &out->result, err) != 0)
			return -1;
	}
	if (client_effect_coherent(out, ok, has_disposition, has_receipt, x,
	    err) != 0) {
		out->disposition = IDEM_EFFECT_NONE;
		return -1;
	}
	if (!ok) {
		client_effect_wire_error(response, err);
		/* Only a disposition makes a refusal an answer. */
		if (!has_disposition)
			out->disposition = IDEM_EFFECT_NONE;
	}
	return out->disposition == IDEM_EFFECT_NONE ? -1 : 0;
}

/*
 * An effect op's answer line into out, checked as client_call_json
 * checks one (what jansson would accept, an object with a boolean ok)
 * but without a tree.  extend: effect_extend's, whose ok:true answer is
 * {"ok":true,"lease_expires_at":...}.
 */
static int
client_effect_line(const char *line, size_t length,
    const struct client_expect *x, struct idem_effect *out,
    struct idem_error *err)
{
	struct replyscan_object		 response, receipt;
	struct client_facts		 facts;
	const struct replyscan_member	*m;
	enum replyscan_verdict		 verdict;
	json_error_t			 jerr;
	json_t				*j;
	int				 rc;

	verdict = replyscan_line_inner(line, length, &response,
	    "receipt", &receipt);
	if (verdict == REPLYSCAN_INVALID) {
		/* jansson's words for what is wrong with it. */
		j = json_loads(line, JSON_REJECT_DUPLICATES, &jerr);
		json_decref(j);
		client_error(err, IDEM_E_PROTOCOL, "response: %s", j == NULL ?
		    jerr.text : "not JSON");
		return -1;
	}
	if (verdict == REPLYSCAN_OBJECT)
		client_facts_of(&response, &facts);
	if (verdict != REPLYSCAN_OBJECT ||
	    (m = facts.m[CLIENT_FACT_OK]) == NULL ||
	    !((m->value_length == 4 && memcmp(m->value, "true", 4) == 0) ||
	    (m->value_length == 5 && memcmp(m->value, "false", 5) == 0))) {
		client_error(err, IDEM_E_PROTOCOL,
		    "response is not an object with a boolean ok");
		return -1;
	}
	if (x != NULL && x->extend && m->value_length == 4) {
		rc = client_scan_copy(facts.m[CLIENT_FACT_LEASE_EXPIRES_AT],
		    "lease_expires_at",
		    out->lease_expires_at, sizeof out->lease_expires_at, 1,
		    err);
		if (rc == 0)
			out->disposition = IDEM_EFFECT_EXTENDED;
		return rc;
	}
	return client_effect_answer(&facts, &receipt, x, out, err);
}

int
idem_effect_parse(const char *response, struct idem_effect *out,
    struct idem_error *err)
{
	struct idem_error	scratch;
	int			rc;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	if (out == NULL || response == NULL) {
		client_error(err, IDEM_E_ARGUMENT, "%s is required",
		    out == NULL ? "out" : "response");
		if (out != NULL)
			memset(out, 0, sizeof *out);
		return -1;
	}
	memset(out, 0, sizeof *out);
	rc = client_effect_line(response, strlen(response), NULL, out, err);
	(void)client_code_out(err);
	return rc;
}

/* Send request (consumed) and take the answer into out. */
static int
client_effect_call(struct idem_conn *conn, json_t *request,
    const struct client_expect *x, struct idem_effect *out,
    struct idem_error *err)
{
	char	*line;
	int	 rc;

	if (request == NULL)
		return -1;
	rc = client_call_line(conn, request, &line, err);
	json_decref(request);
	if (rc != 0)
		return -1;
	rc = client_effect_line(line, strlen(line), x, out, err);
	free(line);
	return client_done(conn, rc, err);
}

/*
 * ---- A request line written from the caller's bytes -------------------
 *
 * The calls above build a request as a jansson tree (the caller's JSON
 * text parsed, the whole line dumped): 200,000 instructions an effect,
 * where the answer's decode is 20,000 (issue #33).  The common call
 * needs neither: its strings are printable ASCII, which jansson's dump
 * writes as they are, and its JSON text is already in compact form.
 * Then the line is written from those bytes, the members in the order
 * client_request_new gives them: byte for byte the jansson path's line
 * (test_libidem_standin holds the two to each other), which the
 * broker's retry fast path needs (it matches a retry by its bytes).
 * Anything else takes the jansson path, with its checks and its words.
 */

/* A plain line's room (effect_begin's and effect_complete's: 11 pieces). */
#define CLIENT_LINE_PIECES	16

/*
 * A line's pieces and their lengths, each counted once: a literal's at
 * compile time, the caller's strings as they are judged (not again by
 * client_call_pieces' caller).
 */
struct client_pieces {
	const char	*piece[CLIENT_LINE_PIECES];
	size_t		 length[CLIENT_LINE_PIECES];
	size_t		 count;
};

static void
client_put(struct client_pieces *l, const char *piece, size_t length)
{
	assert(l->count < CLIENT_LINE_PIECES);
	l->piece[l->count] = piece;
	l->length[l->count++] = length;
}

#define CLIENT_PUT_LITERAL(l, s)	client_put((l), (s), sizeof (s) - 1)

/*
 * A plain line's first pieces, the same for every effect op: its op,
 * id and kind (judged plain by the caller, their lengths counted then).
 */
static void
client_line_head(struct client_pieces *l, enum idem_op_code code,
    const char *id, size_t id_length, const char *kind, size_t kind_length)
{
	const char	*op = idem_op_names[code];

	l->count = 0;
	CLIENT_PUT_LITERAL(l, "{\"op\":\"");
	client_put(l, op, strlen(op));
	CLIENT_PUT_LITERAL(l, "\",\"client_submission_id\":\"");
	client_put(l, id, id_length);
	CLIENT_PUT_LITERAL(l, "\",\"effect_kind\":\"");
	client_put(l, kind, kind_length);
}

/*
 * s is printable ASCII without a quote or a backslash: a valid string
 * that jansson's dump writes as it stands (judged a word at a time, as
 * fastscan judges ids).  Its length into *length.
 */
static int
client_plain(const char *s, size_t *length)
{
	*length = strlen(s);
	return jsonbytes_printable_plain(s, *length, 0x20);
}

/*
 * text is JSON jansson accepts (an object or an array; a lone scalar
 * takes the jansson path) and its compact dump is text: both judged in
 * replyscan's one pass.  Its length into *length.
 */
static int
client_compact(const char *text, size_t *length)
{
	struct replyscan_object	top;

	if (text == NULL)
		return 0;
	*length = strlen(text);
	return replyscan_line(text, *length, &top) != REPLYSCAN_INVALID &&
	    top.compact;
}

/*
 * Send the line of the pieces and take the answer into out: the line
 * written into the connection's send buffer, the answer decoded where
 * it was read (client_call_pieces).
 */
static int
client_effect_call_pieces(struct idem_conn *conn,
    const struct client_pieces *l, const struct client_expect *x,
    struct idem_effect *out, struct idem_error *err)
{
	const char	*answer;
	size_t		 answer_length;

	if (client_call_pieces(conn, l->piece, l->length, l->count, &answer,
	    &answer_length, err) != 0)
		return -1;
	return client_done(conn, client_effect_line(answer, answer_length, x,
	    out, err), err);
}

/*
 * effect_begin's line from the caller's bytes, sent, its answer in out
 * and *rc; 0 if the call is not plain (the jansson path builds it).
 */
static int
client_begin_plain(struct idem_conn *conn, const char *id, const char *kind,
    const char *request_json, int64_t lease_ms, struct idem_effect *out,
    struct idem_error *err, int *rc)
{
	struct client_pieces	 l;
	char			 digits[24], *first;
	size_t			 id_length, kind_length, request_length;

	if (id == NULL || kind == NULL || !client_plain(id, &id_length) ||
	    !client_plain(kind, &kind_length) ||
	    !client_compact(request_json, &request_length))
		return 0;
	client_line_head(&l, IDEM_OPC_EFFECT_BEGIN, id, id_length, kind,
	    kind_length);
	CLIENT_PUT_LITERAL(&l, "\",\"request\":");
	client_put(&l, request_json, request_length);
	if (lease_ms > 0) {
		CLIENT_PUT_LITERAL(&l, ",\"lease_ms\":");
		first = jsonbytes_decimal(digits + sizeof digits,
		    (uint64_t)lease_ms);
		client_put(&l, first, (size_t)(digits + sizeof digits - first));
	}
	CLIENT_PUT_LITERAL(&l, "}");
	*rc = client_effect_call_pieces(conn, &l,
	    &(const struct client_expect){ id, kind, 0, 0 }, out, err);
	return 1;
}

/* effect_complete's line the same way; 0: the jansson path. */
static int
client_complete_plain(struct idem_conn *conn, const char *id,
    const char *kind, const char *fence, int applied, const char *result_json,
    struct idem_effect *out, struct idem_error *err, int *rc)
{
	struct client_pieces	 l;
	size_t			 id_length, kind_length, fence_length;
	size_t			 result_length = 0;

	if (id == NULL || kind == NULL || fence == NULL ||
	    !client_plain(id, &id_length) ||
	    !client_plain(kind, &kind_length) ||
	    !client_plain(fence, &fence_length) ||
	    (applied && !client_compact(result_json, &result_length)))
		return 0;
	client_line_head(&l, IDEM_OPC_EFFECT_COMPLETE, id, id_length, kind,
	    kind_length);
	CLIENT_PUT_LITERAL(&l, "\",\"fence\":\"");
	client_put(&l, fence, fence_length);
	if (applied) {
		CLIENT_PUT_LITERAL(&l, "\",\"outcome\":\"applied\",\"result\":");
		client_put(&l, result_json, result_length);
	} else
		CLIENT_PUT_LITERAL(&l, "\",\"outcome\":\"not_applied\"");
	CLIENT_PUT_LITERAL(&l, "}");
	*rc = client_effect_call_pieces(conn, &l,
	    &(const struct client_expect){ id, kind, 0, applied }, out, err);
	return 1;
}

int
idem_effect_begin(struct idem_conn *conn, const char *client_submission_id,
    const char *effect_kind, const char *request_json, int64_t lease_ms,
    struct idem_effect *out, struct idem_error *err)
{
	struct idem_error	 scratch;
	json_t			*request, *value;
	int			 rc;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	memset(out, 0, sizeof *out);
	if (request_json == NULL) {
		client_error(err, IDEM_E_ARGUMENT, "request is required");
		return -1;
	}
	if (client_begin_plain(conn, client_submission_id, effect_kind,
	    request_json, lease_ms, out, err, &rc))
		return rc;
	request = client_effect_request(IDEM_OPC_EFFECT_BEGIN,
	    client_submission_id, effect_kind, err);
	if (request == NULL)
		return -1;
	if ((value = client_json_text(request_json, "request", err)) == NULL ||
	    client_set(request, "request", value, err) != 0 ||
	    (lease_ms > 0 && client_set(request, "lease_ms",
	    json_integer(lease_ms), err) != 0)) {
		json_decref(request);
		return -1;
	}
	return client_effect_call(conn, request,
	    &(const struct client_expect){ client_submission_id, effect_kind,
	    0, 0 }, out, err);
}

int
idem_effect_complete(struct idem_conn *conn, const char *client_submission_id,
    const char *effect_kind, const char *fence, int applied,
    const char *result_json, struct idem_effect *out, struct idem_error *err)
{
	struct idem_error	 scratch;
	json_t			*request, *value = NULL;
	int			 rc;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	memset(out, 0, sizeof *out);
	if (client_complete_plain(conn, client_submission_id, effect_kind,
	    fence, applied, result_json, out, err, &rc))
		return rc;
	request = client_effect_fenced(IDEM_OPC_EFFECT_COMPLETE,
	    client_submission_id, effect_kind, fence, err);
	if (request == NULL)
		return -1;
	if (client_set(request, "outcome", json_string(applied ?
	    "applied" : "not_applied"), err) != 0 ||
	    (applied && ((value = client_json_text(result_json, "result",
	    err)) == NULL || client_set(request, "result", value,
	    err) != 0))) {
		json_decref(request);
		return -1;
	}
	return client_effect_call(conn, request,
	    &(const struct client_expect){ client_submission_id, effect_kind,
	    0, applied }, out, err);
}

int
idem_effect_resolve(struct idem_conn *conn, const char *client_submission_id,
    const char *effect_kind, enum idem_effect_observed observed,
    const char *result_json, const char *source, struct idem_effect *out,
    struct idem_error *err)
{
	static const char *const names[] = {
		"applied", "not_applied", "unknown"
	};
	struct idem_error	 scratch;
	json_t			*request, *evidence, *value;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	memset(out, 0, sizeof *out);
	if ((unsigned)observed >= nitems(names)) {
		client_error(err, IDEM_E_ARGUMENT, "observed is out of range");
		return -1;
	}
	request = client_effect_request(IDEM_OPC_EFFECT_RESOLVE,
	    client_submission_id, effect_kind, err);
	if (request == NULL)
		return -1;
	if ((evidence = json_object()) == NULL ||
	    client_set(evidence, "observed", json_string(names[observed]),
	    err) != 0 ||
	    (observed == IDEM_OBSERVED_APPLIED && ((value = client_json_text(
	    result_json, "result", err)) == NULL || client_set(evidence,
	    "result", value, err) != 0)) ||
	    (source != NULL && client_set(evidence, "source",
	    client_string(source, "source", err), err) != 0) ||
	    client_set(request, "evidence", evidence, err) != 0) {
		if (evidence == NULL)
			client_error(err, IDEM_E_NOMEM, "out of memory");
		json_decref(request);
		return -1;
	}
	return client_effect_call(conn, request,
	    &(const struct client_expect){ client_submission_id, effect_kind,
	    0, observed == IDEM_OBSERVED_APPLIED }, out, err);
}

int
idem_effect_extend(struct idem_conn *conn, const char *client_submission_id,
    const char *effect_kind, const char *fence, int64_t lease_ms,
    struct idem_effect *out, struct idem_error *err)
{
	struct idem_error	 scratch;
	json_t			*request;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	memset(out, 0, sizeof *out);
	request = client_effect_fenced(IDEM_OPC_EFFECT_EXTEND,
	    client_submission_id, effect_kind, fence, err);
	if (request == NULL)
		return -1;
	if (lease_ms > 0 && client_set(request, "lease_ms",
	    json_integer(lease_ms), err) != 0) {
		json_decref(request);
		return -1;
	}
	return client_effect_call(conn, request,
	    &(const struct client_expect){ client_submission_id, effect_kind,
	    1, 0 }, out, err);
}
