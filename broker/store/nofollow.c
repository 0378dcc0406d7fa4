/* SPDX-License-Identifier: ISC */
/*
 * nofollow.c: opening a path below a directory descriptor without
 * following a symlink at any of its components.  Every name idemd opens
 * in the workspace goes through here (or through openat with O_NOFOLLOW
 * from a directory opened here), so a symlink planted at a stage, at a
 * TASK file's name or in .idem/ leads nowhere: the call fails with ELOOP
 * and nothing outside the root is read, written or truncated.
 *
 * Each directory on the way is opened O_DIRECTORY|O_NOFOLLOW from the
 * one before, so a component swapped for a symlink meanwhile is refused
 * too; the path is never resolved as a whole.  ".." is refused: nothing
 * here climbs out of the directory it starts from.  Where the kernel has
 * openat2 (Linux 5.6), the directories on the way are opened by one
 * call with RESOLVE_NO_SYMLINKS, which refuses a symlink at any
 * component as the walk does (ELOOP): one system call instead of two
 * per component, which a retry's check of its TASK file pays.
 */
#include <sys/stat.h>
#include <sys/syscall.h>

#include <linux/openat2.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "store.h"

/*
 * O_NOFOLLOW on a symlink fails with ELOOP, but with O_DIRECTORY Linux
 * says ENOTDIR: make both ELOOP, which callers name as a symlink.
 */
static int
nofollow_errno(int at_fd, const char *name, int error)
{
	struct stat	st;

	if ((error == ENOTDIR || error == ELOOP) &&
	    fstatat(at_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISLNK(st.st_mode))
		return ELOOP;
	return error;
}

/*
 * The next component of relpath at *p, into name, *p moved past it: 1 a
 * directory on the way, 0 the last component (a trailing slash or two
 * ends it too), -1 with errno for an empty or too long one or "..".
 * Both ways of opening the parent (nofollow_parent2, the walk) read a
 * path with it, so they accept and refuse the same paths.
 */
static int
path_next(const char **p, char name[NAME_MAX + 1])
{
	const char	*slash;
	size_t		 length;

	while (**p == '/')
		(*p)++;
	slash = strchr(*p, '/');
	length = slash != NULL ? (size_t)(slash - *p) : strlen(*p);
	if (length == 0 || length > NAME_MAX) {
		errno = length == 0 ? EINVAL : ENAMETOOLONG;
		return -1;
	}
	memcpy(name, *p, length);
	name[length] = '\0';
	if (strcmp(name, "..") == 0) {
		errno = EINVAL;
		return -1;
	}
	if (slash == NULL || slash[strspn(slash, "/")] == '\0')
		return 0;
	*p = slash + 1;
	return 1;
}

/*
 * The directory part of relpath in one openat2, its components checked as
 * nofollow_parent's walk checks them.  -1 with errno ENOSYS: no openat2
 * (or a filter refuses it), walk instead.
 */
static int
nofollow_parent2(int at_fd, const char *relpath, char last[NAME_MAX + 1])
{
	static _Atomic int	 missing;
	struct open_how		 how;
	const char		*p = relpath;
	char			 dir[PATH_MAX], name[NAME_MAX + 1];
	size_t			 length, used = 0;
	long			 fd;
	int			 more;

	if (atomic_load(&missing)) {
		errno = ENOSYS;
		return -1;
	}
	while ((more = path_next(&p, name)) == 1) {
		length = strlen(name);
		if (used + length + 2 > sizeof dir) {
			errno = ENAMETOOLONG;
			return -1;
		}
		if (used > 0)
			dir[used++] = '/';
		memcpy(dir + used, name, length);
		used += length;
	}
	if (more == -1)
		return -1;
	memcpy(last, name, strlen(name) + 1);
	if (used == 0)
		return fcntl(at_fd, F_DUPFD_CLOEXEC, 0);
	dir[used] = '\0';
	memset(&how, 0, sizeof how);
	/* No O_NOFOLLOW: with O_DIRECTORY a symlink at the last directory
	 * would say ENOTDIR; RESOLVE_NO_SYMLINKS says ELOOP at any. */
	how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
	how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
	    RESOLVE_BENEATH;
	fd = syscall(SYS_openat2, at_fd, dir, &how, sizeof how);
	if (fd == -1 && (errno == ENOSYS || errno == EPERM)) {
		atomic_store(&missing, 1);
		errno = ENOSYS;
	}
	return (int)fd;
}

int
nofollow_parent(int at_fd, const char *relpath, char last[NAME_MAX + 1])
{
	const char	*p = relpath;
	char		 name[NAME_MAX + 1];
	int		 fd, next, more, error;

	if ((fd = nofollow_parent2(at_fd, relpath, last)) != -1 ||
	    errno != ENOSYS)
		return fd;
	if ((fd = fcntl(at_fd, F_DUPFD_CLOEXEC, 0)) == -1)
		return -1;
	for (;;) {
		if ((more = path_next(&p, name)) == -1) {
			error = errno;
			close(fd);
			errno = error;
			return -1;
		}
		if (more == 0) {
			memcpy(last, name, strlen(name) + 1);
			return fd;
		}
		next = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
		    O_CLOEXEC);
		if (next == -1) {
			error = nofollow_errno(fd, name, errno);
			close(fd);
			errno = error;
			return -1;
		}
		close(fd);
		fd = next;
	}
}

int
nofollow_openat(int at_fd, const char *relpath, int flags, mode_t mode)
{
	char	last[NAME_MAX + 1];
	int	parent, fd, error;

	if ((parent = nofollow_parent(at_fd, relpath, last)) == -1)
		return -1;
	fd = openat(parent, last, flags | O_NOFOLLOW | O_CLOEXEC, mode);
	error = fd == -1 ? nofollow_errno(parent, last, errno) : 0;
	close(parent);
	errno = error;
	return fd;
}

int
nofollow_dir(int at_fd, const char *relpath)
{
	if (strcmp(relpath, ".") == 0)
		return fcntl(at_fd, F_DUPFD_CLOEXEC, 0);
	return nofollow_openat(at_fd, relpath, O_RDONLY | O_DIRECTORY, 0);
}

int
nofollow_lstat(int at_fd, const char *relpath, struct stat *st)
{
	char	last[NAME_MAX + 1];
	int	parent, rc, error;

	if ((parent = nofollow_parent(at_fd, relpath, last)) == -1)
		return -1;
	rc = fstatat(parent, last, st, AT_SYMLINK_NOFOLLOW);
	error = errno;
	close(parent);
	errno = error;
	return rc;
}

int
nofollow_mkdir(int at_fd, const char *relpath, mode_t mode)
{
	char	last[NAME_MAX + 1];
	int	parent, rc, error;

	if ((parent = nofollow_parent(at_fd, relpath, last)) == -1)
		return -1;
	rc = mkdirat(parent, last, mode);
	error = errno;
	close(parent);
	errno = error;
	return rc;
}
