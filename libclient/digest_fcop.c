/* SPDX-License-Identifier: ISC */
/*
 * digest_fcop.c: the fcop-create-task-v1 digest schema (doc/protocol.md,
 * "Digest schemas"): its normalization (defaults, the body's final LF,
 * references de-duplicated and sorted), canonical form and digest, and
 * FCoP 4's grammars of operation, workspace and task ids.  Strings are
 * normalized, written and hashed by digest.c's functions: nothing here
 * touches utf8proc or libsodium.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"

#ifndef nitems
#define nitems(a)	(sizeof (a) / sizeof (a)[0])
#endif

/* Keep p in n's list of allocations; NULL (ENOMEM) frees it at once. */
static char *
digest_fcop_own(struct digest_fcop_normalized *n, void *p)
{
	char	**owned;

	if (p == NULL)
		return NULL;
	owned = realloc(n->owned, (n->owned_count + 1) * sizeof *owned);
	if (owned == NULL) {
		free(p);
		errno = ENOMEM;
		return NULL;
	}
	n->owned = owned;
	n->owned[n->owned_count++] = p;
	return p;
}

/* Normalize *s in place (NULL stays NULL); -1 with errno. */
static int
digest_fcop_string(struct digest_fcop_normalized *n, const char **s)
{
	size_t	length;

	if (*s == NULL)
		return 0;
	*s = digest_fcop_own(n, digest_normalize_string(*s, strlen(*s),
	    &length));
	return *s == NULL ? -1 : 0;
}

static int
digest_fcop_compare(const void *a, const void *b)
{
	/* UTF-8 byte order is code point order. */
	return strcmp(*(const char *const *)a, *(const char *const *)b);
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
		return -1;
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
	return 0;

fail:
	digest_fcop_normalized_free(out);
	return -1;
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
		return -1;
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
	return digest_finish(fp, failed, &buf, &size, canonical, length);
}

int
idem_fcop_task_canonical(const struct idem_fcop_task *task, char **canonical,
    size_t *length)
{
	struct digest_fcop_normalized	n;
	int				rc;

	if (digest_fcop_normalize(task, &n) != 0)
		return -1;
	rc = digest_fcop_canonical_normalized(&n.task, canonical, length);
	digest_fcop_normalized_free(&n);
	return rc;
}

int
idem_fcop_task_digest(const struct idem_fcop_task *task,
    char digest[IDEM_DIGEST_HEX_SIZE])
{
	char	*canonical;
	size_t	 length;

	if (idem_fcop_task_canonical(task, &canonical, &length) != 0)
		return -1;
	digest_hex_of(canonical, length, digest);
	return 0;
}

static int
digest_is_alnum(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	    (c >= '0' && c <= '9');
}

int
digest_fcop_operation_id_valid(const char *s, size_t length)
{
	size_t	i;

	if (length == 0 || length > IDEM_MAX_OPERATION_ID_BYTES ||
	    !digest_is_alnum(s[0]))
		return 0;
	for (i = 1; i < length; i++)
		if (!digest_is_alnum(s[i]) && (s[i] == '\0' ||
		    strchr("._:-", s[i]) == NULL))
			return 0;
	return 1;
}

/* ^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$ */
int
digest_fcop_workspace_id_valid(const char *s, size_t length)
{
	static const char	shape[] =
	    "urn:uuid:xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
	size_t			i;

	if (length != sizeof shape - 1)
		return 0;
	for (i = 0; i < length; i++) {
		if (shape[i] != 'x') {
			if (s[i] != shape[i])
				return 0;
		} else if (!((s[i] >= '0' && s[i] <= '9') ||
		    (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	}
	return 1;
}

/* ^TASK-[A-Za-z0-9][A-Za-z0-9._-]*$ */
int
digest_fcop_task_ref_valid(const char *s, size_t length)
{
	size_t	i;

	if (length < 6 || strncmp(s, "TASK-", 5) != 0 ||
	    !digest_is_alnum(s[5]))
		return 0;
	for (i = 6; i < length; i++)
		if (!digest_is_alnum(s[i]) && (s[i] == '\0' ||
		    strchr("._-", s[i]) == NULL))
			return 0;
	return 1;
}
