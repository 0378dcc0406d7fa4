/* SPDX-License-Identifier: ISC */
/*
 * master.c: the master process after start-up.  It starts the workers
 * (fork and exec), replaces one that dies, runs the journaling thread,
 * and on SIGTERM or SIGINT drains: workers finish what they hold and
 * exit, the journaler flushes the rest, and the socket and segment are
 * removed.
 *
 * Each worker has a socketpair to the master, which carries the store's
 * URI first; the worker's end reading EOF means the master is gone.  And
 * an eventfd of its own: the journaling thread (and the master itself,
 * when a worker dies) wakes the worker by writing it, and the worker's
 * loop, edge-triggered, never reads it (worker.c).
 */
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>

#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "idemd.h"

/* Respawns faster than this many a second mean something is broken. */
#define MASTER_RESPAWN_BURST	10

struct master {
	struct idemd		*d;
	struct event_base	*base;
	pid_t			 pids[IDEM_MAX_WORKERS];
	int			 notify_fds[IDEM_MAX_WORKERS];
	int			 wake_fds[IDEM_MAX_WORKERS];
	pthread_mutex_t		 fds_lock;	/* the fds: shared with the journaler */
	int			 stopping;
	unsigned		 live;
	int64_t			 burst_started_ms;
	unsigned		 burst;
	struct event		*respawn_ev;
};

/*
 * Tell systemd (Type=notify) how the service is: READY=1, RELOADING=1,
 * STOPPING=1.  Without NOTIFY_SOCKET in the environment, or in a build
 * without libsystemd, nothing (--ready-fd is the other way to wait).
 */
static void
master_notify(const char *state)
{
#ifdef HAVE_SYSTEMD
	int	rc;

	if ((rc = sd_notify(0, state)) < 0)
		log_warnx("sd_notify %s: %s", state, strerror(-rc));
#else
	(void)state;
#endif
}

/*
 * Wake the workers' loops: every one (all), or only those with a
 * request parked for durability or ring room (a flush's: the others
 * would wake to find nothing, two context switches and three system
 * calls each) and not watching the durable position already
 * (pending_watch: it sees this flush without a wake-up, and looks once
 * more after it stops watching).
 */
static int
master_broadcast(void *arg, int all)
{
	struct master		*m = arg;
	struct shm_header	*h = m->d->seg.header;
	uint64_t		 one = 1;
	unsigned		 i;

	pthread_mutex_lock(&m->fds_lock);
	for (i = 0; i < m->d->worker_count; i++) {
		if (!all && (atomic_load(&h->workers[i].loop_waiters) == 0 ||
		    atomic_load(&h->workers[i].watching) != 0))
			continue;
		/* Never full (2^64 - 2 writes): a write cannot fail. */
		if (m->wake_fds[i] != -1)
			(void)write(m->wake_fds[i], &one, sizeof one);
	}
	pthread_mutex_unlock(&m->fds_lock);
	return 0;
}

/*
 * The store's URI, the one option a worker is not given in its command
 * line, which any local user can read (its password: issue #27): the
 * first bytes on its notify socket, a 32-bit length (0: the local store)
 * and the URI, read before the worker serves (main.c, store_receive).
 * Written before the fork into an empty socket whose buffer holds far
 * more, so it never blocks and always comes ahead of any wake-up.
 */
static int
master_send_store(int fd, const char *uri)
{
	uint32_t	 length = uri != NULL ? (uint32_t)strlen(uri) : 0;
	struct iovec	 iov[2];
	struct msghdr	 msg;
	ssize_t		 n;

	iov[0].iov_base = &length;
	iov[0].iov_len = sizeof length;
	iov[1].iov_base = (void *)uri;
	iov[1].iov_len = length;
	memset(&msg, 0, sizeof msg);
	msg.msg_iov = iov;
	msg.msg_iovlen = 2;
	do
		n = sendmsg(fd, &msg, MSG_NOSIGNAL);
	while (n == -1 && errno == EINTR);
	if (n != (ssize_t)(sizeof length + length)) {
		if (n != -1)
			errno = EMSGSIZE;
		return -1;
	}
	return 0;
}

/*
 * A worker is this program again, exec'd with --worker and the numbers of
 * the handles it inherits (main.c).  Why exec and not a bare fork: once
 * serving, the master has threads (journaling, checkpoint), and a child
 * forked from a threaded process may only call async-signal-safe
 * functions until it execs: a lock another thread held at the fork, in
 * malloc or in a sanitizer's runtime, stays held in the child for ever.
 * So everything the child needs is prepared before the fork, and between
 * fork and exec it only clears close-on-exec flags.  Its command line is
 * the master's, whose --store password main.c has overwritten; the URI
 * itself goes through the notify socket (master_send_store).
 */
static int
master_spawn(struct master *m, unsigned index)
{
	static const char exec_failed[] = "idemd: cannot exec a worker\n";
	struct idemd	*d = m->d;
	sigset_t	 term, old;
	uint32_t	 generation;
	char		 handles[160], name[32], **argv;
	int		 sv[2], wake, inherit[WORKER_HANDLE_COUNT], i, n;
	size_t		 used;
	pid_t		 pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == -1) {
		log_warn("socketpair for worker %u", index);
		return -1;
	}
	if (master_send_store(sv[0], d->store_arg) != 0) {
		log_warn("worker %u: sending the store's URI", index);
		close(sv[0]);
		close(sv[1]);
		return -1;
	}
	if ((wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) == -1) {
		log_warn("worker %u: eventfd", index);
		close(sv[0]);
		close(sv[1]);
		return -1;
	}
	if ((argv = calloc((size_t)d->argc + 5, sizeof *argv)) == NULL) {
		log_warn("worker %u", index);
		close(sv[0]);
		close(sv[1]);
		close(wake);
		return -1;
	}
	generation = registry_start(&d->seg, index);
	inherit[WORKER_HANDLE_NOTIFY] = sv[1];
	inherit[WORKER_HANDLE_LISTEN] = d->listen_fd;
	inherit[WORKER_HANDLE_ROOT] = d->root_fd;
	inherit[WORKER_HANDLE_INBOX] = d->inbox_fd;
	inherit[WORKER_HANDLE_REPORTS] = d->reports_fd;
	inherit[WORKER_HANDLE_KICK] = d->kick_fd;
	inherit[WORKER_HANDLE_WATCH] = d->watch_fd;
	inherit[WORKER_HANDLE_INDEX] = d->index_dir_fd;
	inherit[WORKER_HANDLE_WAKE] = wake;
	inherit[WORKER_HANDLE_LOCK] = d->lock_fd;
	inherit[WORKER_HANDLE_MOUNTS] = d->mounts_fd;
	used = (size_t)snprintf(handles, sizeof handles, "%ld,%u,%u",
	    (long)getpid(), index, generation);
	for (i = 0; i < WORKER_HANDLE_COUNT; i++)
		used += (size_t)snprintf(handles + used, sizeof handles - used,
		    ",%d", inherit[i]);
	/* What ps shows (the kernel's own name is set by the worker). */
	snprintf(name, sizeof name, "idemd: worker %u", index);
	n = 0;
	argv[n++] = name;
	argv[n++] = "--worker";
	argv[n++] = handles;
	for (i = 1; i < d->argc; i++) {
		if (d->argv_root == NULL || !d->argv_root[i])
			argv[n++] = d->argv[i];
	}
	/*
	 * The root exactly as the master resolved it: it names the segment.
	 * Its --root options are left out above, so that ps shows one.
	 */
	argv[n++] = "--root";
	argv[n++] = d->root_real;
	argv[n] = NULL;

	/*
	 * Publish the wake eventfd before the fork: the worker may be
	 * serving, and parked until a flush, before the parent runs again
	 * (on a loaded machine it can be descheduled right after fork), and
	 * a journaling round that found no descriptor here would never wake
	 * it.  A wake-up sent early waits in the eventfd's counter, which
	 * the loop's event reports when it is added (epoll looks at the
	 * file then, edge-triggered or not).
	 */
	if (fcntl(sv[0], F_SETFL, O_NONBLOCK) == -1)
		log_warn("worker %u notify socket", index);
	pthread_mutex_lock(&m->fds_lock);
	m->notify_fds[index] = sv[0];
	m->wake_fds[index] = wake;
	pthread_mutex_unlock(&m->fds_lock);

	/*
	 * SIGTERM stays blocked in the child until its own loop handles it
	 * (the mask survives exec): one arriving earlier would kill it
	 * before it could drain, or be lost.
	 */
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigaddset(&term, SIGHUP);
	sigprocmask(SIG_BLOCK, &term, &old);
	pid = fork();
	if (pid == 0) {
		/*
		 * Registered by itself too, before it can serve: the parent's
		 * store below may come after the worker answers its first
		 * stats (a loaded machine deschedules the parent), which
		 * would not count the worker answering it.
		 */
		atomic_store(&d->seg.header->workers[index].pid, getpid());
		for (i = 0; i < WORKER_HANDLE_COUNT; i++) {
			if (inherit[i] != -1 &&
			    fcntl(inherit[i], F_SETFD, 0) == -1)
				_exit(127);
		}
		if (d->ready_fd != -1)
			close(d->ready_fd);
#ifdef IDEM_WORKER_EXEC_PATH
		/*
		 * A counting build only (doc/effects.md, "Counted, not
		 * timed"): under valgrind /proc/self/exe is valgrind's tool.
		 */
		execv(IDEM_WORKER_EXEC_PATH, argv);
#else
		/* The same binary as the master's, even if replaced on disk. */
		execv("/proc/self/exe", argv);
#endif
		(void)write(STDERR_FILENO, exec_failed, sizeof exec_failed - 1);
		_exit(127);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (pid > 0)
		crash_spawn_delay();
	free(argv);
	close(sv[1]);
	if (pid == -1) {
		log_warn("fork of worker %u", index);
		pthread_mutex_lock(&m->fds_lock);
		m->notify_fds[index] = -1;
		m->wake_fds[index] = -1;
		pthread_mutex_unlock(&m->fds_lock);
		close(sv[0]);
		close(wake);
		return -1;
	}
	atomic_store(&d->seg.header->workers[index].pid, pid);
	m->pids[index] = pid;
	m->live++;
	log_debug("worker %u started, pid %ld", index, (long)pid);
	return 0;
}

static void
master_spawn_missing(evutil_socket_t fd, short events, void *arg)
{
	struct master	*m = arg;
	struct timeval	 one_second = { 1, 0 };
	unsigned	 i;

	for (i = 0; i < m->d->worker_count && !m->stopping; i++) {
		if (m->pids[i] == 0 && master_spawn(m, i) != 0)
			evtimer_add(m->respawn_ev, &one_second);
	}
}

static void
master_child(evutil_socket_t fd, short events, void *arg)
{
	struct master	*m = arg;
	struct timeval	 one_second = { 1, 0 };
	int64_t		 now;
	unsigned	 i;
	pid_t		 pid;
	int		 status;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		for (i = 0; i < m->d->worker_count; i++) {
			if (m->pids[i] == pid)
				break;
		}
		if (i == m->d->worker_count)
			continue;
		if (WIFSIGNALED(status))
			log_warnx("worker %u (pid %ld) killed by signal %d",
			    i, (long)pid, WTERMSIG(status));
		else if (WEXITSTATUS(status) != 0 || !m->stopping)
			log_warnx("worker %u (pid %ld) exited with status %d",
			    i, (long)pid, WEXITSTATUS(status));
		/* Its claims lapse now; waiters elsewhere must look again. */
		registry_exit(&m->d->seg, i);
		/*
		 * A worker kicks the journaler once a pass, after the pass's
		 * replies: one killed in between left records in the ring
		 * that no kick announced (a lease extension it answered, a
		 * reservation whose request died with it).  An idle journaler
		 * would leave them there until the next append, and a request
		 * that waits for one of them (a retry on its key) would wait
		 * that long: kick it for them.
		 */
		journaler_kick(m->d->kick_fd);
		pthread_mutex_lock(&m->fds_lock);
		close(m->notify_fds[i]);
		m->notify_fds[i] = -1;
		close(m->wake_fds[i]);
		m->wake_fds[i] = -1;
		pthread_mutex_unlock(&m->fds_lock);
		m->pids[i] = 0;
		m->live--;
		master_broadcast(m, 1);
		if (m->stopping)
			continue;
		atomic_fetch_add(&m->d->seg.header->counters.worker_restarts,
		    1);
		now = shm_now_ms();
		if (now - m->burst_started_ms > 1000) {
			m->burst_started_ms = now;
			m->burst = 0;
		}
		if (++m->burst > MASTER_RESPAWN_BURST) {
			log_warnx("workers die too fast; next respawn in 1 s");
			evtimer_add(m->respawn_ev, &one_second);
		} else if (master_spawn(m, i) != 0)
			evtimer_add(m->respawn_ev, &one_second);
	}
	if (m->stopping && m->live == 0)
		event_base_loopbreak(m->base);
}

static void
master_watch(evutil_socket_t fd, short events, void *arg)
{
	struct master	*m = arg;

	watch_read(m->d, m->d->watch_fd);
}

/*
 * SIGUSR1 once meant "the journal failed"; the journaling thread now
 * reopens the journal itself (journaler.c).  Still caught, so that a
 * stray one does not kill the broker.
 */
static void
master_usr1(evutil_socket_t fd, short events, void *arg)
{
	log_info("SIGUSR1 ignored");
}

static void
master_terminate(evutil_socket_t fd, short events, void *arg)
{
	struct master	*m = arg;
	unsigned	 i;

	if (m->stopping)
		return;
	log_notice("signal %d: draining", (int)fd);
	master_notify("STOPPING=1");
	m->stopping = 1;
	atomic_store(&m->d->seg.header->shutting_down, 1);
	for (i = 0; i < m->d->worker_count; i++) {
		if (m->pids[i] != 0)
			kill(m->pids[i], SIGTERM);
	}
	if (m->live == 0)
		event_base_loopbreak(m->base);
}

/*
 * SIGHUP (systemctl reload, logrotate): reopen the log file and have
 * every worker reopen it too; nothing else changes, nothing stops.
 */
static void
master_hangup(evutil_socket_t fd, short events, void *arg)
{
	struct master	*m = arg;
	char		*cause = NULL;
	unsigned	 i;

	master_notify("RELOADING=1");
	log_notice("SIGHUP: reopening the log%s", m->d->log_file != NULL ?
	    "" : " (none: logging to stderr)");
	if (log_reopen(&cause) != 0) {
		log_warnx("%s; logging on to the file as it was", cause);
		free(cause);
	} else if (m->d->log_file != NULL)
		log_notice("SIGHUP: log reopened at %s", m->d->log_file);
	for (i = 0; i < m->d->worker_count; i++) {
		if (m->pids[i] != 0)
			kill(m->pids[i], SIGHUP);
	}
	master_notify("READY=1");
}

int
master_run(struct idemd *d)
{
	struct master	 m;
	struct event	*sigchld, *sigterm, *sigint, *sigusr1, *sighup;
	struct event	*watch_ev = NULL;
	struct timeval	 watch_every = { IDEM_WATCH_DRAIN_MS / 1000,
	    (IDEM_WATCH_DRAIN_MS % 1000) * 1000 };
	sigset_t	 hup, stop_signals;
	unsigned	 i;

	memset(&m, 0, sizeof m);
	m.d = d;
	for (i = 0; i < IDEM_MAX_WORKERS; i++)
		m.notify_fds[i] = m.wake_fds[i] = -1;
	pthread_mutex_init(&m.fds_lock, NULL);
	if ((m.base = event_base_new()) == NULL)
		fatalx("event_base_new failed");
	sigchld = evsignal_new(m.base, SIGCHLD, master_child, &m);
	sigterm = evsignal_new(m.base, SIGTERM, master_terminate, &m);
	sigint = evsignal_new(m.base, SIGINT, master_terminate, &m);
	m.respawn_ev = evtimer_new(m.base, master_spawn_missing, &m);
	sigusr1 = evsignal_new(m.base, SIGUSR1, master_usr1, &m);
	sighup = evsignal_new(m.base, SIGHUP, master_hangup, &m);
	if (sigchld == NULL || sigterm == NULL || sigint == NULL ||
	    m.respawn_ev == NULL || sigusr1 == NULL || sighup == NULL)
		fatalx("cannot create the master's events");
	event_add(sigchld, NULL);
	event_add(sigterm, NULL);
	event_add(sigint, NULL);
	event_add(sigusr1, NULL);
	event_add(sighup, NULL);
	/* Blocked since start-up (main.c): one that came meanwhile runs now. */
	sigemptyset(&hup);
	sigaddset(&hup, SIGHUP);
	sigprocmask(SIG_UNBLOCK, &hup, NULL);

	if (watch_start(d) != -1) {
		/*
		 * Not woken by every event (each creation makes two): the
		 * workers read the queue before they take a number and
		 * before they link (watch.c); this only keeps an idle
		 * broker's queue from overflowing.
		 */
		watch_ev = event_new(m.base, -1, EV_PERSIST, master_watch, &m);
		if (watch_ev == NULL || event_add(watch_ev, &watch_every) != 0)
			fatalx("cannot watch the workspace");
	}

	for (i = 0; i < d->worker_count; i++) {
		if (master_spawn(&m, i) != 0)
			fatalx("cannot start worker %u", i);
	}
	if (journaler_start(d, master_broadcast, &m) != 0)
		fatal("starting the journaling thread");
	log_notice("serving %s on %s with %u worker%s", d->root_real,
	    d->socket_path, d->worker_count, log_plural(d->worker_count));
	master_notify("READY=1");
	if (d->ready_fd != -1) {
		(void)write(d->ready_fd, "ready\n", 6);
		close(d->ready_fd);
		d->ready_fd = -1;
	}

	event_base_dispatch(m.base);

	/*
	 * Draining is under way: a second SIGTERM or SIGINT (or a SIGHUP)
	 * must change nothing.  Freeing the signal events below gives the
	 * signals their default action back, which would kill the master
	 * half-way through its clean-up (socket and segment left behind).
	 * Blocked here, they stay pending: once journaler_stop() has joined
	 * the journaling threads, this is the only thread left, and while
	 * those threads run, libevent's handler is still installed.
	 */
	sigemptyset(&stop_signals);
	sigaddset(&stop_signals, SIGTERM);
	sigaddset(&stop_signals, SIGINT);
	sigaddset(&stop_signals, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
	journaler_stop();
	event_free(sigchld);
	event_free(sigterm);
	event_free(sigint);
	event_free(m.respawn_ev);
	event_free(sigusr1);
	event_free(sighup);
	if (watch_ev != NULL) {
		event_free(watch_ev);
		close(d->watch_fd);
		d->watch_fd = -1;
		if (d->mounts_fd != -1)
			close(d->mounts_fd);
		d->mounts_fd = -1;
	}
	event_base_free(m.base);
	pthread_mutex_destroy(&m.fds_lock);
	return atomic_load(&d->seg.header->journal_failed) ? 1 : 0;
}
