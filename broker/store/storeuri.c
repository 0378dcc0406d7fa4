/* SPDX-License-Identifier: ISC */
/*
 * storeuri.c: the PostgreSQL store's URI as a secret.  A password given
 * with --store is readable by every local user in ps until it is
 * overwritten; --store-file keeps it out of every command line, and
 * libpq's own PGPASSFILE and PGSERVICE keep it out of the URI
 * altogether (doc/cluster.md).  The grammar followed is libpq's
 * (conninfo_uri_parse_options): the user part ends at the first '@'
 * before any '/', the password is what follows its first ':', and the
 * parameters after '?' are key=value pairs separated by '&', both
 * percent-encoded.
 */
#include <sys/stat.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "storeuri.h"

static int
storeuri_hex(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Is the percent-encoded key from key to end "password"? */
static int
storeuri_key_is_password(const char *key, const char *end)
{
	static const char	 want[] = "password";
	size_t			 i = 0;
	int			 c, hi, lo;

	while (key < end) {
		c = (unsigned char)*key++;
		if (c == '%' && end - key >= 2 &&
		    (hi = storeuri_hex(key[0])) != -1 &&
		    (lo = storeuri_hex(key[1])) != -1) {
			c = hi * 16 + lo;
			key += 2;
		}
		if (i >= sizeof want - 1 || c != want[i++])
			return 0;
	}
	return i == sizeof want - 1;
}

/*
 * Each password in uri, as [from, to): at most one in the user part and
 * one per "password" parameter.  Returns how many bytes they hold.
 */
static size_t
storeuri_spans(const char *uri, void (*fn)(const char *, const char *,
    void *), void *arg)
{
	const char	*p, *user, *colon, *query, *pair, *eq, *next;
	size_t		 n = 0;

	if ((p = strstr(uri, "://")) == NULL)
		return 0;
	user = p + 3;
	p = user + strcspn(user, "@/");
	if (*p == '@' && (colon = memchr(user, ':', (size_t)(p - user))) !=
	    NULL && p > colon + 1) {
		fn(colon + 1, p, arg);
		n += (size_t)(p - colon - 1);
	}
	/* The parameters: after the first '?' past the user part. */
	if ((query = strchr(*p == '@' ? p : user, '?')) == NULL)
		return n;
	for (pair = query + 1; *pair != '\0'; pair = next) {
		next = pair + strcspn(pair, "&");
		eq = memchr(pair, '=', (size_t)(next - pair));
		if (eq != NULL && next > eq + 1 &&
		    storeuri_key_is_password(pair, eq)) {
			fn(eq + 1, next, arg);
			n += (size_t)(next - eq - 1);
		}
		if (*next == '&')
			next++;
	}
	return n;
}

/* The span, in the string that holds it, overwritten. */
static void
storeuri_blank(const char *from, const char *to, void *arg)
{
	(void)arg;
	memset((char *)from, 'x', (size_t)(to - from));
}

size_t
storeuri_redact(char *uri)
{
	return storeuri_spans(uri, storeuri_blank, NULL);
}

/* Every copy of the span's bytes in the text (arg) overwritten. */
static void
storeuri_blank_in(const char *from, const char *to, void *arg)
{
	char	*text = arg, *at;
	size_t	 len = (size_t)(to - from);
	char	 word[STOREURI_FILE_MAX + 1];

	if (len > STOREURI_FILE_MAX)
		return;
	memcpy(word, from, len);
	word[len] = '\0';
	while ((at = strstr(text, word)) != NULL)
		memset(at, 'x', len);
	explicit_bzero(word, len);
}

void
storeuri_scrub(char *text, const char *uri)
{
	if (text != NULL && uri != NULL)
		(void)storeuri_spans(uri, storeuri_blank_in, text);
}

int
storeuri_is_postgresql(const char *uri)
{
	return strncmp(uri, "postgresql://", 13) == 0 ||
	    strncmp(uri, "postgres://", 11) == 0;
}

int
storeuri_has_password(const char *uri)
{
	char	*copy;
	size_t	 n;

	if ((copy = strdup(uri)) == NULL)
		return 1;	/* assume the worst */
	n = storeuri_redact(copy);
	free(copy);
	return n > 0;
}

char *
storeuri_read_file(const char *path, unsigned uid, char **cause)
{
	struct stat	 st;
	char		 buf[STOREURI_FILE_MAX + 1], *start, *end, *uri;
	ssize_t		 got;
	size_t		 used = 0;
	int		 fd;

	*cause = NULL;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY)) == -1) {
		if (asprintf(cause, "--store-file %s: %s", path,
		    strerror(errno)) == -1)
			*cause = NULL;
		return NULL;
	}
	if (fstat(fd, &st) == -1) {
		if (asprintf(cause, "--store-file %s: %s", path,
		    strerror(errno)) == -1)
			*cause = NULL;
		close(fd);
		return NULL;
	}
	if (!S_ISREG(st.st_mode)) {
		if (asprintf(cause, "--store-file %s: not a regular file",
		    path) == -1)
			*cause = NULL;
		close(fd);
		return NULL;
	}
	if (st.st_uid != uid && st.st_uid != 0) {
		if (asprintf(cause, "--store-file %s: owned by uid %u: it "
		    "must be owned by uid %u (who runs this) or by root",
		    path, (unsigned)st.st_uid, uid) == -1)
			*cause = NULL;
		close(fd);
		return NULL;
	}
	if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
		if (asprintf(cause, "--store-file %s: mode %04o gives its "
		    "group or others access to the store's password: "
		    "chmod 600 %s", path, (unsigned)(st.st_mode & 07777),
		    path) == -1)
			*cause = NULL;
		close(fd);
		return NULL;
	}
	while (used < sizeof buf - 1) {
		got = read(fd, buf + used, sizeof buf - 1 - used);
		if (got == -1 && errno == EINTR)
			continue;
		if (got == -1) {
			if (asprintf(cause, "--store-file %s: %s", path,
			    strerror(errno)) == -1)
				*cause = NULL;
			close(fd);
			return NULL;
		}
		if (got == 0)
			break;
		used += (size_t)got;
	}
	close(fd);
	buf[used] = '\0';
	for (start = buf; isspace((unsigned char)*start); start++)
		;
	for (end = buf + used; end > start &&
	    isspace((unsigned char)end[-1]); end--)
		;
	*end = '\0';
	if (used == sizeof buf - 1 || start == end ||
	    strlen(start) != (size_t)(end - start) ||
	    strpbrk(start, "\r\n") != NULL) {
		if (asprintf(cause, "--store-file %s: must hold one URI on "
		    "one line (at most %d bytes)", path,
		    STOREURI_FILE_MAX) == -1)
			*cause = NULL;
		explicit_bzero(buf, sizeof buf);
		return NULL;
	}
	uri = strdup(start);
	explicit_bzero(buf, sizeof buf);
	if (uri == NULL && (*cause = strdup("out of memory")) == NULL)
		errno = ENOMEM;
	return uri;
}
