/* SPDX-License-Identifier: ISC */
/*
 * taskfile_write.c: writing a TASK or REPORT file durably without ever
 * replacing a file: a temporary of our own, written and fsync'd, then
 * linked to its name (renameat2's RENAME_NOREPLACE, or link), with the
 * caller's steps between (taskfile_write_stepped); removing the
 * temporaries a crash left; making a file an interrupted call linked
 * durable before a retry adopts it.  It never renames onto, truncates or
 * deletes a file it did not create itself.
 */
#include <sys/stat.h>
#include <sys/types.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "store.h"
#include "taskfile_int.h"

/* Random bytes in a temporary name: two writers never share one. */
#define TASKFILE_TEMP_RANDOM_BYTES	8
/* Tries at a fresh temporary name before giving up. */
#define TASKFILE_TEMP_TRIES		4
#define TASKFILE_FILE_MODE		0644

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
