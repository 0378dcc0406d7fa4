/* SPDX-License-Identifier: ISC */
/*
 * taskfile_inspect.c: reading a TASK or REPORT file back: its digest
 * (the whole file, streamed) and the facts idem needs from its front
 * matter, whether it belongs to a submission, and whether FCoP's
 * reference library would parse it (its name grammar and the front
 * matter it requires).
 */
#include <sys/stat.h>
#include <sys/types.h>

#include <errno.h>
#include <fcntl.h>
#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "digest.h"
#include "store.h"
#include "taskfile_int.h"

/*
 * How much of a file taskfile_inspect keeps to look for front matter.
 * The largest front matter idem can write (256 references and 256
 * dependencies of 256 bytes, each byte escaped as \u00XX) is under
 * 1 MiB, so a closing "---" not found in the first 4 MiB means the
 * front matter is not idem's.  The digest always covers the whole file.
 */
#define TASKFILE_INSPECT_HEAD_BYTES	(4 * 1024 * 1024)
#define TASKFILE_READ_CHUNK_BYTES	16384

/* ---- reading a file back ---------------------------------------------- */

/* Lower-case hex only: that is what idem writes and compares. */
static int
taskfile_is_digest_hex(const char *s, size_t length)
{
	size_t	i;

	if (length != IDEM_SHA256_HEX_BYTES)
		return 0;
	for (i = 0; i < length; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') ||
		    (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	}
	return 1;
}

/* Printable ASCII, as the wire protocol requires of a submission id. */
static int
taskfile_is_submission_id(const char *s, size_t length)
{
	size_t	i;

	if (length == 0 || length > IDEM_MAX_SUBMISSION_ID_BYTES)
		return 0;
	for (i = 0; i < length; i++) {
		if (s[i] < 0x21 || s[i] > 0x7e)
			return 0;
	}
	return 1;
}

/* Take one of the three facts from a parsed value; others are ignored. */
static void
taskfile_take_fact(struct taskfile_facts *facts, const char *key,
    json_t *value)
{
	const char	*s;
	size_t		 length;

	/* FCoP reads version 1 as a number or a string ("1", "1.0"). */
	if (strcmp(key, "version") == 0 && ((json_is_integer(value) &&
	    json_integer_value(value) == TASKFILE_FCOP_VERSION) ||
	    (json_is_string(value) && (strcmp(json_string_value(value),
	    "1") == 0 || strcmp(json_string_value(value), "1.0") == 0))))
		facts->fcop_fields |= TASKFILE_FM_VERSION;
	if (!json_is_string(value))
		return;
	s = json_string_value(value);
	length = json_string_length(value);

	if (strcmp(key, "protocol") == 0 && strcmp(s, "fcop") == 0)
		facts->fcop_fields |= TASKFILE_FM_PROTOCOL;
	else if (strcmp(key, "sender") == 0 && digest_role_code_valid(s,
	    length))
		facts->fcop_fields |= TASKFILE_FM_SENDER;
	else if (strcmp(key, "recipient") == 0 && digest_role_code_valid(s,
	    length))
		facts->fcop_fields |= TASKFILE_FM_RECIPIENT;

	if (strcmp(key, "client_submission_id") == 0) {
		if (taskfile_is_submission_id(s, length)) {
			memcpy(facts->client_submission_id, s, length + 1);
			facts->has_client_submission_id = 1;
		}
	} else if (strcmp(key, "request_digest") == 0) {
		if (taskfile_is_digest_hex(s, length)) {
			memcpy(facts->request_digest, s, length + 1);
			facts->has_request_digest = 1;
		}
	} else if (strcmp(key, "created_at") == 0) {
		/* jansson refuses \u0000 by default: length is strlen. */
		if (length < sizeof facts->created_at &&
		    taskfile_parse_time(s, &facts->created_at_ms) == 0) {
			memcpy(facts->created_at, s, length + 1);
			facts->has_created_at = 1;
		}
	}
}

static int
taskfile_is_key_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/*
 * Parse front matter in the shape idem writes: a first line "---", then
 * only "key: <one JSON value>" lines, then a line "---".  Anything else
 * (block YAML from another FCoP writer, CRLF, no closing line in the
 * head) is not an error, just not ours: 0, and no facts.  A key given
 * twice is not ours either, since a YAML reader would see another value.
 */
static int
taskfile_parse_front_matter(const char *buf, size_t length,
    struct taskfile_facts *facts)
{
	const char	*p = buf, *end = buf + length, *nl, *key, *value;
	char		 name[64];
	size_t		 key_length;
	json_t		*json, *seen;
	json_error_t	 error;
	int		 ok = 0;

	if (length < 4 || memcmp(buf, "---\n", 4) != 0)
		return 0;
	p += 4;
	if ((seen = json_object()) == NULL)
		return 0;

	while ((nl = memchr(p, '\n', end - p)) != NULL) {
		if (nl - p == 3 && memcmp(p, "---", 3) == 0) {
			ok = 1;
			break;
		}
		key = p;
		while (p < nl && taskfile_is_key_char(*p))
			p++;
		key_length = p - key;
		if (key_length == 0 || key_length >= sizeof name ||
		    nl - p < 3 || p[0] != ':' || p[1] != ' ')
			break;
		value = p + 2;
		memcpy(name, key, key_length);
		name[key_length] = '\0';
		if (json_object_get(seen, name) != NULL ||
		    json_object_set_new(seen, name, json_true()) == -1)
			break;

		json = json_loadb(value, nl - value, JSON_DECODE_ANY, &error);
		if (json == NULL)
			break;
		taskfile_take_fact(facts, name, json);
		json_decref(json);
		p = nl + 1;
	}
	json_decref(seen);

	if (!ok) {
		facts->fcop_fields = 0;
		facts->has_client_submission_id = 0;
		facts->client_submission_id[0] = '\0';
		facts->has_request_digest = 0;
		facts->request_digest[0] = '\0';
		facts->has_created_at = 0;
		facts->created_at[0] = '\0';
		facts->created_at_ms = 0;
	}
	return ok;
}

/*
 * Does the head open with a "---" line and have a closing one, as FCoP's
 * split_frontmatter needs (CRLF taken as LF, as it does)?
 */
static int
taskfile_delimited(const char *head, size_t length)
{
	const char	*p, *end = head + length, *nl;
	size_t		 n;

	if (length >= 4 && memcmp(head, "---\n", 4) == 0)
		p = head + 4;
	else if (length >= 5 && memcmp(head, "---\r\n", 5) == 0)
		p = head + 5;
	else
		return 0;
	for (; p < end; p = nl + 1) {
		if ((nl = memchr(p, '\n', end - p)) == NULL)
			nl = end;
		n = nl - p;
		if (n > 0 && p[n - 1] == '\r')
			n--;
		/* FCoP strips the line: surrounding blanks are allowed. */
		while (n > 0 && (*p == ' ' || *p == '\t')) {
			p++;
			n--;
		}
		while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
			n--;
		if (n == 3 && memcmp(p, "---", 3) == 0)
			return 1;
	}
	return 0;
}

/*
 * The digest covers the whole file, streamed, so a file of any size gets
 * its true digest and a file that grew past an idem file can never match
 * one; only the head is kept in memory for the front matter.
 */
int
taskfile_inspect(int root_fd, const char *relpath,
    struct taskfile_facts *facts, char **cause)
{
	crypto_hash_sha256_state	 state;
	char				 chunk[TASKFILE_READ_CHUNK_BYTES];
	char				*head = NULL, *p;
	size_t				 head_size, head_length = 0, want;
	struct stat			 st;
	ssize_t				 n;
	int				 fd, saved_errno;

	memset(facts, 0, sizeof *facts);
	if (cause != NULL)
		*cause = NULL;

	if ((fd = nofollow_openat(root_fd, relpath, O_RDONLY|O_NOCTTY, 0)) ==
	    -1)
		return taskfile_fail(cause, errno == ELOOP ? "open %s (a "
		    "symlink: never followed)" : "open %s", relpath);
	if (fstat(fd, &st) == -1)
		goto fail;
	if (!S_ISREG(st.st_mode)) {
		errno = EINVAL;
		goto fail;
	}
	head_size = (uintmax_t)st.st_size < TASKFILE_INSPECT_HEAD_BYTES ?
	    (size_t)st.st_size : TASKFILE_INSPECT_HEAD_BYTES;
	if ((head = malloc(head_size != 0 ? head_size : 1)) == NULL)
		goto fail;

	crypto_hash_sha256_init(&state);
	for (;;) {
		/* Fill the head first, then stream the rest through chunk. */
		if (head_length < head_size) {
			p = head + head_length;
			want = head_size - head_length;
		} else {
			p = chunk;
			want = sizeof chunk;
		}
		if ((n = read(fd, p, want)) == -1) {
			if (errno == EINTR)
				continue;
			goto fail;
		}
		if (n == 0)
			break;
		crypto_hash_sha256_update(&state, (unsigned char *)p, n);
		if (p != chunk)
			head_length += (size_t)n;
	}
	crypto_hash_sha256_final(&state, facts->file_digest);
	close(fd);

	facts->has_front_matter = taskfile_parse_front_matter(head,
	    head_length, facts);
	facts->fm_delimited = taskfile_delimited(head, head_length);
	free(head);
	return 0;

fail:
	saved_errno = errno;
	free(head);
	close(fd);
	errno = saved_errno;
	return taskfile_fail(cause, "read %s", relpath);
}

/*
 * Whether a file found at a reserved name is the one its submission
 * wrote: its front matter names the submission and its request digest.
 */
int
taskfile_facts_belong(const struct taskfile_facts *facts,
    const char *client_submission_id, const char *request_digest_hex)
{
	return facts->has_client_submission_id && facts->has_request_digest &&
	    strcmp(facts->client_submission_id, client_submission_id) == 0 &&
	    strcmp(facts->request_digest, request_digest_hex) == 0;
}

/*
 * FCoP's file name grammar (fcop/core/filename.py, TASK_FILENAME_RE and
 * REPORT_FILENAME_RE), with the number's digits as a parameter: role
 * codes, an optional slot on a task's recipient, an optional slug.
 */
#define TASKFILE_RE_ROLE	"[A-Z][A-Z0-9_]*(-[A-Z0-9_]+)*"
#define TASKFILE_RE_SLUG	"(-[a-z]([a-z0-9-]*[a-z0-9])?)?"

const char *
taskfile_fcop_problem(const char *name, unsigned digits,
    const struct taskfile_facts *facts)
{
	regex_t		 re;
	char		 pattern[512];
	int		 task = strncmp(name, "TASK-", 5) == 0, matched;

	snprintf(pattern, sizeof pattern, "^%s-[0-9]{8}-[0-9]{3,%u}-"
	    TASKFILE_RE_ROLE "-to-" TASKFILE_RE_ROLE "%s" TASKFILE_RE_SLUG
	    "\\.md$", task ? "TASK" : "REPORT", digits < 3 ? 3 : digits,
	    task ? "(\\." TASKFILE_RE_ROLE ")?" : "");
	if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0)
		return "the name grammar could not be compiled";
	matched = regexec(&re, name, 0, NULL, 0) == 0;
	regfree(&re);
	if (!matched)
		return digits <= 3 ? "its name is not FCoP's (a number of "
		    "exactly three digits, role codes, an optional slot and "
		    "slug)" : "its name is not FCoP's grammar";
	if (!facts->fm_delimited)
		return "it has no front matter between \"---\" lines";
	if (facts->has_front_matter &&
	    (facts->fcop_fields & TASKFILE_FM_ALL) != TASKFILE_FM_ALL)
		return "its front matter lacks what FCoP's reader requires "
		    "(protocol \"fcop\", version 1, sender and recipient "
		    "role codes)";
	return NULL;
}
