/* SPDX-License-Identifier: ISC */
/*
 * main.c: idemd start-up.  Options, the root and its lock, the segment
 * filled by replaying the journal (state.c), the listening socket; then
 * the master takes over (master.c).  Everything that can fail at
 * start-up fails here, before any worker exists, with a message that
 * says what to do.  A worker is this same program run with --worker
 * (run_worker): it maps the segment and serves with the handles the
 * master left it.
 */
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "log.h"
#include "idemd.h"
#include "backend.h"
#include "storeuri.h"

static void
usage(FILE *out, int status)
{
	fprintf(out,
"usage: idemd [--root DIR] [--socket PATH] [--workers N] [--capacity N]\n"
"             [--inflight-wait-ms N] [--max-connections N]\n"
"             [--max-connections-per-pid N] [--max-connections-per-uid N]\n"
"             [--idle-timeout-ms N] [--socket-mode MODE] [--socket-group GROUP]\n"
"             [--segment-bytes N] [--result-bytes N] [--sequence-digits N]\n"
"             [--ready-fd FD] [--log-file PATH | --syslog] [--log-level LEVEL]\n"
"             [--store URI | --store-file PATH] [--host-id NAME] [--lease-ms N]\n"
"             [--store-connections N]\n"
"\n"
"  --root DIR            FCoP workspace (env IDEM_ROOT; default %s)\n"
"  --socket PATH         Unix socket (default ROOT/%s)\n"
"  --workers N           worker processes (default %d, at most %d)\n"
"  --capacity N          submissions the table holds (default %d)\n"
"  --inflight-wait-ms N  how long an identical call waits (default %d)\n"
"  --max-connections N   open connections, all workers together (default %d)\n"
"  --max-connections-per-pid N\n"
"                        of them from one client process (default %d)\n"
"  --max-connections-per-uid N\n"
"                        of them from one user (default max-connections/%d)\n"
"  --idle-timeout-ms N   close a connection silent this long (default %d)\n"
"  --socket-mode MODE    the socket's permissions, octal (default %03o)\n"
"  --socket-group GROUP  the socket's group (to share it with a group)\n"
"  --segment-bytes N     start a journal segment and checkpoint the table\n"
"                        when a segment passes N bytes (default 64 MiB)\n"
"  --result-bytes N      memory caching effects' committed results, at least\n"
"                        65552 (default 8 bytes per --capacity slot, 4 to 64 MiB)\n"
"  --sequence-digits N   digits of a day's task and report numbers, %d to %d\n"
"                        (default %d, FCoP's: 999 a day)\n"
"  --ready-fd FD         write \"ready\\n\" to FD once serving\n"
"  --log-file PATH       log to PATH (reopened on SIGHUP) instead of stderr\n"
"  --syslog              log to syslog (facility daemon) instead of stderr\n"
"  --log-level LEVEL     error, warning, notice, info (default) or debug\n"
"  --store URI           local (default) or postgresql://...: several brokers\n"
"                        on one workspace (doc/cluster.md)\n"
"  --store-file PATH     the --store URI from PATH (mode 0600, ours or root's):\n"
"                        a password in it stays out of every command line\n"
"  --host-id NAME        this broker's name among them (with postgresql://)\n"
"  --lease-ms N          a creation's lease (default 30000)\n"
"  --store-connections N creations in flight per worker, and as many effect\n"
"                        ops, each on its own PostgreSQL connection\n"
"                        (default %d, at most %d)\n",
	    IDEM_DEFAULT_ROOT, IDEM_SOCKET_NAME, IDEM_DEFAULT_WORKERS,
	    IDEM_MAX_WORKERS, IDEM_DEFAULT_CAPACITY,
	    IDEM_DEFAULT_INFLIGHT_WAIT_MS, IDEM_DEFAULT_MAX_CONNECTIONS,
	    IDEM_DEFAULT_MAX_CONNECTIONS_PER_PID,
	    IDEM_DEFAULT_MAX_CONNECTIONS_PER_UID_DIVISOR,
	    IDEM_DEFAULT_IDLE_TIMEOUT_MS, IDEM_DEFAULT_SOCKET_MODE,
	    IDEM_MIN_SEQUENCE_DIGITS, IDEM_MAX_SEQUENCE_DIGITS,
	    IDEM_DEFAULT_SEQUENCE_DIGITS, IDEM_STORE_DEFAULT_CONNECTIONS,
	    IDEM_STORE_MAX_CONNECTIONS);
	exit(status);
}

static long
number_option(const char *name, const char *value, long min, long max)
{
	char	*end;
	long	 n;

	errno = 0;
	n = strtol(value, &end, 10);
	if (errno != 0 || *end != '\0' || end == value || n < min || n > max)
		fatalx("--%s must be a number from %ld to %ld", name, min, max);
	return n;
}

static unsigned
socket_mode_option(const char *value)
{
	char		*end;
	unsigned long	 mode;

	errno = 0;
	mode = strtoul(value, &end, 8);
	if (errno != 0 || *end != '\0' || end == value || mode > 0777 ||
	    (mode & 0600) != 0600)
		fatalx("--socket-mode must be octal permissions that include "
		    "0600 (the broker's own user), such as 0660");
	return (unsigned)mode;
}

/*
 * --store URI: the URI is kept (a copy), and its password overwritten
 * where it was given, in the command line itself, which any local user
 * can read in ps (as MySQL's client does).  It was there from the exec
 * until now: --store-file closes that window.  Workers get the URI from
 * the master through their notify socket (store_receive), never in
 * their own command line.
 */
static void
store_uri_option(struct idemd *d, char *value)
{
	free(d->store_arg);
	d->store_arg = NULL;
	if (strcmp(value, "local") == 0)
		return;
	if ((d->store_arg = strdup(value)) == NULL)
		fatal("strdup");
	storeuri_redact(value);
}

/* --store-file PATH (the master only: a worker is sent the URI). */
static void
store_file_option(struct idemd *d)
{
	char	*cause = NULL, *uri;

	if (d->store_file == NULL)
		return;
	if (d->store_arg != NULL)
		fatalx("--store and --store-file: choose one");
	if ((uri = storeuri_read_file(d->store_file, (unsigned)getuid(),
	    &cause)) == NULL)
		fatalx("%s", cause != NULL ? cause : strerror(errno));
	if (strcmp(uri, "local") == 0)
		free(uri);
	else
		d->store_arg = uri;
}

/* Exactly size bytes from fd (blocking); a worker's start-up. */
static void
store_read_full(int fd, void *buf, size_t size, long index)
{
	size_t	done = 0;
	ssize_t	n;

	while (done < size) {
		n = read(fd, (char *)buf + done, size - done);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			fatal("worker %ld: reading the store's URI", index);
		if (n == 0)
			fatalx("worker %ld: the master is gone", index);
		done += (size_t)n;
	}
}

/*
 * A worker's store URI: the master writes it on the worker's notify
 * socket before the fork, ahead of any wake-up (master_spawn), as a
 * 32-bit length (0: the local store) and the bytes.
 */
static void
store_receive(struct idemd *d, int fd, long index)
{
	uint32_t	length;

	free(d->store_arg);
	d->store_arg = NULL;
	store_read_full(fd, &length, sizeof length, index);
	if (length == 0)
		return;
	if (length > STOREURI_FILE_MAX)
		fatalx("worker %ld: a store URI of %u bytes from the master",
		    index, length);
	if ((d->store_arg = calloc(1, (size_t)length + 1)) == NULL)
		fatal("worker %ld", index);
	store_read_full(fd, d->store_arg, length, index);
}

/* What parse_options, the backend's configure and start-up allocated. */
static void
free_names(struct idemd *d)
{
	free(d->socket_path);
	free(d->root_real);
	free(d->segment_key);
	free(d->state_dir);
	free(d->lock_name);
	free(d->journal_name);
	free(d->socket_name);
	free(d->store_arg);
	free(d->argv_root);
}

static void
parse_options(struct idemd *d, int argc, char **argv)
{
	static const struct option options[] = {
		{ "root", required_argument, NULL, 'r' },
		{ "socket", required_argument, NULL, 's' },
		{ "workers", required_argument, NULL, 'w' },
		{ "capacity", required_argument, NULL, 'c' },
		{ "inflight-wait-ms", required_argument, NULL, 'i' },
		{ "max-connections", required_argument, NULL, 'm' },
		{ "max-connections-per-pid", required_argument, NULL, 'p' },
		{ "max-connections-per-uid", required_argument, NULL, 'u' },
		{ "ready-fd", required_argument, NULL, 'R' },
		{ "idle-timeout-ms", required_argument, NULL, 'I' },
		{ "socket-mode", required_argument, NULL, 'M' },
		{ "socket-group", required_argument, NULL, 'G' },
		{ "segment-bytes", required_argument, NULL, 'B' },
		{ "result-bytes", required_argument, NULL, 'E' },
		{ "sequence-digits", required_argument, NULL, 'D' },
		{ "log-file", required_argument, NULL, 'L' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "syslog", no_argument, NULL, 'S' },
		{ "store", required_argument, NULL, 'T' },
		{ "store-file", required_argument, NULL, 'F' },
		{ "host-id", required_argument, NULL, 'H' },
		{ "lease-ms", required_argument, NULL, 'A' },
		{ "store-connections", required_argument, NULL, 'C' },
		{ "worker", required_argument, NULL, 'W' },	/* master.c */
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 }
	};
	int	ch;

	d->root = getenv("IDEM_ROOT");
	if (d->root == NULL || *d->root == '\0')
		d->root = IDEM_DEFAULT_ROOT;
	d->worker_count = IDEM_DEFAULT_WORKERS;
	d->capacity = IDEM_DEFAULT_CAPACITY;
	d->result_bytes = 0;	/* from --capacity */
	d->inflight_wait_ms = IDEM_DEFAULT_INFLIGHT_WAIT_MS;
	d->max_connections = IDEM_DEFAULT_MAX_CONNECTIONS;
	d->max_connections_per_pid = IDEM_DEFAULT_MAX_CONNECTIONS_PER_PID;
	d->max_connections_per_uid = 0;		/* from max_connections */
	d->ready_fd = -1;
	d->watch_fd = -1;
	d->mounts_fd = -1;
	d->journal_dir_fd = -1;
	d->index_dir_fd = -1;
	d->idle_timeout_ms = IDEM_DEFAULT_IDLE_TIMEOUT_MS;
	d->socket_mode = IDEM_DEFAULT_SOCKET_MODE;
	d->segment_bytes = JOURNAL_DEFAULT_SEGMENT_BYTES;
	d->sequence_digits = IDEM_DEFAULT_SEQUENCE_DIGITS;
	d->store_connections = IDEM_STORE_DEFAULT_CONNECTIONS;
	while ((ch = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (ch) {
		case 'r':
			d->root = optarg;
			/*
			 * Where it is in argv ("--root DIR", or
			 * "--root=DIR"): a worker is given the resolved
			 * root instead (master.c), and ps shows it once.
			 */
			if (d->argv_root == NULL &&
			    (d->argv_root = calloc((size_t)argc, 1)) == NULL)
				fatal("--root");
			d->argv_root[optind - 1] = 1;
			if (optarg == argv[optind - 1] && optind >= 2)
				d->argv_root[optind - 2] = 1;
			break;
		case 's':
			d->socket_path = strdup(optarg);
			break;
		case 'w':
			d->worker_count = (unsigned)number_option("workers",
			    optarg, 1, IDEM_MAX_WORKERS);
			break;
		case 'c':
			d->capacity = (uint32_t)number_option("capacity",
			    optarg, 1, IDEM_MAX_CAPACITY);
			break;
		case 'i':
			d->inflight_wait_ms = (int)number_option(
			    "inflight-wait-ms", optarg, 0, 3600000);
			break;
		case 'm':
			d->max_connections = (int)number_option(
			    "max-connections", optarg, 1, 1000000);
			break;
		case 'p':
			d->max_connections_per_pid = (int)number_option(
			    "max-connections-per-pid", optarg, 1, 1000000);
			break;
		case 'u':
			d->max_connections_per_uid = (int)number_option(
			    "max-connections-per-uid", optarg, 1, 1000000);
			break;
		case 'R':
			d->ready_fd = (int)number_option("ready-fd", optarg, 0,
			    INT_MAX);
			break;
		case 'I':
			d->idle_timeout_ms = (int)number_option(
			    "idle-timeout-ms", optarg, 1, INT_MAX);
			break;
		case 'M':
			d->socket_mode = socket_mode_option(optarg);
			break;
		case 'G':
			d->socket_group = optarg;
			break;
		case 'B':
			d->segment_bytes = (uint64_t)number_option(
			    "segment-bytes", optarg, 4096, 1L << 40);
			break;
		case 'E':
			d->result_bytes = (uint64_t)number_option(
			    "result-bytes", optarg, 0, 1L << 40);
			/*
			 * The arena must hold one result of the largest size
			 * the ledger accepts: a smaller one would take
			 * results it then refuses for ever.
			 */
			if (d->result_bytes != 0 &&
			    d->result_bytes < SHM_ARENA_LEAST_BYTES)
				fatalx("--result-bytes must be 0 (the default) "
				    "or at least %d: one result of the largest "
				    "size an effect may commit (%d bytes) and "
				    "its %d-byte header", SHM_ARENA_LEAST_BYTES,
				    IDEM_MAX_EFFECT_RESULT_BYTES,
				    SHM_RING_RECORD_HEADER_BYTES);
			break;
		case 'D':
			d->sequence_digits = (unsigned)number_option(
			    "sequence-digits", optarg, IDEM_MIN_SEQUENCE_DIGITS,
			    IDEM_MAX_SEQUENCE_DIGITS);
			break;
		case 'L':
			d->log_file = optarg;
			break;
		case 'l':
			if (log_set_level(optarg) != 0)
				fatalx("--log-level must be error, warning, "
				    "notice, info or debug");
			break;
		case 'S':
			d->log_syslog = 1;
			break;
		case 'W':
			d->worker_handles = optarg;
			break;
		case 'T':
			store_uri_option(d, optarg);
			break;
		case 'F':
			d->store_file = optarg;
			break;
		case 'H':
			d->host_id = optarg;
			break;
		case 'A':
			d->lease_ms = (int)number_option("lease-ms", optarg,
			    IDEM_STORE_MIN_LEASE_MS, IDEM_STORE_MAX_LEASE_MS);
			break;
		case 'C':
			d->store_connections = (unsigned)number_option(
			    "store-connections", optarg, 1,
			    IDEM_STORE_MAX_CONNECTIONS);
			break;
		case 'h':
			usage(stdout, 0);
			break;
		case 'V':
			printf("idemd %s\n", PACKAGE_VERSION);
			exit(0);
		default:
			usage(stderr, 2);
		}
	}
	if (optind != argc)
		usage(stderr, 2);
	if (d->max_connections_per_uid == 0) {
		d->max_connections_per_uid = d->max_connections /
		    IDEM_DEFAULT_MAX_CONNECTIONS_PER_UID_DIVISOR;
		if (d->max_connections_per_uid < 1)
			d->max_connections_per_uid = 1;
	}
	if (d->log_file != NULL && d->log_syslog)
		fatalx("--log-file and --syslog: choose one");
	if (d->lease_ms == 0)
		d->lease_ms = IDEM_STORE_DEFAULT_LEASE_MS;
	/* backend_select once --store's text is known: main, run_worker. */
}

/* mkdir -p for the root itself; the topology below is taskfile.c's. */
static void
make_root(const char *root)
{
	char	*path, *p;

	if ((path = strdup(root)) == NULL)
		fatal("strdup");
	for (p = path + 1; *p != '\0'; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0755) == -1 && errno != EEXIST)
			fatal("mkdir %s", path);
		*p = '/';
	}
	if (mkdir(path, 0755) == -1 && errno != EEXIST)
		fatal("mkdir %s", path);
	free(path);
}

/*
 * The workspace's --sequence-digits, recorded (seqdigits.c) so that
 * idemctl verify uses it unasked.  Fewer digits than a file already has
 * is refused: the allocator would hand out numbers below the wider
 * ones, and FCoP readers order names by their text.  The disk is read
 * only when the digits shrink or were never recorded (an upgrade).
 */
static void
record_sequence_digits(struct idemd *d)
{
	char		 widest[NAME_MAX + 1], *cause;
	unsigned	 recorded, digits;

	if (seqdigits_read(d->root_fd, &recorded, &cause) == -1)
		fatalx("%s: %s", d->root_real, cause);
	if (recorded == d->sequence_digits)
		return;
	if (recorded == 0 || recorded > d->sequence_digits) {
		if (taskfile_scan_widest(d->root_fd, &digits, widest,
		    sizeof widest) == -1)
			fatal("%s: reading the names of its TASK and REPORT "
			    "files", d->root_real);
		if (digits > d->sequence_digits && recorded != 0)
			fatalx("%s: %s has a number of %u digits, more than "
			    "--sequence-digits %u allows: start idemd with "
			    "--sequence-digits %u (as it last ran) or at "
			    "least %u", d->root_real, widest, digits,
			    d->sequence_digits, recorded, digits);
		if (digits > d->sequence_digits)
			fatalx("%s: %s has a number of %u digits, more than "
			    "--sequence-digits %u allows: start idemd with "
			    "--sequence-digits %u or more", d->root_real,
			    widest, digits, d->sequence_digits, digits);
	}
	if (seqdigits_record(d->root_fd, d->sequence_digits, &cause) == -1)
		fatalx("%s: %s", d->root_real, cause);
}

/*
 * The lock is taken, by the master whose pid the file holds: if that
 * master is gone, its workers hold it (they inherit it so that no
 * broker starts while one of them still listens) and are dying with it
 * (PR_SET_PDEATHSIG): wait for them, as long as the socket's probe
 * waits for a listener on its way out.  1 once the lock is ours, 0 if
 * the master lives (or the file names none), -1 if its workers outlast
 * the wait.
 */
static int
lock_held_by_dead_master(struct idemd *d, const char *pid_text)
{
	const struct timespec	 pause = { 0, 10 * 1000000 };
	int64_t			 deadline;
	char			*end;
	long			 pid;

	errno = 0;
	pid = strtol(pid_text, &end, 10);
	if (errno != 0 || end == pid_text || *end != '\0' || pid <= 0 ||
	    pid > INT_MAX || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
		return 0;
	deadline = clock_monotonic_us() / 1000 + IDEM_SOCKET_PROBE_TIMEOUT_MS;
	while (clock_monotonic_us() / 1000 < deadline) {
		nanosleep(&pause, NULL);
		if (flock(d->lock_fd, LOCK_EX | LOCK_NB) == 0) {
			log_info("%s: the workers of idemd pid %ld, which "
			    "died, have exited", d->root_real, pid);
			return 1;
		}
		if (errno != EWOULDBLOCK)
			fatal("flock %s/%s", d->root_real, d->lock_name);
	}
	return -1;
}

/* One broker per root: flock the lock file, name the holder if taken. */
static void
lock_root(struct idemd *d)
{
	struct stat	st;
	char		buf[32];
	ssize_t		n;

	/* Never through a symlink (at .idem or at the lock itself). */
	d->lock_fd = nofollow_openat(d->root_fd, d->lock_name,
	    O_RDWR | O_CREAT, 0644);
	if (d->lock_fd == -1 && errno == ELOOP)
		fatalx("%s/%s is a symlink (or a directory on its way is); "
		    "idemd never follows one: remove it", d->root_real,
		    d->lock_name);
	if (d->lock_fd == -1)
		fatal("%s/%s", d->root_real, d->lock_name);
	if (fstat(d->lock_fd, &st) == -1)
		fatal("%s/%s", d->root_real, d->lock_name);
	if (!S_ISREG(st.st_mode))
		fatalx("%s/%s is not a regular file; remove it", d->root_real,
		    d->lock_name);
	if (flock(d->lock_fd, LOCK_EX | LOCK_NB) == -1) {
		if (errno != EWOULDBLOCK)
			fatal("flock %s/%s", d->root_real, d->lock_name);
		n = pread(d->lock_fd, buf, sizeof buf - 1, 0);
		buf[n > 0 ? n : 0] = '\0';
		buf[strcspn(buf, "\n")] = '\0';
		switch (lock_held_by_dead_master(d, buf)) {
		case 0:
			fatalx("%s is in use by another idemd (pid %s); one "
			    "broker per root", d->root_real,
			    buf[0] != '\0' ? buf : "unknown");
		case -1:
			fatalx("%s is held by the workers of idemd pid %s, "
			    "which died; they have not exited within %d ms",
			    d->root_real, buf, IDEM_SOCKET_PROBE_TIMEOUT_MS);
		}
	}
	/*
	 * Held: only now is the file ours to truncate, and only if no other
	 * name shares it (a hard link to another file, or a backup's): then
	 * the pid is not written, the lock works all the same.
	 */
	if (st.st_nlink != 1) {
		log_warnx("%s/%s has other hard links: not writing the pid "
		    "into it", d->root_real, d->lock_name);
		return;
	}
	n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
	if (ftruncate(d->lock_fd, 0) == -1 ||
	    pwrite(d->lock_fd, buf, (size_t)n, 0) != n)
		log_warn("writing the pid to %s", d->lock_name);
}

/*
 * A worker's own open file description of a directory it links into and
 * fsyncs (the inbox, the reports), in place of the master's it
 * inherited.  Linux reports a directory's writeback error once per open
 * file description (errseq), and a worker counts its failed fsyncs for
 * itself (dirsync.c, fileio.c): with the master's description shared by
 * every worker, one worker's failed fsync could take the error of
 * another's link, whose own later fsync then succeeds, and the link
 * would be committed although it may be lost.  Its own description
 * reports every error after it was opened to this worker, and an error
 * before that concerns no link of its own.
 *
 * Opened through the inherited descriptor (".": no path resolved, so no
 * symlink planted on the way and no directory put at the name since
 * start-up is followed): the directory the master and the other workers
 * hold, whatever became of its name (as the index is, test_trust's
 * test_state_dir_swapped_while_running).  Checked to be that directory
 * (device and inode): anything else is refused, not linked into.
 */
static int
worker_own_dir(int inherited, long index, const char *name)
{
	struct stat	held, own;
	int		fd;

	if ((fd = openat(inherited, ".", O_RDONLY | O_DIRECTORY |
	    O_NOFOLLOW | O_CLOEXEC)) == -1)
		fatal("worker %ld: opening %s", index, name);
	if (fstat(inherited, &held) == -1 || fstat(fd, &own) == -1)
		fatal("worker %ld: %s", index, name);
	if (held.st_dev != own.st_dev || held.st_ino != own.st_ino)
		fatalx("worker %ld: %s opened again is not the directory "
		    "idemd opened at start-up: refusing to link into it",
		    index, name);
	close(inherited);
	return fd;
}

/*
 * --worker PID,INDEX,GENERATION,NOTIFY,LISTEN,ROOT,INBOX,REPORTS,KICK,WATCH,
 * INDEXDIR,LOCK: this process is a worker the master (PID) forked and exec'd
 * (master.c), with the same options and those inherited handles (enum
 * worker_handle), and the store's URI, whose password its command line
 * does not hold, first on its notify socket.  It maps the master's
 * segment and serves until told to stop.
 */
static int
run_worker(struct idemd *d)
{
	const char	*p = d->worker_handles;
	char		*end, *cause = NULL, comm[16];
	long		 field[3 + WORKER_HANDLE_COUNT], master, index;
	int		 handle[WORKER_HANDLE_COUNT], status;
	unsigned	 i, last = 3 + WORKER_HANDLE_COUNT - 1;

	for (i = 0; i <= last; i++) {
		errno = 0;
		field[i] = strtol(p, &end, 10);
		if (errno != 0 || end == p || field[i] < -1 ||
		    field[i] > INT_MAX || *end != (i < last ? ',' : '\0'))
			fatalx("--worker is for idemd's own use");
		p = end + 1;
	}
	master = field[0];
	index = field[1];
	d->master_pid = (pid_t)master;
	for (i = 0; i < WORKER_HANDLE_COUNT; i++)
		handle[i] = (int)field[3 + i];
	/* Die with the master: a worker never outlives it. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* Its name in ps -e and top (15 bytes), not "exe". */
	snprintf(comm, sizeof comm, "idemd worker %ld", index);
	prctl(PR_SET_NAME, comm);
	if (getppid() != (pid_t)master)
		exit(1);
	d->listen_fd = handle[WORKER_HANDLE_LISTEN];
	d->root_fd = handle[WORKER_HANDLE_ROOT];
	/* Its own descriptions of them: worker_own_dir's errseq. */
	d->inbox_fd = worker_own_dir(handle[WORKER_HANDLE_INBOX], index,
	    IDEM_INBOX_DIR);
	d->reports_fd = worker_own_dir(handle[WORKER_HANDLE_REPORTS], index,
	    IDEM_REPORTS_DIR);
	handle[WORKER_HANDLE_INBOX] = d->inbox_fd;
	handle[WORKER_HANDLE_REPORTS] = d->reports_fd;
	d->kick_fd = handle[WORKER_HANDLE_KICK];
	d->watch_fd = handle[WORKER_HANDLE_WATCH];
	d->mounts_fd = handle[WORKER_HANDLE_MOUNTS];
	for (i = 0; i < WORKER_HANDLE_COUNT; i++) {
		if (handle[i] != -1 &&
		    fcntl(handle[i], F_SETFD, FD_CLOEXEC) == -1)
			fatal("worker %ld: inherited handle %d", index,
			    handle[i]);
	}
	d->index_dir_fd = handle[WORKER_HANDLE_INDEX];
	handle[WORKER_HANDLE_INDEX] = -1;	/* history_close's */
	/* First on the socket, ahead of any wake-up: the store's URI. */
	store_receive(d, handle[WORKER_HANDLE_NOTIFY], index);
	/* The master's checks, passed there: its texts, unprefixed. */
	if (backend_select(d, d->store_arg, &cause) != 0)
		fatalx("%s", cause);
	if (fcntl(handle[WORKER_HANDLE_NOTIFY], F_SETFL, O_NONBLOCK) == -1)
		fatal("worker %ld: notify socket", index);
	if ((d->root_real = strdup(d->root)) == NULL)
		fatal("strdup");
	if (paths_segment_key(d) != 0 ||
	    shm_attach(d->segment_key, &d->seg, &cause) != 0 ||
	    crash_init(&d->seg, (pid_t)master, &cause) != 0 ||
	    history_open(d, INDEX_READONLY, &cause) != 0)
		fatalx("worker %ld: %s", index, cause);
	history_warm_start(d);
	status = worker_main(d, (unsigned)index, (uint32_t)field[2],
	    handle[WORKER_HANDLE_NOTIFY], handle[WORKER_HANDLE_WAKE]);
	history_warm_stop();
	history_close(d);
	shm_detach(&d->seg);
	for (i = 0; i < WORKER_HANDLE_COUNT; i++) {
		if (handle[i] != -1)
			close(handle[i]);
	}
	free_names(d);
	return status;
}

/*
 * shm/ and the store log nothing themselves: what they have to say that
 * is not a failure (a lock repaired, a temporary file left, fault
 * injection armed) comes here, in every process of the broker.
 */
static void
shm_warned(const char *message)
{
	log_warnx("%s", message);
}

static void
store_noted(enum store_notice_level level, const char *message)
{
	if (level == STORE_NOTICE_WARNING)
		log_warnx("%s", message);
	else
		log_info("%s", message);
}

int
main(int argc, char **argv)
{
	struct idemd	 d;
	char		*cause = NULL;
	unsigned	 swept = 0;
	int		 status;
	sigset_t	 hup;

	log_init("idemd");
	shm_set_warn_hook(shm_warned);
	store_set_notice_hook(store_noted);
	memset(&d, 0, sizeof d);
	parse_options(&d, argc, argv);
	if (d.log_file != NULL && log_open_file(d.log_file, &cause) != 0)
		fatalx("%s", cause);
	if (d.log_syslog)
		log_use_syslog();
	d.argc = argc;
	d.argv = argv;
	if (sodium_init() < 0)
		fatalx("libsodium failed to initialise");
	signal(SIGPIPE, SIG_IGN);
	/*
	 * SIGHUP waits until the event loop handles it (master.c,
	 * worker.c): by default it would kill the process and leave the
	 * socket and the segment behind.
	 */
	sigemptyset(&hup);
	sigaddset(&hup, SIGHUP);
	sigprocmask(SIG_BLOCK, &hup, NULL);
	if (d.worker_handles != NULL)
		return run_worker(&d);
	d.master_pid = getpid();
	store_file_option(&d);
	if (backend_select(&d, d.store_arg, &cause) != 0)
		fatalx("%s", cause);
#ifndef IDEM_FAULT_INJECTION
	if (faultenv_refuse(environ, &cause) != 0)
		fatalx("%s", cause);
#endif

	make_root(d.root);
	if ((d.root_real = realpath(d.root, NULL)) == NULL)
		fatal("realpath %s", d.root);
	if ((d.root_fd = open(d.root_real, O_RDONLY | O_DIRECTORY |
	    O_CLOEXEC)) == -1)
		fatal("open %s", d.root_real);
	if (taskfile_make_topology(d.root_fd, &cause) != 0)
		fatalx("%s: %s", d.root_real, cause);
	if (paths_segment_key(&d) != 0)
		fatal("segment name");
	if (d.be->preflight != NULL && d.be->preflight(&d, &cause) != 0)
		fatalx("%s", cause);
	lock_root(&d);
	record_sequence_digits(&d);
	if (d.be->locked != NULL && d.be->locked(&d, &cause) != 0)
		fatalx("%s", cause);
	listener_activated(&d);
	listener_check(&d);
	/* make_topology refused symlinks; these are the same, held. */
	if ((d.inbox_fd = nofollow_dir(d.root_fd, IDEM_INBOX_DIR)) == -1)
		fatal("open %s/%s", d.root_real, IDEM_INBOX_DIR);
	/*
	 * Beside other brokers, a temporary may be a live owner's: only a
	 * takeover removes those (doc/cluster.md).
	 */
	if ((d.be->flags & BACKEND_SWEEPS_TEMPORARIES) &&
	    taskfile_sweep_temporaries(d.inbox_fd, &swept) != 0)
		fatal("sweeping %s/%s", d.root_real, IDEM_INBOX_DIR);
	if (swept > 0)
		log_info("removed %u temporary files a crash left in %s", swept,
		    IDEM_INBOX_DIR);
	if ((d.reports_fd = nofollow_dir(d.root_fd, IDEM_REPORTS_DIR)) == -1)
		fatal("open %s/%s", d.root_real, IDEM_REPORTS_DIR);
	if ((d.be->flags & BACKEND_SWEEPS_TEMPORARIES) &&
	    taskfile_sweep_temporaries(d.reports_fd, &swept) != 0)
		fatal("sweeping %s/%s", d.root_real, IDEM_REPORTS_DIR);

	if (state_open(&d, &cause) != 0)
		fatalx("%s", cause);
	if (crash_init(&d.seg, getpid(), &cause) != 0) {
		state_close(&d);	/* no segment left in /dev/shm */
		fatalx("%s", cause);
	}
	if ((d.kick_fd = eventfd(0, EFD_CLOEXEC)) == -1)
		fatal("eventfd");
	listener_open(&d);

	status = master_run(&d);

	listener_remove(&d);
	if (d.seg.header != NULL)
		state_close(&d);
	close(d.listen_fd);
	close(d.kick_fd);
	close(d.inbox_fd);
	close(d.reports_fd);
	close(d.root_fd);
	free_names(&d);
	log_notice("stopped");
	return status;
}
