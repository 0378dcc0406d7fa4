/* SPDX-License-Identifier: ISC */
/*
 * taskfile.c: the TASK and REPORT files idem puts in the FCoP workspace:
 * their names and times, their bytes (front matter exactly as SPEC.md
 * shows it), writing them durably without ever replacing a file,
 * finding them again after FCoP tools moved them, reading back the
 * facts idem needs from one, the highest number already used on a
 * date, the workspace_id of the FCoP 4 declaration (fcop.json), and
 * whether FCoP's reference library would parse a file (its name grammar
 * and the front matter it requires).
 *
 * It never renames onto, truncates or deletes a file it did not create
 * itself: everything under the root but its own temporary files belongs
 * to the agents.  It holds no state and takes no lock.
 */
#include <sys/stat.h>
#include <sys/types.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "digest.h"
#include "store.h"

/*
 * How much of a file taskfile_inspect keeps to look for front matter.
 * The largest front matter idem can write (256 references and 256
 * dependencies of 256 bytes, each byte escaped as \u00XX) is under
 * 1 MiB, so a closing "---" not found in the first 4 MiB means the
 * front matter is not idem's.  The digest always covers the whole file.
 */
#define TASKFILE_INSPECT_HEAD_BYTES	(4 * 1024 * 1024)
#define TASKFILE_READ_CHUNK_BYTES	16384
/* Random bytes in a temporary name: two writers never share one. */
#define TASKFILE_TEMP_RANDOM_BYTES	8
/* Tries at a fresh temporary name before giving up. */
#define TASKFILE_TEMP_TRIES		4
/* The FCoP envelope version that FCoP's reference library speaks. */
#define TASKFILE_FCOP_VERSION		1
#define TASKFILE_DIR_MODE		0755
#define TASKFILE_FILE_MODE		0644

#define TASKFILE_LIFECYCLE_DIR		"_lifecycle"
#define TASKFILE_HISTORY_DIR		"history"

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

/* Where FCoP archives tasks: <base>/<date dir>/<task_id>/<task_id>.md. */
static const char *const taskfile_history_bases[] = {
	TASKFILE_HISTORY_DIR,
	TASKFILE_LIFECYCLE_DIR "/" TASKFILE_HISTORY_DIR
};
#define TASKFILE_HISTORY_BASE_COUNT \
	(sizeof taskfile_history_bases / sizeof taskfile_history_bases[0])

/*
 * Set *cause to "<what>: <strerror(errno)>" and return -1 with errno
 * unchanged, so callers can still map it to storage_unavailable.  A
 * cause that cannot be allocated is left NULL.
 */
static int __attribute__((format(printf, 2, 3)))
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

static const char *
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

void
taskfile_format_time(int64_t ms, char out[TASKFILE_TIME_BYTES])
{
	struct tm	tm;
	time_t		seconds;
	int		millis;

	if (ms < TASKFILE_MIN_MS)
		ms = TASKFILE_MIN_MS;
	if (ms > TASKFILE_MAX_MS)
		ms = TASKFILE_MAX_MS;
	taskfile_split_ms(ms, &seconds, &millis);
	if (gmtime_r(&seconds, &tm) == NULL)
		memset(&tm, 0, sizeof tm);
	/* The modulos change nothing after the clamp; they bound the width. */
	snprintf(out, TASKFILE_TIME_BYTES, "%04u-%02u-%02uT%02u:%02u:%02u.%03uZ",
	    (unsigned)(tm.tm_year + 1900) % 10000, (unsigned)tm.tm_mon % 12 + 1,
	    (unsigned)tm.tm_mday % 32, (unsigned)tm.tm_hour % 24,
	    (unsigned)tm.tm_min % 60, (unsigned)tm.tm_sec % 61,
	    (unsigned)millis % 1000);
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

/* ---- durable writes --------------------------------------------------- */

/*
 * Remove our temporary file after a failure, keeping the errno that
 * brought us here: if it stays, *cause (the failure's) says so too.
 */
static void
taskfile_unlink_temp(int dir_fd, const char *temp, char **cause)
{
	int	 saved_errno = errno;
	char	*more;

	if (unlinkat(dir_fd, temp, 0) == -1 && errno != ENOENT &&
	    cause != NULL && *cause != NULL &&
	    asprintf(&more, "%s (and the temporary file %s is left: %s)",
	    *cause, temp, strerror(errno)) != -1) {
		free(*cause);
		*cause = more;
	}
	errno = saved_errno;
}

/*
 * The random part of a temporary's name: random bytes drawn once per
 * process (again after a fork: the pid changed) and a counter added, so
 * that a creation costs no getrandom; a collision draws afresh.
 */
static void
taskfile_temp_noise(uint8_t noise[TASKFILE_TEMP_RANDOM_BYTES], pid_t pid,
    int fresh)
{
	static pthread_mutex_t	lock = PTHREAD_MUTEX_INITIALIZER;
	static uint8_t		seed[TASKFILE_TEMP_RANDOM_BYTES];
	static uint64_t		counter;
	static pid_t		seeded_by;
	uint64_t		n;
	size_t			i;

	pthread_mutex_lock(&lock);
	if (fresh || seeded_by != pid) {
		randombytes_buf(seed, sizeof seed);
		seeded_by = pid;
	}
	n = ++counter;
	memcpy(noise, seed, TASKFILE_TEMP_RANDOM_BYTES);
	pthread_mutex_unlock(&lock);
	for (i = 0; i < TASKFILE_TEMP_RANDOM_BYTES && i < sizeof n; i++)
		noise[i] ^= (uint8_t)(n >> (8 * i));
}

/*
 * This process's pid, read once (a system call per creation otherwise),
 * and again in a child after fork (pthread_atfork).
 */
static _Atomic pid_t	taskfile_pid;

static void
taskfile_pid_forget(void)
{
	atomic_store(&taskfile_pid, 0);
}

static void
taskfile_pid_watch(void)
{
	(void)pthread_atfork(NULL, NULL, taskfile_pid_forget);
}

static pid_t
taskfile_getpid(void)
{
	static pthread_once_t	once = PTHREAD_ONCE_INIT;
	pid_t			pid;

	if ((pid = atomic_load(&taskfile_pid)) != 0)
		return pid;
	(void)pthread_once(&once, taskfile_pid_watch);
	pid = getpid();
	atomic_store(&taskfile_pid, pid);
	return pid;
}

/*
 * Create ".<name>.tmp.<pid>.<random hex>" exclusively.  The random part
 * keeps two workers (or a worker and its restarted self with a reused
 * pid) apart; a collision just picks another name, because an EEXIST
 * here must not reach the caller as "name exists".
 */
static int
taskfile_create_temp(int dir_fd, const char *name, char *temp,
    size_t temp_size)
{
	uint8_t		noise[TASKFILE_TEMP_RANDOM_BYTES];
	char		hex[TASKFILE_TEMP_RANDOM_BYTES * 2 + 1];
	pid_t		pid = taskfile_getpid();
	int		fd, tries, n;
	size_t		i;

	for (tries = 0; tries < TASKFILE_TEMP_TRIES; tries++) {
		taskfile_temp_noise(noise, pid, tries > 0);
		for (i = 0; i < sizeof noise; i++)
			snprintf(hex + 2 * i, 3, "%02x", noise[i]);
		n = snprintf(temp, temp_size, ".%s.tmp.%ld.%s", name,
		    (long)pid, hex);
		if (n < 0 || (size_t)n >= temp_size) {
			errno = ENAMETOOLONG;
			return -1;
		}
		fd = openat(dir_fd, temp,
		    O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC,
		    TASKFILE_FILE_MODE);
		if (fd != -1 || errno != EEXIST)
			return fd;
	}
	errno = EBUSY;
	return -1;
}

/*
 * The failure of one of our own operations in *cause, errno kept: the
 * caller's texts if it has its own (steps->failed), else taskfile's.
 */
static void
taskfile_put_failed(const struct taskfile_steps *steps, enum taskfile_op op,
    const char *temp, const char *name, char **cause)
{
	int	saved_errno = errno;

	if (steps->failed != NULL) {
		steps->failed(steps->arg, op, temp, name, cause);
		errno = saved_errno;
		return;
	}
	switch (op) {
	case TASKFILE_OP_CREATE:
		taskfile_fail(cause, "create temporary file for %s", name);
		break;
	case TASKFILE_OP_WRITE:
	case TASKFILE_OP_FSYNC:
		taskfile_fail(cause, "%s %s (as %s)", op == TASKFILE_OP_WRITE ?
		    "write" : "fsync", name, temp);
		break;
	case TASKFILE_OP_CLOSE:
		taskfile_fail(cause, "close %s (as %s)", name, temp);
		break;
	case TASKFILE_OP_RENAME:
		taskfile_fail(cause, "rename %s to %s", temp, name);
		break;
	case TASKFILE_OP_LINK:
		taskfile_fail(cause, "link %s to %s", temp, name);
		break;
	}
}

/*
 * The temporary removed after a failure.  A "left behind" is added to
 * a cause of taskfile's texts only: a caller with texts of its own
 * (steps->failed) gets its cause as it made it.
 */
static void
taskfile_put_drop(int dir_fd, const char *temp,
    const struct taskfile_steps *steps, char **cause)
{
	taskfile_unlink_temp(dir_fd, temp, steps->failed == NULL ? cause :
	    NULL);
}

/*
 * The first half of taskfile_write_stepped: the temporary created (as
 * steps->temp, or a fresh name of ours) with its name in temp, written,
 * steps->written, fsync'd and closed, steps->synced.  0: on to the
 * link; 1: fenced (steps->synced said so); -1: failed (errno, *cause).
 * On 1 and -1 nothing is left, but a temporary of that name that was
 * there before (the create's EEXIST): it is not ours.
 */
static int
taskfile_put_temp(int dir_fd, const char *name, const void *data,
    size_t length, const struct taskfile_steps *steps,
    char temp[NAME_MAX + 1], char **cause)
{
	enum taskfile_op	 op;
	int			 fd, sync_error, rc;

	if (cause != NULL)
		*cause = NULL;
	if (*name == '\0' || strchr(name, '/') != NULL) {
		errno = EINVAL;
		return taskfile_fail(cause, "bad file name \"%s\"", name);
	}
	if (steps->temp != NULL) {
		snprintf(temp, NAME_MAX + 1, "%s", steps->temp);
		fd = openat(dir_fd, temp,
		    O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC,
		    TASKFILE_FILE_MODE);
	} else
		fd = taskfile_create_temp(dir_fd, name, temp, NAME_MAX + 1);
	if (fd == -1) {
		taskfile_put_failed(steps, TASKFILE_OP_CREATE, temp, name,
		    cause);
		return -1;
	}

	if (durable_write_all(fd, data, length) == -1) {
		rc = errno;
		close(fd);
		errno = rc;
		taskfile_put_failed(steps, TASKFILE_OP_WRITE, temp, name,
		    cause);
		taskfile_put_drop(dir_fd, temp, steps, cause);
		return -1;
	}
	if (steps->written != NULL && steps->written(steps->arg, cause) !=
	    0) {
		rc = errno;
		close(fd);
		errno = rc;
		taskfile_put_drop(dir_fd, temp, steps, cause);
		return -1;
	}
	sync_error = 0;
	op = TASKFILE_OP_FSYNC;
	if (fsync(fd) == -1)
		sync_error = errno;
	/* On NFS a deferred write error may only show here. */
	if (close(fd) == -1 && errno != EINTR && sync_error == 0) {
		sync_error = errno;
		op = TASKFILE_OP_CLOSE;
	}
	if (steps->synced != NULL &&
	    (rc = steps->synced(steps->arg, sync_error, cause)) != 0) {
		taskfile_put_drop(dir_fd, temp, steps, cause);
		return rc > 0 ? 1 : -1;
	}
	if (sync_error != 0) {
		errno = sync_error;
		taskfile_put_failed(steps, op, temp, name, cause);
		taskfile_put_drop(dir_fd, temp, steps, cause);
		return -1;
	}
	return 0;
}

/* A link refused: EEXIST is the name taken, anything else a failure. */
static enum taskfile_put
taskfile_put_refused(int dir_fd, const char *temp, const char *name,
    enum taskfile_op op, const struct taskfile_steps *steps, char **cause)
{
	int	taken = errno == EEXIST;

	taskfile_put_failed(steps, op, temp, name, cause);
	taskfile_put_drop(dir_fd, temp, steps, cause);
	return taken ? TASKFILE_TAKEN : TASKFILE_FAILED;
}

/* renameat2(RENAME_NOREPLACE) is not supported here (taskfile_put_link). */
static _Atomic int	taskfile_no_noreplace;

/* The second half: the temporary linked to name, and gone. */
static enum taskfile_put
taskfile_put_link(int dir_fd, const char *temp, const char *name,
    const struct taskfile_steps *steps, char **cause)
{
	if (cause != NULL)
		*cause = NULL;
	if (steps->crash_points & TASKFILE_CRASH_WRITTEN)
		crash_point(CRASH_AFTER_TASK_FILE_WRITTEN);

	/*
	 * Never a plain rename(): it replaces an existing file, and the
	 * name may have been taken by another FCoP writer since it was
	 * reserved.  renameat2's RENAME_NOREPLACE fails with EEXIST as
	 * link() does, in one call and one change of the directory instead
	 * of a link and an unlink; a file system or a kernel without it
	 * (EINVAL, ENOSYS; EPERM from a system call filter; EOPNOTSUPP)
	 * gets link() and unlink() from then on, which also give the real
	 * answer if the error had another cause.  EEXIST goes back to the
	 * caller as it is.  steps->plain_link always links: a fenced
	 * writer's temporary that a takeover removed is then ENOENT.
	 */
	if (!steps->plain_link && !atomic_load(&taskfile_no_noreplace)) {
		if (renameat2(dir_fd, temp, dir_fd, name,
		    RENAME_NOREPLACE) == 0)
			goto linked;
		/* Not this error: a link would fail the same way. */
		if (errno != EINVAL && errno != ENOSYS && errno != EPERM &&
		    errno != EOPNOTSUPP)
			return taskfile_put_refused(dir_fd, temp, name,
			    TASKFILE_OP_RENAME, steps, cause);
		atomic_store(&taskfile_no_noreplace, 1);
	}
	if (linkat(dir_fd, temp, dir_fd, name, 0) == -1) {
		if (steps->plain_link && errno == ENOENT) {
			/* A takeover removed the temporary: fenced. */
			taskfile_unlink_temp(dir_fd, temp, NULL);
			return TASKFILE_FENCED;
		}
		return taskfile_put_refused(dir_fd, temp, name,
		    TASKFILE_OP_LINK, steps, cause);
	}
	/*
	 * The file is in place from here on: a failure below leaves it
	 * there (a retry finds and adopts it) and says so through -1.
	 */
	if (unlinkat(dir_fd, temp, 0) == -1 && errno != ENOENT)
		store_notice(STORE_NOTICE_WARNING, "%s in place, but "
		    "cannot remove %s: %s", name, temp, strerror(errno));
linked:
	if (steps->crash_points & TASKFILE_CRASH_LINKED)
		crash_point(CRASH_AFTER_TASK_FILE_LINKED);
	return TASKFILE_LINKED;
}

enum taskfile_put
taskfile_write_stepped(int dir_fd, const char *name, const void *data,
    size_t length, const struct taskfile_steps *steps, char **cause)
{
	char	temp[NAME_MAX + 1];
	int	rc;

	if ((rc = taskfile_put_temp(dir_fd, name, data, length, steps, temp,
	    cause)) != 0)
		return rc > 0 ? TASKFILE_FENCED : TASKFILE_FAILED;
	return taskfile_put_link(dir_fd, temp, name, steps, cause);
}

/* A local creation's steps: none, and both crash points or neither. */
static void
taskfile_local_steps(struct taskfile_steps *steps, int task_crash_points)
{
	memset(steps, 0, sizeof *steps);
	if (task_crash_points)
		steps->crash_points = TASKFILE_CRASH_WRITTEN |
		    TASKFILE_CRASH_LINKED;
}

int
taskfile_write_durable(int dir_fd, const char *name, const void *data,
    size_t length, int task_crash_points, char **cause)
{
	if (taskfile_write_linked(dir_fd, name, data, length,
	    task_crash_points, cause) != 0)
		return -1;
	/* dir_fd must be open for reading (not O_PATH) for this fsync. */
	if (fsync(dir_fd) == -1)
		return taskfile_fail(cause, "fsync the directory of %s", name);
	return 0;
}

int
taskfile_write_linked(int dir_fd, const char *name, const void *data,
    size_t length, int task_crash_points, char **cause)
{
	struct taskfile_steps	steps;

	taskfile_local_steps(&steps, task_crash_points);
	return taskfile_write_stepped(dir_fd, name, data, length, &steps,
	    cause) == TASKFILE_LINKED ? 0 : -1;
}

int
taskfile_write_temp(int dir_fd, const char *name, const void *data,
    size_t length, char temp[NAME_MAX + 1], char **cause)
{
	struct taskfile_steps	steps;

	taskfile_local_steps(&steps, 0);
	return taskfile_put_temp(dir_fd, name, data, length, &steps, temp,
	    cause) == 0 ? 0 : -1;
}

int
taskfile_link_temp(int dir_fd, const char *temp, const char *name,
    int task_crash_points, char **cause)
{
	struct taskfile_steps	steps;

	taskfile_local_steps(&steps, task_crash_points);
	return taskfile_put_link(dir_fd, temp, name, &steps, cause) ==
	    TASKFILE_LINKED ? 0 : -1;
}

/* Remove a temporary file that will not be linked. */
int
taskfile_drop_temp(int dir_fd, const char *temp)
{
	if (unlinkat(dir_fd, temp, 0) == -1 && errno != ENOENT)
		return -1;
	return 0;
}

/* ---- finding a file --------------------------------------------------- */

/* 1 if at_fd/path is a regular file, 0 if nothing is there, -1 on error. */
static int
taskfile_is_file(int at_fd, const char *path)
{
	struct stat	st;

	/* A symlink, at the name or on the way, is not a task: skipped. */
	if (nofollow_lstat(at_fd, path, &st) == -1) {
		if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP)
			return 0;
		return -1;
	}
	return S_ISREG(st.st_mode) ? 1 : 0;
}

/*
 * Open a directory to read its entries.  NULL with errno 0 if it does not
 * exist (a missing stage or history is normal) or is a symlink (which
 * could lead out of the workspace: skipped), NULL and errno otherwise.
 */
static DIR *
taskfile_open_dir(int at_fd, const char *path)
{
	DIR	*dir;
	int	 fd, saved_errno;

	if ((fd = nofollow_dir(at_fd, path)) == -1) {
		if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP)
			errno = 0;
		return NULL;
	}
	if ((dir = fdopendir(fd)) == NULL) {
		saved_errno = errno;
		close(fd);
		errno = saved_errno;
	}
	return dir;
}

/* The next entry other than . and ..; NULL at the end (errno 0) or error. */
static struct dirent *
taskfile_next_entry(DIR *dir)
{
	struct dirent	*entry;

	for (;;) {
		errno = 0;
		if ((entry = readdir(dir)) == NULL)
			return NULL;
		if (strcmp(entry->d_name, ".") != 0 &&
		    strcmp(entry->d_name, "..") != 0)
			return entry;
	}
}

static void
taskfile_close_dir(DIR *dir)
{
	int	saved_errno = errno;

	closedir(dir);
	errno = saved_errno;
}

/* snprintf that fails with ENAMETOOLONG instead of truncating. */
static int __attribute__((format(printf, 3, 4)))
taskfile_path(char *out, size_t out_size, const char *fmt, ...)
{
	va_list	ap;
	int	n;

	va_start(ap, fmt);
	n = vsnprintf(out, out_size, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= out_size) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

/* Try one candidate path: 1 (copied to relpath), 0 or -1. */
static int
taskfile_try(int root_fd, const char *candidate, char *relpath,
    size_t relpath_size)
{
	int	found;

	if ((found = taskfile_is_file(root_fd, candidate)) != 1)
		return found;
	if (taskfile_path(relpath, relpath_size, "%s", candidate) == -1)
		return -1;
	return 1;
}

/*
 * Look for <base>/<entry>/<suffix> for every entry of base, where suffix
 * is "<id>.md" (a stage) or "<id>/<id>.md" (a history date).
 */
static int
taskfile_find_under(int root_fd, const char *base, const char *skip,
    const char *suffix, char *relpath, size_t relpath_size)
{
	DIR		*dir;
	struct dirent	*entry;
	char		 candidate[PATH_MAX];
	int		 found = 0;

	if ((dir = taskfile_open_dir(root_fd, base)) == NULL)
		return errno == 0 ? 0 : -1;
	while ((entry = taskfile_next_entry(dir)) != NULL) {
		if (skip != NULL && strcmp(entry->d_name, skip) == 0)
			continue;
		if (taskfile_path(candidate, sizeof candidate, "%s/%s/%s",
		    base, entry->d_name, suffix) == -1) {
			found = -1;
			break;
		}
		if ((found = taskfile_try(root_fd, candidate, relpath,
		    relpath_size)) != 0)
			break;
	}
	if (entry == NULL && errno != 0)
		found = -1;
	taskfile_close_dir(dir);
	return found;
}

int
taskfile_find(int root_fd, const char *id, char *relpath,
    size_t relpath_size)
{
	char	candidate[PATH_MAX], file[NAME_MAX + 1], nested[PATH_MAX];
	size_t	i;
	int	found;

	/* The id becomes a path component: nothing that climbs out. */
	if (*id == '\0' || strchr(id, '/') != NULL || strcmp(id, ".") == 0 ||
	    strcmp(id, "..") == 0) {
		errno = EINVAL;
		return -1;
	}
	if (taskfile_path(file, sizeof file, "%s.md", id) == -1 ||
	    taskfile_path(nested, sizeof nested, "%s/%s.md", id, id) == -1)
		return -1;

	if (strncmp(id, "REPORT-", 7) == 0) {
		taskfile_format_path(SUBTAB_KIND_REPORT, id, candidate,
		    sizeof candidate);
		if ((found = taskfile_try(root_fd, candidate, relpath,
		    relpath_size)) != 0)
			return found;
	}

	/* Where idem put it, and where it almost always still is. */
	if (taskfile_path(candidate, sizeof candidate, "%s/%s", IDEM_INBOX_DIR,
	    file) == -1)
		return -1;
	if ((found = taskfile_try(root_fd, candidate, relpath,
	    relpath_size)) != 0)
		return found;

	/* Any stage, not only the five FCoP names today. */
	if ((found = taskfile_find_under(root_fd, TASKFILE_LIFECYCLE_DIR,
	    "inbox", file, relpath, relpath_size)) != 0)
		return found;

	for (i = 0; i < TASKFILE_HISTORY_BASE_COUNT; i++) {
		if ((found = taskfile_find_under(root_fd,
		    taskfile_history_bases[i], NULL, nested, relpath,
		    relpath_size)) != 0)
			return found;
	}
	return 0;
}

int
taskfile_current_path(int root_fd, const char *id, const char *recorded,
    char *relpath, size_t relpath_size)
{
	int	found;

	if ((found = taskfile_is_file(root_fd, recorded)) != 0)
		return found == 1 ? 0 : -1;
	if ((found = taskfile_find(root_fd, id, relpath, relpath_size)) != 1)
		return found;
	return strcmp(relpath, recorded) != 0;
}

/* The largest fcop.json read: a declaration is a few hundred bytes. */
#define TASKFILE_DECLARATION_MAX_BYTES	65536

int
taskfile_workspace_id(int root_fd, char out[IDEM_WORKSPACE_ID_BYTES + 1],
    const char **cause)
{
	char		 buf[TASKFILE_DECLARATION_MAX_BYTES];
	struct stat	 st;
	json_t		*json, *v;
	ssize_t		 n;
	size_t		 length = 0;
	int		 fd, found = 0;

	*cause = "the workspace has no " IDEM_FCOP_DECLARATION_NAME;
	if ((fd = openat(root_fd, IDEM_FCOP_DECLARATION_NAME, O_RDONLY |
	    O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)) == -1)
	{
		if (errno == ELOOP)
			*cause = IDEM_FCOP_DECLARATION_NAME " is a symbolic "
			    "link, which idemd does not follow";
		return errno == ENOENT || errno == ELOOP ? 0 : -1;
	}
	if (fstat(fd, &st) == -1) {
		close(fd);
		return -1;
	}
	*cause = IDEM_FCOP_DECLARATION_NAME " is not a regular file of at "
	    "most 64 KiB";
	if (!S_ISREG(st.st_mode) || st.st_size > (off_t)sizeof buf) {
		close(fd);
		return 0;
	}
	while (length < sizeof buf) {
		if ((n = read(fd, buf + length, sizeof buf - length)) == -1) {
			if (errno == EINTR)
				continue;
			close(fd);
			return -1;
		}
		if (n == 0)
			break;
		length += (size_t)n;
	}
	close(fd);
	*cause = IDEM_FCOP_DECLARATION_NAME " holds no workspace_id of the "
	    "form urn:uuid:<lower-case UUID>";
	if ((json = json_loadb(buf, length, JSON_REJECT_DUPLICATES,
	    NULL)) == NULL)
		return 0;
	v = json_object_get(json, "workspace_id");
	if (json_is_string(v) && digest_fcop_workspace_id_valid(
	    json_string_value(v), json_string_length(v))) {
		memcpy(out, json_string_value(v), IDEM_WORKSPACE_ID_BYTES);
		out[IDEM_WORKSPACE_ID_BYTES] = '\0';
		*cause = NULL;
		found = 1;
	}
	json_decref(json);
	return found;
}

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

/* ---- numbers already used --------------------------------------------- */

/*
 * If name is "<prefix><digits>-..." raise *max_seq to the number.  Any
 * number of digits counts (idem's own grow past 999); one too large for
 * a uint32_t cannot collide with one idem hands out, so it is ignored.
 */
static void
taskfile_note_name(const char *name, const char *prefix, size_t prefix_length,
    uint32_t *max_seq)
{
	const char	*p;
	uint64_t	 value = 0;

	if (strncmp(name, prefix, prefix_length) != 0)
		return;
	for (p = name + prefix_length; *p >= '0' && *p <= '9'; p++) {
		value = value * 10 + (uint64_t)(*p - '0');
		if (value > UINT32_MAX)
			return;
	}
	if (p == name + prefix_length || *p != '-')
		return;
	if (value > *max_seq)
		*max_seq = (uint32_t)value;
}

/*
 * Call note(name, arg) for every name in at_fd/path and, with depth, in
 * each directory in it (a missing directory, or an entry that is a file,
 * is skipped).
 */
static int
taskfile_scan_dir(int at_fd, const char *path, int depth,
    void (*note)(const char *, void *), void *arg)
{
	DIR		*dir;
	struct dirent	*entry;
	int		 error = 0;

	if ((dir = taskfile_open_dir(at_fd, path)) == NULL)
		return errno == 0 ? 0 : -1;
	while ((entry = taskfile_next_entry(dir)) != NULL) {
		note(entry->d_name, arg);
		if (depth > 0 && taskfile_scan_dir(dirfd(dir), entry->d_name,
		    depth - 1, note, arg) == -1) {
			error = 1;
			break;
		}
	}
	if (entry == NULL && errno != 0)
		error = 1;
	taskfile_close_dir(dir);
	return error ? -1 : 0;
}

/*
 * Every place a TASK or REPORT file of kind may be: reports/ for a
 * report; every stage (_lifecycle/<stage>/<file>) and the history
 * (<base>/<date dir>/<task_id>/, where the directory's name counts) for
 * a task.
 */
static int
taskfile_scan_kind(int root_fd, enum subtab_kind kind,
    void (*note)(const char *, void *), void *arg)
{
	size_t	i;

	if (kind == SUBTAB_KIND_REPORT)
		return taskfile_scan_dir(root_fd, IDEM_REPORTS_DIR, 0, note,
		    arg);
	if (taskfile_scan_dir(root_fd, TASKFILE_LIFECYCLE_DIR, 1, note,
	    arg) == -1)
		return -1;
	for (i = 0; i < TASKFILE_HISTORY_BASE_COUNT; i++) {
		if (taskfile_scan_dir(root_fd, taskfile_history_bases[i], 1,
		    note, arg) == -1)
			return -1;
	}
	return 0;
}

struct taskfile_max_seq {
	char		 prefix[32];
	size_t		 prefix_length;
	uint32_t	*max_seq;
};

static void
taskfile_note_max_seq(const char *name, void *arg)
{
	struct taskfile_max_seq	*m = arg;

	taskfile_note_name(name, m->prefix, m->prefix_length, m->max_seq);
}

int
taskfile_scan_max_seq(int root_fd, enum subtab_kind kind, uint32_t date,
    uint32_t *max_seq)
{
	struct taskfile_max_seq	m = { .max_seq = max_seq };

	*max_seq = 0;
	snprintf(m.prefix, sizeof m.prefix, "%s-%08" PRIu32 "-",
	    taskfile_kind_prefix(kind), date);
	m.prefix_length = strlen(m.prefix);
	return taskfile_scan_kind(root_fd, kind, taskfile_note_max_seq, &m);
}

struct taskfile_widest {
	unsigned	 digits;
	char		*name;
	size_t		 size;
};

/* <TASK|REPORT>-YYYYMMDD-N...-: the most digits of N seen, and where. */
static void
taskfile_note_widest(const char *name, void *arg)
{
	struct taskfile_widest	*w = arg;
	const char		*p;
	unsigned		 digits = 0;
	int			 i;

	if (strncmp(name, "TASK-", 5) == 0)
		p = name + 5;
	else if (strncmp(name, "REPORT-", 7) == 0)
		p = name + 7;
	else
		return;
	for (i = 0; i < 8; i++, p++) {
		if (*p < '0' || *p > '9')
			return;
	}
	if (*p++ != '-')
		return;
	for (; p[digits] >= '0' && p[digits] <= '9'; digits++)
		;
	if (digits == 0 || p[digits] != '-' || digits <= w->digits)
		return;
	w->digits = digits;
	snprintf(w->name, w->size, "%s", name);
}

int
taskfile_scan_widest(int root_fd, unsigned *digits, char *name,
    size_t name_size)
{
	struct taskfile_widest	w = { 0, name, name_size };

	if (name_size > 0)
		name[0] = '\0';
	if (taskfile_scan_kind(root_fd, SUBTAB_KIND_TASK,
	    taskfile_note_widest, &w) == -1 ||
	    taskfile_scan_kind(root_fd, SUBTAB_KIND_REPORT,
	    taskfile_note_widest, &w) == -1)
		return -1;
	*digits = w.digits;
	return 0;
}

/*
 * Remove the temporary files a crash left in dir (".TASK-*.md.tmp.*" and
 * ".REPORT-*.md.tmp.*": only the names taskfile_write_durable makes).
 * Run at start-up, under the root's lock, before any worker exists.
 */
int
taskfile_sweep_temporaries(int dir_fd, unsigned *removed)
{
	DIR		*dir;
	struct dirent	*e;
	int		 fd;

	*removed = 0;
	if ((fd = dup(dir_fd)) == -1)
		return -1;
	if ((dir = fdopendir(fd)) == NULL) {
		close(fd);
		return -1;
	}
	rewinddir(dir);
	while ((e = readdir(dir)) != NULL) {
		if ((strncmp(e->d_name, ".TASK-", 6) != 0 &&
		    strncmp(e->d_name, ".REPORT-", 8) != 0) ||
		    strstr(e->d_name, ".md.tmp.") == NULL)
			continue;
		if (unlinkat(dir_fd, e->d_name, 0) == 0)
			(*removed)++;
		else if (errno != ENOENT)
			store_notice(STORE_NOTICE_WARNING, "cannot remove "
			    "temporary file %s: %s", e->d_name,
			    strerror(errno));
	}
	closedir(dir);
	return 0;
}

/*
 * fsync the file at relpath and then its directory: what a retry does
 * before it adopts a file an interrupted call linked but may not have
 * made durable.
 */
int
taskfile_sync_path(int root_fd, const char *relpath)
{
	char	 dir[PATH_MAX];
	char	*slash;
	int	 fd, rc;

	if (snprintf(dir, sizeof dir, "%s", relpath) >= (int)sizeof dir) {
		errno = ENAMETOOLONG;
		return -1;
	}
	if ((fd = nofollow_openat(root_fd, relpath, O_RDONLY, 0)) == -1)
		return -1;
	rc = fsync(fd);
	close(fd);
	if (rc == -1)
		return -1;
	if ((slash = strrchr(dir, '/')) == NULL)
		return fsync(root_fd);
	*slash = '\0';
	if ((fd = nofollow_dir(root_fd, dir)) == -1)
		return -1;
	rc = fsync(fd);
	close(fd);
	return rc;
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

/* "TASK-YYYYMMDD-NNN-..." or "REPORT-YYYYMMDD-NNN-...": 1 and its parts. */
int
taskfile_parse_name(const char *name, enum subtab_kind *kind, uint32_t *date,
    uint32_t *seq)
{
	const char	*p;
	uint64_t	 value;
	int		 i;

	if (strncmp(name, "TASK-", 5) == 0) {
		*kind = SUBTAB_KIND_TASK;
		p = name + 5;
	} else if (strncmp(name, "REPORT-", 7) == 0) {
		*kind = SUBTAB_KIND_REPORT;
		p = name + 7;
	} else
		return 0;
	for (i = 0, value = 0; i < 8; i++, p++) {
		if (*p < '0' || *p > '9')
			return 0;
		value = value * 10 + (uint64_t)(*p - '0');
	}
	if (*p++ != '-')
		return 0;
	*date = (uint32_t)value;
	*seq = 0;
	taskfile_note_name(p, "", 0, seq);
	return *seq > 0;
}
