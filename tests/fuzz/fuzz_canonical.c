/* SPDX-License-Identifier: ISC */
/*
 * fuzz_canonical.c: libFuzzer target for the write-task-v1 canonical form
 * (SPEC.md, "Digest scheme write-task-v1"; libclient/digest.c).
 *
 * Input: byte 0 says which optional fields are given (bit 0 body, 1
 * priority, 2 risk_level, 3 thread_key, 4 parent), byte 1 how the list
 * items are shared between references and depends_on; the rest is split
 * at NUL bytes into sender, recipient, subject, body, priority,
 * risk_level, thread_key, parent and up to 32 list items.  No value is
 * validated as the broker would (role codes, enums, lengths): the
 * canonicalizer must be right for any strings, valid UTF-8 or not.
 *
 * Invariants:
 *   - normalization is idempotent, leaves no CR, no NUL and valid UTF-8,
 *     and fails only with EILSEQ;
 *   - the canonical form exists iff every string normalizes, and its
 *     bytes are exactly what SPEC.md's rules give (reference_canonical
 *     below, written from SPEC.md, not from digest.c);
 *   - the canonical bytes parse as JSON (jansson) into exactly the ten
 *     keys, in byte order, holding the normalized values and defaults;
 *   - equivalent inputs digest the same: the task with its strings
 *     normalized beforehand, with every LF written as CRLF or as a lone
 *     CR, and with the defaults spelled out;
 *   - idem_task_digest is the SHA-256 of the canonical bytes.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sodium.h>
#include <utf8proc.h>

#include "digest.h"

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);

#define FUZZ_CHECK(cond) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "fuzz_canonical: invariant failed at "	\
		    "%s:%d: %s\n", __FILE__, __LINE__, #cond);		\
		abort();						\
	}								\
} while (0)

#define SCALARS		8
#define MAX_ITEMS	32

/* The ten members of write-task-v1, in byte order of their keys. */
static const char *const canonical_keys[] = {
	"body", "depends_on", "parent", "priority", "recipient",
	"references", "risk_level", "sender", "subject", "thread_key"
};

struct fuzz_task {
	struct idem_task	 t;
	const char		*items[MAX_ITEMS];
	char			*owned[SCALARS + MAX_ITEMS];
	size_t			 nowned;
};

static const char **
scalar(struct idem_task *t, int i)
{
	const char	**s[SCALARS] = { &t->sender, &t->recipient,
			    &t->subject, &t->body, &t->priority,
			    &t->risk_level, &t->thread_key, &t->parent };

	return s[i];
}

static void
fuzz_task_free(struct fuzz_task *f)
{
	size_t	i;

	for (i = 0; i < f->nowned; i++)
		free(f->owned[i]);
	f->nowned = 0;
}

/* A copy of src with every string replaced by fn(string). */
static int
fuzz_task_map(const struct fuzz_task *src, struct fuzz_task *dst,
    char *(*fn)(const char *, void *), void *arg)
{
	const char	**in, **out;
	size_t		 i, n = src->t.references_count +
			    src->t.depends_on_count;
	char		*s;
	int		 k;

	memset(dst, 0, sizeof *dst);
	dst->t = src->t;
	for (k = 0; k < SCALARS; k++) {
		in = scalar((struct idem_task *)&src->t, k);
		out = scalar(&dst->t, k);
		if (*in == NULL)
			continue;
		if ((s = fn(*in, arg)) == NULL)
			goto fail;
		dst->owned[dst->nowned++] = s;
		*out = s;
	}
	for (i = 0; i < n; i++) {
		if ((s = fn(src->items[i], arg)) == NULL)
			goto fail;
		dst->owned[dst->nowned++] = s;
		dst->items[i] = s;
	}
	dst->t.references = dst->items;
	dst->t.depends_on = dst->items + src->t.references_count;
	return 0;
fail:
	fuzz_task_free(dst);
	return -1;
}

static char *
map_normalize(const char *s, void *arg)
{
	size_t	n;

	return digest_normalize_string(s, strlen(s), &n);
}

/* Every LF as CRLF (arg 0), as a lone CR (1), or alternately (2). */
static char *
map_newlines(const char *s, void *arg)
{
	int	 how = *(int *)arg, k = 0;
	char	*out, *o;

	if ((out = malloc(2 * strlen(s) + 1)) == NULL)
		abort();
	for (o = out; *s != '\0'; s++) {
		if (*s != '\n') {
			*o++ = *s;
			continue;
		}
		if (how == 0 || (how == 2 && (k++ & 1) == 0)) {
			*o++ = '\r';
			*o++ = '\n';
		} else
			*o++ = '\r';
	}
	*o = '\0';
	return out;
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

/* Normalize s; 0 if it is not UTF-8.  Checks the normalizer's promises. */
static int
check_normalize(const char *s)
{
	char	*n1, *n2;
	size_t	 l1, l2;

	n1 = digest_normalize_string(s, strlen(s), &l1);
	if (n1 == NULL) {
		FUZZ_CHECK(errno == EILSEQ);
		FUZZ_CHECK(!utf8_valid(s, strlen(s)));
		return 0;
	}
	FUZZ_CHECK(strlen(n1) == l1);
	FUZZ_CHECK(memchr(n1, '\r', l1) == NULL);
	FUZZ_CHECK(utf8_valid(n1, l1));
	n2 = digest_normalize_string(n1, l1, &l2);
	FUZZ_CHECK(n2 != NULL);
	FUZZ_CHECK(l2 == l1 && memcmp(n1, n2, l1) == 0);
	free(n2);
	free(n1);
	return 1;
}

/* SPEC.md step 3, for a string already normalized (valid UTF-8). */
static void
reference_string(FILE *fp, const char *s)
{
	const unsigned char	*p;

	fputc('"', fp);
	for (p = (const unsigned char *)s; *p != '\0'; p++) {
		switch (*p) {
		case '"':	fputs("\\\"", fp); break;
		case '\\':	fputs("\\\\", fp); break;
		case 0x08:	fputs("\\b", fp); break;
		case 0x09:	fputs("\\t", fp); break;
		case 0x0a:	fputs("\\n", fp); break;
		case 0x0c:	fputs("\\f", fp); break;
		case 0x0d:	fputs("\\r", fp); break;
		default:
			if (*p < 0x20)
				fprintf(fp, "\\u%04x", *p);
			else
				fputc(*p, fp);	/* UTF-8 bytes as they are */
		}
	}
	fputc('"', fp);
}

static void
reference_value(FILE *fp, const char *s)
{
	if (s == NULL)
		fputs("null", fp);
	else
		reference_string(fp, s);
}

static void
reference_list(FILE *fp, const char *const *items, size_t count)
{
	size_t	i;

	fputc('[', fp);
	for (i = 0; i < count; i++) {
		if (i != 0)
			fputc(',', fp);
		reference_string(fp, items[i]);
	}
	fputc(']', fp);
}

/* The canonical bytes of a normalized task with the defaults applied. */
static char *
reference_canonical(const struct idem_task *t, size_t *length)
{
	char	*buf = NULL;
	FILE	*fp;

	if ((fp = open_memstream(&buf, length)) == NULL)
		abort();
	fputs("{\"body\":", fp);
	reference_value(fp, t->body != NULL ? t->body : "");
	fputs(",\"depends_on\":", fp);
	reference_list(fp, t->depends_on, t->depends_on_count);
	fputs(",\"parent\":", fp);
	reference_value(fp, t->parent);
	fputs(",\"priority\":", fp);
	reference_value(fp, t->priority != NULL ? t->priority : "P2");
	fputs(",\"recipient\":", fp);
	reference_value(fp, t->recipient);
	fputs(",\"references\":", fp);
	reference_list(fp, t->references, t->references_count);
	fputs(",\"risk_level\":", fp);
	reference_value(fp, t->risk_level != NULL ? t->risk_level : "low");
	fputs(",\"sender\":", fp);
	reference_value(fp, t->sender);
	fputs(",\"subject\":", fp);
	reference_value(fp, t->subject);
	fputs(",\"thread_key\":", fp);
	reference_value(fp, t->thread_key);
	fputc('}', fp);
	if (fclose(fp) != 0)
		abort();
	return buf;
}

static int
json_is_str(json_t *v, const char *s)
{
	return json_is_string(v) && json_string_length(v) == strlen(s) &&
	    strcmp(json_string_value(v), s) == 0;
}

static int
json_is_value(json_t *v, const char *s)
{
	return s == NULL ? json_is_null(v) : json_is_str(v, s);
}

static int
json_is_list(json_t *v, const char *const *items, size_t count)
{
	size_t	i;

	if (!json_is_array(v) || json_array_size(v) != count)
		return 0;
	for (i = 0; i < count; i++)
		if (!json_is_str(json_array_get(v, i), items[i]))
			return 0;
	return 1;
}

/* The canonical bytes read back as JSON: the ten keys, in order, the values. */
static void
check_json(const char *canonical, size_t length, const struct idem_task *n)
{
	json_error_t	 jerr;
	json_t		*o, *v;
	const char	*key, *prev = NULL;
	size_t		 count = 0;

	o = json_loadb(canonical, length, JSON_REJECT_DUPLICATES, &jerr);
	FUZZ_CHECK(o != NULL);
	FUZZ_CHECK(json_is_object(o));
	FUZZ_CHECK(json_object_size(o) == 10);
	json_object_foreach(o, key, v) {
		FUZZ_CHECK(strcmp(key, canonical_keys[count]) == 0);
		FUZZ_CHECK(prev == NULL || strcmp(prev, key) < 0);
		prev = key;
		count++;
	}
	FUZZ_CHECK(count == 10);
	FUZZ_CHECK(json_is_value(json_object_get(o, "body"), n->body));
	FUZZ_CHECK(json_is_list(json_object_get(o, "depends_on"),
	    n->depends_on, n->depends_on_count));
	FUZZ_CHECK(json_is_value(json_object_get(o, "parent"), n->parent));
	FUZZ_CHECK(json_is_value(json_object_get(o, "priority"),
	    n->priority));
	FUZZ_CHECK(json_is_value(json_object_get(o, "recipient"),
	    n->recipient));
	FUZZ_CHECK(json_is_list(json_object_get(o, "references"),
	    n->references, n->references_count));
	FUZZ_CHECK(json_is_value(json_object_get(o, "risk_level"),
	    n->risk_level));
	FUZZ_CHECK(json_is_value(json_object_get(o, "sender"), n->sender));
	FUZZ_CHECK(json_is_value(json_object_get(o, "subject"), n->subject));
	FUZZ_CHECK(json_is_value(json_object_get(o, "thread_key"),
	    n->thread_key));
	json_decref(o);
}

static void
digest_of(const struct idem_task *t, char hex[IDEM_DIGEST_HEX_SIZE])
{
	FUZZ_CHECK(idem_task_digest(t, hex) == 0);
	FUZZ_CHECK(strlen(hex) == IDEM_SHA256_HEX_BYTES);
}

static void
check_variant(const struct fuzz_task *f, int how, const char *digest)
{
	struct fuzz_task	v;
	char			hex[IDEM_DIGEST_HEX_SIZE];

	FUZZ_CHECK(fuzz_task_map(f, &v, map_newlines, &how) == 0);
	digest_of(&v.t, hex);
	FUZZ_CHECK(strcmp(hex, digest) == 0);
	fuzz_task_free(&v);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_task		 f, pre;
	struct digest_task_normalized	 n;
	struct idem_task		 spelled;
	const char			*p, *end;
	char				*buf, *canonical, *again, *ref;
	char				 digest[IDEM_DIGEST_HEX_SIZE];
	char				 hex[IDEM_DIGEST_HEX_SIZE];
	uint8_t				 sum[IDEM_SHA256_BYTES];
	size_t				 length, again_length, ref_length;
	size_t				 nfields = 0, nlist = 0, i;
	unsigned			 given, split;
	int				 k, valid = 1, rc;

	if (size < 2)
		return 0;
	given = data[0];
	split = data[1];
	if ((buf = malloc(size - 2 + 1)) == NULL)
		abort();
	memcpy(buf, data + 2, size - 2);
	buf[size - 2] = '\0';

	/* Fields: the NUL-separated pieces of the rest. */
	memset(&f, 0, sizeof f);
	f.t.sender = f.t.recipient = f.t.subject = "";
	for (p = buf, end = buf + (size - 2); ; p += strlen(p) + 1) {
		if (nfields < SCALARS) {
			if (nfields < 3 || (given & (1u << (nfields - 3))))
				*scalar(&f.t, nfields) = p;
			nfields++;
		} else if (nlist < MAX_ITEMS)
			f.items[nlist++] = p;
		if (p + strlen(p) >= end)
			break;
	}
	f.t.references = f.items;
	f.t.references_count = nlist == 0 ? 0 : split % (nlist + 1);
	f.t.depends_on = f.items + f.t.references_count;
	f.t.depends_on_count = nlist - f.t.references_count;

	for (k = 0; k < SCALARS; k++)
		if (*scalar(&f.t, k) != NULL)
			valid &= check_normalize(*scalar(&f.t, k));
	for (i = 0; i < nlist; i++)
		valid &= check_normalize(f.items[i]);

	rc = idem_task_canonical(&f.t, &canonical, &length);
	if (!valid) {
		FUZZ_CHECK(rc == -1 && errno == EILSEQ);
		FUZZ_CHECK(digest_task_normalize(&f.t, &n) == -1);
		FUZZ_CHECK(idem_task_digest(&f.t, digest) == -1);
		free(buf);
		return 0;
	}
	FUZZ_CHECK(rc == 0);
	FUZZ_CHECK(strlen(canonical) == length);

	/* The same bytes from the normalized task, and from SPEC.md's rules. */
	FUZZ_CHECK(digest_task_normalize(&f.t, &n) == 0);
	FUZZ_CHECK(digest_task_canonical_normalized(&n.task, &again,
	    &again_length) == 0);
	FUZZ_CHECK(again_length == length &&
	    memcmp(again, canonical, length) == 0);
	free(again);
	ref = reference_canonical(&n.task, &ref_length);
	if (ref_length != length || memcmp(ref, canonical, length) != 0) {
		fprintf(stderr, "fuzz_canonical: digest.c  %s\n"
		    "fuzz_canonical: SPEC.md   %s\n", canonical, ref);
		FUZZ_CHECK(!"canonical bytes differ from SPEC.md's rules");
	}
	free(ref);
	check_json(canonical, length, &n.task);

	/* The digest is the SHA-256 of those bytes. */
	digest_of(&f.t, digest);
	crypto_hash_sha256(sum, (const unsigned char *)canonical, length);
	for (i = 0; i < IDEM_SHA256_BYTES; i++)
		snprintf(hex + 2 * i, 3, "%02x", sum[i]);
	FUZZ_CHECK(strcmp(hex, digest) == 0);
	free(canonical);

	/* Equivalent inputs: normalized beforehand, defaults spelled out. */
	FUZZ_CHECK(fuzz_task_map(&f, &pre, map_normalize, NULL) == 0);
	digest_of(&pre.t, hex);
	FUZZ_CHECK(strcmp(hex, digest) == 0);
	spelled = pre.t;
	if (spelled.body == NULL)
		spelled.body = "";
	if (spelled.priority == NULL)
		spelled.priority = "P2";
	if (spelled.risk_level == NULL)
		spelled.risk_level = "low";
	digest_of(&spelled, hex);
	FUZZ_CHECK(strcmp(hex, digest) == 0);

	/* CRLF and lone CR for LF: the same digest. */
	for (k = 0; k < 3; k++)
		check_variant(&pre, k, digest);

	fuzz_task_free(&pre);
	digest_task_normalized_free(&n);
	free(buf);
	return 0;
}
