/* SPDX-License-Identifier: ISC */
/*
 * test_digest.c: the digest schemes of libclient/digest.c against the
 * conformance vectors ($IDEM_VECTORS/write-task-v1.json) and against
 * hand-checked expectations for escaping, normalization, errors, role
 * codes and hex.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "integration/filter.h"
#include "digest.h"

#define REPORT_TASK_ID	"TASK-20261202-007-PM-to-DEV"
/* Written by hand from SPEC.md; digest from printf '%s' ... | sha256sum. */
#define REPORT_CANONICAL \
	"{\"body\":\"Done.\\nAll good\",\"recipient\":\"PM\"," \
	"\"sender\":\"DEV\",\"status\":\"done\"," \
	"\"task_id\":\"" REPORT_TASK_ID "\"}"
#define REPORT_DIGEST \
	"84c3faacdb604e51470aee4d9d749d612dbfece8a96aa5678cd9b20003d09737"

/* SHA-256("abc"), FIPS 180-2 appendix B.1. */
#define ABC_DIGEST \
	"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

/* digest_write_json_string's output as a malloc'd string. */
static char *
encode(const char *s, size_t length, int yaml_safe)
{
	char	*buf = NULL;
	size_t	 size;
	FILE	*fp;

	fp = open_memstream(&buf, &size);
	assert_non_null(fp);
	assert_int_equal(digest_write_json_string(fp, s, length, yaml_safe), 0);
	assert_int_equal(fclose(fp), 0);
	return buf;
}

static void
assert_encodes(const char *s, int yaml_safe, const char *expected)
{
	char	*got = encode(s, strlen(s), yaml_safe);

	assert_string_equal(got, expected);
	free(got);
}

static char *
normalize(const char *s)
{
	char	*n;
	size_t	 length;

	n = digest_normalize_string(s, strlen(s), &length);
	assert_non_null(n);
	assert_int_equal(length, strlen(n));
	return n;
}

/* A vector's string or null; anything else fails the test. */
static const char *
vector_string(json_t *task, const char *key)
{
	json_t	*v = json_object_get(task, key);

	if (v == NULL || json_is_null(v))
		return NULL;
	assert_true(json_is_string(v));
	return json_string_value(v);
}

static const char **
vector_list(json_t *task, const char *key, size_t *count)
{
	json_t		 *v = json_object_get(task, key), *item;
	const char	**list;
	size_t		  i;

	*count = 0;
	if (v == NULL || json_is_null(v))	/* null means the default */
		return NULL;
	assert_true(json_is_array(v));
	*count = json_array_size(v);
	list = calloc(*count + 1, sizeof *list);
	assert_non_null(list);
	json_array_foreach(v, i, item) {
		assert_true(json_is_string(item));
		list[i] = json_string_value(item);
	}
	return list;
}

/* Every member of a vector's task is one of known[0..n-1]. */
static void
assert_known_fields(const char *name, json_t *task,
    const char *const *known, size_t n)
{
	const char	*key;
	json_t		*value;
	size_t		 i;

	json_object_foreach(task, key, value) {
		for (i = 0; i < n; i++)
			if (strcmp(key, known[i]) == 0)
				break;
		if (i == n)
			fail_msg("vector %s: unknown task field %s", name, key);
	}
}

/* canonical (malloc'd, freed here) is the vector's, byte for byte. */
static void
assert_canonical(const char *name, json_t *vector, char *canonical,
    size_t length)
{
	json_t	*expected = json_object_get(vector, "canonical");

	if (length != json_string_length(expected) ||
	    memcmp(canonical, json_string_value(expected), length) != 0)
		fail_msg("vector %s:\n got      %s\n expected %s", name,
		    canonical, json_string_value(expected));
	free(canonical);
}

static void
run_vector(json_t *vector, void *arg)
{
	static const char *const known[] = { "sender", "recipient", "subject",
	    "body", "priority", "risk_level", "thread_key", "parent",
	    "references", "depends_on" };
	json_t		*task = json_object_get(vector, "task");
	const char	*name, *expected, **refs, **deps;
	struct idem_task t;
	char		*canonical, digest[IDEM_DIGEST_HEX_SIZE];
	size_t		 length;

	name = json_string_value(json_object_get(vector, "name"));
	expected = json_string_value(json_object_get(vector, "canonical"));
	assert_non_null(name);
	assert_non_null(expected);
	assert_true(json_is_object(task));

	/* A field this test does not know would silently drop out. */
	assert_known_fields(name, task, known, sizeof known / sizeof known[0]);

	memset(&t, 0, sizeof t);
	t.sender = vector_string(task, "sender");
	t.recipient = vector_string(task, "recipient");
	t.subject = vector_string(task, "subject");
	t.body = vector_string(task, "body");
	t.priority = vector_string(task, "priority");
	t.risk_level = vector_string(task, "risk_level");
	t.thread_key = vector_string(task, "thread_key");
	t.parent = vector_string(task, "parent");
	t.references = refs = vector_list(task, "references",
	    &t.references_count);
	t.depends_on = deps = vector_list(task, "depends_on",
	    &t.depends_on_count);

	if (idem_task_canonical(&t, &canonical, &length) != 0)
		fail_msg("vector %s: canonical failed: %s", name,
		    strerror(errno));
	assert_canonical(name, vector, canonical, length);

	assert_int_equal(idem_task_digest(&t, digest), 0);
	expected = json_string_value(json_object_get(vector,
	    "request_digest"));
	assert_non_null(expected);
	if (strcmp(digest, expected) != 0)
		fail_msg("vector %s: digest %s, expected %s", name, digest,
		    expected);
	free(refs);
	free(deps);
}

/* One vector of a file, with what the test keeps across vectors. */
typedef void (*vector_fn)(json_t *vector, void *arg);

/*
 * Every vector of $IDEM_VECTORS/<file>, whose "schema" must be schema;
 * the file must hold some: a missing or emptied file must not pass.
 */
static void
run_vectors(const char *file, const char *schema, vector_fn run, void *arg)
{
	const char	*dir = getenv("IDEM_VECTORS");
	char		 path[4096];
	json_t		*root, *vectors, *vector;
	json_error_t	 jerr;
	size_t		 i;

	if (dir == NULL)
		fail_msg("IDEM_VECTORS is not set");
	snprintf(path, sizeof path, "%s/%s", dir, file);
	root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (root == NULL)
		fail_msg("%s:%d: %s", path, jerr.line, jerr.text);
	assert_string_equal(json_string_value(json_object_get(root, "schema")),
	    schema);
	vectors = json_object_get(root, "vectors");
	assert_true(json_is_array(vectors));
	assert_true(json_array_size(vectors) > 0);
	json_array_foreach(vectors, i, vector)
		run(vector, arg);
	json_decref(root);
}

static void
test_conformance_vectors_all_match(void **state)
{
	run_vectors("write-task-v1.json", IDEM_SCHEMA_WRITE_TASK_V1,
	    run_vector, NULL);
}

/* FCoP fidelity: null means the default; a slot recipient (DEV.D1). */
static void
test_fcop_vectors_all_match(void **state)
{
	run_vectors("write-task-v1-fcop.json", IDEM_SCHEMA_WRITE_TASK_V1,
	    run_vector, NULL);
}

/* One fcop-create-task-v1 vector: canonical bytes and digest. */
static void
run_fcop_vector(json_t *vector, void *arg)
{
	static const char *const known[] = { "sender", "recipient", "subject",
	    "body", "priority", "parent", "branch_of", "references" };
	json_t			*task = json_object_get(vector, "task");
	const char		*name, *expected, **refs;
	struct idem_fcop_task	 t;
	char			*canonical, digest[IDEM_DIGEST_HEX_SIZE];
	size_t			 length;

	name = json_string_value(json_object_get(vector, "name"));
	expected = json_string_value(json_object_get(vector, "canonical"));
	assert_non_null(name);
	assert_non_null(expected);
	assert_true(json_is_object(task));
	assert_known_fields(name, task, known, sizeof known / sizeof known[0]);
	memset(&t, 0, sizeof t);
	t.workspace_id = json_string_value(json_object_get(vector,
	    "workspace_id"));
	t.operation_id = json_string_value(json_object_get(vector,
	    "operation_id"));
	assert_non_null(t.workspace_id);
	assert_non_null(t.operation_id);
	t.sender = vector_string(task, "sender");
	t.recipient = vector_string(task, "recipient");
	t.subject = vector_string(task, "subject");
	t.body = vector_string(task, "body");
	t.priority = vector_string(task, "priority");
	t.parent = vector_string(task, "parent");
	t.branch_of = vector_string(task, "branch_of");
	t.references = refs = vector_list(task, "references",
	    &t.references_count);

	if (idem_fcop_task_canonical(&t, &canonical, &length) != 0)
		fail_msg("vector %s: canonical failed: %s", name,
		    strerror(errno));
	assert_canonical(name, vector, canonical, length);
	assert_int_equal(idem_fcop_task_digest(&t, digest), 0);
	if (strcmp(digest, json_string_value(json_object_get(vector,
	    "request_digest"))) != 0)
		fail_msg("vector %s: digest %s", name, digest);
	free(refs);
}

/* idem's own vectors for fcop-create-task-v1 (FCoP 4.0's C7 digest). */
static void
test_fcop_create_task_vectors_all_match(void **state)
{
	run_vectors("fcop-create-task-v1.json", IDEM_SCHEMA_FCOP_CREATE_TASK_V1,
	    run_fcop_vector, NULL);
}

/* FCoP 4's identifier grammars, as the broker checks them. */
static void
test_fcop_identifier_grammars(void **state)
{
	char	long_id[IDEM_MAX_OPERATION_ID_BYTES + 2];

	assert_true(digest_fcop_operation_id_valid("a", 1));
	assert_true(digest_fcop_operation_id_valid("ns:Run-1.step_x", 15));
	assert_false(digest_fcop_operation_id_valid("ns:Run-1.step x", 15));
	assert_false(digest_fcop_operation_id_valid("-a", 2));
	assert_false(digest_fcop_operation_id_valid("run/1", 5));
	assert_false(digest_fcop_operation_id_valid("", 0));
	memset(long_id, 'a', sizeof long_id);
	assert_true(digest_fcop_operation_id_valid(long_id,
	    IDEM_MAX_OPERATION_ID_BYTES));
	assert_false(digest_fcop_operation_id_valid(long_id,
	    IDEM_MAX_OPERATION_ID_BYTES + 1));
	assert_true(digest_fcop_workspace_id_valid(
	    "urn:uuid:00000000-0000-4000-8000-000000000000", 45));
	assert_false(digest_fcop_workspace_id_valid(
	    "urn:uuid:00000000-0000-4000-8000-00000000000A", 45));
	assert_false(digest_fcop_workspace_id_valid(
	    "00000000-0000-4000-8000-000000000000", 36));
	assert_true(digest_fcop_task_ref_valid("TASK-20261202-001-PM-to-DEV",
	    27));
	assert_false(digest_fcop_task_ref_valid("TASK-", 5));
	assert_false(digest_fcop_task_ref_valid("doc/a.md", 8));
	assert_false(digest_fcop_task_ref_valid("TASK-a b", 8));
}

/* The recipient grammar: a role code, or ROLE.SLOT with two role codes. */
static void
test_recipient_slot_grammar(void **state)
{
	static const char *const good[] = { "DEV", "DEV.D1", "LEAD-QA.B_2",
	    "ABCDEFGHIJKLMNOP.ABCDEFGHIJKLMNOP" };
	static const char *const bad[] = { "DEV.", ".D1", "DEV.d1",
	    "DEV.D1.X", "DEV..D1", "ABCDEFGHIJKLMNOPQ.D1",
	    "DEV.ABCDEFGHIJKLMNOPQ", "dev.D1", "DEV-.D1" };
	size_t	i;

	for (i = 0; i < sizeof good / sizeof good[0]; i++)
		if (!digest_recipient_valid(good[i], strlen(good[i])))
			fail_msg("%s refused", good[i]);
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (digest_recipient_valid(bad[i], strlen(bad[i])))
			fail_msg("%s accepted", bad[i]);
	/* A sender is never a slot. */
	assert_false(digest_role_code_valid("DEV.D1", 6));
}

static void
test_jcs_escapes_every_control_char(void **state)
{
	char	in[2], expected[16], *got;
	int	c, yaml_safe;

	for (c = 0x01; c < 0x20; c++) {
		in[0] = c;
		in[1] = '\0';
		switch (c) {
		case '\b':
			strcpy(expected, "\"\\b\"");
			break;
		case '\t':
			strcpy(expected, "\"\\t\"");
			break;
		case '\n':
			strcpy(expected, "\"\\n\"");
			break;
		case '\f':
			strcpy(expected, "\"\\f\"");
			break;
		case '\r':
			strcpy(expected, "\"\\r\"");
			break;
		default:
			snprintf(expected, sizeof expected, "\"\\u00%02x\"", c);
			break;
		}
		for (yaml_safe = 0; yaml_safe <= 1; yaml_safe++)
			assert_encodes(in, yaml_safe, expected);
	}
	/* No task string holds a NUL, but a length-given string may. */
	got = encode("\0", 1, 0);
	assert_string_equal(got, "\"\\u0000\"");
	free(got);
}

static void
test_jcs_escapes_quote_backslash_not_slash(void **state)
{
	assert_encodes("a\"b\\c/d", 0, "\"a\\\"b\\\\c/d\"");
	assert_encodes("a\"b\\c/d", 1, "\"a\\\"b\\\\c/d\"");
	assert_encodes("", 0, "\"\"");
}

static void
test_u2028_literal_in_jcs_escaped_in_yaml(void **state)
{
	assert_encodes("x\xe2\x80\xa8y", 0, "\"x\xe2\x80\xa8y\"");
	assert_encodes("x\xe2\x80\xa8y", 1, "\"x\\u2028y\"");
	assert_encodes("\xe2\x80\xa9", 1, "\"\\u2029\"");
	assert_encodes("\xef\xbb\xbf", 1, "\"\\ufeff\"");
	assert_encodes("\xef\xbf\xbe\xef\xbf\xbf", 1, "\"\\ufffe\\uffff\"");
	assert_encodes("\xef\xbf\xbe\xef\xbf\xbf", 0,
	    "\"\xef\xbf\xbe\xef\xbf\xbf\"");
	/* The C1 block ends at U+009F; U+00A0 and the rest stay literal. */
	assert_encodes("\xc2\x80\xc2\x85\xc2\x9f\xc2\xa0\xc3\xa9", 1,
	    "\"\\u0080\\u0085\\u009f\xc2\xa0\xc3\xa9\"");
	assert_encodes("\xc2\x85", 0, "\"\xc2\x85\"");
	assert_encodes("\xf0\x9f\x9a\x80", 1, "\"\xf0\x9f\x9a\x80\"");
}

static void
test_del_escaped_only_in_yaml(void **state)
{
	assert_encodes("x\x7fy", 0, "\"x\x7fy\"");
	assert_encodes("x\x7fy", 1, "\"x\\u007fy\"");
}

static void
test_invalid_utf8_is_eilseq(void **state)
{
	static const char *const bad[] = {
		"\xff",			/* never valid */
		"a\xc3",		/* truncated */
		"\xc0\xaf",		/* overlong '/' */
		"\xed\xa0\x80",		/* surrogate U+D800 */
		"\xf4\x90\x80\x80",	/* past U+10FFFF */
		"\x80",			/* lone continuation */
	};
	struct idem_task	 t = { .sender = "PM", .recipient = "DEV",
				    .subject = "Fix login" };
	char			 digest[IDEM_DIGEST_HEX_SIZE];
	size_t			 i, length;
	FILE			*fp;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		errno = 0;
		assert_null(digest_normalize_string(bad[i], strlen(bad[i]),
		    &length));
		assert_int_equal(errno, EILSEQ);

		t.body = bad[i];
		errno = 0;
		assert_int_equal(idem_task_digest(&t, digest), -1);
		assert_int_equal(errno, EILSEQ);

		fp = fopen("/dev/null", "w");
		assert_non_null(fp);
		errno = 0;
		assert_int_equal(digest_write_json_string(fp, bad[i],
		    strlen(bad[i]), 0), -1);
		assert_int_equal(errno, EILSEQ);
		fclose(fp);
	}
}

static void
test_missing_required_field_is_einval(void **state)
{
	const struct idem_task	 base = { .sender = "PM", .recipient = "DEV",
				    .subject = "Fix login" };
	const char		*refs[] = { "a", NULL };
	struct idem_task	 t;
	char			 digest[IDEM_DIGEST_HEX_SIZE];

	t = base;
	t.sender = NULL;
	errno = 0;
	assert_int_equal(idem_task_digest(&t, digest), -1);
	assert_int_equal(errno, EINVAL);

	t = base;
	t.recipient = NULL;
	errno = 0;
	assert_int_equal(idem_task_digest(&t, digest), -1);
	assert_int_equal(errno, EINVAL);

	t = base;
	t.subject = NULL;
	errno = 0;
	assert_int_equal(idem_task_digest(&t, digest), -1);
	assert_int_equal(errno, EINVAL);

	t = base;
	t.references_count = 1;
	errno = 0;
	assert_int_equal(idem_task_digest(&t, digest), -1);
	assert_int_equal(errno, EINVAL);

	t = base;
	t.depends_on = refs;
	t.depends_on_count = 2;
	errno = 0;
	assert_int_equal(idem_task_digest(&t, digest), -1);
	assert_int_equal(errno, EINVAL);
}

static void
test_normalization_is_idempotent(void **state)
{
	static const char *const inputs[] = {
		"",
		"plain ascii",
		"a\r\nb\rc\n\r\r\n",
		"Cafe\xcc\x81",				/* e + U+0301 */
		"\xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab",	/* Hangul jamo */
		"\xe2\x84\xab",			/* U+212B ANGSTROM SIGN */
		"x\xe2\x80\xa8y\xef\xbc\xa1",	/* U+2028, fullwidth A */
	};
	char	*once, *twice;
	size_t	 i;

	for (i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
		once = normalize(inputs[i]);
		twice = normalize(once);
		assert_string_equal(once, twice);
		free(once);
		free(twice);
	}
}

static void
test_normalization_folds_and_composes(void **state)
{
	char	*n;

	n = normalize("a\r\nb\rc\n\r\r\n");
	assert_string_equal(n, "a\nb\nc\n\n\n");
	free(n);
	n = normalize("Cafe\xcc\x81");
	assert_string_equal(n, "Caf\xc3\xa9");
	free(n);
	/* Singleton decomposition: NFC maps U+212B to U+00C5. */
	n = normalize("\xe2\x84\xab");
	assert_string_equal(n, "\xc3\x85");
	free(n);
	/* NFC, not NFKC: the fullwidth A stays. */
	n = normalize("\xef\xbc\xa1");
	assert_string_equal(n, "\xef\xbc\xa1");
	free(n);
}

static void
test_nfd_and_nfc_give_same_digest(void **state)
{
	const char		*nfd_refs[] = { "Cafe\xcc\x81" };
	const char		*nfc_refs[] = { "Caf\xc3\xa9" };
	struct idem_task	 nfd = { .sender = "PM", .recipient = "DEV",
				    .subject = "Cafe\xcc\x81 menu",
				    .references = nfd_refs,
				    .references_count = 1 };
	struct idem_task	 nfc = { .sender = "PM", .recipient = "DEV",
				    .subject = "Caf\xc3\xa9 menu",
				    .references = nfc_refs,
				    .references_count = 1 };
	char			 a[IDEM_DIGEST_HEX_SIZE];
	char			 b[IDEM_DIGEST_HEX_SIZE];

	assert_int_equal(idem_task_digest(&nfd, a), 0);
	assert_int_equal(idem_task_digest(&nfc, b), 0);
	assert_string_equal(a, b);
}

static void
test_task_normalize_applies_defaults(void **state)
{
	const char			*refs[] = { "x\r\ny", "Cafe\xcc\x81" };
	const char			*deps[] = { "TASK-1" };
	struct idem_task		 t = { .sender = "PM",
					    .recipient = "DEV",
					    .subject = "s\r",
					    .references = refs,
					    .references_count = 2,
					    .depends_on = deps,
					    .depends_on_count = 1 };
	struct digest_task_normalized	 n;
	char				*canonical;
	size_t				 length;

	assert_int_equal(digest_task_normalize(&t, &n), 0);
	assert_string_equal(n.task.subject, "s\n");
	assert_string_equal(n.task.body, "");
	assert_int_equal(n.body_length, 0);
	assert_string_equal(n.task.priority, "P2");
	assert_string_equal(n.task.risk_level, "low");
	assert_null(n.task.thread_key);
	assert_null(n.task.parent);
	assert_int_equal(n.task.references_count, 2);
	assert_string_equal(n.task.references[0], "x\ny");
	assert_string_equal(n.task.references[1], "Caf\xc3\xa9");
	assert_int_equal(n.task.depends_on_count, 1);
	assert_string_equal(n.task.depends_on[0], "TASK-1");

	assert_int_equal(digest_task_canonical_normalized(&n.task, &canonical,
	    &length), 0);
	assert_string_equal(canonical, "{\"body\":\"\","
	    "\"depends_on\":[\"TASK-1\"],\"parent\":null,\"priority\":\"P2\","
	    "\"recipient\":\"DEV\",\"references\":[\"x\\ny\",\"Caf\xc3\xa9\"],"
	    "\"risk_level\":\"low\",\"sender\":\"PM\",\"subject\":\"s\\n\","
	    "\"thread_key\":null}");
	assert_int_equal(length, strlen(canonical));
	free(canonical);
	digest_task_normalized_free(&n);
	assert_null(n.storage);
}

static void
test_report_canonical_and_digest(void **state)
{
	struct idem_report	 r = { .sender = "DEV", .recipient = "PM",
				    .body = "Done.\r\nAll good" };
	char			*canonical;
	char			 digest[IDEM_DIGEST_HEX_SIZE];
	size_t			 length;

	assert_int_equal(idem_report_canonical(REPORT_TASK_ID, &r, &canonical,
	    &length), 0);
	assert_string_equal(canonical, REPORT_CANONICAL);
	assert_int_equal(length, strlen(REPORT_CANONICAL));
	free(canonical);

	assert_int_equal(idem_report_digest(REPORT_TASK_ID, &r, digest), 0);
	assert_string_equal(digest, REPORT_DIGEST);

	/* The defaults, given explicitly, change nothing. */
	r.status = "done";
	assert_int_equal(idem_report_digest(REPORT_TASK_ID, &r, digest), 0);
	assert_string_equal(digest, REPORT_DIGEST);
	r.status = "partial";
	assert_int_equal(idem_report_digest(REPORT_TASK_ID, &r, digest), 0);
	assert_string_not_equal(digest, REPORT_DIGEST);
}

static void
test_report_requires_recipient(void **state)
{
	struct idem_report	r = { .sender = "DEV" };
	char			digest[IDEM_DIGEST_HEX_SIZE];

	errno = 0;
	assert_int_equal(idem_report_digest(REPORT_TASK_ID, &r, digest), -1);
	assert_int_equal(errno, EINVAL);
	r.recipient = "PM";
	r.sender = NULL;
	errno = 0;
	assert_int_equal(idem_report_digest(REPORT_TASK_ID, &r, digest), -1);
	assert_int_equal(errno, EINVAL);
	r.sender = "DEV";
	errno = 0;
	assert_int_equal(idem_report_digest(NULL, &r, digest), -1);
	assert_int_equal(errno, EINVAL);
	r.body = "\xff";
	errno = 0;
	assert_int_equal(idem_report_digest(REPORT_TASK_ID, &r, digest), -1);
	assert_int_equal(errno, EILSEQ);
}

static void
test_role_codes(void **state)
{
	static const char *const good[] = { "PM", "DEV_01", "LEAD-QA", "A",
	    "A-B-C", "X_", "A-_", "ABCDEFGHIJKLMNOP" };
	static const char *const bad[] = { "pm", "-X", "X-", "A--B", "",
	    "ABCDEFGHIJKLMNOPQ", "1A", "_A", "A B", "A.B", "Pm" };
	size_t	i;

	for (i = 0; i < sizeof good / sizeof good[0]; i++)
		if (!digest_role_code_valid(good[i], strlen(good[i])))
			fail_msg("%s should be a valid role code", good[i]);
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (digest_role_code_valid(bad[i], strlen(bad[i])))
			fail_msg("\"%s\" should not be a valid role code",
			    bad[i]);
	/* The length bounds the check: a NUL inside is not a terminator. */
	assert_false(digest_role_code_valid("PM\0X", 4));
	assert_true(digest_role_code_valid("PMX", 2));
}

static void
test_hex_round_trip(void **state)
{
	uint8_t	sum[IDEM_SHA256_BYTES], back[IDEM_SHA256_BYTES];
	char	hex[IDEM_DIGEST_HEX_SIZE], bad[IDEM_DIGEST_HEX_SIZE + 1];

	digest_sha256("abc", 3, sum);
	digest_to_hex(sum, hex);
	assert_string_equal(hex, ABC_DIGEST);
	assert_int_equal(digest_from_hex(hex, back), 0);
	assert_memory_equal(sum, back, sizeof sum);

	strcpy(bad, ABC_DIGEST);
	bad[0] = 'B';
	assert_int_equal(digest_from_hex(bad, back), -1);
	bad[0] = 'g';
	assert_int_equal(digest_from_hex(bad, back), -1);
	strcpy(bad, ABC_DIGEST);
	bad[63] = '\0';
	assert_int_equal(digest_from_hex(bad, back), -1);
	strcpy(bad, ABC_DIGEST);
	strcat(bad, "0");
	assert_int_equal(digest_from_hex(bad, back), -1);
	assert_int_equal(digest_from_hex("", back), -1);
}

/* ---- generic-json-v1 ------------------------------------------------------ */

static int
errno_named(const char *name)
{
	if (strcmp(name, "EEXIST") == 0)
		return EEXIST;
	if (strcmp(name, "EDOM") == 0)
		return EDOM;
	if (strcmp(name, "EILSEQ") == 0)
		return EILSEQ;
	if (strcmp(name, "EINVAL") == 0)
		return EINVAL;
	fail_msg("unknown errno name %s in the vectors", name);
	return 0;
}

/* What the generic-json-v1 vectors were: digested and refused. */
struct generic_counts {
	size_t	ok;
	size_t	refused;
};

/*
 * {"a": "\xc3\x28"}: a lead byte followed by no continuation byte.
 * json_pack and json_string check UTF-8 and would return NULL, so the
 * value is made with json_stringn_nocheck, as a caller's tree could be.
 */
static json_t *
invalid_utf8_request(void)
{
	json_t	*r;

	assert_non_null(r = json_object());
	assert_int_equal(json_object_set_new(r, "a",
	    json_stringn_nocheck("\xc3\x28", 2)), 0);
	return r;
}

/*
 * digest_generic_sha256 (the broker's: the canonical form hashed as it
 * is written) agrees with digest_generic_canonical's bytes hashed: the
 * same digest and length, or the same refusal, errno and path.
 */
static void
assert_hashing_agrees(const char *kind, const json_t *request)
{
	char	 where[DIGEST_PATH_BYTES], hashing_where[DIGEST_PATH_BYTES];
	char	*canonical;
	uint8_t	 want[IDEM_SHA256_BYTES], got[IDEM_SHA256_BYTES];
	size_t	 length, hashed_length;
	int	 rc, hashing_rc, saved_errno;

	errno = 0;
	rc = digest_generic_canonical(kind, request, &canonical, &length,
	    where);
	saved_errno = errno;
	errno = 0;
	hashing_rc = digest_generic_sha256(kind, request, got, &hashed_length,
	    hashing_where);
	assert_int_equal(hashing_rc, rc);
	assert_string_equal(hashing_where, where);
	if (rc != 0) {
		assert_int_equal(errno, saved_errno);
		return;
	}
	digest_sha256(canonical, length, want);
	free(canonical);
	assert_int_equal(hashed_length, length);
	assert_memory_equal(got, want, sizeof want);
}

/* One generic-json-v1 vector: canonical bytes and digest, or refusal. */
static void
run_generic_vector(json_t *v, void *arg)
{
	struct generic_counts	*counts = arg;
	char			 hex[IDEM_DIGEST_HEX_SIZE], *canonical;
	size_t			 length;
	const char		*kind, *request, *error;
	json_t			*tree;

	kind = json_string_value(json_object_get(v, "effect_kind"));
	request = json_string_value(json_object_get(v, "request_json"));
	error = json_string_value(json_object_get(v, "error"));
	assert_non_null(kind);
	assert_non_null(request);
	if ((tree = json_loads(request, JSON_REJECT_DUPLICATES |
	    JSON_DECODE_ANY, NULL)) != NULL) {
		assert_hashing_agrees(kind, tree);
		json_decref(tree);
	}
	if (error != NULL) {
		errno = 0;
		if (idem_effect_digest(kind, request, hex) == 0)
			fail_msg("vector %s: digested, expected %s",
			    json_string_value(json_object_get(v, "name")),
			    error);
		assert_int_equal(errno, errno_named(error));
		counts->refused++;
		return;
	}
	if (idem_effect_canonical(kind, request, &canonical, &length) != 0)
		fail_msg("vector %s: %s", json_string_value(
		    json_object_get(v, "name")), strerror(errno));
	assert_string_equal(canonical, json_string_value(
	    json_object_get(v, "canonical")));
	assert_int_equal(length, strlen(canonical));
	free(canonical);
	assert_int_equal(idem_effect_digest(kind, request, hex), 0);
	assert_string_equal(hex, json_string_value(json_object_get(v,
	    "request_digest")));
	counts->ok++;
}

static void
test_generic_json_vectors_all_match(void **state)
{
	struct generic_counts	counts = { 0, 0 };

	run_vectors("generic-json-v1.json", IDEM_SCHEMA_GENERIC_JSON_V1,
	    run_generic_vector, &counts);
	/* Both kinds are there: a file of refusals only must not pass. */
	assert_true(counts.ok >= 10);
	assert_true(counts.refused >= 3);
}

/* Numbers as ECMAScript prints them, checked by hand against RFC 8785. */
static void
test_generic_json_numbers(void **state)
{
	static const struct {
		double		 v;
		const char	*text;
	} cases[] = {
		{ 0.0, "0" }, { -0.0, "0" }, { 1.0, "1" }, { -1.5, "-1.5" },
		{ 1e21, "1e+21" }, { 1e20, "100000000000000000000" },
		{ 1e-6, "0.000001" }, { 1e-7, "1e-7" },
		{ 333333333.33333329, "333333333.3333333" },
		{ 4.5e-324, "5e-324" }, { 1.7976931348623157e308,
		    "1.7976931348623157e+308" },
		{ 9007199254740994.0, "9007199254740994" },
		{ 295147905179352830000.0, "295147905179352830000" },
	};
	char	*buf;
	size_t	 size, i;
	FILE	*fp;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		buf = NULL;
		fp = open_memstream(&buf, &size);
		assert_non_null(fp);
		assert_int_equal(digest_write_number(fp, cases[i].v), 0);
		assert_int_equal(fclose(fp), 0);
		assert_string_equal(buf, cases[i].text);
		free(buf);
	}
}

static void
test_generic_json_refusals(void **state)
{
	char	hex[IDEM_DIGEST_HEX_SIZE], where[DIGEST_PATH_BYTES], *c;
	size_t	n;
	json_t	*r;

	/* Not JSON, duplicate names as sent: EINVAL. */
	errno = 0;
	assert_int_equal(idem_effect_digest("k/v1", "{", hex), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(idem_effect_digest("k/v1", "{\"a\":1,\"a\":2}",
	    hex), -1);
	assert_int_equal(errno, EINVAL);
	/*
	 * Invalid UTF-8 inside a value built in memory: EILSEQ.  json_pack
	 * checks UTF-8 and would build nothing, so the string is set
	 * unchecked.
	 */
	r = invalid_utf8_request();
	errno = 0;
	assert_int_equal(digest_generic_canonical("k/v1", r, &c, &n, where),
	    -1);
	assert_int_equal(errno, EILSEQ);
	json_decref(r);
	/* Too deep. */
	{
		char	deep[200];
		int	i;

		for (i = 0; i < 40; i++)
			deep[i] = '[';
		for (i = 40; i < 80; i++)
			deep[i] = ']';
		deep[80] = '\0';
		assert_int_equal(idem_effect_digest("k/v1", deep, hex), -1);
		assert_int_equal(errno, ELOOP);
	}
	/* The path names the offending member. */
	r = json_loads("{\"x\":{\"cafe\\u0301\":1,\"caf\\u00e9\":2}}", 0,
	    NULL);
	assert_non_null(r);
	assert_int_equal(digest_generic_canonical("k/v1", r, &c, &n, where),
	    -1);
	assert_int_equal(errno, EEXIST);
	assert_string_equal(where, ".x.caf\xc3\xa9");
	json_decref(r);
	/* Through an array, and cut to its room (63 bytes and a NUL). */
	r = json_loads("{\"a\":[0,{\"b\":null,\"c\":\"\\u0000\"}]}",
	    JSON_ALLOW_NUL, NULL);
	assert_non_null(r);
	assert_int_equal(digest_generic_canonical("k/v1", r, &c, &n, where),
	    -1);
	assert_int_equal(errno, EINVAL);
	assert_string_equal(where, ".a[1].c");
	json_decref(r);
	r = json_loads("{\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\":"
	    "{\"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\":\"\\u0000\"}}",
	    JSON_ALLOW_NUL, NULL);
	assert_non_null(r);
	assert_int_equal(digest_generic_canonical("k/v1", r, &c, &n, where),
	    -1);
	assert_string_equal(where, ".aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    ".bbbbbbbbbbbbbbbbbbbbb");
	json_decref(r);
}

/*
 * The broker's hashing of the canonical form agrees with the bytes
 * hashed: across its stream's buffer (4 KiB) and many times it, and
 * for the odd inputs: NUL, escapes, non-canonical numbers, names equal
 * after normalization, invalid UTF-8, too deep.
 */
static void
test_generic_json_hashing_agrees(void **state)
{
	static const char *const odd[] = {
		"null", "0", "-0", "1.0", "1e2", "1E+2", "0.000001", "1e-7",
		"123456789012345678901.0", "9007199254740993",
		"\"\\u00e9 \\ud83d\\ude00 \\/ \\u2028 \\u007f \\t\"",
		"\"a\\u0000b\"", "[\"\\u0000\"]",
		"{\"b\":1,\"a\":[true,false,null,{}],\"\\u00e9\":\"e\\u0301\"}",
		"{\"cafe\\u0301\":1,\"caf\\u00e9\":2}",
		"{\"x\":\"a\\r\\nb\\rc\"}",
		"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
		NULL };
	static const size_t sizes[] = { 1, 4000, 4070, 4080, 4090, 4095,
	    4096, 4097, 8191, 8192, 8193, 70000 };
	json_t	*r;
	char	*pad, where[DIGEST_PATH_BYTES];
	uint8_t	 digest[IDEM_SHA256_BYTES];
	size_t	 i, length;

	for (i = 0; odd[i] != NULL; i++) {
		r = json_loads(odd[i], JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
		if (r == NULL)
			fail_msg("odd input %zu does not parse", i);
		assert_hashing_agrees("k/v1", r);
		json_decref(r);
	}
	/* Invalid UTF-8: both refuse it, with EILSEQ. */
	r = invalid_utf8_request();
	assert_hashing_agrees("k/v1", r);
	errno = 0;
	assert_int_equal(digest_generic_sha256("k/v1", r, digest, &length,
	    where), -1);
	assert_int_equal(errno, EILSEQ);
	json_decref(r);
	/* Around and past the stream's buffer, offsets shifted by a byte. */
	for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		assert_non_null(pad = malloc(sizes[i] + 1));
		memset(pad, 'x', sizes[i]);
		pad[sizes[i]] = '\0';
		r = json_pack("{s:s,s:[i,s]}", "pad", pad, "z", (int)i, "\xc3\xa9");
		assert_non_null(r);
		assert_hashing_agrees("k/v1", r);
		assert_hashing_agrees("kind.with.another/length", r);
		json_decref(r);
		free(pad);
	}
}

/* Every byte value written as two lower-case hex digits, in order. */
static void
test_digest_to_hex_every_byte(void **state)
{
	uint8_t	digest[IDEM_SHA256_BYTES];
	char	hex[IDEM_DIGEST_HEX_SIZE], want[IDEM_DIGEST_HEX_SIZE];
	size_t	i, base;

	for (base = 0; base < 256; base += IDEM_SHA256_BYTES) {
		for (i = 0; i < IDEM_SHA256_BYTES; i++) {
			digest[i] = (uint8_t)(base + i);
			snprintf(want + 2 * i, 3, "%02x", digest[i]);
		}
		memset(hex, '*', sizeof hex);
		digest_to_hex(digest, hex);
		assert_string_equal(hex, want);
	}
}

/*
 * A long string is encoded as its bytes one at a time are: every byte
 * 0x01..0x7f, and a two-byte UTF-8 character, at each place of plain
 * strings of up to 40 bytes (whose runs are skipped sixteen bytes at a
 * time), both ways (JCS and YAML-safe), equals the plain bytes around
 * that character's own encoding.
 */
static void
test_long_strings_encode_as_their_bytes(void **state)
{
	char	s[40], want[128], *one, *got;
	size_t	n, i, k;
	int	a, yaml_safe;

	(void)state;
	for (yaml_safe = 0; yaml_safe <= 1; yaml_safe++)
	for (n = 1; n <= sizeof s; n++)
	for (i = 0; i < n; i++)
	for (a = 1; a <= 0x80; a++) {
		memset(s, 'x', sizeof s);
		if (a == 0x80) {
			if (i + 1 >= n)
				continue;
			memcpy(s + i, "\xc3\xa9", 2);	/* U+00E9 */
			k = 2;
		} else {
			s[i] = (char)a;
			k = 1;
		}
		one = encode(s + i, k, yaml_safe);
		/* ", the x before, the character's own text without its quotes, the x after, " */
		snprintf(want, sizeof want, "\"%.*s%.*s%.*s\"", (int)i, s,
		    (int)(strlen(one) - 2), one + 1, (int)(n - i - k), s + i + k);
		got = encode(s, n, yaml_safe);
		if (strcmp(got, want) != 0)
			fail_msg("byte 0x%02x at %zu of %zu (yaml_safe %d): %s, "
			    "want %s", a, i, n, yaml_safe, got, want);
		free(got);
		free(one);
	}
}

/*
 * A string that is not all ASCII is normalized wherever its first
 * non-ASCII byte is: "e" and a combining acute (NFD) at each place of
 * plain strings of up to 40 bytes digest as the precomposed character
 * (NFC) there; and a single 0x80 (a lone continuation byte) or 0xff
 * (never in UTF-8) at each place 0..40 of plain strings of up to 41
 * bytes is refused with EILSEQ.  The single byte is what catches
 * digest_is_ascii skipping one place of its eight-byte words: the NFD
 * pair has two high bytes, so one skipped place still sees the other.
 */
static void
test_non_ascii_found_at_every_place(void **state)
{
	static const unsigned char lone[] = { 0x80, 0xff };
	char	nfd[48], nfc[48], *a, *b;
	size_t	n, i, j, alength, blength;

	(void)state;
	for (j = 0; j < sizeof lone; j++) {
		for (n = 1; n <= 41; n++) {
			for (i = 0; i < n; i++) {
				memset(nfd, 'x', n);
				nfd[i] = (char)lone[j];
				errno = 0;
				a = digest_normalize_string(nfd, n, &alength);
				if (a != NULL || errno != EILSEQ)
					fail_msg("byte 0x%02x at %zu of %zu: "
					    "not refused with EILSEQ", lone[j],
					    i, n);
			}
		}
	}
	for (n = 3; n <= 40; n++) {
		for (i = 0; i + 3 <= n; i++) {
			memset(nfd, 'x', n);
			memcpy(nfd + i, "e\xcc\x81", 3);	/* e U+0301 */
			memset(nfc, 'x', n - 1);
			memcpy(nfc + i, "\xc3\xa9", 2);	/* U+00E9 */
			a = digest_normalize_string(nfd, n, &alength);
			b = digest_normalize_string(nfc, n - 1, &blength);
			assert_non_null(a);
			assert_non_null(b);
			assert_int_equal(alength, blength);
			assert_memory_equal(a, b, blength);
			free(a);
			free(b);
		}
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_conformance_vectors_all_match),
		cmocka_unit_test(test_fcop_vectors_all_match),
		cmocka_unit_test(test_recipient_slot_grammar),
		cmocka_unit_test(test_fcop_create_task_vectors_all_match),
		cmocka_unit_test(test_fcop_identifier_grammars),
		cmocka_unit_test(test_jcs_escapes_every_control_char),
		cmocka_unit_test(test_jcs_escapes_quote_backslash_not_slash),
		cmocka_unit_test(test_u2028_literal_in_jcs_escaped_in_yaml),
		cmocka_unit_test(test_del_escaped_only_in_yaml),
		cmocka_unit_test(test_invalid_utf8_is_eilseq),
		cmocka_unit_test(test_missing_required_field_is_einval),
		cmocka_unit_test(test_normalization_is_idempotent),
		cmocka_unit_test(test_normalization_folds_and_composes),
		cmocka_unit_test(test_nfd_and_nfc_give_same_digest),
		cmocka_unit_test(test_task_normalize_applies_defaults),
		cmocka_unit_test(test_report_canonical_and_digest),
		cmocka_unit_test(test_report_requires_recipient),
		cmocka_unit_test(test_role_codes),
		cmocka_unit_test(test_hex_round_trip),
		cmocka_unit_test(test_generic_json_vectors_all_match),
		cmocka_unit_test(test_generic_json_numbers),
		cmocka_unit_test(test_generic_json_refusals),
		cmocka_unit_test(test_generic_json_hashing_agrees),
		cmocka_unit_test(test_digest_to_hex_every_byte),
		cmocka_unit_test(test_long_strings_encode_as_their_bytes),
		cmocka_unit_test(test_non_ascii_found_at_every_place),
	};

	return FILTER_RUN(tests);
}
