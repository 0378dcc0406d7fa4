/* SPDX-License-Identifier: ISC */
/*
 * taskfile.c: the TASK and REPORT files idem puts in the FCoP workspace:
 * their names and times, their bytes (front matter exactly as SPEC.md
 * shows it), and the workspace's directories (the FCoP topology).  The
 * rest of the files' life is in taskfile_write.c (writing them durably
 * without ever replacing a file), taskfile_find.c (finding them again
 * after FCoP tools moved them, the highest number already used on a
 * date, the workspace_id of the FCoP 4 declaration, fcop.json) and
 * taskfile_inspect.c (reading back the facts idem needs from one, and
 * whether FCoP's reference library would parse a file: its name grammar
 * and the front matter it requires).
 *
 * It never renames onto, truncates or deletes a file it did not create
 * itself: everything under the root but its own temporary files belongs
 * to the agents.  It holds no state and takes no lock.
 */
#include <sys/stat.h>
#include <sys/types.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "digest.h"
#include "store.h"
#include "taskfile_int.h"

#define TASKFILE_DIR_MODE		0755

/*
 * The topology, parents before children.  Stage names and the three
 * FCoP directories are fixed by the FCoP layout; .idem is ours.
 */
static const char *const taskfile_topology[] = {
	TASKFILE_LIFECYCLE_DIR,
	IDEM_INBOX_DIR,
	TASKFILE_LIFECYCLE_DIR "/active",
	TASKFILE_LIFECYCLE_DIR "/review",
	TASKFILE_LIFECYCLE_DIR "/done",
	TASKFILE_LIFECYCLE_DIR "/archive",
	IDEM_REPORTS_DIR,
	"issues",
	"shared",
	IDEM_STATE_DIR,
	IDEM_JOURNAL_DIR
};
#define TASKFILE_TOPOLOGY_COUNT \
	(sizeof taskfile_topology / sizeof taskfile_topology[0])
/* The directories above that have entries of the table: children first. */
static const char *const taskfile_topology_parents[] = {
	TASKFILE_LIFECYCLE_DIR,
	IDEM_STATE_DIR,
	"."
};
#define TASKFILE_TOPOLOGY_PARENT_COUNT \
	(sizeof taskfile_topology_parents / sizeof taskfile_topology_parents[0])

/*
 * Set *cause to "<what>: <strerror(errno)>" and return -1 with errno
 * unchanged, so callers can still map it to storage_unavailable.  A
 * cause that cannot be allocated is left NULL.
 */
int
taskfile_fail(char **cause, const char *fmt, ...)
{
	int	 saved_errno = errno;
	char	*what;
	va_list	 ap;

	if (cause != NULL) {
		*cause = NULL;
		va_start(ap, fmt);
		if (vasprintf(&what, fmt, ap) == -1)
			what = NULL;
		va_end(ap);
		if (what != NULL) {
			if (asprintf(cause, "%s: %s", what,
			    strerror(saved_errno)) == -1)
				*cause = NULL;
			free(what);
		}
	}
	errno = saved_errno;
	return -1;
}

/* ---- names and times -------------------------------------------------- */

const char *
taskfile_kind_prefix(enum subtab_kind kind)
{
	return kind == SUBTAB_KIND_REPORT ? "REPORT" : "TASK";
}

void
taskfile_format_id(enum subtab_kind kind, uint32_t date, uint32_t seq,
    const char *sender, size_t sender_length, const char *recipient,
    size_t recipient_length, char *out, size_t out_size)
{
	snprintf(out, out_size, "%s-%08" PRIu32 "-%03" PRIu32 "-%.*s-to-%.*s",
	    taskfile_kind_prefix(kind), date, seq, (int)sender_length, sender,
	    (int)recipient_length, recipient);
}

void
taskfile_format_path(enum subtab_kind kind, const char *id, char *out,
    size_t out_size)
{
	snprintf(out, out_size, "%s/%s.md",
	    kind == SUBTAB_KIND_REPORT ? IDEM_REPORTS_DIR : IDEM_INBOX_DIR, id);
}

/*
 * Split ms into whole seconds and milliseconds rounding down, so a time
 * before 1970 still has 0..999 milliseconds.
 */
static void
taskfile_split_ms(int64_t ms, time_t *seconds, int *millis)
{
	int64_t	s = ms / 1000, rest = ms % 1000;

	if (rest < 0) {
		rest += 1000;
		s--;
	}
	*seconds = (time_t)s;
	*millis = (int)rest;
}

/*
 * The time format has a four-digit year; out of that range (never a real
 * clock) clamp rather than write something taskfile_parse_time refuses.
 */
#define TASKFILE_MIN_MS		INT64_C(-62167219200000)	/* 0000-01-01 */
#define TASKFILE_MAX_MS		INT64_C(253402300799999)	/* 9999-12-31 */

/* v's last n decimal digits at p, zero-padded; past them. */
static char *
taskfile_put_digits(char *p, unsigned v, int n)
{
	int	i;

	for (i = n - 1; i >= 0; i--) {
		p[i] = (char)('0' + v % 10);
		v /= 10;
	}
	return p + n;
}

/*
 * Written digit by digit, not by snprintf: every effect's receipt has
 * one, and the format's parse was most of its cost (callgrind: 3,900
 * instructions a call against about 600; doc/effects.md).
 */
void
taskfile_format_time(int64_t ms, char out[TASKFILE_TIME_BYTES])
{
	struct tm	tm;
	time_t		seconds;
	char		*p;
	int		millis;

	if (ms < TASKFILE_MIN_MS)
		ms = TASKFILE_MIN_MS;
	if (ms > TASKFILE_MAX_MS)
		ms = TASKFILE_MAX_MS;
	taskfile_split_ms(ms, &seconds, &millis);
	if (gmtime_r(&seconds, &tm) == NULL)
		memset(&tm, 0, sizeof tm);
	/*
	 * "YYYY-MM-DDTHH:MM:SS.mmmZ".  The modulos change nothing after the
	 * clamp; they bound the width.
	 */
	p = taskfile_put_digits(out, (unsigned)(tm.tm_year + 1900) % 10000,
	    4);
	*p++ = '-';
	p = taskfile_put_digits(p, (unsigned)tm.tm_mon % 12 + 1, 2);
	*p++ = '-';
	p = taskfile_put_digits(p, (unsigned)tm.tm_mday % 32, 2);
	*p++ = 'T';
	p = taskfile_put_digits(p, (unsigned)tm.tm_hour % 24, 2);
	*p++ = ':';
	p = taskfile_put_digits(p, (unsigned)tm.tm_min % 60, 2);
	*p++ = ':';
	p = taskfile_put_digits(p, (unsigned)tm.tm_sec % 61, 2);
	*p++ = '.';
	p = taskfile_put_digits(p, (unsigned)millis % 1000, 3);
	*p++ = 'Z';
	*p = '\0';
}

/* n decimal digits at s; -1 if any is not a digit. */
static int
taskfile_digits(const char *s, int n)
{
	int	value = 0;

	while (n-- > 0) {
		if (*s < '0' || *s > '9')
			return -1;
		value = value * 10 + (*s++ - '0');
	}
	return value;
}

/*
 * Exactly what taskfile_format_time writes, nothing else: the created_at
 * of a file is compared byte for byte, so a second spelling of the same
 * instant must not parse.
 */
int
taskfile_parse_time(const char *s, int64_t *ms)
{
	static const char	 shape[] = "dddd-dd-ddTdd:dd:dd.dddZ";
	struct tm		 tm, back;
	time_t			 seconds;
	int			 year, month, day, hour, minute, second, millis;
	size_t			 i;

	for (i = 0; shape[i] != '\0'; i++) {
		if (shape[i] == 'd' ? (s[i] < '0' || s[i] > '9') :
		    s[i] != shape[i])
			goto invalid;
	}
	if (s[i] != '\0')
		goto invalid;

	year = taskfile_digits(s, 4);
	month = taskfile_digits(s + 5, 2);
	day = taskfile_digits(s + 8, 2);
	hour = taskfile_digits(s + 11, 2);
	minute = taskfile_digits(s + 14, 2);
	second = taskfile_digits(s + 17, 2);
	millis = taskfile_digits(s + 20, 3);
	if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 ||
	    minute > 59 || second > 59)
		goto invalid;

	memset(&tm, 0, sizeof tm);
	tm.tm_year = year - 1900;
	tm.tm_mon = month - 1;
	tm.tm_mday = day;
	tm.tm_hour = hour;
	tm.tm_min = minute;
	tm.tm_sec = second;
	seconds = timegm(&tm);

	/* timegm normalizes 02-30 into March: refuse what moved. */
	if (gmtime_r(&seconds, &back) == NULL ||
	    back.tm_year != year - 1900 || back.tm_mon != month - 1 ||
	    back.tm_mday != day || back.tm_hour != hour ||
	    back.tm_min != minute || back.tm_sec != second)
		goto invalid;

	*ms = (int64_t)seconds * 1000 + millis;
	return 0;

invalid:
	errno = EINVAL;
	return -1;
}

uint32_t
taskfile_date_of(int64_t ms)
{
	struct tm	tm;
	time_t		seconds;
	int		millis;

	taskfile_split_ms(ms, &seconds, &millis);
	if (gmtime_r(&seconds, &tm) == NULL)
		return 0;
	return (uint32_t)(tm.tm_year + 1900) * 10000 +
	    (uint32_t)(tm.tm_mon + 1) * 100 + (uint32_t)tm.tm_mday;
}

/* ---- rendering -------------------------------------------------------- */

/*
 * Every string goes through the yaml_safe JSON writer: a JSON string is a
 * YAML double-quoted scalar once the characters YAML folds or refuses
 * are escaped too, so FCoP's YAML reader gets the exact string back.
 */
static int
taskfile_put_json_string(FILE *f, const char *s)
{
	if (s == NULL)
		return fputs("null", f) == EOF ? -1 : 0;
	return digest_write_json_string(f, s, strlen(s), 1);
}

static int
taskfile_put_string(FILE *f, const char *key, const char *s)
{
	if (fprintf(f, "%s: ", key) < 0 ||
	    taskfile_put_json_string(f, s) == -1 ||
	    fputc('\n', f) == EOF)
		return -1;
	return 0;
}

static int
taskfile_put_array(FILE *f, const char *key, const char *const *items,
    size_t count)
{
	size_t	i;

	if (fprintf(f, "%s: [", key) < 0)
		return -1;
	for (i = 0; i < count; i++) {
		if (i != 0 && fputc(',', f) == EOF)
			return -1;
		if (items[i] == NULL) {
			errno = EINVAL;
			return -1;
		}
		if (taskfile_put_json_string(f, items[i]) == -1)
			return -1;
	}
	if (fputs("]\n", f) == EOF)
		return -1;
	return 0;
}

/* The envelope every file starts with; FCoP reads version as a number. */
static int
taskfile_put_envelope(FILE *f, const char *type)
{
	if (fputs("---\n", f) == EOF ||
	    taskfile_put_string(f, "protocol", "fcop") == -1 ||
	    fprintf(f, "version: %d\n", TASKFILE_FCOP_VERSION) < 0 ||
	    taskfile_put_string(f, "type", type) == -1)
		return -1;
	return 0;
}

/* The first transition: created into <to> by <by> through <tool>. */
static int
taskfile_put_transitions(FILE *f, const char *at, const char *to,
    const char *by, const char *tool)
{
	if (fputs("transitions: [{\"at\":", f) == EOF ||
	    taskfile_put_json_string(f, at) == -1 ||
	    fputs(",\"from\":null,\"to\":", f) == EOF ||
	    taskfile_put_json_string(f, to) == -1 ||
	    fputs(",\"by\":", f) == EOF ||
	    taskfile_put_json_string(f, by) == -1 ||
	    fputs(",\"tool\":", f) == EOF ||
	    taskfile_put_json_string(f, tool) == -1 ||
	    fputs("}]\n", f) == EOF)
		return -1;
	return 0;
}

/*
 * Close the memory stream and hand out its bytes, or free them if
 * anything failed.  buffer and size are only final after fclose, hence
 * the pointers.  A memory stream fails only with ENOMEM; a NULL string
 * in the input was reported as EINVAL.
 */
static int
taskfile_finish(FILE *f, char **buffer, size_t *size, int failed,
    char **out, size_t *length)
{
	int	saved_errno = errno;

	if (fclose(f) != 0 && !failed) {
		failed = 1;
		saved_errno = errno;
	}
	if (failed) {
		free(*buffer);
		errno = saved_errno != 0 ? saved_errno : ENOMEM;
		return -1;
	}
	*out = *buffer;
	*length = *size;
	return 0;
}

int
taskfile_render_task(const struct taskfile_task *tf, char **out,
    size_t *length)
{
	const struct idem_task	*t = tf->task;
	const char		*body;
	FILE			*f;
	char			*buffer = NULL;
	char			 role[IDEM_MAX_RECIPIENT_BYTES + 1];
	size_t			 size = 0;
	int			 failed = 0;

	if (tf->task_id == NULL || tf->created_at == NULL || t == NULL ||
	    t->sender == NULL || t->recipient == NULL || t->subject == NULL ||
	    (tf->client_submission_id != NULL && tf->request_digest == NULL) ||
	    (tf->fcop != NULL && (tf->client_submission_id == NULL ||
	    tf->fcop->workspace_id == NULL || tf->fcop->operation_id == NULL)) ||
	    (t->references_count != 0 && t->references == NULL) ||
	    (t->depends_on_count != 0 && t->depends_on == NULL)) {
		errno = EINVAL;
		return -1;
	}
	/* Normalized tasks have their defaults; these match digest.c's. */
	body = t->body != NULL ? t->body : "";
	/*
	 * An FCoP slot (DEV.D1) is in the name only: the front matter's
	 * recipient is the bare role code, as FCoP's own writer puts it.
	 */
	snprintf(role, sizeof role, "%.*s", (int)strcspn(t->recipient, "."),
	    t->recipient);

	if ((f = open_memstream(&buffer, &size)) == NULL)
		return -1;
	errno = 0;
	if (taskfile_put_envelope(f, "TASK") == -1 ||
	    taskfile_put_string(f, "task_id", tf->task_id) == -1 ||
	    taskfile_put_string(f, "sender", t->sender) == -1 ||
	    taskfile_put_string(f, "recipient", role) == -1 ||
	    taskfile_put_string(f, "subject", t->subject) == -1 ||
	    taskfile_put_string(f, "priority",
	    t->priority != NULL ? t->priority : "P2") == -1)
		failed = 1;
	if (!failed && tf->fcop == NULL &&
	    (taskfile_put_string(f, "risk_level",
	    t->risk_level != NULL ? t->risk_level : "low") == -1 ||
	    taskfile_put_string(f, "thread_key", t->thread_key) == -1))
		failed = 1;
	if (!failed && (taskfile_put_string(f, "parent", t->parent) == -1 ||
	    (tf->fcop != NULL && taskfile_put_string(f, "branch_of",
	    tf->fcop->branch_of) == -1) ||
	    taskfile_put_array(f, "references", t->references,
	    t->references_count) == -1 ||
	    (tf->fcop == NULL && taskfile_put_array(f, "depends_on",
	    t->depends_on, t->depends_on_count) == -1) ||
	    taskfile_put_string(f, "created_at", tf->created_at) == -1 ||
	    taskfile_put_string(f, "client_submission_id",
	    tf->client_submission_id) == -1))
		failed = 1;
	if (!failed && tf->client_submission_id != NULL &&
	    (taskfile_put_string(f, "digest_schema", tf->fcop != NULL ?
	    IDEM_SCHEMA_FCOP_CREATE_TASK_V1 : IDEM_SCHEMA_WRITE_TASK_V1) == -1 ||
	    taskfile_put_string(f, "request_digest",
	    tf->request_digest) == -1))
		failed = 1;
	/* FCoP 4's C7 fields: the result TASK repeats its operation. */
	if (!failed && tf->fcop != NULL &&
	    (taskfile_put_string(f, "workspace_id",
	    tf->fcop->workspace_id) == -1 ||
	    taskfile_put_string(f, "operation_kind",
	    IDEM_FCOP_OPERATION_KIND) == -1 ||
	    taskfile_put_string(f, "operation_id",
	    tf->fcop->operation_id) == -1 ||
	    taskfile_put_string(f, "normalized_request_digest",
	    tf->request_digest) == -1))
		failed = 1;
	if (!failed && (taskfile_put_transitions(f, tf->created_at, "inbox",
	    t->sender, "write_task") == -1 ||
	    fputs("---\n", f) == EOF ||
	    fwrite(body, 1, strlen(body), f) != strlen(body)))
		failed = 1;
	return taskfile_finish(f, &buffer, &size, failed, out, length);
}

int
taskfile_render_report(const struct taskfile_report *rf, char **out,
    size_t *length)
{
	const struct idem_report	*r = rf->report;
	const char			*body;
	FILE				*f;
	char				*buffer = NULL;
	size_t				 size = 0;
	int				 failed = 0;

	if (rf->report_id == NULL || rf->task_id == NULL ||
	    rf->created_at == NULL || r == NULL || r->sender == NULL ||
	    r->recipient == NULL ||
	    (rf->client_submission_id != NULL && rf->request_digest == NULL)) {
		errno = EINVAL;
		return -1;
	}
	body = r->body != NULL ? r->body : "";

	if ((f = open_memstream(&buffer, &size)) == NULL)
		return -1;
	errno = 0;
	if (taskfile_put_envelope(f, "REPORT") == -1 ||
	    taskfile_put_string(f, "report_id", rf->report_id) == -1 ||
	    taskfile_put_string(f, "task_id", rf->task_id) == -1 ||
	    taskfile_put_string(f, "sender", r->sender) == -1 ||
	    taskfile_put_string(f, "recipient", r->recipient) == -1 ||
	    taskfile_put_string(f, "status",
	    r->status != NULL ? r->status : "done") == -1 ||
	    /* FCoP's report reader finds the task in references[0]. */
	    taskfile_put_array(f, "references", &rf->task_id, 1) == -1 ||
	    taskfile_put_string(f, "created_at", rf->created_at) == -1 ||
	    taskfile_put_string(f, "client_submission_id",
	    rf->client_submission_id) == -1)
		failed = 1;
	if (!failed && rf->client_submission_id != NULL &&
	    (taskfile_put_string(f, "digest_schema",
	    IDEM_SCHEMA_WRITE_REPORT_V1) == -1 ||
	    taskfile_put_string(f, "request_digest",
	    rf->request_digest) == -1))
		failed = 1;
	if (!failed && (taskfile_put_transitions(f, rf->created_at, "reports",
	    r->sender, "write_report") == -1 ||
	    fputs("---\n", f) == EOF ||
	    fwrite(body, 1, strlen(body), f) != strlen(body)))
		failed = 1;
	return taskfile_finish(f, &buffer, &size, failed, out, length);
}

/* ---- directories ------------------------------------------------------ */

/* fsync a directory by path; works whatever way at_fd was opened. */
static int
taskfile_fsync_dir(int at_fd, const char *path)
{
	int	fd, saved_errno;

	if ((fd = nofollow_dir(at_fd, path)) == -1)
		return -1;
	if (fsync(fd) == -1) {
		saved_errno = errno;
		close(fd);
		errno = saved_errno;
		return -1;
	}
	close(fd);
	return 0;
}

/* Does idemd write below path (or keep its state there)? */
static int
taskfile_topology_written(const char *path)
{
	return strcmp(path, TASKFILE_LIFECYCLE_DIR) == 0 ||
	    strcmp(path, IDEM_INBOX_DIR) == 0 ||
	    strcmp(path, IDEM_REPORTS_DIR) == 0 ||
	    strcmp(path, IDEM_STATE_DIR) == 0 ||
	    strcmp(path, IDEM_JOURNAL_DIR) == 0;
}

int
taskfile_make_topology(int root_fd, char **cause)
{
	const char	*path;
	struct stat	 st;
	size_t		 i;

	for (i = 0; i < TASKFILE_TOPOLOGY_COUNT; i++) {
		path = taskfile_topology[i];
		/* Never through a symlink: it could lead out of the root. */
		if (nofollow_mkdir(root_fd, path, TASKFILE_DIR_MODE) == 0)
			continue;
		if (errno == ELOOP)
			return taskfile_fail(cause, "%s: a symlink on the way; "
			    "idemd never follows one (make it a directory)",
			    path);
		if (errno != EEXIST)
			return taskfile_fail(cause, "mkdir %s", path);
		/* Something is there: it must be a directory. */
		if (nofollow_lstat(root_fd, path, &st) == -1)
			return taskfile_fail(cause, "stat %s", path);
		if (S_ISLNK(st.st_mode)) {
			/*
			 * Where idemd writes or keeps state, a symlink could
			 * send that out of the root: refuse.  Elsewhere (a
			 * stage FCoP tools fill, issues/, shared/) it is left
			 * as it is and never searched.
			 */
			if (!taskfile_topology_written(path)) {
				store_notice(STORE_NOTICE_WARNING, "%s is a "
				    "symlink: left alone, never followed "
				    "(tasks behind it are not found)", path);
				continue;
			}
			errno = ELOOP;
			return taskfile_fail(cause, "%s is a symlink; idemd "
			    "never follows one (make it a directory)", path);
		}
		if (!S_ISDIR(st.st_mode)) {
			errno = ENOTDIR;
			return taskfile_fail(cause, "%s", path);
		}
	}

	/*
	 * A new directory survives a crash only once its parent's entry is
	 * on disk.  The parents are fsync'd even when nothing was created
	 * now: a broker killed right after its mkdir left entries that exist
	 * but may not be durable yet, and this costs three fsyncs a start.
	 */
	for (i = 0; i < TASKFILE_TOPOLOGY_PARENT_COUNT; i++) {
		path = taskfile_topology_parents[i];
		if (taskfile_fsync_dir(root_fd, path) == -1)
			return taskfile_fail(cause, "fsync %s", path);
	}
	return 0;
}
