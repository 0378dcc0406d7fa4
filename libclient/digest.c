/* SPDX-License-Identifier: ISC */
/*
 * digest.c: the write-task-v1 and write-report-v1 digest schemes
 * (SPEC.md, "Digest scheme write-task-v1") and generic-json-v1 (SPEC.md,
 * "Effects: any side effect the caller performs"): string normalization
 * (CRLF and lone CR to LF, then NFC), the JCS string encoding, their
 * canonical JSON bytes and SHA-256 (generic-json-v1's also hashed as it
 * is written, for the broker), digests' hex, and the grammars of role
 * codes and slots.  fcop-create-task-v1 and FCoP 4's id grammars are
 * digest_fcop.c's, built on the functions here.
 * This is the only place idem touches utf8proc and libsodium's hash.
 * Everything here is pure: no I/O beyond the caller's FILE, no state
 * but libsodium's one-time initialization.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>
#include <utf8proc.h>

#include "digest.h"
#include "jsonbytes.h"

#ifndef nitems
#define nitems(a)	(sizeof (a) / sizeof (a)[0])
#endif

/* A canonical form's members: key (in byte order) and value (NULL: null). */
struct digest_member {
	const char	*key;
	const char	*value;
};

static pthread_once_t	digest_sodium_once = PTHREAD_ONCE_INIT;

static void	digest_sodium_init(void);

/*
 * CRLF and lone CR become LF.  Only called when s holds a CR, so the
 * common case costs one memchr.
 */
static char *
digest_fold_newlines(const char *s, size_t length, size_t *out_length)
{
	char	*out, *o;
	size_t	 i;

	if ((out = malloc(length)) == NULL)
		return NULL;
	for (i = 0, o = out; i < length; i++) {
		if (s[i] != '\r')
			*o++ = s[i];
		else if (i + 1 == length || s[i + 1] != '\n')
			*o++ = '\n';
	}
	*out_length = o - out;
	return out;
}

/* No byte from 0x80 up: eight bytes at a time, then the rest. */
static int
digest_is_ascii(const char *s, size_t length)
{
	uint64_t	v;
	size_t		i;

	for (i = 0; length - i >= 8; i += 8) {
		memcpy(&v, s + i, sizeof v);
		if (v & JSONBYTES_HIGHS)
			return 0;
	}
	for (; i < length; i++) {
		if ((unsigned char)s[i] >= 0x80)
			return 0;
	}
	return 1;
}

/*
 * ASCII without CR: its own normalization (digest_normalize_string
 * would hand back a copy of the same bytes).
 */
static int
digest_is_plain(const char *s, size_t length)
{
	return memchr(s, '\r', length) == NULL && digest_is_ascii(s, length);
}

char *
digest_normalize_string(const char *s, size_t length, size_t *out_length)
{
	char			*folded = NULL;
	utf8proc_uint8_t	*nfc;
	utf8proc_ssize_t	 n;

	if (memchr(s, '\r', length) != NULL) {
		if ((folded = digest_fold_newlines(s, length, &length)) == NULL)
			return NULL;
		s = folded;
	}
	/*
	 * ASCII is its own NFC (no ASCII character decomposes or composes):
	 * most of what agents send, and utf8proc is the costliest part of a
	 * retry, so only other text goes through it.
	 */
	if (digest_is_ascii(s, length)) {
		if ((nfc = malloc(length + 1)) == NULL) {
			free(folded);
			return NULL;
		}
		memcpy(nfc, s, length);
		nfc[length] = '\0';
		free(folded);
		*out_length = length;
		return (char *)nfc;
	}
	/* With a length and no UTF8PROC_NULLTERM, s need not end in NUL. */
	n = utf8proc_map((const utf8proc_uint8_t *)s, length, &nfc,
	    UTF8PROC_STABLE|UTF8PROC_COMPOSE);
	free(folded);
	if (n < 0) {
		errno = n == UTF8PROC_ERROR_INVALIDUTF8 ? EILSEQ : ENOMEM;
		return NULL;
	}
	*out_length = n;
	return (char *)nfc;
}

/*
 * Close a memstream after writing to it (failed: a write already failed,
 * with errno set).  A failing memstream write means no memory.
 */
static int
digest_close(FILE *fp, int failed)
{
	int	saved_errno = errno;

	if (fclose(fp) != 0 && !failed) {
		errno = ENOMEM;
		return -1;
	}
	errno = saved_errno;
	return failed ? -1 : 0;
}

/* Append s, normalized and with its NUL, to fp. */
static int
digest_append_normalized(FILE *fp, const char *s)
{
	char	*n;
	size_t	 length;
	int	 written;

	if ((n = digest_normalize_string(s, strlen(s), &length)) == NULL)
		return -1;
	written = fwrite(n, 1, length + 1, fp) == length + 1;
	free(n);
	if (!written) {
		errno = ENOMEM;
		return -1;
	}
	return 0;
}

/*
 * Point *slot at the string at *p in the storage and step past it.  The
 * strings were written back to back with their NULs; normalization of a
 * C string cannot produce a NUL, so strlen finds each end.
 */
static size_t
digest_take(const char **slot, char **p)
{
	size_t	length = strlen(*p);

	*slot = *p;
	*p += length + 1;
	return length;
}

/* An array of count strings, none of them NULL. */
int
digest_list_given(const char *const *items, size_t count)
{
	size_t	i;

	if (count != 0 && items == NULL)
		return 0;
	for (i = 0; i < count; i++)
		if (items[i] == NULL)
			return 0;
	return 1;
}

int
digest_task_normalize(const struct idem_task *in,
    struct digest_task_normalized *out)
{
	struct idem_task	*t = &out->task;
	const char		**scalars[] = { &t->sender, &t->recipient,
				    &t->subject, &t->body, &t->priority,
				    &t->risk_level, &t->thread_key,
				    &t->parent };
	const char		**list;
	char			*storage = NULL, *p;
	size_t			 size, length, i, nlist;
	FILE			*fp;
	int			 failed = 0;

	memset(out, 0, sizeof *out);
	if (in->sender == NULL || in->recipient == NULL ||
	    in->subject == NULL ||
	    !digest_list_given(in->references, in->references_count) ||
	    !digest_list_given(in->depends_on, in->depends_on_count)) {
		errno = EINVAL;
		return -1;
	}

	*t = *in;
	if (t->body == NULL)
		t->body = "";
	if (t->priority == NULL)
		t->priority = "P2";
	if (t->risk_level == NULL)
		t->risk_level = "low";

	/*
	 * One allocation: the two pointer arrays first (memstream buffers
	 * come from malloc, so they are aligned), then every string.
	 */
	nlist = t->references_count + t->depends_on_count;
	if ((fp = open_memstream(&storage, &size)) == NULL)
		return -1;
	list = NULL;
	for (i = 0; i < nlist && !failed; i++)
		failed = fwrite(&list, sizeof list, 1, fp) != 1;
	for (i = 0; i < nitems(scalars) && !failed; i++)
		if (*scalars[i] != NULL)
			failed = digest_append_normalized(fp, *scalars[i]) != 0;
	for (i = 0; i < t->references_count && !failed; i++)
		failed = digest_append_normalized(fp, t->references[i]) != 0;
	for (i = 0; i < t->depends_on_count && !failed; i++)
		failed = digest_append_normalized(fp, t->depends_on[i]) != 0;
	if (digest_close(fp, failed) != 0) {
		free(storage);
		return -1;
	}

	list = (const char **)storage;
	p = storage + nlist * sizeof *list;
	for (i = 0; i < nitems(scalars); i++) {
		if (*scalars[i] == NULL)
			continue;
		length = digest_take(scalars[i], &p);
		if (scalars[i] == &t->body)
			out->body_length = length;
	}
	for (i = 0; i < nlist; i++)
		digest_take(&list[i], &p);
	t->references = list;
	t->depends_on = list + t->references_count;
	out->storage = storage;
	return 0;
}

void
digest_task_normalized_free(struct digest_task_normalized *n)
{
	free(n->storage);
	memset(n, 0, sizeof *n);
}

/* The escape for code point c, or NULL to write it as literal UTF-8. */
static const char *
digest_escape(int32_t c, int yaml_safe, char buf[8])
{
	switch (c) {
	case '"':
		return "\\\"";
	case '\\':
		return "\\\\";
	case '\b':
		return "\\b";
	case '\t':
		return "\\t";
	case '\n':
		return "\\n";
	case '\f':
		return "\\f";
	case '\r':
		return "\\r";
	}
	/*
	 * PyYAML rejects DEL, the C1 controls, U+FFFE and U+FFFF as not
	 * printable, folds U+0085, U+2028 and U+2029 as line breaks inside
	 * a quoted scalar, and may drop U+FEFF as a byte order mark.
	 */
	if (c < 0x20 || (yaml_safe && ((c >= 0x7f && c <= 0x9f) ||
	    c == 0x2028 || c == 0x2029 || c == 0xfeff || c == 0xfffe ||
	    c == 0xffff))) {
		snprintf(buf, 8, "\\u%04x", (unsigned int)c);
		return buf;
	}
	return NULL;
}

int
digest_write_json_string(FILE *fp, const char *s, size_t length,
    int yaml_safe)
{
	const utf8proc_uint8_t	*p = (const utf8proc_uint8_t *)s;
	const utf8proc_uint8_t	*end = p + length, *run = p;
	const char		*escape;
	char			 buf[8];
	utf8proc_int32_t	 c;
	utf8proc_ssize_t	 n;

	if (fputc('"', fp) == EOF)
		return -1;
	while (p < end) {
		/*
		 * Sixteen bytes at a time past those that need nothing: no
		 * control, quote, backslash or byte from 0x80 up (DEL, which
		 * it passes, is written as it is unless yaml_safe).
		 */
		if (!yaml_safe)
			p = (const utf8proc_uint8_t *)jsonbytes_skip_run16(
			    (const char *)p, (const char *)end, 1);
		if (p == end)
			break;
		/* Printable ASCII other than " and \ is the common case. */
		if (*p >= 0x20 && *p < 0x7f && *p != '"' && *p != '\\') {
			p++;
			continue;
		}
		if ((n = utf8proc_iterate(p, end - p, &c)) < 0) {
			errno = EILSEQ;
			return -1;
		}
		if ((escape = digest_escape(c, yaml_safe, buf)) == NULL) {
			p += n;
			continue;
		}
		if (fwrite(run, 1, p - run, fp) != (size_t)(p - run) ||
		    fputs(escape, fp) == EOF)
			return -1;
		p += n;
		run = p;
	}
	if (fwrite(run, 1, p - run, fp) != (size_t)(p - run) ||
	    fputc('"', fp) == EOF)
		return -1;
	return 0;
}

/* ,"key":value -- the key is ASCII and needs no escaping. */
int
digest_write_member(FILE *fp, int first, const char *key, const char *value)
{
	if (fprintf(fp, "%s\"%s\":", first ? "" : ",", key) < 0)
		return -1;
	if (value == NULL)
		return fputs("null", fp) == EOF ? -1 : 0;
	return digest_write_json_string(fp, value, strlen(value), 0);
}

int
digest_write_array(FILE *fp, const char *key, const char *const *items,
    size_t count)
{
	size_t	i;

	if (fprintf(fp, ",\"%s\":[", key) < 0)
		return -1;
	for (i = 0; i < count; i++) {
		if (i != 0 && fputc(',', fp) == EOF)
			return -1;
		if (digest_write_json_string(fp, items[i], strlen(items[i]),
		    0) != 0)
			return -1;
	}
	return fputc(']', fp) == EOF ? -1 : 0;
}

/*
 * Close the memstream and hand back its bytes, or free them on error;
 * fclose is what fills in *buf and *size.
 */
int
digest_finish(FILE *fp, int failed, char **buf, size_t *size,
    char **canonical, size_t *length)
{
	if (digest_close(fp, failed) != 0) {
		free(*buf);
		return -1;
	}
	*canonical = *buf;
	if (length != NULL)
		*length = *size;
	return 0;
}

int
digest_task_canonical_normalized(const struct idem_task *t,
    char **canonical, size_t *length)
{
	char	*buf = NULL;
	size_t	 size;
	FILE	*fp;
	int	 failed;

	if ((fp = open_memstream(&buf, &size)) == NULL)
		return -1;
	/* The ten members in byte order of their keys. */
	failed = fputc('{', fp) == EOF ||
	    digest_write_member(fp, 1, "body", t->body) != 0 ||
	    digest_write_array(fp, "depends_on", t->depends_on,
	    t->depends_on_count) != 0 ||
	    digest_write_member(fp, 0, "parent", t->parent) != 0 ||
	    digest_write_member(fp, 0, "priority", t->priority) != 0 ||
	    digest_write_member(fp, 0, "recipient", t->recipient) != 0 ||
	    digest_write_array(fp, "references", t->references,
	    t->references_count) != 0 ||
	    digest_write_member(fp, 0, "risk_level", t->risk_level) != 0 ||
	    digest_write_member(fp, 0, "sender", t->sender) != 0 ||
	    digest_write_member(fp, 0, "subject", t->subject) != 0 ||
	    digest_write_member(fp, 0, "thread_key", t->thread_key) != 0 ||
	    fputc('}', fp) == EOF;
	return digest_finish(fp, failed, &buf, &size, canonical, length);
}

int
idem_task_canonical(const struct idem_task *task, char **canonical,
    size_t *length)
{
	struct digest_task_normalized	n;
	int				rc;

	if (digest_task_normalize(task, &n) != 0)
		return -1;
	rc = digest_task_canonical_normalized(&n.task, canonical, length);
	digest_task_normalized_free(&n);
	return rc;
}

/* Hash canonical bytes into hex; frees them. */
void
digest_hex_of(char *canonical, size_t length,
    char digest[IDEM_DIGEST_HEX_SIZE])
{
	uint8_t	sum[IDEM_SHA256_BYTES];

	digest_sha256(canonical, length, sum);
	free(canonical);
	digest_to_hex(sum, digest);
}

int
idem_task_digest(const struct idem_task *task,
    char digest[IDEM_DIGEST_HEX_SIZE])
{
	char	*canonical;
	size_t	 length;

	if (idem_task_canonical(task, &canonical, &length) != 0)
		return -1;
	digest_hex_of(canonical, length, digest);
	return 0;
}

int
idem_report_canonical(const char *task_id, const struct idem_report *r,
    char **canonical, size_t *length)
{
	struct digest_member	 members[] = {
		{ "body", r->body != NULL ? r->body : "" },
		{ "recipient", r->recipient },
		{ "sender", r->sender },
		{ "status", r->status != NULL ? r->status : "done" },
		{ "task_id", task_id },
	};
	char			*buf = NULL, *value;
	size_t			 size, n, i;
	FILE			*fp;
	int			 failed;

	if (task_id == NULL || r->sender == NULL || r->recipient == NULL) {
		errno = EINVAL;
		return -1;
	}
	if ((fp = open_memstream(&buf, &size)) == NULL)
		return -1;
	failed = fputc('{', fp) == EOF;
	for (i = 0; i < nitems(members) && !failed; i++) {
		value = digest_normalize_string(members[i].value,
		    strlen(members[i].value), &n);
		if (value == NULL) {
			failed = 1;
			break;
		}
		failed = digest_write_member(fp, i == 0, members[i].key,
		    value) != 0;
		free(value);
	}
	failed = failed || fputc('}', fp) == EOF;
	return digest_finish(fp, failed, &buf, &size, canonical, length);
}

int
idem_report_digest(const char *task_id, const struct idem_report *r,
    char digest[IDEM_DIGEST_HEX_SIZE])
{
	char	*canonical;
	size_t	 length;

	if (idem_report_canonical(task_id, r, &canonical, &length) != 0)
		return -1;
	digest_hex_of(canonical, length, digest);
	return 0;
}

/* ---- generic-json-v1 ------------------------------------------------------ */

/*
 * ECMAScript's Number::toString, which JCS prescribes: the shortest
 * decimal that reads back as the same double (the fewest significant
 * digits k for which the correctly rounded k-digit form round-trips;
 * being the nearest k-digit decimal, it is also the one ECMAScript picks
 * when several k-digit forms would), laid out by the exponent n as the
 * standard says: plain digits up to 21 integer digits, "0.000ddd" down
 * to 10^-6, exponent form otherwise.
 */
int
digest_write_number(FILE *fp, double v)
{
	char	buf[48], digits[24], *p;
	int	prec, k = 0, n, i, e;

	if (!isfinite(v)) {
		errno = EDOM;
		return -1;
	}
	if (v == 0)
		return fputc('0', fp) == EOF ? -1 : 0;	/* -0 too */
	if (v < 0) {
		if (fputc('-', fp) == EOF)
			return -1;
		v = -v;
	}
	for (prec = 1; prec <= 17; prec++) {
		snprintf(buf, sizeof buf, "%.*e", prec - 1, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	for (p = buf; *p != 'e' && *p != '\0'; p++)
		if (*p >= '0' && *p <= '9')
			digits[k++] = *p;
	while (k > 1 && digits[k - 1] == '0')
		k--;
	digits[k] = '\0';
	n = atoi(p + 1) + 1;	/* v = 0.d1d2...dk x 10^n */
	if (k <= n && n <= 21) {
		if (fputs(digits, fp) == EOF)
			return -1;
		for (i = k; i < n; i++)
			if (fputc('0', fp) == EOF)
				return -1;
		return 0;
	}
	if (0 < n && n <= 21)
		return fprintf(fp, "%.*s.%s", n, digits, digits + n) < 0 ?
		    -1 : 0;
	if (-6 < n && n <= 0) {
		if (fputs("0.", fp) == EOF)
			return -1;
		for (i = n; i < 0; i++)
			if (fputc('0', fp) == EOF)
				return -1;
		return fputs(digits, fp) == EOF ? -1 : 0;
	}
	e = n - 1;
	if (fprintf(fp, "%c%s%se%c%d", digits[0], k > 1 ? "." : "",
	    digits + 1, e < 0 ? '-' : '+', e < 0 ? -e : e) < 0)
		return -1;
	return 0;
}

/* A member name, normalized, and its UTF-16 code units for sorting. */
struct digest_name {
	char		*name;
	int		 borrowed;	/* name is the tree's key: not freed */
	size_t		 length;
	uint16_t	*units;
	size_t		 count;
	const json_t	*value;
};

static int
digest_utf16(struct digest_name *m)
{
	const utf8proc_uint8_t	*p = (const utf8proc_uint8_t *)m->name;
	const utf8proc_uint8_t	*end = p + m->length;
	utf8proc_int32_t	 c;
	utf8proc_ssize_t	 n;

	/* At most one unit per byte. */
	if ((m->units = malloc((m->length + 1) * sizeof *m->units)) == NULL)
		return -1;
	m->count = 0;
	while (p < end) {
		if ((n = utf8proc_iterate(p, end - p, &c)) < 0) {
			errno = EILSEQ;
			return -1;
		}
		if (c >= 0x10000) {
			m->units[m->count++] = (uint16_t)(0xd800 +
			    ((c - 0x10000) >> 10));
			m->units[m->count++] = (uint16_t)(0xdc00 +
			    ((c - 0x10000) & 0x3ff));
		} else
			m->units[m->count++] = (uint16_t)c;
		p += n;
	}
	return 0;
}

static int
digest_name_cmp(const void *a, const void *b)
{
	const struct digest_name	*x = a, *y = b;
	size_t				 i;

	for (i = 0; i < x->count && i < y->count; i++)
		if (x->units[i] != y->units[i])
			return x->units[i] < y->units[i] ? -1 : 1;
	return x->count < y->count ? -1 : x->count > y->count;
}

static void
digest_where(char *where, const char *parent, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * where = a + sep + b, cut to fit (as snprintf's "%s%s%s" would cut
 * it): written for each member of every request's canonical form, in
 * case an error below it names the path, so not by snprintf.
 */
static void
digest_where_join(char *where, const char *a, const char *sep,
    const char *b)
{
	const char	*part[3] = { a, sep, b };
	size_t		 used = 0, n, i;

	if (where == NULL)
		return;
	for (i = 0; i < 3; i++) {
		n = strnlen(part[i], DIGEST_PATH_BYTES - 1 - used);
		memcpy(where + used, part[i], n);
		used += n;
	}
	where[used] = '\0';
}

/* where = parent + "[i]", cut to fit. */
static void
digest_where(char *where, const char *parent, const char *fmt, ...)
{
	char	step[DIGEST_PATH_BYTES];
	va_list	ap;

	if (where == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(step, sizeof step, fmt, ap);
	va_end(ap);
	snprintf(where, DIGEST_PATH_BYTES, "%s%s", parent, step);
}

static int	digest_write_value(FILE *, const json_t *, int depth,
		    char *where);

static int
digest_write_string_value(FILE *fp, const char *s, size_t length)
{
	char	*n;
	size_t	 nlength;
	int	 rc;

	if (memchr(s, '\0', length) != NULL) {
		errno = EINVAL;
		return -1;
	}
	/* What normalizing would copy unchanged is written as it is. */
	if (digest_is_plain(s, length))
		return digest_write_json_string(fp, s, length, 0);
	if ((n = digest_normalize_string(s, length, &nlength)) == NULL)
		return -1;
	rc = digest_write_json_string(fp, n, nlength, 0);
	free(n);
	return rc;
}

static int
digest_write_object(FILE *fp, const json_t *object, int depth, char *where)
{
	struct digest_name	*m;
	const char		*key;
	json_t			*value;
	char			 parent[DIGEST_PATH_BYTES];
	size_t			 count = json_object_size(object), i = 0, j;
	int			 rc = -1;

	if (where != NULL)
		digest_where_join(parent, where, "", "");
	if ((m = calloc(count + 1, sizeof *m)) == NULL)
		return -1;
	json_object_foreach((json_t *)object, key, value) {
		m[i].value = value;
		m[i].length = strlen(key);
		if ((m[i].borrowed = digest_is_plain(key, m[i].length)))
			m[i].name = (char *)key;
		else
			m[i].name = digest_normalize_string(key, m[i].length,
			    &m[i].length);
		if (m[i].name == NULL || digest_utf16(&m[i]) != 0) {
			digest_where_join(where, parent, ".", key);
			i++;
			goto out;
		}
		i++;
	}
	qsort(m, count, sizeof *m, digest_name_cmp);
	for (j = 0; j + 1 < count; j++)
		if (digest_name_cmp(&m[j], &m[j + 1]) == 0) {
			digest_where_join(where, parent, ".", m[j].name);
			errno = EEXIST;
			goto out;
		}
	if (fputc('{', fp) == EOF)
		goto out;
	for (j = 0; j < count; j++) {
		if ((j > 0 && fputc(',', fp) == EOF) ||
		    digest_write_json_string(fp, m[j].name, m[j].length,
		    0) != 0 || fputc(':', fp) == EOF)
			goto out;
		digest_where_join(where, parent, ".", m[j].name);
		if (digest_write_value(fp, m[j].value, depth + 1, where) != 0)
			goto out;
	}
	digest_where_join(where, parent, "", "");
	rc = fputc('}', fp) == EOF ? -1 : 0;
out:
	for (j = 0; j < i; j++) {
		if (!m[j].borrowed)
			free(m[j].name);
		free(m[j].units);
	}
	free(m);
	return rc;
}

static int
digest_write_value(FILE *fp, const json_t *v, int depth, char *where)
{
	char		parent[DIGEST_PATH_BYTES];
	json_int_t	i;
	size_t		k;

	if (depth > IDEM_MAX_JSON_DEPTH) {
		errno = ELOOP;
		return -1;
	}
	switch (json_typeof(v)) {
	case JSON_NULL:
		return fputs("null", fp) == EOF ? -1 : 0;
	case JSON_TRUE:
		return fputs("true", fp) == EOF ? -1 : 0;
	case JSON_FALSE:
		return fputs("false", fp) == EOF ? -1 : 0;
	case JSON_INTEGER:
		i = json_integer_value(v);
		if (i > IDEM_MAX_SAFE_INTEGER || i < -IDEM_MAX_SAFE_INTEGER) {
			errno = EDOM;
			return -1;
		}
		return fprintf(fp, "%lld", (long long)i) < 0 ? -1 : 0;
	case JSON_REAL:
		return digest_write_number(fp, json_real_value(v));
	case JSON_STRING:
		return digest_write_string_value(fp, json_string_value(v),
		    json_string_length(v));
	case JSON_ARRAY:
		if (where != NULL)
			digest_where_join(parent, where, "", "");
		if (fputc('[', fp) == EOF)
			return -1;
		for (k = 0; k < json_array_size(v); k++) {
			if (k > 0 && fputc(',', fp) == EOF)
				return -1;
			digest_where(where, parent, "[%zu]", k);
			if (digest_write_value(fp, json_array_get(v, k),
			    depth + 1, where) != 0)
				return -1;
		}
		digest_where_join(where, parent, "", "");
		return fputc(']', fp) == EOF ? -1 : 0;
	case JSON_OBJECT:
		return digest_write_object(fp, v, depth, where);
	}
	errno = EINVAL;
	return -1;
}

/*
 * Both entries' start: no place named yet; a kind and a request
 * given, else -1 with EINVAL.
 */
static int
digest_generic_given(const char *kind, const json_t *request, char *where)
{
	if (where != NULL)
		where[0] = '\0';
	if (kind == NULL || request == NULL) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}

/* The generic canonical form's bytes to fp: 1 if a write failed. */
static int
digest_write_generic(FILE *fp, const char *kind, const json_t *request,
    char *where)
{
	/* "kind" sorts before "request" in UTF-16 as in bytes. */
	return fputs("{\"kind\":", fp) == EOF ||
	    digest_write_string_value(fp, kind, strlen(kind)) != 0 ||
	    fputs(",\"request\":", fp) == EOF ||
	    digest_write_value(fp, request, 1, where) != 0 ||
	    fputc('}', fp) == EOF;
}

int
digest_generic_canonical(const char *kind, const json_t *request,
    char **canonical, size_t *length, char where[DIGEST_PATH_BYTES])
{
	char	*buf = NULL;
	size_t	 size;
	FILE	*fp;
	int	 failed;

	if (digest_generic_given(kind, request, where) != 0)
		return -1;
	if ((fp = open_memstream(&buf, &size)) == NULL)
		return -1;
	failed = digest_write_generic(fp, kind, request, where);
	return digest_finish(fp, failed, &buf, &size, canonical, length);
}

/*
 * The canonical form's bytes, as the stream flushes them, go into the
 * hash: the broker needs their digest and length, never the bytes.
 */
struct digest_hashing {
	crypto_hash_sha256_state	state;
	size_t				length;
};

static ssize_t
digest_hashing_write(void *cookie, const char *buf, size_t size)
{
	struct digest_hashing	*h = cookie;

	crypto_hash_sha256_update(&h->state, (const unsigned char *)buf,
	    size);
	h->length += size;
	return (ssize_t)size;
}

/*
 * The stream's buffer: a request's canonical form is mostly under it,
 * so hashed in one update at fclose; a larger one in as many as it
 * takes, the same digest.
 */
#define DIGEST_HASHING_BUFFER_BYTES	4096

int
digest_generic_sha256(const char *kind, const json_t *request,
    uint8_t digest[IDEM_SHA256_BYTES], size_t *length,
    char where[DIGEST_PATH_BYTES])
{
	static const cookie_io_functions_t	 io = {
		.write = digest_hashing_write
	};
	struct digest_hashing	 h;
	char			 buf[DIGEST_HASHING_BUFFER_BYTES];
	FILE			*fp;
	int			 failed;

	if (digest_generic_given(kind, request, where) != 0)
		return -1;
	pthread_once(&digest_sodium_once, digest_sodium_init);
	crypto_hash_sha256_init(&h.state);
	h.length = 0;
	if ((fp = fopencookie(&h, "w", io)) == NULL)
		return -1;
	if (setvbuf(fp, buf, _IOFBF, sizeof buf) != 0) {
		fclose(fp);
		errno = ENOMEM;
		return -1;
	}
	failed = digest_write_generic(fp, kind, request, where);
	/* fclose flushes the rest into the hash; it cannot fail there. */
	if (digest_close(fp, failed) != 0)
		return -1;
	crypto_hash_sha256_final(&h.state, digest);
	*length = h.length;
	return 0;
}

int
idem_effect_canonical(const char *effect_kind, const char *request_json,
    char **canonical, size_t *length)
{
	json_t	*request;
	int	 rc;

	if (effect_kind == NULL || request_json == NULL) {
		errno = EINVAL;
		return -1;
	}
	request = json_loads(request_json, JSON_REJECT_DUPLICATES |
	    JSON_DECODE_ANY, NULL);
	if (request == NULL) {
		errno = EINVAL;
		return -1;
	}
	rc = digest_generic_canonical(effect_kind, request, canonical, length,
	    NULL);
	json_decref(request);
	return rc;
}

int
idem_effect_digest(const char *effect_kind, const char *request_json,
    char digest[IDEM_DIGEST_HEX_SIZE])
{
	char	*canonical;
	size_t	 length;

	if (idem_effect_canonical(effect_kind, request_json, &canonical,
	    &length) != 0)
		return -1;
	digest_hex_of(canonical, length, digest);
	return 0;
}

static void
digest_sodium_init(void)
{
	/*
	 * libsodium declares itself unusable after a failed init, which
	 * happens only when it cannot take its own lock.
	 */
	if (sodium_init() < 0)
		abort();
}

void
digest_sha256(const void *data, size_t length,
    uint8_t out[IDEM_SHA256_BYTES])
{
	pthread_once(&digest_sodium_once, digest_sodium_init);
	crypto_hash_sha256(out, data, length);
}

void
digest_to_hex(const uint8_t digest[IDEM_SHA256_BYTES],
    char hex[IDEM_DIGEST_HEX_SIZE])
{
	static const char	digits[] = "0123456789abcdef";
	size_t			i;

	/*
	 * Not sodium_bin2hex: its constant-time arithmetic guards secrets,
	 * and a digest is none (written two or three times a request).
	 */
	for (i = 0; i < IDEM_SHA256_BYTES; i++) {
		hex[2 * i] = digits[digest[i] >> 4];
		hex[2 * i + 1] = digits[digest[i] & 0xf];
	}
	hex[2 * IDEM_SHA256_BYTES] = '\0';
}

int
digest_from_hex(const char *hex, uint8_t out[IDEM_SHA256_BYTES])
{
	size_t	i;

	/* sodium_hex2bin also takes upper case; the contract says lower. */
	for (i = 0; i < IDEM_SHA256_HEX_BYTES; i++)
		if (!((hex[i] >= '0' && hex[i] <= '9') ||
		    (hex[i] >= 'a' && hex[i] <= 'f')))
			return -1;
	if (hex[i] != '\0')
		return -1;
	return sodium_hex2bin(out, IDEM_SHA256_BYTES, hex,
	    IDEM_SHA256_HEX_BYTES, NULL, NULL, NULL);
}

int
digest_role_code_valid(const char *s, size_t length)
{
	size_t	i;

	if (length == 0 || length > IDEM_MAX_ROLE_BYTES ||
	    s[0] < 'A' || s[0] > 'Z')
		return 0;
	for (i = 1; i < length; i++) {
		if (s[i] == '-') {
			/* A dash starts a group of at least one character. */
			if (i + 1 == length || s[i + 1] == '-')
				return 0;
			continue;
		}
		if (!((s[i] >= 'A' && s[i] <= 'Z') ||
		    (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return 0;
	}
	return 1;
}

int
digest_recipient_valid(const char *s, size_t length)
{
	const char	*dot = memchr(s, '.', length);
	size_t		 role;

	if (dot == NULL)
		return digest_role_code_valid(s, length);
	role = dot - s;
	return digest_role_code_valid(s, role) &&
	    digest_role_code_valid(dot + 1, length - role - 1);
}
