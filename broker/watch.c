/* SPDX-License-Identifier: ISC */
/*
 * watch.c: the watch on the workspace for numbers that other FCoP writers
 * use while idemd runs, and the name check it serves.  The allocator
 * scans the disk once per date; after that, inotify reports every TASK
 * or REPORT file created or moved into a stage directory or reports/,
 * and every task directory made in a history date directory; the number
 * is noted (seqalloc_note_seen_locked): one at or past the allocator's
 * next is never handed out, one already past is a late sighting.
 *
 * The name check.  A name about to be linked must be new to the whole
 * workspace, not only to the directory it is linked in (linkat's EEXIST
 * is the final word there).  Every number idem hands out is past every
 * number seen before it, so such a name can exist elsewhere only if a
 * file of its number was sighted late.  watch_name_new drains the queue
 * and answers from the sightings; the caller walks the workspace
 * (taskfile_find) only when it says "not known": a sighting, another
 * date, a watch that does not cover every directory, or one that does
 * not vouch for every name (watch_local, below: another host's writer
 * makes names it never sights).
 *
 * The queue is shared by the master and every worker (one inotify
 * descriptor), so whoever reads it notes what it read before anyone
 * else can judge a name: reading and noting happen under the
 * allocator's lock.  A directory made or moved in (a new stage, a new
 * history date) or a queue overflow makes the reader refresh the watch
 * under the same hold: watch every directory there is, then note every
 * name in them, so nothing made before its directory was watched is
 * missed.  Until a refresh succeeds in full (inotify's limits), the
 * watch is not complete and every check walks, as before the watch.
 *
 * A mount on a watched directory makes no inotify event (the watch stays
 * on the directory it covers) and an unmount uncovers one nobody
 * watched: every drain polls the mount table first and refreshes on a
 * change (watch_mounts_changed), as on IN_UNMOUNT and IN_IGNORED.
 *
 * The watch is best effort: without inotify the broker runs on, with
 * the start-of-day scan and the walk at every link.
 *
 * The day's highest number on disk (watch_disk_max, the PostgreSQL
 * store's claims): the same sightings keep it from one scan on, as long
 * as the watch vouches for every name: complete, no refresh since the
 * scan (a refresh is what an overflow, a failed read or a directory made
 * or moved in cause), and every watched directory on a file system whose
 * other writers inotify sees.  A network or FUSE file system's other
 * hosts make names the local kernel never hears of: only a file system
 * known to be local (statfs's f_type, fslocal.c) is vouched for, each
 * watched directory's checked at every refresh (watch_check_fs); on any
 * other the claims scan, as they did before the watch.
 */
#include <sys/inotify.h>
#include <sys/vfs.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "idemd.h"
#include "backend.h"
#include "fslocal.h"

#define WATCH_EVENTS	(IN_CREATE | IN_MOVED_TO)

/*
 * What one refresh (under the allocator's lock) learnt of the file
 * systems it watches: the first directory not vouched for ("" if none)
 * and why; the first local file system's type, for the start-up line.
 */
struct watch_vouch {
	char		 unvouched[PATH_MAX];
	char		 why[160];
	const char	*local_type;
};

/* The directories under which a history date directory holds tasks. */
static const char *const watch_history_bases[] = {
	"history",
	"_lifecycle/history"
};

/*
 * Is path (relpath in the workspace) on a file system whose every writer
 * is this kernel (fslocal.c)?  If not, and it is the first such
 * directory of this refresh, say which and why.
 */
static void
watch_check_fs(struct watch_vouch *v, const char *path, const char *relpath)
{
	struct statfs	 sfs;
	const char	*type = NULL;
	unsigned long	 f_type = 0;
	int		 failed = 0, error = 0;

	if (statfs(path, &sfs) == -1) {
		failed = 1;
		error = errno;
	} else {
		f_type = (unsigned long)sfs.f_type & 0xffffffffUL;
		type = fslocal_name(f_type);
	}
	/* The test's stand-in for NFS: every directory, or one. */
	if (type != NULL && fslocal_counts_remote(relpath)) {
		if (v->unvouched[0] == '\0') {
			snprintf(v->why,
			    sizeof v->why, "its file system (%s) "
			    "counts as remote (IDEM_CRASH_WATCH)", type);
			snprintf(v->unvouched, sizeof v->unvouched, "%s",
			    relpath);
		}
		return;
	}
	if (type != NULL) {
		if (v->local_type == NULL)
			v->local_type = type;
		return;
	}
	if (v->unvouched[0] != '\0')
		return;
	if (failed)
		snprintf(v->why, sizeof v->why,
		    "statfs failed (%s): its file system is not known",
		    strerror(error));
	else
		snprintf(v->why, sizeof v->why,
		    "its file system (type 0x%lx) is not one known to have "
		    "no writers but this host's kernel (a network, cluster "
		    "or FUSE file system?)", f_type);
	snprintf(v->unvouched, sizeof v->unvouched, "%s", relpath);
}

/* Watch relpath (0; -1 if it exists but cannot be watched). */
static int
watch_add(struct idemd *d, struct watch_vouch *v, const char *relpath)
{
	char	path[PATH_MAX];

	if (snprintf(path, sizeof path, "%s/%s", d->root_real, relpath) >=
	    (int)sizeof path)
		return -1;
	/* A stage that is a symlink leads out of the workspace: not watched. */
	if (inotify_add_watch(d->watch_fd, path, WATCH_EVENTS | IN_ONLYDIR |
	    IN_DONT_FOLLOW) == -1) {
		if (errno == ENOENT || errno == ENOTDIR)
			return 0;
		log_warn("inotify watch on %s", path);
		return -1;
	}
	watch_check_fs(v, path, relpath);
	return 0;
}

/*
 * Is name a TASK or REPORT name (1; its number noted if heard), else 0?
 * An event's name not heard is one the test's stand-in for NFS drops.
 */
static int
watch_note(struct idemd *d, const char *name, int heard)
{
	enum subtab_kind	kind;
	uint32_t		date, seq;

	if (!taskfile_parse_name(name, &kind, &date, &seq))
		return 0;
	if (heard)
		seqalloc_note_seen_locked(&d->seg, kind, date, seq);
	return 1;
}

/*
 * Watch relpath, then note every name in it; with subdirs, do the same
 * for each directory in it (its stages, or its history dates).  0, or
 * -1 if some directory could not be watched or read.
 */
static int
watch_dir(struct idemd *d, struct watch_vouch *v, const char *relpath,
    int subdirs)
{
	DIR		*dir;
	struct dirent	*e;
	char		 sub[PATH_MAX];
	int		 fd, rc;

	if ((rc = watch_add(d, v, relpath)) != 0)
		return rc;
	if ((fd = nofollow_dir(d->root_fd, relpath)) == -1)
		return errno == ENOENT || errno == ENOTDIR || errno == ELOOP ?
		    0 : -1;
	if ((dir = fdopendir(fd)) == NULL) {
		close(fd);
		return -1;
	}
	while ((e = readdir(dir)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		if (subdirs) {
			/* _lifecycle/history is a history base, not a stage. */
			if (strcmp(relpath, "_lifecycle") == 0 &&
			    strcmp(e->d_name, "history") == 0)
				continue;
			if (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN)
				continue;
			if (snprintf(sub, sizeof sub, "%s/%s", relpath,
			    e->d_name) >= (int)sizeof sub ||
			    watch_dir(d, v, sub, 0) != 0)
				rc = -1;
		} else
			watch_note(d, e->d_name, 1);
	}
	closedir(dir);
	return rc;
}

/*
 * Alloc lock held: watch every directory a TASK or REPORT name can be
 * in and note what is in them; the watch is complete if all of it
 * succeeded.  The root and _lifecycle are watched for new directories.
 * What it learnt of their file systems goes to *v.
 */
static void
watch_refresh_locked(struct idemd *d, struct watch_vouch *v)
{
	size_t	i;
	int	rc = 0, was_local = atomic_load(&d->seg.header->watch_local);

	atomic_store(&d->seg.header->watch_complete, 0);
	d->seg.header->watch_refreshing = 1;
	/* Every day's highest number kept since a scan is scanned again. */
	d->seg.header->watch_refreshes++;
	v->unvouched[0] = '\0';
	v->local_type = NULL;
	if (watch_add(d, v, ".") != 0 ||
	    watch_dir(d, v, IDEM_REPORTS_DIR, 0) != 0 ||
	    watch_dir(d, v, "_lifecycle", 1) != 0)
		rc = -1;
	for (i = 0; i < sizeof watch_history_bases /
	    sizeof watch_history_bases[0]; i++) {
		if (watch_dir(d, v, watch_history_bases[i], 1) != 0)
			rc = -1;
	}
	d->seg.header->watch_refreshing = 0;
	atomic_store(&d->seg.header->watch_local, v->unvouched[0] == '\0');
	/* Once, when it stops vouching; only the PostgreSQL claims care. */
	if (v->unvouched[0] != '\0' && was_local &&
	    (d->be->flags & BACKEND_CLAIMS_READ_WATCH))
		log_notice("the watch cannot vouch for %s: %s: every claim "
		    "scans the workspace for numbers in use",
		    v->unvouched, v->why);
	if (rc != 0) {
		log_warnx("the watch does not cover the whole workspace: every "
		    "new name is looked for in every stage");
		return;
	}
	atomic_store(&d->seg.header->watch_complete, 1);
}

#ifdef IDEM_FAULT_INJECTION
/* Does buf (n bytes of events) hold a TASK or REPORT name? */
static int
watch_names_in(const char *buf, ssize_t n)
{
	const struct inotify_event	*ev;
	const char			*p;
	enum subtab_kind		 kind;
	uint32_t			 date, seq;

	for (p = buf; p < buf + n; p += sizeof *ev + ev->len) {
		ev = (const struct inotify_event *)p;
		if (ev->len != 0 &&
		    taskfile_parse_name(ev->name, &kind, &date, &seq))
			return 1;
	}
	return 0;
}
#endif

/*
 * Alloc lock held: was a file system mounted or unmounted anywhere since
 * the last look?  inotify says nothing of a mount over a watched
 * directory (its watch stays on the covered directory, blind to the
 * names made on the mount); an unmount it reports (IN_UNMOUNT), but the
 * directory uncovered is not watched.  The mount table's poll(2) says
 * POLLPRI (POLLERR) once per change: the kernel (mounts_poll) records
 * the change it reported in the open file, so the poll itself re-arms
 * it, for every process sharing it (the master's, inherited by the
 * workers; polled only under this lock, so the process that sees the
 * change is the one that refreshes).  No read is needed.
 */
static int
watch_mounts_changed(struct idemd *d)
{
	struct pollfd	pfd;

	if (d->mounts_fd == -1)
		return 0;
	pfd.fd = d->mounts_fd;
	pfd.events = POLLPRI;
	pfd.revents = 0;
	if (poll(&pfd, 1, 0) == -1) {
		log_warn("polling /proc/self/mountinfo");
		return 1;	/* not known: as if changed */
	}
	return (pfd.revents & (POLLPRI | POLLERR)) != 0;
}

/* Alloc lock held: read what happened, note every number seen. */
static void
watch_drain_locked(struct idemd *d)
{
	char				 buf[16384]
	    __attribute__((aligned(__alignof__(struct inotify_event))));
	const struct inotify_event	*ev;
	struct watch_vouch		 vouch;
	ssize_t				 n;
	char				*p;
	/* A reader killed in the middle of a refresh left it to us. */
	int				 refresh = d->seg.header->watch_refreshing;
	/*
	 * IDEM_CRASH_WATCH=remote: as on NFS, where another host's names
	 * make no event here, no event's name is noted (a refresh still
	 * reads them, as a directory read on NFS would).
	 */
	int				 heard = !fslocal_counts_remote(NULL);

	/* A mount over a watched directory, or one gone: read it again. */
	if (watch_mounts_changed(d)) {
		log_info("the mount table changed: the watch reads the "
		    "workspace again");
		refresh = 1;
	}

	/* A read that leaves room emptied the queue: no second read. */
	while ((n = read(d->watch_fd, buf, sizeof buf)) > 0) {
		crash_watch_read(watch_names_in(buf, n));
		for (p = buf; p < buf + n; p += sizeof *ev + ev->len) {
			ev = (const struct inotify_event *)p;
			if (ev->mask & IN_Q_OVERFLOW) {
				log_warnx("inotify queue overflow: the watch "
				    "reads the workspace again");
				refresh = 1;
			}
			/*
			 * A file system unmounted from a watched directory
			 * (its watch gone with it), or a watch removed: what
			 * is there now was never read.
			 */
			if (ev->mask & (IN_UNMOUNT | IN_IGNORED))
				refresh = 1;
			if (ev->len == 0 || ev->name[0] == '.')
				continue;
			/* A new stage or history date, or a history base. */
			if (!watch_note(d, ev->name, heard) &&
			    (ev->mask & IN_ISDIR))
				refresh = 1;
		}
		if ((size_t)n + sizeof *ev + NAME_MAX + 1 <= sizeof buf)
			break;
	}
	if (n == -1 && errno != EAGAIN && errno != EINTR) {
		/* Events may be lost: read the workspace again. */
		log_warn("reading inotify events");
		refresh = 1;
	}
	if (refresh)
		watch_refresh_locked(d, &vouch);
}

/* An inotify descriptor watching the workspace; -1 if none. */
int
watch_start(struct idemd *d)
{
	struct watch_vouch	 vouch;
#ifdef IDEM_FAULT_INJECTION
	const char	*how = getenv("IDEM_CRASH_WATCH");

	/* The test's stand-in for a kernel without inotify (or its limits). */
	if (how != NULL && strcmp(how, "off") == 0) {
		d->watch_fd = -1;
		errno = EMFILE;
	} else
#endif
	d->watch_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (d->watch_fd == -1) {
		log_warn("inotify: numbers other writers use after start-up "
		    "are only caught %s",
		    d->be->flags & BACKEND_CLAIMS_READ_WATCH ? "by a scan of "
		    "the workspace at every claim" : "by name");
		return -1;
	}
	/*
	 * Before the first refresh, so that no mount after it is missed;
	 * without it no mount is seen, and the claims cannot trust the
	 * watch (watch_disk_max).
	 */
	if ((d->mounts_fd = open("/proc/self/mountinfo", O_RDONLY |
	    O_CLOEXEC)) == -1 && (d->be->flags & BACKEND_CLAIMS_READ_WATCH))
		log_warn("/proc/self/mountinfo: a mount over a stage would "
		    "not be seen, so every claim scans the workspace for "
		    "numbers in use");
	/* Until the first refresh says otherwise. */
	atomic_store(&d->seg.header->watch_local, 1);
	if (seqalloc_lock(&d->seg) != 0)
		return d->watch_fd;	/* not complete: names are walked */
	watch_refresh_locked(d, &vouch);
	seqalloc_unlock(&d->seg);
	if (atomic_load(&d->seg.header->watch_complete) &&
	    atomic_load(&d->seg.header->watch_local) && d->mounts_fd != -1 &&
	    (d->be->flags & BACKEND_CLAIMS_READ_WATCH))
		log_info("the watch sees every name made in the workspace "
		    "(%s): a claim reads the day's highest number on disk "
		    "from it, scanning once a day", vouch.local_type != NULL ?
		    vouch.local_type : "?");
	return d->watch_fd;
}

/* Read what happened; note every number seen. */
void
watch_read(struct idemd *d, int fd)
{
	if (fd == -1 || d->seg.header == NULL || seqalloc_lock(&d->seg) != 0)
		return;
	watch_drain_locked(d);
	seqalloc_unlock(&d->seg);
}

int
watch_name_new(struct idemd *d, const char *name)
{
	enum subtab_kind	kind;
	uint32_t		date, seq;
	int			new;

	if (d->watch_fd == -1 || d->seg.header == NULL ||
	    !taskfile_parse_name(name, &kind, &date, &seq) ||
	    seqalloc_lock(&d->seg) != 0)
		return 0;
	watch_drain_locked(d);
	/*
	 * Where the watch does not vouch (watch_local: NFS and the like),
	 * another host's writer makes names it never sights: walk.
	 */
	new = atomic_load(&d->seg.header->watch_complete) &&
	    atomic_load(&d->seg.header->watch_local) &&
	    !seqalloc_sighted(&d->seg, kind, date, seq);
	seqalloc_unlock(&d->seg);
	return new;
}

int
watch_disk_max(struct idemd *d, enum subtab_kind kind, uint32_t date,
    seqalloc_scan_fn scan, void *arg, uint32_t *max_seq, int *scanned)
{
	int	rc;

	*scanned = 0;
	if (d->watch_fd == -1 || d->seg.header == NULL ||
	    seqalloc_lock(&d->seg) != 0)
		return 0;
	/*
	 * Every name made before the caller asked has its event in the
	 * queue, or noted by whoever read it (reading and noting are one
	 * hold of the lock): read what is left, then answer.
	 */
	watch_drain_locked(d);
	if (!atomic_load(&d->seg.header->watch_complete) ||
	    !atomic_load(&d->seg.header->watch_local) || d->mounts_fd == -1) {
		seqalloc_unlock(&d->seg);
		return 0;
	}
	rc = seqalloc_disk_max_locked(&d->seg, kind, date, scan, arg, max_seq,
	    scanned);
	seqalloc_unlock(&d->seg);
	return rc == 0 ? 1 : -1;
}
