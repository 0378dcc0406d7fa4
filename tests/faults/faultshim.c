/* SPDX-License-Identifier: ISC */
/*
 * faultshim.c: an LD_PRELOAD shim that makes chosen writes and syncs
 * fail, so tests can show what idemd does on a full disk or an I/O
 * error without either.
 *
 * At every intercepted call it reads one rule from the file named by
 * IDEM_FAULT_FILE (missing, empty or malformed: no fault):
 *
 *	<op> <path-substring> <errno-name>
 *
 * op is "write" (write, writev, pwrite, pwritev), "pwrite" (pwrite
 * only: the zeros journal.c writes ahead of the journal's end, and not
 * its records, which go with pwritev), "sync" (fsync, fdatasync),
 * "writeback" (sync_file_range: the checkpoint thread's paced write-back,
 * durable.c), "truncate" (ftruncate) or "any": every call idemd writes,
 * syncs, writes back or truncates a file with (journal.c, checkpoint.c,
 * durable.c, taskfile_write.c, fileio.c, main.c).  The path is the fd's, from /proc/self/fd; a substring
 * ending in "$" must end it (so "_lifecycle/inbox$" is the directory,
 * not the files in it).  The errno is ENOSPC, EIO, EDQUOT or EROFS.  A
 * matching call writes, syncs or truncates nothing and fails with that
 * errno.  A "write" rule with EROFS also fails ftruncate, as a
 * read-only file system does (a full one still lets a file shrink).
 * "rename" fails renameat2 (taskfile_write.c's RENAME_NOREPLACE), matched by
 * the path of its source directory, with EINVAL or ENOSYS (as a file
 * system or a kernel without it does) or any errno above; "any" does
 * not include it.
 * Reading the rule at every call is what lets a test turn a fault on
 * and off between two requests, or keep it for as long as it likes: a
 * sync rule makes every fsync fail until it is cleared.
 *
 *	<op> <path-substring> <errno-name> <n>
 *
 * lets the first n matching calls of each process through and fails
 * the later ones (SQLite's "fail the Nth write"): a test can fail the
 * second journal append of a request and not the first.  The count
 * starts again whenever the rule's text changes.
 *
 *	fork <errno-name>
 *
 * makes fork() fail with EAGAIN or ENOMEM (the master forking a worker,
 * master.c) until the rule is cleared.
 *
 *	hold <path-substring>
 *
 * makes a sync of a matching file wait until the rule is changed, as a
 * disk that takes its time would: holding the journal's fdatasync holds
 * the journaling thread, and the records behind it fill the hand-off
 * ring.  The wait looks at the rule every millisecond.
 *
 *	hold <path-substring> <n>
 *
 * lets the first n matching syncs of each process through and holds the
 * later ones (counted as above): "hold 0000000000000001.jnl 1" lets a
 * request's first journal round be synced and holds its second, written
 * and never synced, for a test to kill the broker there.
 *
 *	holdfail <path-substring> <errno-name>
 *
 * holds a matching sync as "hold" does, and when the rule changes the
 * held call fails with that errno (a call that comes after runs by the
 * new rule): a disk whose fsync takes its time and then reports an
 * error, so a test can act while the failing fsync runs.  A held sync
 * (either rule) says so once on stderr ("faultshim: a sync held"), so
 * that a test awaits the hold in the log instead of guessing.
 *
 * It never calls what it intercepts (open, read, close and readlink are
 * not intercepted) and keeps no state but the real functions' addresses
 * and that count, in atomic words, so it is safe in idemd's threads;
 * once those are resolved it calls nothing but getenv, those four,
 * nanosleep and the real write (a hold, and its line on stderr), so it
 * is safe in libevent's signal handlers, which write.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE	/* RTLD_NEXT */
#endif
#include <sys/types.h>
#include <sys/uio.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FAULT_RULE_BYTES	512
#define FAULT_PATH_BYTES	4096
/* "/proc/self/fd/" and an int. */
#define FAULT_PROC_BYTES	32
/* fault_check's answer for a "hold" rule that matches. */
#define FAULT_HOLD		(-1)
/* Its answer for "holdfail ... e": at most FAULT_HOLD_FAIL(0). */
#define FAULT_HOLD_FAIL(e)	(-1000 - (e))
/* How often a held sync looks at the rule again (nanoseconds). */
#define FAULT_HOLD_POLL_NS	1000000L

enum fault_op {
	FAULT_WRITE,
	FAULT_PWRITE,	/* pwrite only; a "write" rule matches it too */
	FAULT_SYNC,
	FAULT_TRUNCATE,
	FAULT_FORK,
	FAULT_RENAME,
	FAULT_WRITEBACK
};

static void	*real_write;
static void	*real_writev;
static void	*real_pwrite;
static void	*real_pwritev;
static void	*real_fsync;
static void	*real_fdatasync;
static void	*real_ftruncate;
static void	*real_fork;
static void	*real_renameat2;
static void	*real_sync_file_range;
/* For "<n>": the rule counted (its hash) and its matching calls. */
static uint64_t	 counted_rule;
static uint64_t	 counted_calls;

/*
 * Resolved before main, while the process has one thread; a call that
 * comes earlier (another library's constructor) resolves its own.  Two
 * threads resolving at once store the same value, hence relaxed atomics.
 */
static void *
fault_real(void **slot, const char *name)
{
	void	*fn = __atomic_load_n(slot, __ATOMIC_RELAXED);

	if (fn == NULL) {
		fn = dlsym(RTLD_NEXT, name);
		__atomic_store_n(slot, fn, __ATOMIC_RELAXED);
	}
	return fn;
}

/* The next definition of name, typed as the one it stands for. */
#define REAL(name)	((__typeof__(&name))fault_real(&real_##name, #name))

__attribute__((constructor)) static void
fault_init(void)
{
	(void)REAL(write);
	(void)REAL(writev);
	(void)REAL(pwrite);
	(void)REAL(pwritev);
	(void)REAL(fsync);
	(void)REAL(fdatasync);
	(void)REAL(ftruncate);
	(void)REAL(fork);
	(void)REAL(renameat2);
	(void)REAL(sync_file_range);
}

static int
fault_errno(const char *name, size_t length)
{
	static const struct {
		const char	*name;
		int		 error;
	} errnos[] = {
		{ "ENOSPC", ENOSPC }, { "EIO", EIO }, { "EDQUOT", EDQUOT },
		{ "EROFS", EROFS }, { "EINVAL", EINVAL }, { "ENOSYS", ENOSYS },
		{ "EAGAIN", EAGAIN }, { "ENOMEM", ENOMEM }
	};
	size_t	i;

	for (i = 0; i < sizeof errnos / sizeof errnos[0]; i++) {
		if (strlen(errnos[i].name) == length &&
		    memcmp(name, errnos[i].name, length) == 0)
			return errnos[i].error;
	}
	return 0;
}

/* The next space-separated word of s at *pos, or NULL. */
static const char *
fault_word(const char *s, size_t *pos, size_t *length)
{
	const char	*start;

	while (s[*pos] == ' ' || s[*pos] == '\t')
		(*pos)++;
	start = s + *pos;
	while (s[*pos] != '\0' && s[*pos] != ' ' && s[*pos] != '\t' &&
	    s[*pos] != '\n' && s[*pos] != '\r')
		(*pos)++;
	*length = (size_t)(s + *pos - start);
	return *length > 0 ? start : NULL;
}

/* "/proc/self/fd/<fd>" without snprintf, which is not signal-safe. */
static void
fault_proc_path(int fd, char out[FAULT_PROC_BYTES])
{
	static const char	prefix[] = "/proc/self/fd/";
	char			digits[16];
	unsigned		value = (unsigned)fd;
	size_t			n = 0, i;

	do {
		digits[n++] = (char)('0' + value % 10);
		value /= 10;
	} while (value != 0);
	memcpy(out, prefix, sizeof prefix - 1);
	for (i = 0; i < n; i++)
		out[sizeof prefix - 1 + i] = digits[n - 1 - i];
	out[sizeof prefix - 1 + n] = '\0';
}

/* FNV-1a: which rule the count belongs to. */
static uint64_t
fault_hash(const char *s)
{
	uint64_t	h = 14695981039346656037ULL;

	for (; *s != '\0'; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h | 1;	/* never 0, the value before any rule */
}

/* The optional count: 1 to let the call by, 0 to fail it. */
static int
fault_passes(const char *rule, size_t *pos)
{
	const char	*word;
	size_t		 length, i;
	uint64_t	 after = 0, hash, seen;

	if ((word = fault_word(rule, pos, &length)) == NULL)
		return 0;
	for (i = 0; i < length; i++) {
		if (word[i] < '0' || word[i] > '9')
			return 0;
		after = after * 10 + (uint64_t)(word[i] - '0');
	}
	hash = fault_hash(rule);
	seen = __atomic_load_n(&counted_rule, __ATOMIC_SEQ_CST);
	if (seen != hash && __atomic_compare_exchange_n(&counted_rule, &seen,
	    hash, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		__atomic_store_n(&counted_calls, 0, __ATOMIC_SEQ_CST);
	return __atomic_fetch_add(&counted_calls, 1, __ATOMIC_SEQ_CST) < after;
}

/* The errno a call of kind op on fd must fail with, or 0 to let it run. */
static int
fault_check(enum fault_op op, int fd)
{
	const char	*file = getenv("IDEM_FAULT_FILE");
	const char	*word, *want;
	char		 rule[FAULT_RULE_BYTES], path[FAULT_PATH_BYTES];
	char		 proc[FAULT_PROC_BYTES];
	size_t		 pos = 0, length, want_length;
	ssize_t		 n, got = 0;
	int		 rfd, error, rule_op, matched = 0;
	size_t		 i;

	if (file == NULL || *file == '\0' || (fd < 0 && op != FAULT_FORK))
		return 0;
	if ((rfd = open(file, O_RDONLY | O_CLOEXEC)) == -1)
		return 0;
	while ((size_t)got < sizeof rule - 1) {
		n = read(rfd, rule + got, sizeof rule - 1 - (size_t)got);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += n;
	}
	close(rfd);
	rule[got] = '\0';

	if ((word = fault_word(rule, &pos, &length)) == NULL)
		return 0;
	/* "fork <errno>": no path; only fork() reads it. */
	if (op == FAULT_FORK || (length == 4 && memcmp(word, "fork", 4) == 0)) {
		if (op != FAULT_FORK || length != 4 ||
		    memcmp(word, "fork", 4) != 0 ||
		    (word = fault_word(rule, &pos, &length)) == NULL)
			return 0;
		return fault_errno(word, length);
	}
	if (length == 8 && memcmp(word, "holdfail", 8) == 0) {
		if (op != FAULT_SYNC || (want = fault_word(rule, &pos,
		    &want_length)) == NULL || want_length >= FAULT_PATH_BYTES ||
		    (word = fault_word(rule, &pos, &length)) == NULL ||
		    (error = fault_errno(word, length)) == 0)
			return 0;
		error = FAULT_HOLD_FAIL(error);
		goto match;
	}
	if (length == 4 && memcmp(word, "hold", 4) == 0) {
		if (op != FAULT_SYNC || (want = fault_word(rule, &pos,
		    &want_length)) == NULL || want_length >= FAULT_PATH_BYTES)
			return 0;
		error = FAULT_HOLD;
		goto match;
	}
	if (length == 3 && memcmp(word, "any", 3) == 0)
		rule_op = -1;
	else if (length == 5 && memcmp(word, "write", 5) == 0)
		rule_op = FAULT_WRITE;
	else if (length == 6 && memcmp(word, "pwrite", 6) == 0)
		rule_op = FAULT_PWRITE;
	else if (length == 4 && memcmp(word, "sync", 4) == 0)
		rule_op = FAULT_SYNC;
	else if (length == 8 && memcmp(word, "truncate", 8) == 0)
		rule_op = FAULT_TRUNCATE;
	else if (length == 6 && memcmp(word, "rename", 6) == 0)
		rule_op = FAULT_RENAME;
	else if (length == 9 && memcmp(word, "writeback", 9) == 0)
		rule_op = FAULT_WRITEBACK;
	else
		return 0;
	if ((want = fault_word(rule, &pos, &want_length)) == NULL ||
	    want_length >= FAULT_PATH_BYTES)
		return 0;
	if ((word = fault_word(rule, &pos, &length)) == NULL ||
	    (error = fault_errno(word, length)) == 0)
		return 0;
	if (rule_op != -1 && rule_op != (int)op && !(op == FAULT_TRUNCATE &&
	    rule_op == FAULT_WRITE && error == EROFS) && !(op == FAULT_PWRITE &&
	    rule_op == FAULT_WRITE))
		return 0;
	if (rule_op == -1 && op == FAULT_RENAME)
		return 0;

match:
	fault_proc_path(fd, proc);
	if ((n = readlink(proc, path, sizeof path - 1)) == -1)
		return 0;
	path[n] = '\0';
	if (want[want_length - 1] == '$') {
		want_length--;
		matched = (size_t)n >= want_length && memcmp(path + n -
		    want_length, want, want_length) == 0;
	} else {
		/* Not strstr: want is not NUL-terminated where it ends. */
		for (i = 0; !matched && i + want_length <= (size_t)n; i++)
			matched = memcmp(path + i, want, want_length) == 0;
	}
	/* A held sync asks again every poll: the count only grows. */
	if (!matched || fault_passes(rule, &pos))
		return 0;
	return error;
}

/* Run the check keeping the caller's errno: a call that passes sees it. */
static int
fault_for(enum fault_op op, int fd)
{
	int	saved_errno = errno, error;

	error = fault_check(op, fd);
	errno = saved_errno;
	return error;
}

ssize_t
write(int fd, const void *buf, size_t count)
{
	int	error;

	if ((error = fault_for(FAULT_WRITE, fd)) != 0) {
		errno = error;
		return -1;
	}
	return REAL(write)(fd, buf, count);
}

ssize_t
writev(int fd, const struct iovec *iov, int iovcnt)
{
	int	error;

	if ((error = fault_for(FAULT_WRITE, fd)) != 0) {
		errno = error;
		return -1;
	}
	return REAL(writev)(fd, iov, iovcnt);
}

ssize_t
pwrite(int fd, const void *buf, size_t count, off_t offset)
{
	int	error;

	if ((error = fault_for(FAULT_PWRITE, fd)) != 0) {
		errno = error;
		return -1;
	}
	return REAL(pwrite)(fd, buf, count, offset);
}

/* The journal's appends (journal.c): records at its logical end. */
ssize_t
pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset)
{
	int	error;

	if ((error = fault_for(FAULT_WRITE, fd)) != 0) {
		errno = error;
		return -1;
	}
	return REAL(pwritev)(fd, iov, iovcnt, offset);
}

/*
 * The errno a sync must fail with, or 0, once any hold has ended: a
 * "holdfail" hold's errno, whatever the rule says then.
 */
static int
fault_sync(int fd)
{
	struct timespec	ts;
	static const char held[] = "faultshim: a sync held\n";
	int		error, held_error = 0, said = 0;
	ssize_t		written;

	while ((error = fault_for(FAULT_SYNC, fd)) == FAULT_HOLD ||
	    error <= FAULT_HOLD_FAIL(0)) {
		if (!said) {
			said = 1;
			written = REAL(write)(STDERR_FILENO, held,
			    sizeof held - 1);
			(void)written;
		}
		if (error != FAULT_HOLD)
			held_error = FAULT_HOLD_FAIL(0) - error;
		ts.tv_sec = 0;
		ts.tv_nsec = FAULT_HOLD_POLL_NS;
		nanosleep(&ts, NULL);
	}
	return held_error != 0 ? held_error : error;
}

int
fsync(int fd)
{
	int	error;

	if ((error = fault_sync(fd)) != 0) {
		errno = error;
		return -1;
	}
	return REAL(fsync)(fd);
}

int
fdatasync(int fd)
{
	int	error;

	if ((error = fault_sync(fd)) != 0) {
		errno = error;
		return -1;
	}
	return REAL(fdatasync)(fd);
}

/* The paced write-back (durable.c): a hint, but one that can fail. */
int
sync_file_range(int fd, off64_t offset, off64_t nbytes, unsigned int flags)
{
	int	error;

	if ((error = fault_for(FAULT_WRITEBACK, fd)) != 0) {
		errno = error;
		return -1;
	}
	return REAL(sync_file_range)(fd, offset, nbytes, flags);
}

int
ftruncate(int fd, off_t length)
{
	int	error;

	if ((error = fault_for(FAULT_TRUNCATE, fd)) != 0) {
		errno = error;
		return -1;
	}
	return REAL(ftruncate)(fd, length);
}

int
renameat2(int olddirfd, const char *oldpath, int newdirfd,
    const char *newpath, unsigned int flags)
{
	int	error;

	if ((error = fault_for(FAULT_RENAME, olddirfd)) != 0) {
		errno = error;
		return -1;
	}
	return REAL(renameat2)(olddirfd, oldpath, newdirfd, newpath, flags);
}

pid_t
fork(void)
{
	int	error;

	if ((error = fault_for(FAULT_FORK, -1)) != 0) {
		errno = error;
		return -1;
	}
	return REAL(fork)();
}
