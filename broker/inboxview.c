/* SPDX-License-Identifier: ISC */
/*
 * inboxview.c: is a task still where idem put it?  The question every
 * answer from an earlier creation asks ("current_path", SPEC.md), on the
 * retry's hot path.
 *
 * The root-relative walk (taskfile_current_path) opens the inbox below
 * the root without following a symlink, then looks at the name: three
 * system calls (openat2, fstatat, close), half of what a fast retry costs
 * besides its read and its write.  A worker already holds the inbox
 * directory (d->inbox_fd, opened at start-up); one fstatat in it answers
 * the same question, as long as the root's "_lifecycle" still is the
 * directory whose "inbox" is the one held.  That is what this file
 * watches, with an inotify queue of its own (not the shared one of
 * watch.c, which other processes drain): on the root and on
 * "_lifecycle", for any entry made, removed, moved or changed there.
 *
 * Why the answer is exact.  Arming adds the root's watch, then opens
 * "_lifecycle" (without following a symlink) and watches it, then opens
 * its "inbox" and compares it with the held one (device and inode), then
 * requires the queue to be empty.  From then on, a change to either
 * name (replaced, moved, removed, a symlink planted, its permissions
 * changed) is in the queue before the call that made it returns.  A
 * check calls fstatat(inbox, name) at t1 and then reads the queue at t2:
 * if nothing in it concerns those names, the path named the held inbox
 * all through [arming, t2], so also at t1, when the file was there.  An
 * event about another name (a file written beside "_lifecycle") is read
 * and dropped; one about those names, a change to the watched directory
 * itself or an overflow disarms the view, and the caller walks.  The
 * next check arms it again; if the inbox named then is not the one held
 * (it was replaced while the broker ran), the view stays off until the
 * names change again, and every check walks, as before.
 *
 * What inotify cannot see: a mount over "_lifecycle" or its inbox (only
 * the administrator can make one), and changes made by another host (or
 * a FUSE daemon) to a workspace on a file system shared that way.  So
 * unless the root and the held inbox are both on a file system known to
 * be local (fslocal.c's list, the watch's: a network, cluster or FUSE
 * file system, where several brokers on PostgreSQL may share the
 * workspace (doc/cluster.md), or any type nobody listed), the view is
 * off and every check walks.  Without inotify or /proc it is off too.
 */
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "idemd.h"
#include "fslocal.h"
#include "log.h"

/* IDEM_INBOX_DIR, one component at a time. */
#define INBOXVIEW_LIFECYCLE	"_lifecycle"
#define INBOXVIEW_INBOX		"inbox"

#define INBOXVIEW_EVENTS	(IN_CREATE | IN_DELETE | IN_MOVED_FROM | \
	IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)

/* Watch the directory open at fd (its watch descriptor; -1: cannot). */
static int
inboxview_watch(int queue_fd, int fd)
{
	char	path[64];

	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	return inotify_add_watch(queue_fd, path, INBOXVIEW_EVENTS);
}

/*
 * Read every queued event.  1 if one of them may change what
 * root/_lifecycle/inbox names, 0 if none does, -1 on error.
 */
static int
inboxview_drain(struct inboxview *v)
{
	char				 buf[4096]
	    __attribute__((aligned(__alignof__(struct inotify_event))));
	const struct inotify_event	*ev;
	ssize_t				 n;
	size_t				 at;
	int				 queued, changed = 0;

	if (ioctl(v->fd, FIONREAD, &queued) == -1)
		return -1;
	if (queued == 0)
		return 0;
	for (;;) {
		if ((n = read(v->fd, buf, sizeof buf)) == -1) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? changed : -1;
		}
		for (at = 0; at + sizeof *ev <= (size_t)n;
		    at += sizeof *ev + ev->len) {
			ev = (const struct inotify_event *)(buf + at);
			/* Self events (and overflow) have no name. */
			if (ev->len == 0 || (ev->wd == v->root_wd &&
			    strcmp(ev->name, INBOXVIEW_LIFECYCLE) == 0) ||
			    (ev->wd == v->lifecycle_wd &&
			    strcmp(ev->name, INBOXVIEW_INBOX) == 0))
				changed = 1;
		}
	}
}

static void
inboxview_off(struct inboxview *v, const char *what, int error)
{
	log_notice("retries look for their task by path (%s: %s)", what,
	    strerror(error));
	inboxview_close(v);
}

/* Watch the names again and compare the inbox they lead to. */
static void
inboxview_arm(struct inboxview *v, int root_fd, int inbox_fd)
{
	struct stat	held, named;
	int		lifecycle, inbox, same, error;

	if (v->fd != -1)
		close(v->fd);
	if ((v->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) == -1) {
		inboxview_off(v, "inotify_init1", errno);
		return;
	}
	if ((v->root_wd = inboxview_watch(v->fd, root_fd)) == -1) {
		inboxview_off(v, "watching the root", errno);
		return;
	}
	v->lifecycle_wd = -1;
	v->state = INBOXVIEW_MISMATCH;
	/* A missing or planted name: the walk says what it says. */
	if ((lifecycle = nofollow_dir(root_fd, INBOXVIEW_LIFECYCLE)) == -1)
		return;
	if ((v->lifecycle_wd = inboxview_watch(v->fd, lifecycle)) == -1) {
		error = errno;
		close(lifecycle);
		inboxview_off(v, "watching " INBOXVIEW_LIFECYCLE, error);
		return;
	}
	inbox = nofollow_dir(lifecycle, INBOXVIEW_INBOX);
	close(lifecycle);
	if (inbox == -1)
		return;
	same = fstat(inbox, &named) == 0 && fstat(inbox_fd, &held) == 0 &&
	    named.st_dev == held.st_dev && named.st_ino == held.st_ino;
	close(inbox);
	if (!same) {
		log_debug("%s is not the inbox held since start-up: retries "
		    "look for their task by path", IDEM_INBOX_DIR);
		return;
	}
	/* A change while arming: armed at the next check. */
	if (inboxview_drain(v) != 0) {
		v->state = INBOXVIEW_STALE;
		return;
	}
	v->state = INBOXVIEW_ARMED;
	log_debug("retries look for their task in the held inbox");
}

int
inboxview_holds(struct inboxview *v, int root_fd, int inbox_fd,
    const char *recorded)
{
	struct stat	 st;
	const char	*file;
	size_t		 prefix = sizeof IDEM_INBOX_DIR - 1;
	int		 present;

	if (v->state == INBOXVIEW_OFF ||
	    strncmp(recorded, IDEM_INBOX_DIR "/", prefix + 1) != 0)
		return 0;
	file = recorded + prefix + 1;
	if (v->state == INBOXVIEW_MISMATCH) {
		/* Arm again only once the names have changed again. */
		switch (inboxview_drain(v)) {
		case 0:
			return 0;
		case 1:
			break;
		default:
			inboxview_off(v, "reading the inotify queue", errno);
			return 0;
		}
	}
	if (v->state != INBOXVIEW_ARMED) {
		inboxview_arm(v, root_fd, inbox_fd);
		if (v->state != INBOXVIEW_ARMED)
			return 0;
	}
	present = fstatat(inbox_fd, file, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISREG(st.st_mode);
	switch (inboxview_drain(v)) {
	case 0:
		return present;
	case 1:
		log_debug("%s or %s changed: the inbox is compared again",
		    INBOXVIEW_LIFECYCLE, IDEM_INBOX_DIR);
		v->state = INBOXVIEW_STALE;
		return 0;
	default:
		inboxview_off(v, "reading the inotify queue", errno);
		return 0;
	}
}

/*
 * Is the directory open at fd (relpath in the workspace) on a file system
 * known to be local?  If not, say which and why.
 */
static int
inboxview_local(int fd, const char *relpath)
{
	struct statfs	 fs;
	const char	*type;
	unsigned long	 f_type;

	if (fstatfs(fd, &fs) == -1) {
		log_notice("retries look for their task by path (fstatfs: "
		    "%s)", strerror(errno));
		return 0;
	}
	f_type = (unsigned long)fs.f_type & 0xffffffffUL;
	if ((type = fslocal_name(f_type)) == NULL) {
		log_info("%s is on a file system (type 0x%lx) not known to "
		    "have no writers but this host's kernel, whose changes "
		    "inotify may not see: retries look for their task by "
		    "path", relpath, f_type);
		return 0;
	}
	if (fslocal_counts_remote(relpath)) {
		log_info("%s's file system (%s) counts as remote "
		    "(IDEM_CRASH_WATCH): retries look for their task by path",
		    relpath, type);
		return 0;
	}
	return 1;
}

void
inboxview_open(struct inboxview *v, int root_fd, int inbox_fd)
{
	v->fd = -1;
	v->root_wd = v->lifecycle_wd = -1;
	v->state = INBOXVIEW_OFF;
	/* The names watched are the root's, the file checked the inbox's. */
	if (!inboxview_local(root_fd, ".") ||
	    !inboxview_local(inbox_fd, IDEM_INBOX_DIR))
		return;
	v->state = INBOXVIEW_STALE;
}

void
inboxview_close(struct inboxview *v)
{
	if (v->fd != -1)
		close(v->fd);
	v->fd = -1;
	v->state = INBOXVIEW_OFF;
}
