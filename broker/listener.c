/* SPDX-License-Identifier: ISC */
/*
 * listener.c: the broker's listening socket.  Its path is never taken
 * from anyone: whatever is there is connected to first, and only a
 * socket nobody answers on (a broker that died) is replaced; a file that
 * is not a socket is never removed.  An idemd found there is asked hello
 * and named by its pid and root in the refusal.  Then the socket is
 * bound with the mode and group the options give.
 *
 * Under socket activation (an idemd.socket unit, or
 * systemd-socket-activate) the socket is systemd's: idemd takes the one
 * listening Unix stream socket passed to it (sd_listen_fds, libsystemd:
 * optional at build, like the readiness notice), binds and removes
 * nothing, and the master hands it to the workers as it does its own.
 * Connections made while idemd (re)starts wait in its backlog.
 */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "idemd.h"

/*
 * One connection to the socket: -1 refused (nobody listens), 0 answered
 * (who says by whom), 1 closed without a word (a listener on its way
 * out: the workers of a broker killed a moment ago still hold its
 * socket until they die too).
 */
static int
probe_once(const struct sockaddr_un *sun, int ms, char *who,
    size_t who_size)
{
	static const char	 hello[] = "{\"op\":\"hello\"}\n";
	struct timeval		 tv;
	struct ucred		 cred;
	socklen_t		 len = sizeof cred;
	json_error_t		 jerr;
	json_t			*reply, *pid, *root;
	char			 buf[4096], *eol;
	size_t			 got = 0;
	ssize_t			 n;
	int			 fd, rc = 0;

	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		fatal("socket");
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	if (connect(fd, (const struct sockaddr *)sun, sizeof *sun) == -1) {
		if (errno == ECONNREFUSED || errno == ENOENT)
			rc = -1;
		else
			snprintf(who, who_size, "a listener (connect: %s)",
			    strerror(errno));
		close(fd);
		return rc;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
		snprintf(who, who_size, "another program (pid %ld by "
		    "SO_PEERCRED; it accepts connections but does not answer "
		    "idemd's hello)", (long)cred.pid);
	else
		snprintf(who, who_size, "another program (it accepts "
		    "connections but does not answer idemd's hello)");
	(void)send(fd, hello, sizeof hello - 1, MSG_NOSIGNAL);
	for (;;) {
		n = recv(fd, buf + got, sizeof buf - 1 - got, 0);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
		buf[got] = '\0';
		if (strchr(buf, '\n') != NULL || got == sizeof buf - 1)
			break;
	}
	close(fd);
	if (got == 0)
		/* EOF or reset: closed on us.  A timeout: it is there, mute. */
		return n == 0 || (n == -1 && errno != EAGAIN &&
		    errno != EWOULDBLOCK) ? 1 : 0;
	buf[got] = '\0';
	if ((eol = strchr(buf, '\n')) != NULL)
		*eol = '\0';
	reply = json_loads(buf, 0, &jerr);
	if (reply != NULL && json_is_string(json_object_get(reply, "server")) &&
	    strcmp(json_string_value(json_object_get(reply, "server")),
	    "idemd") == 0) {
		pid = json_object_get(reply, "pid");
		root = json_object_get(reply, "root");
		/* A worker outliving its master by a moment: not a holder. */
		if (json_is_integer(pid) && json_integer_value(pid) > 0 &&
		    json_integer_value(pid) <= INT_MAX &&
		    kill((pid_t)json_integer_value(pid), 0) == -1 &&
		    errno == ESRCH) {
			json_decref(reply);
			return 1;
		}
		if (json_is_integer(pid))
			snprintf(who, who_size, "idemd pid %lld serving %s",
			    (long long)json_integer_value(pid),
			    json_is_string(root) ? json_string_value(root) :
			    "an unknown root");
		else
			snprintf(who, who_size, "an idemd that does not say "
			    "its pid");
	}
	json_decref(reply);
	return 0;
}

/*
 * What answers on an existing socket: -1 if nothing does (ECONNREFUSED:
 * a socket file nobody listens on, stale; ENOENT: gone meanwhile), 0 if
 * something does, with who it is in who.  An idemd is asked hello and
 * named by its pid and root; anything else by what happened.  A
 * listener that closes every connection unanswered is asked again until
 * the deadline: it is on its way out (or it answers in its own way).
 */
static int
probe_socket(const struct sockaddr_un *sun, char *who, size_t who_size)
{
	const struct timespec	 pause = { 0, 10 * 1000000 };
	int64_t			 deadline, left;
	int			 rc;

	deadline = clock_monotonic_us() / 1000 + IDEM_SOCKET_PROBE_TIMEOUT_MS;
	for (;;) {
		left = deadline - clock_monotonic_us() / 1000;
		if (left < 1)
			left = 1;
		if ((rc = probe_once(sun, (int)left, who, who_size)) != 1)
			return rc;
		if (clock_monotonic_us() / 1000 >= deadline) {
			snprintf(who, who_size, "a listener that closes every "
			    "connection unanswered");
			return 0;
		}
		nanosleep(&pause, NULL);
	}
}

/*
 * A broker never displaces another program: before replacing anything
 * at the socket's path it connects there, and only a socket nobody
 * answers on (a broker that died) is removed.  A file that is not a
 * socket (a symlink included) is never removed.
 */
static void
claim_socket_path(const struct sockaddr_un *sun)
{
	struct stat	st;
	char		who[PATH_MAX + 128];

	if (lstat(sun->sun_path, &st) == -1) {
		if (errno == ENOENT)
			return;
		fatal("%s", sun->sun_path);
	}
	if (!S_ISSOCK(st.st_mode))
		fatalx("%s exists and is not a socket; refusing to replace "
		    "it (remove it, or choose another --socket)",
		    sun->sun_path);
	if (probe_socket(sun, who, sizeof who) == 0)
		fatalx("socket %s is in use by %s; refusing to replace it "
		    "(stop it, or choose another --socket)", sun->sun_path,
		    who);
	/* Nobody answers: a broker died there.  Replace that one only. */
	if (unlink(sun->sun_path) == -1 && errno != ENOENT)
		fatal("unlink %s", sun->sun_path);
}

static void
socket_address(struct idemd *d, struct sockaddr_un *sun)
{
	if (d->socket_path == NULL && asprintf(&d->socket_path, "%s/%s",
	    d->root_real, d->socket_name) == -1)
		fatal("asprintf");
	memset(sun, 0, sizeof *sun);
	sun->sun_family = AF_UNIX;
	if (strlen(d->socket_path) >= sizeof sun->sun_path)
		fatalx("socket path %s is longer than %zu bytes; use --socket",
		    d->socket_path, sizeof sun->sun_path - 1);
	strcpy(sun->sun_path, d->socket_path);
}

/*
 * The socket systemd passed (LISTEN_FDS, LISTEN_PID), if it passed one:
 * it must be exactly one listening Unix stream socket.  The variables
 * are removed, so the workers (exec'd with this environment) and
 * anything they start never take it for theirs.
 */
void
listener_activated(struct idemd *d)
{
#ifdef HAVE_SYSTEMD
	struct sockaddr_un	sun;
	socklen_t		len = sizeof sun;
	int			n, fd, flags;

	if ((n = sd_listen_fds(1)) < 0)
		fatalx("sd_listen_fds: %s", strerror(-n));
	if (n == 0)
		return;
	if (n != 1)
		fatalx("systemd passed %d sockets; idemd listens on one "
		    "(one ListenStream= in idemd.socket)", n);
	fd = SD_LISTEN_FDS_START;
	if (sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) <= 0)
		fatalx("the socket systemd passed is not a listening Unix "
		    "stream socket (idemd.socket needs ListenStream=PATH)");
	memset(&sun, 0, sizeof sun);
	if (getsockname(fd, (struct sockaddr *)&sun, &len) == -1)
		fatal("getsockname of the socket systemd passed");
	if (len <= offsetof(struct sockaddr_un, sun_path) ||
	    sun.sun_path[0] == '\0')
		fatalx("the socket systemd passed has no path (an abstract "
		    "socket): give ListenStream= a file name");
	sun.sun_path[sizeof sun.sun_path - 1] = '\0';
	if (d->socket_path != NULL && strcmp(d->socket_path, sun.sun_path) !=
	    0)
		fatalx("--socket %s, but systemd passed %s: drop --socket or "
		    "make them one", d->socket_path, sun.sun_path);
	/* Workers accept from libevent's loop; exec'd, they inherit it. */
	if ((flags = fcntl(fd, F_GETFL)) == -1 ||
	    fcntl(fd, F_SETFL, flags | O_NONBLOCK) == -1 ||
	    fcntl(fd, F_SETFD, FD_CLOEXEC) == -1)
		fatal("fcntl on the socket systemd passed");
	free(d->socket_path);
	if ((d->socket_path = strdup(sun.sun_path)) == NULL)
		fatal("strdup");
	d->listen_fd = fd;
	d->socket_activated = 1;
	log_info("listening on %s, the socket systemd passed", d->socket_path);
#else
	const char	*pid = getenv("LISTEN_PID");

	if (getenv("LISTEN_FDS") != NULL && pid != NULL &&
	    strtol(pid, NULL, 10) == (long)getpid())
		fatalx("systemd passed a socket (LISTEN_FDS), but this idemd "
		    "was built without libsystemd: build it with libsystemd "
		    "(Debian: libsystemd-dev) or run it without idemd.socket");
	(void)d;
#endif
}

/*
 * Before anything is built for this start (the segment above all): a
 * broker that will not get its socket must leave nothing behind.
 */
void
listener_check(struct idemd *d)
{
	struct sockaddr_un	sun;

	if (d->socket_activated)
		return;		/* systemd's, bound already */
	socket_address(d, &sun);
	claim_socket_path(&sun);
}

void
listener_open(struct idemd *d)
{
	struct sockaddr_un	sun;
	mode_t			old;
	int			fd;

	if (d->socket_activated)
		return;
	/* Checked at start-up; look again: time passed (the replay). */
	socket_address(d, &sun);
	claim_socket_path(&sun);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1)
		fatal("socket");
	old = umask(0177);
	/* EADDRINUSE: someone bound it since the probe; never unlink that. */
	if (bind(fd, (struct sockaddr *)&sun, sizeof sun) == -1)
		fatal("bind %s", d->socket_path);
	umask(old);
	if (d->socket_group != NULL) {
		struct group	*g = getgrnam(d->socket_group);

		if (g == NULL)
			fatalx("--socket-group: no group \"%s\"",
			    d->socket_group);
		if (chown(d->socket_path, (uid_t)-1, g->gr_gid) == -1)
			fatal("chown %s to group %s", d->socket_path,
			    d->socket_group);
	}
	if (chmod(d->socket_path, d->socket_mode) == -1)
		fatal("chmod %s", d->socket_path);
	if (listen(fd, 1024) == -1)
		fatal("listen %s", d->socket_path);
	if (lstat(d->socket_path, &d->socket_stat) == -1)
		fatal("stat %s", d->socket_path);
	d->listen_fd = fd;
}

/*
 * At exit: remove the socket file if the path still names the one this
 * broker bound.  Its directory may have been swapped for a symlink since
 * (nothing stops the workspace's owner): a file found there is not ours.
 */
void
listener_remove(struct idemd *d)
{
	struct stat	st;

	/* systemd's: it stays for the next start (or the unit's stop). */
	if (d->socket_activated)
		return;
	if (lstat(d->socket_path, &st) == -1)
		return;
	if (st.st_dev != d->socket_stat.st_dev ||
	    st.st_ino != d->socket_stat.st_ino) {
		log_warnx("%s is no longer the socket this broker bound: left "
		    "as it is", d->socket_path);
		return;
	}
	unlink(d->socket_path);
}
