/* SPDX-License-Identifier: ISC */
/*
 * bench_refs.c: the references idemd is measured against: the disk
 * limit, the floor, the socket limit, the SQLite peer, one 4 KiB append
 * + fdatasync, and the CPU cost of one retry's fixed steps.
 */
#include "bench.h"

/* ---- reference: the disk limit ---------------------------------------- */

struct disk_arg {
	char	dir[PATH_MAX];
};

static int
setup_disk(struct client *cl)
{
	const struct disk_arg	*a = cl->job->arg;

	if ((cl->dir_fd = open(a->dir, O_RDONLY | O_DIRECTORY |
	    O_CLOEXEC)) == -1) {
		client_error(cl, "%s: %s", a->dir, strerror(errno));
		return -1;
	}
	cl->buf = xcalloc(1, BENCH_DISK_FILE_BYTES);
	memset(cl->buf, 'd', BENCH_DISK_FILE_BYTES);
	return 0;
}

/* A new 1 KiB file made durable, and its name: nothing else. */
static int
op_disk(struct client *cl, size_t i)
{
	char	name[64];
	int	fd;

	snprintf(name, sizeof name, "f-%d-%zu", cl->index, i);
	fd = openat(cl->dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
	    0644);
	if (fd == -1 || write_all(fd, cl->buf, BENCH_DISK_FILE_BYTES) == -1 ||
	    fsync(fd) == -1 || close(fd) == -1 || fsync(cl->dir_fd) == -1) {
		cl->report->errors++;
		client_error(cl, "%s: %s", name, strerror(errno));
		return -1;
	}
	cl->report->created++;
	return 0;
}

void
run_disk(int clients, size_t total_ops)
{
	struct disk_arg	 a;
	struct result	*r = result_new("disk-limit", clients);
	struct job	 job;

	snprintf(a.dir, sizeof a.dir, "%s/disk-k%d", top, clients);
	if (mkdir(a.dir, 0755) == -1)
		err(1, "mkdir %s", a.dir);
	memset(&job, 0, sizeof job);
	job.clients = clients;
	job.ops = total_ops / (size_t)clients > 0 ? total_ops /
	    (size_t)clients : 1;
	job.setup = setup_disk;
	job.op = op_disk;
	job.arg = &a;
	run_job(&job, r);
}

/* ---- reference: the floor ---------------------------------------------- */

/*
 * The file-system work the contract needs and nothing else, in one
 * process: per batch of K creations, the reservations' append and
 * fdatasync overlapped with K temporary files written and fsync'd by K
 * threads, then K links (and the temporary names removed, as idemd
 * does), one directory fsync, and the commits' append and fdatasync.
 * No socket, no table, no JSON.  Every creation of a batch takes the
 * batch's time; the CPU is the process's own (getrusage: all threads).
 */
struct floor_run {
	int			 k;
	int			 dir_fd;
	int			 journal_fd;
	int			 stop;
	uint64_t		 batch;
	pthread_barrier_t	 start, done;
	char			 file[BENCH_FLOOR_FILE_BYTES];
	int			*failed;	/* per thread */
	char			*records;	/* k commit records' bytes */
};

struct floor_thread {
	struct floor_run	*run;
	int			 index;
};

static void *
floor_writer(void *arg)
{
	struct floor_thread	*t = arg;
	struct floor_run	*run = t->run;
	char			 name[64];
	int			 fd;

	for (;;) {
		pthread_barrier_wait(&run->start);
		if (run->stop)
			return NULL;
		snprintf(name, sizeof name, "tmp-%d", t->index);
		fd = openat(run->dir_fd, name, O_WRONLY | O_CREAT | O_EXCL |
		    O_CLOEXEC, 0644);
		if (fd == -1 || write_all(fd, run->file, sizeof run->file) ==
		    -1 || fsync(fd) == -1 || close(fd) == -1)
			run->failed[t->index] = errno != 0 ? errno : EIO;
		pthread_barrier_wait(&run->done);
	}
}

/* One append of k records and its fdatasync, as the journaler does. */
static int
floor_append(struct floor_run *run, size_t bytes)
{
	return write_all(run->journal_fd, run->records, (size_t)run->k *
	    bytes) == 0 && fdatasync(run->journal_fd) == 0 ? 0 : -1;
}

void
run_floor(int clients, size_t total_ops)
{
	struct result		*r = result_new("floor", clients);
	struct floor_run	 run;
	struct floor_thread	*threads;
	struct rusage		 ru0, ru1;
	pthread_t		*tids;
	uint64_t		*lat, t0, t, release;
	size_t			 batches, b, n = 0;
	char			 dir[PATH_MAX], from[64], to[64];
	int			 i, failed = 0;

	memset(&run, 0, sizeof run);
	run.k = clients;
	batches = total_ops / (size_t)clients > 0 ? total_ops /
	    (size_t)clients : 1;
	snprintf(dir, sizeof dir, "%s/floor-k%d", top, clients);
	if (mkdir(dir, 0755) == -1)
		err(1, "mkdir %s", dir);
	if ((run.dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) ==
	    -1 || (run.journal_fd = openat(run.dir_fd, "journal", O_WRONLY |
	    O_CREAT | O_APPEND | O_CLOEXEC, 0644)) == -1)
		err(1, "%s", dir);
	memset(run.file, 'f', sizeof run.file);
	run.records = xcalloc((size_t)clients, BENCH_FLOOR_COMMIT_BYTES);
	memset(run.records, 'j', (size_t)clients * BENCH_FLOOR_COMMIT_BYTES);
	run.failed = xcalloc((size_t)clients, sizeof *run.failed);
	lat = xcalloc(batches * (size_t)clients, sizeof *lat);
	threads = xcalloc((size_t)clients, sizeof *threads);
	tids = xcalloc((size_t)clients, sizeof *tids);
	if (pthread_barrier_init(&run.start, NULL, (unsigned)clients + 1) ||
	    pthread_barrier_init(&run.done, NULL, (unsigned)clients + 1))
		errx(1, "pthread_barrier_init");
	for (i = 0; i < clients; i++) {
		threads[i].run = &run;
		threads[i].index = i;
		if (pthread_create(&tids[i], NULL, floor_writer,
		    &threads[i]) != 0)
			errx(1, "pthread_create");
	}
	getrusage(RUSAGE_SELF, &ru0);
	release = now_ns();
	for (b = 0; b < batches && !failed; b++) {
		t0 = now_ns();
		pthread_barrier_wait(&run.start);
		if (floor_append(&run, BENCH_FLOOR_RESERVE_BYTES) != 0)
			failed = errno;
		pthread_barrier_wait(&run.done);
		for (i = 0; i < clients; i++) {
			if (run.failed[i] != 0)
				failed = run.failed[i];
			snprintf(from, sizeof from, "tmp-%d", i);
			snprintf(to, sizeof to, "TASK-%zu-%d.md", b, i);
			if (linkat(run.dir_fd, from, run.dir_fd, to, 0) == -1 ||
			    unlinkat(run.dir_fd, from, 0) == -1)
				failed = errno;
		}
		if (fsync(run.dir_fd) == -1 ||
		    floor_append(&run, BENCH_FLOOR_COMMIT_BYTES) != 0)
			failed = errno;
		t = now_ns() - t0;
		for (i = 0; i < clients; i++)
			lat[n++] = t;
	}
	t = now_ns();
	getrusage(RUSAGE_SELF, &ru1);
	run.stop = 1;
	pthread_barrier_wait(&run.start);
	for (i = 0; i < clients; i++)
		pthread_join(tids[i], NULL);
	pthread_barrier_destroy(&run.start);
	pthread_barrier_destroy(&run.done);
	close(run.journal_fd);
	close(run.dir_fd);

	qsort(lat, n, sizeof *lat, cmp_u64);
	r->ops = n;
	r->created = n;
	r->seconds = (double)(t - release) / 1e9;
	r->ops_per_s = (double)n / r->seconds;
	r->p50_ms = percentile_ms(lat, n, 0.50);
	r->p99_ms = percentile_ms(lat, n, 0.99);
	r->p999_ms = percentile_ms(lat, n, 0.999);
	if (n > 0) {
		r->cpu_us = ((double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec +
		    ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) * 1e6 +
		    (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec +
		    ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec)) / (double)n;
		r->csw = (double)(ru1.ru_nvcsw - ru0.ru_nvcsw + ru1.ru_nivcsw -
		    ru0.ru_nivcsw) / (double)n;
		result_note(r, "per creation: %.0f us CPU, %.1f context "
		    "switches; %zu batches of %d", r->cpu_us, r->csw, b,
		    clients);
	}
	if (failed) {
		r->failed = 1;
		result_note(r, "failed: %s", strerror(failed));
	}
	free(lat);
	free(threads);
	free(tids);
	free(run.failed);
	free(run.records);
}

/* ---- reference: the socket limit -------------------------------------- */

struct echo_conn {
	int	fd;
	size_t	length;
	char	buf[BENCH_ECHO_BUF_BYTES];
};

/*
 * socket-echo-json: the server answers every line with this reply (a
 * reused reply's shape and size) instead of the line itself.
 */
static char	*echo_reply;
static size_t	 echo_reply_length;

/* Echo every complete line back; 0, or -1 when the connection is done. */
static int
echo_read(struct echo_conn *ec)
{
	ssize_t	 n;
	char	*nl;
	size_t	 upto;

	n = read(ec->fd, ec->buf + ec->length, sizeof ec->buf - ec->length);
	if (n == -1 && errno == EINTR)
		return 0;
	if (n <= 0)
		return -1;
	ec->length += (size_t)n;
	if ((nl = memrchr(ec->buf, '\n', ec->length)) == NULL)
		return ec->length == sizeof ec->buf ? -1 : 0;
	upto = (size_t)(nl - ec->buf) + 1;
	if (echo_reply != NULL) {
		for (nl = ec->buf; (nl = memchr(nl, '\n', (size_t)(ec->buf +
		    upto - nl))) != NULL; nl++) {
			if (write_all(ec->fd, echo_reply, echo_reply_length) ==
			    -1)
				return -1;
		}
	} else if (write_all(ec->fd, ec->buf, upto) == -1)
		return -1;
	ec->length -= upto;
	memmove(ec->buf, ec->buf + upto, ec->length);
	return 0;
}

/* A poll() loop that does nothing but echo lines: the socket limit. */
static void __attribute__((noreturn))
echo_serve(int listen_fd)
{
	struct echo_conn	*conns;
	struct pollfd		*pfd;
	int			 count = 0, c, fd;

	die_with_parent(SIGKILL);
	conns = xcalloc(BENCH_ECHO_MAX_CONNS, sizeof *conns);
	pfd = xcalloc(BENCH_ECHO_MAX_CONNS + 1, sizeof *pfd);
	for (;;) {
		pfd[0].fd = listen_fd;
		pfd[0].events = POLLIN;
		for (c = 0; c < count; c++) {
			pfd[c + 1].fd = conns[c].fd;
			pfd[c + 1].events = POLLIN;
		}
		if (poll(pfd, (nfds_t)count + 1, -1) == -1) {
			if (errno == EINTR)
				continue;
			_exit(1);
		}
		/* Backwards: a closed one is replaced by one already seen. */
		for (c = count - 1; c >= 0; c--) {
			if (pfd[c + 1].revents == 0)
				continue;
			if (echo_read(&conns[c]) == -1) {
				close(conns[c].fd);
				conns[c] = conns[--count];
			}
		}
		if (!(pfd[0].revents & POLLIN))
			continue;
		/* Non-blocking listener: the other echo process may win. */
		while ((fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC)) !=
		    -1) {
			if (count == BENCH_ECHO_MAX_CONNS) {
				close(fd);
				continue;
			}
			conns[count].fd = fd;
			conns[count].length = 0;
			count++;
		}
	}
}

static int
setup_echo(struct client *cl)
{
	if (client_connect(cl) != 0)
		return -1;
	cl->buf = xcalloc(1, BENCH_ECHO_LINE_BYTES);
	memset(cl->buf, 'e', BENCH_ECHO_LINE_BYTES - 1);
	return 0;
}

/*
 * socket-echo-json's client: a request line of reuse's size, and the
 * reply parsed with jansson and checked, as reuse's clients do.
 */
static int
setup_echo_json(struct client *cl)
{
	char	csid[160];

	if (client_connect(cl) != 0)
		return -1;
	snprintf(csid, sizeof csid, "%s-echo-json-0", id_prefix);
	cl->buf = task_line(csid, 0, 0);
	return 0;
}

static int
op_echo_json(struct client *cl, size_t i)
{
	struct idem_error	 e;
	char			*answer, task_id[BENCH_TASK_ID_BYTES], why[160];

	if (idem_call_raw(cl->conn, cl->buf, &answer, &e) != 0) {
		cl->report->errors++;
		client_error(cl, "echo %zu: %s", i, e.message);
		return -1;
	}
	if (classify(answer, task_id, sizeof task_id, why, sizeof why) !=
	    OUTCOME_REUSED)
		cl->report->unexpected++;
	free(answer);
	return 0;
}

/* The same client path as idemd's requests: idem_call_raw. */
static int
op_echo(struct client *cl, size_t i)
{
	struct idem_error	 e;
	char			*answer;

	if (idem_call_raw(cl->conn, cl->buf, &answer, &e) != 0) {
		cl->report->errors++;
		client_error(cl, "echo %zu: %s", i, e.message);
		return -1;
	}
	if (strlen(answer) != BENCH_ECHO_LINE_BYTES - 1)
		cl->report->unexpected++;
	free(answer);
	return 0;
}

/*
 * As many echo processes as idemd has workers, sharing one listening
 * socket as idemd's workers do, so the two are compared like for like.
 */
void
run_echo(int clients, size_t total_ops, int json)
{
	struct sockaddr_un	 sun;
	struct result		*r = result_new(json ? "socket-echo-json" :
				    "socket-echo", clients);
	struct job		 job;
	pid_t			 pids[IDEM_DEFAULT_WORKERS];
	char			 path[PATH_MAX];
	int			 fd, i, status;

	snprintf(path, sizeof path, "%s/echo%s-k%d.sock", top, json ? "j" : "",
	    clients);
	free(echo_reply);
	echo_reply = NULL;
	/* A reused reply as idemd sends it, of the same size. */
	if (json && asprintf(&echo_reply, "{\"ok\":true,\"id\":0,"
	    "\"disposition\":\"reused\",\"action_taken\":false,"
	    "\"idempotent\":true,\"receipt\":{\"client_submission_id\":"
	    "\"%s-echo-json-0\",\"task_id\":\"TASK-20261203-000001-PM-to-DEV\","
	    "\"task_path\":\"_lifecycle/inbox/TASK-20261203-000001-PM-to-DEV.md\","
	    "\"digest_schema\":\"write-task-v1\",\"request_digest\":\"%064d\","
	    "\"file_digest\":\"%064d\",\"state\":\"committed\","
	    "\"created_at\":\"2026-12-03T09:00:00.000Z\"}}\n", id_prefix, 0, 0)
	    == -1)
		err(1, "asprintf");
	echo_reply_length = echo_reply != NULL ? strlen(echo_reply) : 0;
	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof sun.sun_path) {
		r->failed = 1;
		result_note(r, "socket path %s too long", path);
		return;
	}
	strcpy(sun.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1 || bind(fd, (struct sockaddr *)&sun, sizeof sun) == -1 ||
	    listen(fd, 1024) == -1)
		err(1, "echo socket %s", path);
	fflush(NULL);
	for (i = 0; i < IDEM_DEFAULT_WORKERS; i++) {
		if ((pids[i] = fork()) == -1)
			err(1, "fork");
		if (pids[i] == 0)
			echo_serve(fd);
	}
	close(fd);

	memset(&job, 0, sizeof job);
	job.clients = clients;
	job.ops = total_ops / (size_t)clients > 0 ? total_ops /
	    (size_t)clients : 1;
	job.setup = json ? setup_echo_json : setup_echo;
	job.op = json ? op_echo_json : op_echo;
	job.cleanup = client_disconnect;
	job.socket = path;
	run_job(&job, r);
	if (r->unexpected > 0) {
		r->failed = 1;
		result_note(r, "%" PRIu64 " wrong echoes", r->unexpected);
	}
	for (i = 0; i < IDEM_DEFAULT_WORKERS; i++) {
		kill(pids[i], SIGTERM);
		waitpid(pids[i], &status, 0);
	}
}

/* ---- reference: the SQLite peer --------------------------------------- */

#ifdef HAVE_SQLITE
struct sqlite_arg {
	char		dir[PATH_MAX];
	char		db[PATH_MAX + 16];
	char		inbox[PATH_MAX + 16];
	char		tag[96];
	uint32_t	date;
	size_t		created;	/* ids the create pass made: tag-0.. */
};

static int
sql_fail(struct client *cl, const char *what)
{
	cl->report->errors++;
	client_error(cl, "sqlite %s: %s", what, sqlite3_errmsg(cl->db));
	return -1;
}

static int
sql_prepare(struct client *cl, const char *sql, sqlite3_stmt **stmt)
{
	if (sqlite3_prepare_v2(cl->db, sql, -1, stmt, NULL) != SQLITE_OK)
		return sql_fail(cl, sql);
	return 0;
}

/* Run a statement without results (BEGIN, COMMIT, ROLLBACK). */
static int
sql_run(sqlite3_stmt *stmt)
{
	int	rc = sqlite3_step(stmt);

	sqlite3_reset(stmt);
	return rc == SQLITE_DONE ? 0 : -1;
}

static int
setup_sqlite(struct client *cl)
{
	const struct sqlite_arg	*a = cl->job->arg;
	char			*msg = NULL;

	if (sqlite3_open_v2(a->db, &cl->db, SQLITE_OPEN_READWRITE, NULL) !=
	    SQLITE_OK)
		return sql_fail(cl, "open");
	/* Waiting for the write lock is part of what the peer costs. */
	sqlite3_busy_timeout(cl->db, 60000);
	if (sqlite3_exec(cl->db, "PRAGMA synchronous=FULL", NULL, NULL,
	    &msg) != SQLITE_OK) {
		sqlite3_free(msg);
		return sql_fail(cl, "PRAGMA synchronous=FULL");
	}
	if (sql_prepare(cl, "BEGIN IMMEDIATE", &cl->begin) != 0 ||
	    sql_prepare(cl, "SELECT digest, task_id FROM submission WHERE "
	    "id = ?1", &cl->lookup) != 0 ||
	    sql_prepare(cl, "SELECT ifnull(max(rowid), 0) FROM submission",
	    &cl->maxseq) != 0 ||
	    sql_prepare(cl, "INSERT INTO submission (id, digest, task_id, "
	    "file_digest) VALUES (?1, ?2, ?3, ?4)", &cl->insert) != 0 ||
	    sql_prepare(cl, "COMMIT", &cl->commit) != 0 ||
	    sql_prepare(cl, "ROLLBACK", &cl->rollback) != 0)
		return -1;
	if ((cl->dir_fd = open(a->inbox, O_RDONLY | O_DIRECTORY |
	    O_CLOEXEC)) == -1) {
		client_error(cl, "%s: %s", a->inbox, strerror(errno));
		return -1;
	}
	return 0;
}

static void
cleanup_sqlite(struct client *cl)
{
	sqlite3_finalize(cl->begin);
	sqlite3_finalize(cl->lookup);
	sqlite3_finalize(cl->maxseq);
	sqlite3_finalize(cl->insert);
	sqlite3_finalize(cl->commit);
	sqlite3_finalize(cl->rollback);
	sqlite3_close(cl->db);
}

/*
 * The peer's creation: the same digest, number, TASK file and file
 * digest as idemd, with SQLite as the table and its write lock as the
 * per-id exclusion.  The file is written while the lock is held, as it
 * must be for the lookup to mean anything.
 */
static int
op_sqlite_create(struct client *cl, size_t i)
{
	const struct sqlite_arg	*a = cl->job->arg;
	struct taskfile_task	 tf;
	struct bench_task	 bt;
	unsigned char		 sum[crypto_hash_sha256_BYTES];
	char			 csid[160], digest[IDEM_DIGEST_HEX_SIZE];
	char			 task_id[BENCH_TASK_ID_BYTES], name[128];
	char			 created_at[TASKFILE_TIME_BYTES];
	char			 file_hex[IDEM_DIGEST_HEX_SIZE];
	char			*bytes = NULL, *cause = NULL;
	size_t			 length;
	int64_t			 seq;
	int			 rc;

	snprintf(csid, sizeof csid, "%s-%zu", a->tag,
	    (size_t)cl->index * cl->job->ops + i);
	bench_task(&bt, csid, 0);
	if (idem_task_digest(&bt.task, digest) != 0) {
		cl->report->errors++;
		client_error(cl, "digest: %s", strerror(errno));
		return -1;
	}
	if (sql_run(cl->begin) != 0)
		return sql_fail(cl, "BEGIN IMMEDIATE");
	sqlite3_bind_text(cl->lookup, 1, csid, -1, SQLITE_STATIC);
	rc = sqlite3_step(cl->lookup);
	sqlite3_reset(cl->lookup);
	if (rc == SQLITE_ROW) {
		cl->report->unexpected++;
		sql_run(cl->rollback);
		return 0;
	}
	if (rc != SQLITE_DONE || sqlite3_step(cl->maxseq) != SQLITE_ROW) {
		sqlite3_reset(cl->maxseq);
		sql_fail(cl, "lookup");
		goto fail;
	}
	seq = sqlite3_column_int64(cl->maxseq, 0) + 1;
	sqlite3_reset(cl->maxseq);

	taskfile_format_id(SUBTAB_KIND_TASK, a->date, (uint32_t)seq, "PM", 2,
	    "DEV", 3, task_id, sizeof task_id);
	taskfile_format_time(wall_ms(), created_at);
	memset(&tf, 0, sizeof tf);
	tf.task_id = task_id;
	tf.task = &bt.task;
	tf.created_at = created_at;
	tf.client_submission_id = csid;
	tf.request_digest = digest;
	if (taskfile_render_task(&tf, &bytes, &length) != 0) {
		cl->report->errors++;
		client_error(cl, "render: %s", strerror(errno));
		goto fail;
	}
	crypto_hash_sha256(sum, (const unsigned char *)bytes, length);
	sodium_bin2hex(file_hex, sizeof file_hex, sum, sizeof sum);
	snprintf(name, sizeof name, "%s.md", task_id);
	if (taskfile_write_durable(cl->dir_fd, name, bytes, length, 0,
	    &cause) != 0) {
		cl->report->errors++;
		client_error(cl, "%s", cause != NULL ? cause : "write");
		free(cause);
		goto fail;
	}
	free(bytes);
	bytes = NULL;
	sqlite3_bind_text(cl->insert, 1, csid, -1, SQLITE_STATIC);
	sqlite3_bind_text(cl->insert, 2, digest, -1, SQLITE_STATIC);
	sqlite3_bind_text(cl->insert, 3, task_id, -1, SQLITE_STATIC);
	sqlite3_bind_text(cl->insert, 4, file_hex, -1, SQLITE_STATIC);
	rc = sqlite3_step(cl->insert);
	sqlite3_reset(cl->insert);
	if (rc != SQLITE_DONE) {
		sql_fail(cl, "INSERT");
		goto fail;
	}
	if (sql_run(cl->commit) != 0) {
		sql_fail(cl, "COMMIT");
		goto fail;
	}
	cl->report->created++;
	return 0;

fail:
	free(bytes);
	sql_run(cl->rollback);
	return -1;
}

/* The peer's retry: the digest, one lookup, compare, return. */
static int
op_sqlite_retry(struct client *cl, size_t i)
{
	const struct sqlite_arg	*a = cl->job->arg;
	struct bench_task	 bt;
	const unsigned char	*stored;
	char			 csid[160], digest[IDEM_DIGEST_HEX_SIZE];
	size_t			 g;
	int			 rc;

	g = ((size_t)cl->index * (a->created / (size_t)cl->job->clients) +
	    i) % a->created;
	snprintf(csid, sizeof csid, "%s-%zu", a->tag, g);
	bench_task(&bt, csid, 0);
	if (idem_task_digest(&bt.task, digest) != 0) {
		cl->report->errors++;
		client_error(cl, "digest: %s", strerror(errno));
		return -1;
	}
	sqlite3_bind_text(cl->lookup, 1, csid, -1, SQLITE_STATIC);
	rc = sqlite3_step(cl->lookup);
	stored = rc == SQLITE_ROW ? sqlite3_column_text(cl->lookup, 0) : NULL;
	if (stored != NULL && strcmp((const char *)stored, digest) == 0)
		cl->report->reused++;
	else if (rc == SQLITE_ROW || rc == SQLITE_DONE)
		cl->report->unexpected++;
	else {
		sqlite3_reset(cl->lookup);
		return sql_fail(cl, "lookup");
	}
	sqlite3_reset(cl->lookup);
	return 0;
}

static int
sqlite_make(struct sqlite_arg *a)
{
	sqlite3	*db;
	char	*msg = NULL;
	int	 rc;

	if (mkdir(a->dir, 0755) == -1 || mkdir(a->inbox, 0755) == -1) {
		warn("mkdir %s", a->dir);
		return -1;
	}
	if (sqlite3_open(a->db, &db) != SQLITE_OK) {
		warnx("sqlite %s: %s", a->db, sqlite3_errmsg(db));
		sqlite3_close(db);
		return -1;
	}
	rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE "
	    "submission (id TEXT PRIMARY KEY, digest TEXT NOT NULL, "
	    "task_id TEXT NOT NULL, file_digest TEXT NOT NULL)", NULL, NULL,
	    &msg);
	if (rc != SQLITE_OK)
		warnx("sqlite %s: %s", a->db, msg);
	sqlite3_free(msg);
	sqlite3_close(db);
	return rc == SQLITE_OK ? 0 : -1;
}
#endif

/* Create at K, then retries of those ids at the same K. */
void
run_sqlite(int clients, size_t create_ops, size_t retry_ops)
{
	struct result		*rc = result_new("sqlite-create", clients);
	struct result		*rr = result_new("sqlite-retry", clients);
#ifdef HAVE_SQLITE
	struct sqlite_arg	 a;
	struct job		 job;

	memset(&a, 0, sizeof a);
	snprintf(a.dir, sizeof a.dir, "%s/sqlite-k%d", top, clients);
	snprintf(a.db, sizeof a.db, "%s/peer.db", a.dir);
	snprintf(a.inbox, sizeof a.inbox, "%s/inbox", a.dir);
	snprintf(a.tag, sizeof a.tag, "%s-sqlite-k%d", id_prefix, clients);
	a.date = taskfile_date_of(wall_ms());
	if (sqlite_make(&a) != 0) {
		rc->failed = rr->failed = 1;
		result_note(rc, "could not create %s", a.db);
		return;
	}
	memset(&job, 0, sizeof job);
	job.clients = clients;
	job.ops = create_ops / (size_t)clients > 0 ? create_ops /
	    (size_t)clients : 1;
	job.setup = setup_sqlite;
	job.op = op_sqlite_create;
	job.cleanup = cleanup_sqlite;
	job.arg = &a;
	run_job(&job, rc);
	if (rc->unexpected > 0 || rc->errors > 0)
		rc->failed = 1;
	a.created = (size_t)clients * job.ops;

	job.ops = retry_ops / (size_t)clients > 0 ? retry_ops /
	    (size_t)clients : 1;
	job.op = op_sqlite_retry;
	run_job(&job, rr);
	if (rr->unexpected > 0 || rr->errors > 0) {
		rr->failed = 1;
		result_note(rr, "%" PRIu64 " retries found no matching row",
		    rr->unexpected);
	}
#else
	(void)create_ops;
	(void)retry_ops;
	rc->skipped = rr->skipped = 1;
	result_note(rc, "skipped: built without libsqlite3");
	result_note(rr, "skipped: built without libsqlite3");
#endif
}

/* ---- reference: one 4 KiB append + fdatasync --------------------------- */

/*
 * Taken next to each client count's create run, so the p99 target
 * compares latencies of the same minutes: the disk's latency drifts a
 * lot with what else the machine does.
 */
void
run_fsync_probe(int clients)
{
	struct result	*r = result_new("fdatasync-4k", clients);
	uint64_t	 lat[BENCH_FSYNC_PROBES], t, start;
	char		 path[PATH_MAX], buf[BENCH_FSYNC_PROBE_BYTES];
	size_t		 i;
	int		 fd;

	snprintf(path, sizeof path, "%s/fsync-probe-k%d", top, clients);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC,
	    0644);
	if (fd == -1)
		err(1, "%s", path);
	memset(buf, 'f', sizeof buf);
	start = now_ns();
	for (i = 0; i < BENCH_FSYNC_PROBES; i++) {
		t = now_ns();
		if (write_all(fd, buf, sizeof buf) == -1 || fdatasync(fd) == -1)
			err(1, "%s", path);
		lat[i] = now_ns() - t;
	}
	r->seconds = (double)(now_ns() - start) / 1e9;
	close(fd);
	qsort(lat, BENCH_FSYNC_PROBES, sizeof lat[0], cmp_u64);
	r->ops = BENCH_FSYNC_PROBES;
	r->ops_per_s = (double)r->ops / r->seconds;
	r->p50_ms = percentile_ms(lat, BENCH_FSYNC_PROBES, 0.5);
	r->p99_ms = percentile_ms(lat, BENCH_FSYNC_PROBES, 0.99);
	r->p999_ms = percentile_ms(lat, BENCH_FSYNC_PROBES, 0.999);
	result_note(r, "one 4 KiB append + fdatasync at a time, taken before "
	    "create at this K");
}

/* ---- the CPU cost of one retry's fixed steps ----------------------------- */

enum cost_step {
	COST_PARSE,		/* the broker parses the request line */
	COST_DIGEST,		/* normalize, canonical form, SHA-256 */
	COST_SHA256,		/* SHA-256 alone, of the request line's size */
	COST_REPLY,		/* the broker serializes the reply */
	COST_CLIENT,		/* the client parses the reply */
	COST_STEPS
};

static const char *const cost_names[COST_STEPS] = {
	"cost-parse", "cost-digest", "cost-sha256", "cost-reply",
	"cost-client"
};

/*
 * What a reuse round trip must compute whatever its design: the work a
 * retry does besides moving bytes, with the libraries idem is built on,
 * timed in this process one step at a time on the reuse scenario's own
 * request line.  Its sum over two CPUs bounds any broker's retry rate,
 * which is what the reuse targets are measured against.
 */
void
run_cost(void)
{
	struct bench_task	 bt;
	struct result		*r;
	char			 hex[IDEM_DIGEST_HEX_SIZE], csid[96];
	char			*line, *reply_text;
	unsigned char		 sum[crypto_hash_sha256_BYTES];
	json_t			*reply, *parsed;
	uint64_t		 start;
	double			 us[COST_STEPS], total = 0;
	size_t			 length, i;
	int			 step;

	snprintf(csid, sizeof csid, "%s-cost-000001", id_prefix);
	bench_task(&bt, csid, 0);
	line = task_line(csid, 0, 1);
	length = strlen(line);
	reply = json_pack("{s:b, s:I, s:s, s:b, s:b, s:{s:s, s:s, s:s, s:s, "
	    "s:s, s:s, s:s, s:s}}", "ok", 1, "id", (json_int_t)1,
	    "disposition", "reused", "action_taken", 0, "idempotent", 1,
	    "receipt", "client_submission_id", csid, "task_id",
	    "TASK-20261202-007-PM-to-DEV", "task_path",
	    "_lifecycle/inbox/TASK-20261202-007-PM-to-DEV.md",
	    "digest_schema", "write-task-v1", "request_digest",
	    "8d2c0a8e3a4c6f1b0c1d2e3f405162738495a6b7c8d9eaf0b1c2d3e4f5a6b7c8",
	    "file_digest",
	    "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0",
	    "state", "committed", "created_at", "2026-12-02T12:00:00.123Z");
	if (reply == NULL || (reply_text = json_dumps(reply,
	    JSON_COMPACT | JSON_PRESERVE_ORDER)) == NULL)
		errx(1, "building a reply: out of memory");
	for (step = 0; step < COST_STEPS; step++) {
		start = now_ns();
		for (i = 0; i < BENCH_COST_ROUNDS; i++) {
			switch (step) {
			case COST_PARSE:
				parsed = json_loadb(line, length,
				    JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL |
				    JSON_DECODE_ANY, NULL);
				if (parsed == NULL)
					errx(1, "cost: the request line "
					    "does not parse");
				json_decref(parsed);
				break;
			case COST_DIGEST:
				if (idem_task_digest(&bt.task, hex) != 0)
					err(1, "cost: idem_task_digest");
				break;
			case COST_SHA256:
				crypto_hash_sha256(sum,
				    (const unsigned char *)line, length);
				break;
			case COST_REPLY:
				free(json_dumps(reply,
				    JSON_COMPACT | JSON_PRESERVE_ORDER));
				break;
			case COST_CLIENT:
				json_decref(json_loads(reply_text, 0, NULL));
				break;
			}
		}
		r = result_new(cost_names[step], 1);
		r->ops = BENCH_COST_ROUNDS;
		r->seconds = (double)(now_ns() - start) / 1e9;
		r->ops_per_s = (double)r->ops / r->seconds;
		us[step] = r->seconds / (double)r->ops * 1e6;
		if (step != COST_SHA256)
			total += us[step];
		result_note(r, "%.2f us each (%zu-byte request, %zu-byte "
		    "reply)", us[step], length, strlen(reply_text));
	}
	/* The ceiling: every CPU doing nothing but these steps. */
	r = result_new("cost-retry", 1);
	r->ops_per_s = 1e6 / total * (double)sysconf(_SC_NPROCESSORS_ONLN);
	result_note(r, "parse + digest + reply + client parse: %.1f us a "
	    "retry; ops/s is the most %ld CPUs could do with no system call "
	    "at all", total, sysconf(_SC_NPROCESSORS_ONLN));
	free(reply_text);
	json_decref(reply);
	free(line);
}
