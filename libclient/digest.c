/*
 * digest.c: the write-task-v1 and write-report-v1 digest schemes
 * (SPEC.md, "Digest scheme write-task-v1") and fcop-create-task-v1
 * (doc/protocol.md, "Digest schemas"): string normalization, the JCS
 * string encoding, the canonical JSON bytes and their SHA-256, and the
 * grammars of role codes, slots and FCoP 4's ids.
 * This is the only place idem touches utf8proc and libsodium's hash.
 * Everything here is pure: no I/O beyond the caller's FILE, no state
 * but libsodium's one-time initialization.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>
#include <utf8proc.h>

#include "digest.h"

#ifndef nitems
#define nitems(a)	(sizeof (a) / sizeof (a)[0])
#endif

/* A canonical form's members: key (in byte order) and value (NULL: null). */
struct digest_member {
	const char	*key;
	const char	*value;
};

static pthread_once_t	digest_sodium_once = PTHREAD_ONCE_INIT;

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
		return (NULL);
	for (i = 0, o = out; i < length; i++) {
		if (s[i] != '\r')
			*o++ = s[i];
		else if (i + 1 == length || s[i + 1] != '\n')
			*o++ = '\n';
	}
	*out_length = o - out;
	return (out);
}

static int
digest_is_ascii(const char *s, size_t length)
{
	size_t	i;

	for (i = 0; i < length; i++) {
		if ((unsigned char)s[i] >= 0x80)
			return (0);
	}
	return (1);
}

char *
digest_normalize_string(const char *s, size_t length, size_t *out_length)
{
	char			*folded = NULL;
	utf8proc_uint8_t	*nfc;
	utf8proc_ssize_t	 n;

	if (memchr(s, '\r', length) != NULL) {
		if ((folded = digest_fold_newlines(s, length, &length)) == NULL)
			return (NULL);
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
			return (NULL);
		}
		memcpy(nfc, s, length);
		nfc[length] = '\0';
		free(folded);
		*out_length = length;
		return ((char *)nfc);
	}
	/* With a length and no UTF8PROC_NULLTERM, s need not end in NUL. */
	n = utf8proc_map((const utf8proc_uint8_t *)s, length, &nfc,
	    UTF8PROC_STABLE|UTF8PROC_COMPOSE);
	free(folded);
	if (n < 0) {
		errno = n == UTF8PROC_ERROR_INVALIDUTF8 ? EILSEQ : ENOMEM;
		return (NULL);
	}
	*out_length = n;
	return ((char *)nfc);
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
		return (-1);
	}
	errno = saved_errno;
	return (failed ? -1 : 0);
}

/* Append s, normalized and with its NUL, to fp. */
static int
digest_append_normalized(FILE *fp, const char *s)
{
	char	*n;
	size_t	 length;
	int	 written;

	if ((n = digest_normalize_string(s, strlen(s), &length)) == NULL)
		return (-1);
	written = fwrite(n, 1, length + 1, fp) == length + 1;
	free(n);
	if (!written) {
		errno = ENOMEM;
		return (-1);
	}
	return (0);
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
	return (length);
}

/* An array of count strings, none of them NULL. */
static int
digest_list_given(const char *const *items, size_t count)
{
	size_t	i;

	if (count != 0 && items == NULL)
		return (0);
	for (i = 0; i < count; i++)
		if (items[i] == NULL)
			return (0);
	return (1);
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
		return (-1);
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
		return (-1);
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
		return (-1);
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
	return (0);
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
		return ("\\\"");
	case '\\':
		return ("\\\\");
	case '\b':
		return ("\\b");
	case '\t':
		return ("\\t");
	case '\n':
		return ("\\n");
	case '\f':
		return ("\\f");
	case '\r':
		return ("\\r");
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
		return (buf);
	}
	return (NULL);
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
		return (-1);
	while (p < end) {
		/* Printable ASCII other than " and \ is the common case. */
		if (*p >= 0x20 && *p < 0x7f && *p != '"' && *p != '\\') {
			p++;
			continue;
		}
		if ((n = utf8proc_iterate(p, end - p, &c)) < 0) {
			errno = EILSEQ;
			return (-1);
		}
		if ((escape = digest_escape(c, yaml_safe, buf)) == NULL) {
			p += n;
			continue;
		}
		if (fwrite(run, 1, p - run, fp) != (size_t)(p - run) ||
		    fputs(escape, fp) == EOF)
			return (-1);
		p += n;
		run = p;
	}
	if (fwrite(run, 1, p - run, fp) != (size_t)(p - run) ||
	    fputc('"', fp) == EOF)
		return (-1);
	return (0);
}

/* ,"key":value -- the key is ASCII and needs no escaping. */
static int
digest_write_member(FILE *fp, int first, const char *key, const char *value)
{
	if (fprintf(fp, "%s\"%s\":", first ? "" : ",", key) < 0)
		return (-1);
	if (value == NULL)
		return (fputs("null", fp) == EOF ? -1 : 0);
	return (digest_write_json_string(fp, value, strlen(value), 0));
}

static int
digest_write_array(FILE *fp, const char *key, const char *const *items,
    size_t count)
{
	size_t	i;

	if (fprintf(fp, ",\"%s\":[", key) < 0)
		return (-1);
	for (i = 0; i < count; i++) {
		if (i != 0 && fputc(',', fp) == EOF)
			return (-1);
		if (digest_write_json_string(fp, items[i], strlen(items[i]),
		    0) != 0)
			return (-1);
	}
	return (fputc(']', fp) == EOF ? -1 : 0);
}

/*
 * Close the memstream and hand back its bytes, or free them on error;
 * fclose is what fills in *buf and *size.
 */
static int
digest_finish(FILE *fp, int failed, char **buf, size_t *size,
    char **canonical, size_t *length)
{
	if (digest_close(fp, failed) != 0) {
		free(*buf);
		return (-1);
	}
	*canonical = *buf;
	if (length != NULL)
		*length = *size;
	return (0);
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
		return (-1);
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
	return (digest_finish(fp, failed, &buf, &size, canonical, length));
}

int
idem_task_canonical(const struct idem_task *task, char **canonical,
    size_t *length)
{
	struct digest_task_normalized	n;
	int				rc;

	if (digest_task_normalize(task, &n) != 0)
		return (-1);
	rc = digest_task_canonical_normalized(&n.task, canonical, length);
	digest_task_normalized_free(&n);
	return (rc);
}

/* Hash canonical bytes into hex; frees them. */
static void
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
		return (-1);
	digest_hex_of(canonical, length, digest);
	return (0);
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
		return (-1);
	}
	if ((fp = open_memstream(&buf, &size)) == NULL)
		return (-1);
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
	return (digest_finish(fp, failed, &buf, &size, canonical, length));
}

int
idem_report_digest(const char *task_id, const struct idem_report *r,
    char digest[IDEM_DIGEST_HEX_SIZE])
{
	char	*canonical;
	size_t	 length;

	if (idem_report_canonical(task_id, r, &canonical, &length) != 0)
		return (-1);
	digest_hex_of(canonical, length, digest);
	return (0);
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
	sodium_bin2hex(hex, IDEM_DIGEST_HEX_SIZE, digest, IDEM_SHA256_BYTES);
}

int
digest_from_hex(const char *hex, uint8_t out[IDEM_SHA256_BYTES])
{
	size_t	i;

	/* sodium_hex2bin also takes upper case; the contract says lower. */
	for (i = 0; i < IDEM_SHA256_HEX_BYTES; i++)
		if (!((hex[i] >= '0' && hex[i] <= '9') ||
		    (hex[i] >= 'a' && hex[i] <= 'f')))
			return (-1);
	if (hex[i] != '\0')
		return (-1);
	return (sodium_hex2bin(out, IDEM_SHA256_BYTES, hex,
	    IDEM_SHA256_HEX_BYTES, NULL, NULL, NULL));
}

int
digest_role_code_valid(const char *s, size_t length)
{
	size_t	i;

	if (length == 0 || length > IDEM_MAX_ROLE_BYTES ||
	    s[0] < 'A' || s[0] > 'Z')
		return (0);
	for (i = 1; i < length; i++) {
		if (s[i] == '-') {
			/* A dash starts a group of at least one character. */
			if (i + 1 == length || s[i + 1] == '-')
				return (0);
			continue;
		}
		if (!((s[i] >= 'A' && s[i] <= 'Z') ||
		    (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return (0);
	}
	return (1);
}

int
digest_recipient_valid(const char *s, size_t length)
{
	const char	*dot = memchr(s, '.', length);
	size_t		 role;

	if (dot == NULL)
		return (digest_role_code_valid(s, length));
	role = dot - s;
	return (digest_role_code_valid(s, role) &&
	    digest_role_code_valid(dot + 1, length - role - 1));
}

/* ---- fcop-create-task-v1 ------------------------------------------------ */

/* Keep p in n's list of allocations; NULL (ENOMEM) frees it at once. */
static char *
digest_fcop_own(struct digest_fcop_normalized *n, void *p)
{
	char	**owned;

	if (p == NULL)
		return (NULL);
	owned = realloc(n->owned, (n->owned_count + 1) * sizeof *owned);
	if (owned == NULL) {
		free(p);
		errno = ENOMEM;
		return (NULL);
	}
	n->owned = owned;
	n->owned[n->owned_count++] = p;
	return (p);
}

/* Normalize *s in place (NULL stays NULL); -1 with errno. */
static int
digest_fcop_string(struct digest_fcop_normalized *n, const char **s)
{
	size_t	length;

	if (*s == NULL)
		return (0);
	*s = digest_fcop_own(n, digest_normalize_string(*s, strlen(*s),
	    &length));
	return (*s == NULL ? -1 : 0);
}

static int
digest_fcop_compare(const void *a, const void *b)
{
	/* UTF-8 byte order is code point order. */
	return (strcmp(*(const char *const *)a, *(const char *const *)b));
}

void
digest_fcop_normalized_free(struct digest_fcop_normalized *n)
{
	size_t	i;

	for (i = 0; i < n->owned_count; i++)
		free(n->owned[i]);
	free(n->owned);
	memset(n, 0, sizeof *n);
}

int
digest_fcop_normalize(const struct idem_fcop_task *in,
    struct digest_fcop_normalized *out)
{
	struct idem_fcop_task	*t = &out->task;
	const char		**scalars[] = { &t->workspace_id,
				    &t->operation_id, &t->sender,
				    &t->recipient, &t->subject, &t->body,
				    &t->priority, &t->parent, &t->branch_of };
	const char		**list;
	char			*body;
	size_t			 i, j, length;

	memset(out, 0, sizeof *out);
	if (in->workspace_id == NULL || in->operation_id == NULL ||
	    in->sender == NULL || in->recipient == NULL ||
	    in->subject == NULL ||
	    !digest_list_given(in->references, in->references_count)) {
		errno = EINVAL;
		return (-1);
	}
	*t = *in;
	if (t->body == NULL)
		t->body = "";
	if (t->priority == NULL)
		t->priority = "P2";
	for (i = 0; i < nitems(scalars); i++)
		if (digest_fcop_string(out, scalars[i]) != 0)
			goto fail;

	/* The body ends in exactly one LF (an empty body is "\n"). */
	length = strlen(t->body);
	while (length > 0 && t->body[length - 1] == '\n')
		length--;
	if ((body = digest_fcop_own(out, malloc(length + 2))) == NULL)
		goto fail;
	memcpy(body, t->body, length);
	body[length] = '\n';
	body[length + 1] = '\0';
	t->body = body;

	/* References: normalized, sorted, each once. */
	list = (const char **)digest_fcop_own(out, malloc(
	    (t->references_count + 1) * sizeof *list));
	if (list == NULL)
		goto fail;
	for (i = 0; i < t->references_count; i++) {
		list[i] = in->references[i];
		if (digest_fcop_string(out, &list[i]) != 0)
			goto fail;
	}
	qsort(list, t->references_count, sizeof *list, digest_fcop_compare);
	for (i = j = 0; i < t->references_count; i++)
		if (j == 0 || strcmp(list[j - 1], list[i]) != 0)
			list[j++] = list[i];
	t->references = list;
	t->references_count = j;
	return (0);

fail:
	digest_fcop_normalized_free(out);
	return (-1);
}

int
digest_fcop_canonical_normalized(const struct idem_fcop_task *t,
    char **canonical, size_t *length)
{
	char	*buf = NULL;
	size_t	 size;
	FILE	*fp;
	int	 failed;

	if ((fp = open_memstream(&buf, &size)) == NULL)
		return (-1);
	/* The twelve members in byte order of their keys. */
	failed = fputc('{', fp) == EOF ||
	    digest_write_member(fp, 1, "body", t->body) != 0 ||
	    digest_write_member(fp, 0, "branch_of", t->branch_of) != 0 ||
	    digest_write_member(fp, 0, "contract",
	    IDEM_SCHEMA_FCOP_CREATE_TASK_V1) != 0 ||
	    digest_write_member(fp, 0, "operation_id", t->operation_id) != 0 ||
	    digest_write_member(fp, 0, "operation_kind",
	    IDEM_FCOP_OPERATION_KIND) != 0 ||
	    digest_write_member(fp, 0, "parent", t->parent) != 0 ||
	    digest_write_member(fp, 0, "priority", t->priority) != 0 ||
	    digest_write_member(fp, 0, "recipient", t->recipient) != 0 ||
	    digest_write_array(fp, "references", t->references,
	    t->references_count) != 0 ||
	    digest_write_member(fp, 0, "sender", t->sender) != 0 ||
	    digest_write_member(fp, 0, "subject", t->subject) != 0 ||
	    digest_write_member(fp, 0, "workspace_id", t->workspace_id) != 0 ||
	    fputc('}', fp) == EOF;
	return (digest_finish(fp, failed, &buf, &size, canonical, length));
}

int
idem_fcop_task_canonical(const struct idem_fcop_task *task, char **canonical,
    size_t *length)
{
	struct digest_fcop_normalized	n;
	int				rc;

	if (digest_fcop_normalize(task, &n) != 0)
		return (-1);
	rc = digest_fcop_canonical_normalized(&n.task, canonical, length);
	digest_fcop_normalized_free(&n);
	return (rc);
}

int
idem_fcop_task_digest(const struct idem_fcop_task *task,
    char digest[IDEM_DIGEST_HEX_SIZE])
{
	char	*canonical;
	size_t	 length;

	if (idem_fcop_task_canonical(task, &canonical, &length) != 0)
		return (-1);
	digest_hex_of(canonical, length, digest);
	return (0);
}

static int
digest_is_alnum(char c)
{
	return ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	    (c >= '0' && c <= '9'));
}

int
digest_fcop_operation_id_valid(const char *s, size_t length)
{
	size_t	i;

	if (length == 0 || length > IDEM_MAX_OPERATION_ID_BYTES ||
	    !digest_is_alnum(s[0]))
		return (0);
	for (i = 1; i < length; i++)
		if (!digest_is_alnum(s[i]) && (s[i] == '\0' ||
		    strchr("._:-", s[i]) == NULL))
			return (0);
	return (1);
}

/* ^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$ */
int
digest_fcop_workspace_id_valid(const char *s, size_t length)
{
	static const char	shape[] =
	    "urn:uuid:xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
	size_t			i;

	if (length != sizeof shape - 1)
		return (0);
	for (i = 0; i < length; i++) {
		if (shape[i] != 'x') {
			if (s[i] != shape[i])
				return (0);
		} else if (!((s[i] >= '0' && s[i] <= '9') ||
		    (s[i] >= 'a' && s[i] <= 'f')))
			return (0);
	}
	return (1);
}

/* ^TASK-[A-Za-z0-9][A-Za-z0-9._-]*$ */
int
digest_fcop_task_ref_valid(const char *s, size_t length)
{
	size_t	i;

	if (length < 6 || strncmp(s, "TASK-", 5) != 0 ||
	    !digest_is_alnum(s[5]))
		return (0);
	for (i = 6; i < length; i++)
		if (!digest_is_alnum(s[i]) && (s[i] == '\0' ||
		    strchr("._-", s[i]) == NULL))
			return (0);
	return (1);
}
