/* SPDX-License-Identifier: ISC */
/*
 * main.c: idemd start-up.  Options, the root and its lock, the segment
 * filled by replaying the journal, the listening socket; then the master
 * takes over (master.c).  Everything that can fail at start-up fails here,
 * before any worker exists, with a message that says what to do.  A
 * worker is this same program run with --worker (run_worker): it maps
 * the segment and serves with the handles the master left it.
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
#include "pg.h"
#include "workspace_id.h"

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
"  --result-bytes N      memory caching effects' committed results (default\n"
"                        8 bytes per --capacity slot, 4 to 64 MiB)\n"
"  --sequence-digits N   digits of a day's task and report numbers, %d to %d\n"
"                        (default %d, FCoP's: 999 a day)\n"
"  --ready-fd FD         write \"ready\\n\" to FD once serving\n"
"  --log-file PATH       log to PATH (reopened on SIGHUP) instead of stderr\n"
"  --syslog              log to syslog (facility daemon) instead of stderr\n"
"  --log-level LEVEL     error, warning, notice, info (default) or debug\n"
"  --store URI           local (default) or postgresql://...: several brokers\n"
"                        on one workspace (doc/cluster.md)\n"
"  --host-id NAME        this broker's name among them (with postgresql://)\n"
"  --lease-ms N          a creation's lease (default 30000)\n"
"  --store-connections N creations in flight per worker, each on its own\n"
"                        PostgreSQL connection (default %d, at most %d)\n",
	    IDEM_DEFAULT_ROOT, IDEM_SOCKET_NAME, IDEM_DEFAULT_WORKERS,
	    IDEM_MAX_WORKERS, IDEM_DEFAULT_CAPACITY,
	    IDEM_DEFAULT_INFLIGHT_WAIT_MS, IDEM_DEFAULT_MAX_CONNECTIONS,
	    IDEM_DEFAULT_MAX_CONNECTIONS_PER_PID,
	    IDEM_DEFAULT_MAX_CONNECTIONS_PER_UID_DIVISOR,
	    IDEM_DEFAULT_IDLE_TIMEOUT_MS, IDEM_DEFAULT_SOCKET_MODE,
	    IDEM_MIN_SEQUENCE_DIGITS, IDEM_MAX_SEQUENCE_DIGITS,
	    IDEM_DEFAULT_SEQUENCE_DIGITS, PGSTORE_DEFAULT_CONNECTIONS,
	    PGSTORE_MAX_CONNECTIONS);
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
 * --store, --host-id, --lease-ms, and where this broker's own state is:
 * .idem/ for the local store; .idem/hosts/<host-id>/ when several
 * brokers share the workspace through PostgreSQL (doc/cluster.md).
 */
static void
store_options(struct idemd *d)
{
	if (d->lease_ms == 0)
		d->lease_ms = PGSTORE_DEFAULT_LEASE_MS;
	if (d->store_uri == NULL) {
		if (d->host_id != NULL)
			fatalx("--host-id is for --store postgresql://...");
		d->state_dir = strdup(IDEM_STATE_DIR);
		d->lock_name = strdup(IDEM_LOCK_NAME);
		d->journal_name = strdup(IDEM_JOURNAL_DIR);
		d->socket_name = strdup(IDEM_SOCKET_NAME);
		if (d->state_dir == NULL || d->lock_name == NULL ||
		    d->journal_name == NULL || d->socket_name == NULL)
			fatal("strdup");
		return;
	}
	if (strncmp(d->store_uri, "postgresql://", 13) != 0 &&
	    strncmp(d->store_uri, "postgres://", 11) != 0)
		fatalx("--store must be local or postgresql://...");
#ifndef HAVE_POSTGRESQL
	fatalx("--store %s: this idemd was built without PostgreSQL; "
	    "configure --with-postgresql (Debian: apt-get install libpq-dev) "
	    "and build again", "postgresql://...");
#else
	if (d->host_id == NULL)
		fatalx("--store postgresql://... needs --host-id NAME, unique "
		    "among the brokers of the workspace");
	if (!pgstore_host_id_valid(d->host_id))
		fatalx("--host-id: 1 to %d characters of A-Z a-z 0-9 . _ -",
		    PGSTORE_MAX_HOST_ID_BYTES);
	if (asprintf(&d->state_dir, "%s/hosts/%s", IDEM_STATE_DIR,
	    d->host_id) == -1 ||
	    asprintf(&d->lock_name, "%s/idemd.lock", d->state_dir) == -1 ||
	    asprintf(&d->journal_name, "%s/journal", d->state_dir) == -1 ||
	    asprintf(&d->socket_name, "%s/idemd.sock", d->state_dir) == -1)
		fatal("asprintf");
#endif
}

int
idemd_journal_dir(const struct idemd *d, char *out, size_t out_size)
{
	if (d->store_uri == NULL)
		return store_journal_dir(d->root_real, out, out_size);
	if ((size_t)snprintf(out, out_size, "%s/%s", d->root_real,
	    d->journal_name) >= out_size) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

int
idemd_index_dir(const struct idemd *d, char *out, size_t out_size)
{
	if ((size_t)snprintf(out, out_size, "%s/%s/index", d->root_real,
	    d->state_dir) >= out_size) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

int64_t
idemd_monotonic_us(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* What parse_options, store_options and start-up allocated, at exit. */
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
}

/* The shared-memory segment's name: per root, and per host in a cluster. */
static int
set_segment_key(struct idemd *d)
{
	free(d->segment_key);
	if (d->store_uri == NULL)
		d->segment_key = strdup(d->root_real);
	else if (asprintf(&d->segment_key, "%s/%s", d->root_real,
	    d->state_dir) == -1)
		d->segment_key = NULL;
	return d->segment_key != NULL ? 0 : -1;
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
	d->idle_timeout_ms = IDEM_DEFAULT_IDLE_TIMEOUT_MS;
	d->socket_mode = IDEM_DEFAULT_SOCKET_MODE;
	d->segment_bytes = JOURNAL_DEFAULT_SEGMENT_BYTES;
	d->sequence_digits = IDEM_DEFAULT_SEQUENCE_DIGITS;
	d->store_connections = PGSTORE_DEFAULT_CONNECTIONS;
	while ((ch = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (ch) {
		case 'r':
			d->root = optarg;
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
			d->store_uri = strcmp(optarg, "local") == 0 ? NULL :
			    optarg;
			break;
		case 'H':
			d->host_id = optarg;
			break;
		case 'A':
			d->lease_ms = (int)number_option("lease-ms", optarg,
			    PGSTORE_MIN_LEASE_MS, PGSTORE_MAX_LEASE_MS);
			break;
		case 'C':
			d->store_connections = (unsigned)number_option(
			    "store-connections", optarg, 1,
			    PGSTORE_MAX_CONNECTIONS);
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
	store_options(d);
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
		fatalx("%s is in use by another idemd (pid %s); one broker "
		    "per root", d->root_real, buf[0] != '\0' ? buf : "unknown");
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

int
idemd_scan_max_seq(enum subtab_kind kind, uint32_t date, uint32_t *max_seq,
    void *arg)
{
	struct idemd	*d = arg;

	return taskfile_scan_max_seq(d->root_fd, kind, date, max_seq);
}

/*
 * Submissions that did not fit in the table during the replay, each
 * once (a JSON object used as a set), and their key bytes: so that a
 * --capacity too small for the journal is refused with the capacity
 * that fits, not at the first record that does not.
 */
static json_t	*replay_overflow;
static uint64_t	 replay_overflow_bytes;

static int
replay_overflowed(const struct journal_record *r)
{
	if (replay_overflow == NULL &&
	    (replay_overflow = json_object()) == NULL)
		return -1;
	if (json_object_getn(replay_overflow, r->key,
	    r->entry.key_length) != NULL)
		return 0;
	if (json_object_setn_new(replay_overflow, r->key, r->entry.key_length,
	    json_true()) != 0)
		return -1;
	replay_overflow_bytes += r->entry.key_length;
	return 0;
}

/*
 * The index at start-up: whether it holds every committed entry of the
 * checkpoint being loaded (then one that does not fit in the table is
 * left to it), and the committed entries of the journal that do not fit,
 * given to it in one transaction committed before the broker serves.
 */
static struct {
	int		covers;
	int		loading_checkpoint;
	int		writing;
	uint64_t	put;
	uint64_t	skipped;
} replay_index;

/* A committed entry with no room in the table: the index keeps it. */
static int
replay_to_index(struct idemd *d, const struct journal_record *r)
{
	char	*cause = NULL;

	if (replay_index.loading_checkpoint && replay_index.covers) {
		replay_index.skipped++;
		return 0;
	}
	if (!replay_index.writing) {
		if (index_begin(&d->index, &cause) != 0)
			goto fail;
		replay_index.writing = 1;
	}
	if (index_put(&d->index, INDEX_FULL, r, &cause) != 0)
		goto fail;
	replay_index.put++;
	return 0;
fail:
	log_warnx("replay: %s", cause != NULL ? cause : "index");
	free(cause);
	return -1;
}

/*
 * No room for a submission in flight: give the index every committed
 * entry of the table it lacks (the start-up transaction, committed
 * before the broker serves), which makes them evictable.  0 if that
 * made some, 1 if there were none, -1 on error.
 */
static int
replay_make_room(struct idemd *d)
{
	struct subtab_entry	*entries;
	char			(*keys)[SUBTAB_MAX_KEY_BYTES];
	uint32_t		*flags, *slots = NULL, from = 0, n, i;
	struct journal_record	 record;
	uint8_t			*result = NULL;
	size_t			 count = 0;
	char			*cause = NULL;
	int			 rc = -1;

	entries = calloc(1024, sizeof *entries);
	keys = calloc(1024, sizeof *keys);
	flags = calloc(1024, sizeof *flags);
	slots = calloc(d->seg.header->slots_used + 1, sizeof *slots);
	result = malloc(IDEM_MAX_EFFECT_RESULT_BYTES);
	if (entries == NULL || keys == NULL || flags == NULL || slots == NULL ||
	    result == NULL)
		goto out;
	if (!replay_index.writing) {
		if (index_begin(&d->index, &cause) != 0)
			goto out;
		replay_index.writing = 1;
	}
	while ((n = subtab_copy_flags(&d->seg, from, 1024, entries, keys,
	    flags)) > 0) {
		for (i = 0; i < n; i++) {
			if (entries[i].state != SUBTAB_COMMITTED ||
			    (flags[i] & SUBTAB_SLOT_INDEXED))
				continue;
			memset(&record, 0, sizeof record);
			record.type = entries[i].kind == SUBTAB_KIND_EFFECT ?
			    JOURNAL_RECORD_EFFECT : JOURNAL_RECORD_ENTRY;
			record.entry = entries[i];
			memcpy(record.key, keys[i], entries[i].key_length);
			/* Not indexed: the arena keeps its bytes. */
			record.result = result;
			if (record.type == JOURNAL_RECORD_EFFECT &&
			    arena_read(&d->seg, entries[i].result_offset,
			    entries[i].result_length, result) != 0)
				goto out;
			if (index_put(&d->index, INDEX_FULL, &record,
			    &cause) != 0)
				goto out;
			slots[count++] = from + i;
			replay_index.put++;
		}
		from += n;
	}
	subtab_mark_indexed(&d->seg, slots, count);
	rc = count > 0 ? 0 : 1;
out:
	if (rc < 0)
		log_warnx("replay: making room: %s", cause != NULL ? cause :
		    "out of memory");
	free(cause);
	free(entries);
	free(keys);
	free(flags);
	free(slots);
	free(result);
	return rc;
}

/*
 * Put an effect's result into the arena (no slot names it yet).  The
 * arena reuses the bytes of indexed entries only: when the oldest are of
 * committed entries not yet indexed, those are marked indexed if they
 * come from a checkpoint the index covers (they are there already), else
 * go to the index (the start-up transaction), and the arena tries again.
 */
static int
replay_arena_put(struct idemd *d, const struct journal_record *r,
    uint64_t *offset)
{
	if (arena_put_unlocked(&d->seg, ARENA_NO_SLOT, r->result,
	    r->entry.result_length, offset) == 0)
		return 0;
	if (errno == ENOSPC && replay_index.loading_checkpoint &&
	    replay_index.covers) {
		subtab_mark_all_indexed(&d->seg);
		if (arena_put_unlocked(&d->seg, ARENA_NO_SLOT, r->result,
		    r->entry.result_length, offset) == 0)
			return 0;
	}
	if (errno == ENOSPC && d->index_ready && replay_make_room(d) == 0 &&
	    arena_put_unlocked(&d->seg, ARENA_NO_SLOT, r->result,
	    r->entry.result_length, offset) == 0)
		return 0;
	log_warnx("replay: the result arena (%llu bytes) has no room for a "
	    "result of %u bytes; restart with a larger --result-bytes",
	    (unsigned long long)d->seg.header->arena_bytes,
	    r->entry.result_length);
	return -1;
}

static int
replay_apply(const struct journal_record *r, void *arg)
{
	struct idemd		*d = arg;
	struct subtab_entry	 effect;
	const struct subtab_entry *e = &r->entry;
	uint32_t		 slot;

	if (r->type == JOURNAL_RECORD_EFFECT) {
		/* Its result goes to the arena; the slot names it there. */
		effect = r->entry;
		effect.result_offset = 0;
		if (effect.result_length > 0 &&
		    replay_arena_put(d, r, &effect.result_offset) != 0)
			return -1;
		e = &effect;
	} else
		seqalloc_note_used(&d->seg, r->entry.kind, r->entry.date,
		    r->entry.seq);
	if (r->entry.key_length == 0)
		return 0;	/* legacy: only its number matters */
	if (subtab_apply_slot(&d->seg, r->key, r->entry.key_length,
	    r->hint != 0 ? (uint32_t)r->hint : subtab_prefetch(&d->seg, r->key,
	    r->entry.key_length), e, &slot) != 0) {
		/* A committed entry with no room: the index's (its result
		 * left in the arena, named by no slot, reusable). */
		if (errno == ENOSPC && d->index_ready &&
		    r->entry.state == SUBTAB_COMMITTED)
			return replay_to_index(d, r);
		/* In flight: room is made by giving the index the rest. */
		if (errno == ENOSPC && d->index_ready &&
		    replay_make_room(d) == 0 &&
		    subtab_apply_slot(&d->seg, r->key, r->entry.key_length,
		    subtab_prefetch(&d->seg, r->key, r->entry.key_length), e,
		    &slot) == 0)
			goto applied;
		if (errno == ENOSPC && replay_overflowed(r) == 0)
			return 0;	/* counted; refused after the replay */
		log_warn("replay: submission table (capacity %u)",
		    d->capacity);
		return -1;
	}
applied:
	if (r->type == JOURNAL_RECORD_EFFECT && effect.result_length > 0)
		arena_own(&d->seg, effect.result_offset, slot);
	return 0;
}

/* The journal needs more than --capacity: say how much is needed. */
static int
replay_check_capacity(struct idemd *d, char **cause)
{
	struct shm_header	*h = d->seg.header;
	uint64_t		 keys, bytes, needed, by_heap;

	if (replay_overflow == NULL)
		return 0;
	keys = h->slots_used + json_object_size(replay_overflow);
	bytes = h->heap_used + replay_overflow_bytes;
	needed = keys;
	/* Key space is SHM_HEAP_BYTES_PER_SLOT a slot, plus one key. */
	if (bytes > SUBTAB_MAX_KEY_BYTES) {
		by_heap = (bytes - SUBTAB_MAX_KEY_BYTES +
		    SHM_HEAP_BYTES_PER_SLOT - 1) / SHM_HEAP_BYTES_PER_SLOT;
		if (by_heap > needed)
			needed = by_heap;
	}
	asprintf(cause, "the journal holds %llu submissions in flight or "
	    "not yet committed, more than --capacity %u holds: restart with "
	    "--capacity %llu or more (the journal keeps every one of them)",
	    (unsigned long long)keys, d->capacity,
	    (unsigned long long)needed);
	json_decref(replay_overflow);
	replay_overflow = NULL;
	replay_overflow_bytes = 0;
	return -1;
}

/*
 * A few records ahead of replay_apply: fetch the record's bucket, and
 * keep the key's hash in the record so that apply does not hash again.
 */
/*
 * The checkpoint is loaded (store_load goes on with the journal): if the
 * index covers it, its committed entries in the table are evictable.
 */
static void
replay_checkpoint_done(struct idemd *d)
{
	if (!replay_index.loading_checkpoint)
		return;
	replay_index.loading_checkpoint = 0;
	if (replay_index.covers)
		subtab_mark_all_indexed(&d->seg);
}

static void
replay_hint(struct journal_record *r, void *arg)
{
	struct idemd	*d = arg;

	/* The first hint comes after the checkpoint's last record. */
	replay_checkpoint_done(d);

	if (r->entry.key_length > 0 &&
	    r->entry.key_length <= SUBTAB_MAX_KEY_BYTES)
		r->hint = (uint64_t)1 << 32 | subtab_prefetch(&d->seg, r->key,
		    r->entry.key_length);
}

/*
 * Open the index, or rebuild it when it is missing or damaged: the
 * checkpoint and the journal hold every committed entry unless some
 * lived only in the index (the checkpoint says how many).  Then the
 * index cannot be rebuilt, and start-up stops rather than forget them:
 * a retry of a forgotten id would execute again.
 */
static int
open_index(struct idemd *d, const char *journal_dir, char **cause)
{
	struct index_stats	 st;
	struct stat		 jst;
	char			 idir[PATH_MAX], aside[PATH_MAX + 32];
	char			 first[PATH_MAX + 32];
	char			*why = NULL;
	uint64_t		 segment, index_only;
	int			 existed, damaged = 0;

	memset(&replay_index, 0, sizeof replay_index);
	if (idemd_index_dir(d, idir, sizeof idir) != 0) {
		*cause = strdup("the index's path is too long");
		return -1;
	}
	if (checkpoint_index_only(journal_dir, &segment, &index_only,
	    cause) != 0)
		return -1;
	existed = index_exists(idir);
	if (existed && (history_open(d, 0, &why) != 0 ||
	    index_stats(&d->index, &st) != 0)) {
		/* index.c: EINVAL is damage or another format. */
		if (d->index_ready || errno == EINVAL) {
			damaged = 1;
		} else {
			*cause = why;
			return -1;
		}
		if (d->index_ready)
			index_close(&d->index);
		d->index_ready = 0;
		snprintf(aside, sizeof aside, "%s.damaged-%lld", idir,
		    (long long)shm_now_ms());
		if (rename(idir, aside) != 0) {
			asprintf(cause, "index %s is damaged (%s) and cannot "
			    "be moved aside: %s", idir, why != NULL ? why :
			    "unreadable", strerror(errno));
			free(why);
			return -1;
		}
		log_warnx("index %s is damaged (%s): moved to %s", idir,
		    why != NULL ? why : "unreadable", aside);
		free(why);
		why = NULL;
		existed = 0;
	}
	if (!existed && index_only > 0) {
		asprintf(cause, "the index %s is %s, and %llu committed "
		    "receipts were kept only there (the checkpoint and the "
		    "journal no longer hold them): restore it from a backup. "
		    "idemd will not start without them, since a retry of one "
		    "of those ids would execute again", idir,
		    damaged ? "damaged" : "missing",
		    (unsigned long long)index_only);
		return -1;
	}
	/* A root with a journal had an index: say it is being rebuilt. */
	snprintf(first, sizeof first, "%s/%016llx.jnl", journal_dir, 1ULL);
	if (!existed && (segment != 0 || stat(first, &jst) == 0))
		log_warnx("index %s is %s: rebuilding it from the checkpoint "
		    "and the journal, which hold every committed receipt",
		    idir, damaged ? "damaged" : "missing");
	if (!d->index_ready && history_open(d, 0, cause) != 0)
		return -1;
	if (index_stats(&d->index, &st) != 0) {
		asprintf(cause, "index %s: unreadable after open", idir);
		return -1;
	}
	replay_index.covers = segment != 0 && st.checkpoint >= segment;
	return 0;
}

/* What replay cut or removed (the store reports it; idemd says it). */
static void
replay_warn_torn(const char *dir, const struct journal_replay_stats *st)
{
	if (st->torn_segment == 0)
		return;
	if (st->torn_stub)
		log_warnx("journal %s/%016llx.jnl: segment of %llu bytes was "
		    "shorter than its header (its creation was interrupted): "
		    "removed", dir, (unsigned long long)st->torn_segment,
		    (unsigned long long)st->truncated_bytes);
	else
		log_warnx("journal %s/%016llx.jnl: torn tail at offset %llu "
		    "(%s): cut %llu bytes of an append that never completed",
		    dir, (unsigned long long)st->torn_segment,
		    (unsigned long long)st->torn_offset, st->torn_why,
		    (unsigned long long)st->truncated_bytes);
}

int
idemd_open_state(struct idemd *d, char **cause)
{
	struct store_loaded	 loaded;
	struct shm_prefault	 prefault;
	char			 dir[PATH_MAX];
	int64_t			 started = shm_now_ms();
	int			 digit, loaded_rv;

	if (idemd_journal_dir(d, dir, sizeof dir) != 0) {
		asprintf(cause, "%s: the journal's path is too long",
		    d->root_real);
		return -1;
	}
	if (shm_create_sized(d->segment_key, d->capacity, d->result_bytes,
	    &d->seg, cause) != 0)
		return -1;
	d->seg.header->worker_count = d->worker_count;
	for (digit = 0, d->seg.header->alloc_max_seq = 1;
	    digit < (int)d->sequence_digits; digit++)
		d->seg.header->alloc_max_seq *= 10;
	d->seg.header->alloc_max_seq -= 1;	/* 999 for three digits */
	if (open_index(d, dir, cause) != 0)
		goto fail;
	replay_index.loading_checkpoint = 1;
	/* The table's pages mapped on the other CPU while the replay runs. */
	if (shm_prefault_start(&prefault, &d->seg) != 0)
		log_debug("state: the table is not mapped ahead: %s",
		    strerror(prefault.error));
	loaded_rv = store_load(dir, 0, replay_apply, replay_hint, d, &d->seg,
	    &loaded, cause);
	shm_prefault_stop(&prefault);
	if (prefault.error != 0 && prefault.error != ENOSYS)
		log_debug("state: mapping the table ahead stopped: %s",
		    strerror(prefault.error));
	if (loaded_rv != 0)
		goto fail;
	replay_checkpoint_done(d);
	replay_warn_torn(dir, &loaded.stats);
	if (replay_check_capacity(d, cause) != 0)
		goto fail;
	if (replay_index.writing) {
		replay_index.writing = 0;
		if (index_commit(&d->index, 0, cause) != 0)
			goto fail;
	}
	if (replay_index.put + replay_index.skipped > 0)
		log_info("state: %llu committed submissions left to the index "
		    "(%llu given to it now): the table (--capacity %u) holds "
		    "the rest", (unsigned long long)(replay_index.put +
		    replay_index.skipped), (unsigned long long)replay_index.put,
		    d->capacity);
	if (journal_open(&d->journal, dir, cause) != 0)
		goto fail;
	checkpoint_prune(dir, loaded.checkpoint);
	log_info("state: %llu submissions from the checkpoint, then %llu "
	    "records (%llu bytes, %u segments), in %lld ms (%llu MiB of the "
	    "table mapped ahead)",
	    (unsigned long long)loaded.checkpoint_records,
	    (unsigned long long)loaded.stats.records,
	    (unsigned long long)loaded.stats.bytes, loaded.stats.segments,
	    (long long)(shm_now_ms() - started),
	    (unsigned long long)(atomic_load(&prefault.bytes) >> 20));
	return 0;
fail:
	json_decref(replay_overflow);
	replay_overflow = NULL;
	replay_overflow_bytes = 0;
	if (d->index_ready) {
		index_close(&d->index);
		d->index_ready = 0;
	}
	shm_destroy(&d->seg);
	return -1;
}

void
idemd_close_state(struct idemd *d)
{
	if (d->index_ready) {
		index_close(&d->index);
		d->index_ready = 0;
	}
	journal_close(&d->journal);
	shm_destroy(&d->seg);
}

/*
 * --worker PID,INDEX,GENERATION,NOTIFY,LISTEN,ROOT,INBOX,REPORTS,KICK,WATCH:
 * this process is a worker the master (PID) forked and exec'd
 * (master.c), with the same options and those inherited handles (enum
 * worker_handle).  It maps the master's segment and serves until told
 * to stop.
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
	d->inbox_fd = handle[WORKER_HANDLE_INBOX];
	d->reports_fd = handle[WORKER_HANDLE_REPORTS];
	d->kick_fd = handle[WORKER_HANDLE_KICK];
	d->watch_fd = handle[WORKER_HANDLE_WATCH];
	for (i = 0; i < WORKER_HANDLE_COUNT; i++) {
		if (handle[i] != -1 &&
		    fcntl(handle[i], F_SETFD, FD_CLOEXEC) == -1)
			fatal("worker %ld: inherited handle %d", index,
			    handle[i]);
	}
	if (fcntl(handle[WORKER_HANDLE_NOTIFY], F_SETFL, O_NONBLOCK) == -1)
		fatal("worker %ld: notify socket", index);
	if ((d->root_real = strdup(d->root)) == NULL)
		fatal("strdup");
	if (set_segment_key(d) != 0 ||
	    shm_attach(d->segment_key, &d->seg, &cause) != 0 ||
	    crash_init(&d->seg, (pid_t)master, &cause) != 0 ||
	    history_open(d, INDEX_READONLY, &cause) != 0)
		fatalx("worker %ld: %s", index, cause);
	history_warm_start(d);
	status = worker_main(d, (unsigned)index, (uint32_t)field[2],
	    handle[WORKER_HANDLE_NOTIFY]);
	history_warm_stop();
	index_close(&d->index);
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
	if (set_segment_key(&d) != 0)
		fatal("segment name");
	if (d.store_uri != NULL && cluster_check(&d, &cause) != 0)
		fatalx("%s", cause);
	lock_root(&d);
	if (d.store_uri == NULL && workspace_imported(d.root_fd) != 0)
		fatalx("%s: its history was imported into a PostgreSQL store "
		    "(%s): serve it with --store URI; a local idemd would "
		    "answer from a history the store no longer writes",
		    d.root_real, WORKSPACE_IMPORTED_NAME);
	listener_check(&d);
	/* make_topology refused symlinks; these are the same, held. */
	if ((d.inbox_fd = nofollow_dir(d.root_fd, IDEM_INBOX_DIR)) == -1)
		fatal("open %s/%s", d.root_real, IDEM_INBOX_DIR);
	/*
	 * Beside other brokers, a temporary may be a live owner's: only a
	 * takeover removes those (doc/cluster.md).
	 */
	if (d.store_uri == NULL &&
	    taskfile_sweep_temporaries(d.inbox_fd, &swept) != 0)
		fatal("sweeping %s/%s", d.root_real, IDEM_INBOX_DIR);
	if (swept > 0)
		log_info("removed %u temporary files a crash left in %s", swept,
		    IDEM_INBOX_DIR);
	if ((d.reports_fd = nofollow_dir(d.root_fd, IDEM_REPORTS_DIR)) == -1)
		fatal("open %s/%s", d.root_real, IDEM_REPORTS_DIR);
	if (d.store_uri == NULL &&
	    taskfile_sweep_temporaries(d.reports_fd, &swept) != 0)
		fatal("sweeping %s/%s", d.root_real, IDEM_REPORTS_DIR);

	if (idemd_open_state(&d, &cause) != 0)
		fatalx("%s", cause);
	if (crash_init(&d.seg, getpid(), &cause) != 0) {
		idemd_close_state(&d);	/* no segment left in /dev/shm */
		fatalx("%s", cause);
	}
	if ((d.kick_fd = eventfd(0, EFD_CLOEXEC)) == -1)
		fatal("eventfd");
	listener_open(&d);

	status = master_run(&d);

	unlink(d.socket_path);
	if (d.seg.header != NULL)
		idemd_close_state(&d);
	close(d.listen_fd);
	close(d.kick_fd);
	close(d.inbox_fd);
	close(d.reports_fd);
	close(d.root_fd);
	free_names(&d);
	log_notice("stopped");
	return status;
}
