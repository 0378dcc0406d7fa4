/* SPDX-License-Identifier: ISC */
/*
 * taskfile_find.c: finding TASK and REPORT files again after FCoP tools
 * moved them (the inbox, any stage, the history), the highest number
 * already used on a date and the widest number in the workspace, the
 * parts of a file's name, and the workspace_id of the FCoP 4 declaration
 * (fcop.json).  It only reads: a symlink on the way is never followed.
 */
#include <sys/stat.h>
#include <sys/types.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "digest.h"
#include "store.h"
#include "taskfile_int.h"

/* Where FCoP archives tasks: <base>/<date dir>/<task_id>/<task_id>.md. */
static const char *const taskfile_history_bases[] = {
	TASKFILE_HISTORY_DIR,
	TASKFILE_LIFECYCLE_DIR "/" TASKFILE_HISTORY_DIR
};
#define TASKFILE_HISTORY_BASE_COUNT \
	(sizeof taskfile_history_bases / sizeof taskfile_history_bases[0])

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
