/* SPDX-License-Identifier: ISC */
/*
 * notify_once.c: a tool with a downstream side effect, made safe with
 * idem's effect ledger.  The side effect appends a line to a file that
 * another process reads (an outbox, a feed, a log a pager tails); the
 * line starts with the effect's external_key, which is how the probe
 * finds out, after a crash, whether the line was written.
 *
 *	cc notify_once.c $(pkg-config --cflags --libs libidem)
 *	IDEM_SOCKET=./fcop/.idem/idemd.sock \
 *	    ./a.out [options] SUBMISSION-ID OUTBOX MESSAGE
 *
 * Options:
 *	--lease-ms N		how long the append may take (default 30000)
 *	--die-after-append	append, then die before effect_complete: the
 *				crash window between a side effect and its
 *				report (exit 3, as a killed tool would)
 *	--no-probe		on outcome_unknown, do not look at the outbox;
 *				show what an operator sees (exit 2)
 *
 * Run it twice with the same id: one line in the outbox, the second run
 * answers "reused".  Run it with --die-after-append, then again: while
 * the lease is live, "in_progress" (exit 75: retry later); once it has
 * lapsed, "outcome_unknown", which is never turned into a second append
 * by time: with --no-probe the tool says so and stops, without it the
 * probe finds the line by its external key, resolves the effect as
 * applied, and the tool reports "recovered".  The outbox keeps exactly
 * one line per id whatever was killed when.
 *
 * Exit status: 0 sent (now or before), 2 outcome unknown, 3 died on
 * purpose, 75 in progress, 1 anything else.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE		/* asprintf */
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <idem.h>

#define KIND		"outbox.append/v1"
#define EXIT_UNKNOWN	2
#define EXIT_DIED	3
#define EXIT_TEMPFAIL	75

struct outbox {
	const char	*path;
	const char	*message;
	int		 die_after_append;
};

/* The side effect: "<external_key> <message>\n", appended and fsync'd. */
static enum idem_effect_observed
append_line(const struct idem_effect *begun, char **result, void *arg)
{
	struct outbox	*o = arg;
	char		*line;
	off_t		 at;
	int		 fd, n;

	n = asprintf(&line, "%s %s\n", begun->external_key, o->message);
	if (n < 0)
		return IDEM_OBSERVED_NOT_APPLIED;
	fd = open(o->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd == -1) {
		free(line);
		return IDEM_OBSERVED_NOT_APPLIED;	/* nothing written */
	}
	at = lseek(fd, 0, SEEK_END);
	if (write(fd, line, (size_t)n) != n || fsync(fd) != 0) {
		/* Some bytes may be there: only the probe can tell. */
		close(fd);
		free(line);
		return IDEM_OBSERVED_UNKNOWN;
	}
	close(fd);
	free(line);
	if (o->die_after_append) {
		fprintf(stderr, "notify_once: appended, dying before "
		    "effect_complete\n");
		_exit(EXIT_DIED);
	}
	if (asprintf(result, "{\"offset\":%lld}", (long long)at) < 0)
		*result = NULL;
	return IDEM_OBSERVED_APPLIED;
}

/* After a crash: is a line with this external key in the outbox? */
static enum idem_effect_observed
find_line(const struct idem_effect *unknown, char **result, char **source,
    void *arg)
{
	struct outbox	*o = arg;
	FILE		*fp;
	char		*line = NULL;
	size_t		 size = 0, keylen = strlen(unknown->external_key);
	long long	 at = 0;
	ssize_t		 n;
	int		 found = 0;

	if ((fp = fopen(o->path, "r")) == NULL)
		return errno == ENOENT ? IDEM_OBSERVED_NOT_APPLIED :
		    IDEM_OBSERVED_UNKNOWN;
	while ((n = getline(&line, &size, fp)) != -1) {
		if ((size_t)n > keylen && strncmp(line, unknown->external_key,
		    keylen) == 0 && line[keylen] == ' ') {
			found = 1;
			break;
		}
		at += n;
	}
	free(line);
	fclose(fp);
	if (asprintf(source, "notify_once scanned %s", o->path) < 0)
		*source = NULL;
	if (!found)
		return IDEM_OBSERVED_NOT_APPLIED;
	if (asprintf(result, "{\"offset\":%lld}", at) < 0)
		*result = NULL;
	return IDEM_OBSERVED_APPLIED;
}

/* s as a JSON string (malloc'd): quotes, backslashes, controls escaped. */
static char *
json_quote(const char *s)
{
	char	*out, *o;

	if ((out = malloc(6 * strlen(s) + 3)) == NULL)
		return NULL;
	o = out;
	*o++ = '"';
	for (; *s != '\0'; s++) {
		if (*s == '"' || *s == '\\') {
			*o++ = '\\';
			*o++ = *s;
		} else if ((unsigned char)*s < 0x20)
			o += sprintf(o, "\\u%04x", (unsigned char)*s);
		else
			*o++ = *s;
	}
	*o++ = '"';
	*o = '\0';
	return out;
}

static void
usage(void)
{
	fprintf(stderr, "usage: notify_once [--lease-ms N] "
	    "[--die-after-append] [--no-probe] SUBMISSION-ID OUTBOX "
	    "MESSAGE\n");
	exit(1);
}

int
main(int argc, char *argv[])
{
	struct outbox		 o = { NULL, NULL, 0 };
	struct idem_effect	 out;
	struct idem_error	 err;
	struct idem_conn	*conn;
	int64_t			 lease_ms = 0;
	int			 probe = 1, i, rc;
	char			*request, *qpath, *qmessage;

	for (i = 1; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
		if (strcmp(argv[i], "--die-after-append") == 0)
			o.die_after_append = 1;
		else if (strcmp(argv[i], "--no-probe") == 0)
			probe = 0;
		else if (strcmp(argv[i], "--lease-ms") == 0 && i + 1 < argc)
			lease_ms = strtoll(argv[++i], NULL, 10);
		else
			usage();
	}
	if (argc - i != 3)
		usage();
	o.path = argv[i + 1];
	o.message = argv[i + 2];
	/* What the effect does: digested, so another message is a conflict. */
	qpath = json_quote(o.path);
	qmessage = json_quote(o.message);
	if (qpath == NULL || qmessage == NULL ||
	    asprintf(&request, "{\"outbox\":%s,\"message\":%s}", qpath,
	    qmessage) < 0)
		return 1;
	free(qpath);
	free(qmessage);
	if ((conn = idem_connect(NULL, &err)) == NULL) {
		fprintf(stderr, "notify_once: %s\n", err.message);
		return 1;
	}
	rc = idem_effect_run(conn, argv[i], KIND, request, lease_ms,
	    append_line, probe ? find_line : NULL, &o, &out, &err);
	free(request);
	idem_close(conn);
	if (rc == 0) {
		printf("%s%s %s\n", out.disposition == IDEM_EFFECT_REUSED ?
		    "reused" : out.disposition == IDEM_EFFECT_RELEASED ?
		    "not-sent" : "sent", out.recovered ? " recovered" : "",
		    out.receipt != NULL ? out.receipt : "");
		idem_effect_clear(&out);
		return 0;
	}
	switch (out.disposition) {
	case IDEM_EFFECT_OUTCOME_UNKNOWN:
		printf("outcome_unknown attempt %u external_key %s\n",
		    out.attempt, out.external_key);
		fprintf(stderr, "notify_once: %s\n  look for %s in %s, then: "
		    "idemctl resolve %s %s applied|not_applied\n",
		    err.message, out.external_key, o.path, KIND, argv[i]);
		rc = EXIT_UNKNOWN;
		break;
	case IDEM_EFFECT_IN_PROGRESS:
		printf("in_progress until %s\n", out.lease_expires_at);
		rc = EXIT_TEMPFAIL;
		break;
	default:
		fprintf(stderr, "notify_once: %s%s%s\n", err.message,
		    err.reason[0] != '\0' ? ": " : "", err.reason);
		rc = 1;
		break;
	}
	idem_effect_clear(&out);
	return rc;
}
