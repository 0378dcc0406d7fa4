/* SPDX-License-Identifier: ISC */
/*
 * watch.c: the watch on the workspace for numbers that other FCoP writers
 * use while idemd runs.  The allocator scans the disk once per date;
 * after that, inotify reports every TASK or REPORT file created or moved
 * into a stage directory or reports/, and the number is noted so that it
 * is never handed out (seqalloc_note_seen).  The master reads the queue
 * as events come; a worker also drains it before each creation, so a
 * file made before a request is always known when the request takes a
 * number (the kernel queues the event when the file is created).
 * A name collision that still happens (a file appearing between its
 * event and an allocation) is caught when the file is linked: the whole
 * workspace is searched for the name first (fileio.c).
 *
 * The watch is best effort: without inotify (or past its limits) the
 * broker runs on, with the start-of-day scan and the link-time check.
 */
#include <sys/inotify.h>

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "idemd.h"

#define WATCH_EVENTS	(IN_CREATE | IN_MOVED_TO)

static void
watch_add(int fd, const char *root, const char *relpath)
{
	char	path[PATH_MAX];

	snprintf(path, sizeof path, "%s/%s", root, relpath);
	/* A stage that is a symlink leads out of the workspace: not watched. */
	if (inotify_add_watch(fd, path, WATCH_EVENTS | IN_ONLYDIR |
	    IN_DONT_FOLLOW) == -1 && errno != ENOENT && errno != ENOTDIR)
		log_warn("inotify watch on %s", path);
}

/* An inotify descriptor watching reports/ and every stage; -1 if none. */
int
watch_start(struct idemd *d)
{
	DIR		*dir = NULL;
	struct dirent	*e;
	char		 stage[PATH_MAX];
	int		 fd, dir_fd;

	if ((fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) == -1) {
		log_warn("inotify: numbers other writers use after start-up "
		    "are only caught by name");
		return -1;
	}
	watch_add(fd, d->root_real, IDEM_REPORTS_DIR);
	if ((dir_fd = nofollow_dir(d->root_fd, "_lifecycle")) != -1 &&
	    (dir = fdopendir(dir_fd)) == NULL)
		close(dir_fd);
	if (dir != NULL) {
		while ((e = readdir(dir)) != NULL) {
			if (e->d_name[0] == '.' || strcmp(e->d_name,
			    "history") == 0)
				continue;
			snprintf(stage, sizeof stage, "_lifecycle/%s",
			    e->d_name);
			watch_add(fd, d->root_real, stage);
		}
		closedir(dir);
	}
	return fd;
}

/* Read what happened; note every number seen. */
void
watch_read(struct idemd *d, int fd)
{
	char				 buf[16384]
	    __attribute__((aligned(__alignof__(struct inotify_event))));
	const struct inotify_event	*ev;
	enum subtab_kind		 kind;
	uint32_t			 date, seq;
	ssize_t				 n;
	char				*p;

	while ((n = read(fd, buf, sizeof buf)) > 0) {
		for (p = buf; p < buf + n; p += sizeof *ev + ev->len) {
			ev = (const struct inotify_event *)p;
			if (ev->len == 0 || d->seg.header == NULL)
				continue;
			if (taskfile_parse_name(ev->name, &kind, &date, &seq))
				seqalloc_note_seen(&d->seg, kind, date, seq);
		}
	}
	if (n == -1 && errno != EAGAIN && errno != EINTR)
		log_warn("reading inotify events");
}
