/* SPDX-License-Identifier: ISC */
/*
 * bench_effects.c: effects against Redis (issue #33): a private durable
 * redis-server, its clients in RESP, and idemd's effects beside it.
 */
#include "bench.h"

/* ---- effects, against Redis (issue #33) -------------------------------- */

/*
 * An effect is effect_begin + effect_complete, two durable writes; the
 * store a user would pick instead is Redis made durable (appendonly,
 * appendfsync always: each write's fdatasync before the reply, shared
 * by the writes of one event-loop turn) driven the way AWS Powertools'
 * idempotency utility drives it: SET key request NX PX lease to
 * reserve, SET key result XX to commit, GET to find a committed one.
 * Both sides get the same jobs (K processes, one connection each), the
 * same keys (the kind and the client's submission id), the same
 * request and result bytes, and clients that build their requests at
 * run time and check every reply.  idemd is called through libidem's
 * idem_effect_begin and idem_effect_complete, as a C caller calls it
 * (they write the line and decode the answer); Redis is spoken to in
 * RESP directly over its Unix socket, formatted with snprintf; a GET's
 * value and a reused effect's result are parsed with jansson alike.
 */
#define BENCH_EFFECT_KIND		"bench.effect/v1"
#define BENCH_EFFECT_REQUEST_BYTES	256	/* the request's JSON text */
#define BENCH_EFFECT_RESULT_BYTES	512	/* the result's JSON text */
#define BENCH_EFFECT_LEASE_MS		"30000"	/* Redis's PX, as text */
#define BENCH_EFFECT_LEASE		30000	/* effect_begin's lease_ms */
#define BENCH_EFFECT_LINE_BYTES		4096
#define BENCH_REDIS_BUF_BYTES		4096
#define BENCH_REDIS_START_MS		30000

struct redis {
	pid_t	pid;
	char	dir[PATH_MAX];
	char	socket[PATH_MAX + 16];
	char	log[PATH_MAX + 16];
};

/* $IDEM_REDIS_SERVER, else redis-server on $PATH; NULL: none. */
static const char *
redis_server_path(void)
{
	static char	 path[PATH_MAX];
	const char	*env = getenv("IDEM_REDIS_SERVER"), *p, *end;
	size_t		 n;

	if (env != NULL && *env != '\0')
		return access(env, X_OK) == 0 ? env : NULL;
	if ((p = getenv("PATH")) == NULL || *p == '\0')
		p = "/usr/local/bin:/usr/bin:/bin";
	for (; *p != '\0'; p = *end == ':' ? end + 1 : end) {
		if ((end = strchr(p, ':')) == NULL)
			end = p + strlen(p);
		n = (size_t)(end - p);
		if (n == 0 || (int)n > (int)sizeof path - 16)
			continue;
		snprintf(path, sizeof path, "%.*s/redis-server", (int)n, p);
		if (access(path, X_OK) == 0)
			return path;
	}
	return NULL;
}

/*
 * A private redis-server in dir: no TCP port, a Unix socket, AOF with
 * an fdatasync before every reply, no RDB snapshot and no AOF rewrite
 * (neither forks during a run).  Ready when it says READY=1 on a
 * notify socket of ours (--supervised systemd), not after a sleep.
 * NULL, or why not.
 */
static const char *
redis_start(struct redis *rs, const char *server, const char *dir)
{
	struct sockaddr_un	 sun;
	struct pollfd		 pfd;
	char			 notify[PATH_MAX + 16], msg[512];
	const char		*argv[40];
	int64_t			 deadline;
	ssize_t			 got;
	int			 fd, nfd, n = 0, ready = 0;

	memset(rs, 0, sizeof *rs);
	snprintf(rs->dir, sizeof rs->dir, "%s", dir);
	snprintf(rs->socket, sizeof rs->socket, "%s/redis.sock", dir);
	snprintf(rs->log, sizeof rs->log, "%s/redis.log", dir);
	snprintf(notify, sizeof notify, "%s/notify.sock", dir);
	if (mkdir(dir, 0700) == -1 && errno != EEXIST)
		return "cannot make the server's directory";
	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	if (strlen(notify) >= sizeof sun.sun_path)
		return "the bench's directory is too long for a socket";
	snprintf(sun.sun_path, sizeof sun.sun_path, "%s", notify);
	if ((nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) == -1 ||
	    bind(nfd, (struct sockaddr *)&sun, sizeof sun) == -1)
		err(1, "notify socket %s", notify);
	argv[n++] = server;
	argv[n++] = "--port";
	argv[n++] = "0";
	argv[n++] = "--unixsocket";
	argv[n++] = rs->socket;
	argv[n++] = "--unixsocketperm";
	argv[n++] = "700";
	argv[n++] = "--dir";
	argv[n++] = dir;
	argv[n++] = "--appendonly";
	argv[n++] = "yes";
	argv[n++] = "--appendfsync";
	argv[n++] = "always";
	argv[n++] = "--save";
	argv[n++] = "";
	argv[n++] = "--auto-aof-rewrite-percentage";
	argv[n++] = "0";
	argv[n++] = "--daemonize";
	argv[n++] = "no";
	argv[n++] = "--supervised";
	argv[n++] = "systemd";
	argv[n] = NULL;

	fflush(NULL);
	if ((rs->pid = fork()) == -1)
		err(1, "fork");
	if (rs->pid == 0) {
		die_with_parent(SIGTERM);
		if ((fd = open(rs->log, O_WRONLY | O_CREAT | O_APPEND |
		    O_CLOEXEC, 0644)) != -1) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		if ((fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) != -1)
			dup2(fd, 0);
		setenv("NOTIFY_SOCKET", notify, 1);
		execv(server, (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", server, strerror(errno));
		_exit(127);
	}
	deadline = wall_ms() + BENCH_REDIS_START_MS;
	pfd.fd = nfd;
	pfd.events = POLLIN;
	while (!ready && wall_ms() < deadline &&
	    poll(&pfd, 1, (int)(deadline - wall_ms())) == 1) {
		if ((got = recv(nfd, msg, sizeof msg - 1, 0)) <= 0)
			break;
		msg[got] = '\0';
		ready = strstr(msg, "READY=1") != NULL;
	}
	close(nfd);
	if (ready)
		return NULL;
	kill(rs->pid, SIGKILL);
	waitpid(rs->pid, NULL, 0);
	rs->pid = 0;
	print_log_tail(rs->log);
	return "redis-server did not become ready (see its log)";
}

/* SIGTERM (Redis fsyncs its AOF and exits), waited for by a pidfd. */
static int
redis_stop(struct redis *rs)
{
	struct pollfd	pfd;
	int		status, rv = 0;

	if (rs->pid == 0)
		return 0;
	pfd.fd = (int)syscall(SYS_pidfd_open, rs->pid, 0);
	pfd.events = POLLIN;
	kill(rs->pid, SIGTERM);
	if (pfd.fd != -1) {
		if (poll(&pfd, 1, BENCH_STOP_TIMEOUT_MS) == 0) {
			kill(rs->pid, SIGKILL);
			rv = -1;
		}
		close(pfd.fd);
	}
	while (waitpid(rs->pid, &status, 0) == -1) {
		if (errno != EINTR)
			err(1, "waitpid");
	}
	if (rv == 0 && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
		rv = -1;
	if (rv != 0)
		print_log_tail(rs->log);
	rs->pid = 0;
	return rv;
}

/* JSON text of exactly size bytes: {"id":"<csid>","data":"<filler>"}. */
static void
effect_json(char *out, size_t size, const char *csid)
{
	size_t	n, k;
	int	w;

	w = snprintf(out, size + 1, "{\"id\":\"%s\",\"data\":\"", csid);
	n = w < 0 ? 0 : (size_t)w;
	if (n + 2 > size)
		errx(1, "effect_json: %zu bytes cannot hold id %s", size, csid);
	while (n < size - 2) {
		k = sizeof filler - 2;	/* without its newline */
		if (k > size - 2 - n)
			k = size - 2 - n;
		memcpy(out + n, filler, k);
		n += k;
	}
	memcpy(out + n, "\"}", 3);
}

static void
effect_csid(struct client *cl, size_t g, char *out, size_t size)
{
	const struct idem_scenario	*s = cl->job->arg;

	if (s->ids > 0)	/* reuse: every client's ids */
		snprintf(out, size, "%s-%zu", s->tag, g);
	else
		snprintf(out, size, "%s-c%d-%zu", s->tag, cl->index, g);
}

/* A disposition's name for the log. */
static const char *
effect_disposition_name(enum idem_effect_disposition d)
{
	static const char *const names[] = {
		"none", "proceed", "reused", "conflict", "in_progress",
		"outcome_unknown", "committed", "released", "extended",
	};

	if ((size_t)d >= sizeof names / sizeof names[0])
		return "unknown";
	return names[d];
}

/*
 * What a libidem call (rc, err) came to: 0 when it answered (out has a
 * disposition, or the refusal is logged and left to the caller's
 * check); -1 (counted in errors) when the connection is gone or the
 * answer does not decode.
 */
static int
effect_answered(struct client *cl, size_t i, int rc,
    const struct idem_error *e, const struct idem_effect *out)
{
	if (rc == 0 || out->disposition != IDEM_EFFECT_NONE)
		return 0;
	client_error(cl, "effect %zu: %s", i, e->message);
	if (e->code != IDEM_E_TRANSPORT && e->code != IDEM_E_PROTOCOL)
		return 0;
	cl->report->errors++;
	return -1;
}

/*
 * The begin of csid: its request built here and sent by libidem's
 * idem_effect_begin, which writes the line and decodes the answer, as
 * a C caller's would (Redis's clients build their RESP commands with
 * snprintf).
 */
static int
effect_begin(struct client *cl, const char *csid, size_t i,
    struct idem_effect *out)
{
	struct idem_error	e;
	char			req[BENCH_EFFECT_REQUEST_BYTES + 1];
	int			rc;

	effect_json(req, sizeof req - 1, csid);
	rc = idem_effect_begin(cl->conn, csid, BENCH_EFFECT_KIND, req,
	    BENCH_EFFECT_LEASE, out, &e);
	return effect_answered(cl, i, rc, &e, out);
}

/*
 * A whole effect: begin (proceed expected), complete with the fence and
 * the result (committed expected).  -1 only when the connection is gone.
 */
static int
effect_run(struct client *cl, const char *csid, size_t i)
{
	struct idem_effect	out;
	struct idem_error	e;
	char			result[BENCH_EFFECT_RESULT_BYTES + 1];
	char			fence[sizeof out.fence];
	int			ok, rc;

	if (effect_begin(cl, csid, i, &out) != 0)
		return -1;
	if (out.disposition != IDEM_EFFECT_PROCEED) {
		cl->report->unexpected++;
		client_error(cl, "effect %zu: begin answered %s",
		    i, effect_disposition_name(out.disposition));
		idem_effect_clear(&out);
		return 0;
	}
	effect_json(result, sizeof result - 1, csid);
	snprintf(fence, sizeof fence, "%s", out.fence);
	idem_effect_clear(&out);
	rc = idem_effect_complete(cl->conn, csid, BENCH_EFFECT_KIND, fence, 1,
	    result, &out, &e);
	if (effect_answered(cl, i, rc, &e, &out) != 0)
		return -1;
	ok = out.disposition == IDEM_EFFECT_COMMITTED && out.receipt != NULL;
	idem_effect_clear(&out);
	if (!ok) {
		cl->report->unexpected++;
		client_error(cl, "effect %zu: complete not committed", i);
		return 0;
	}
	cl->report->created++;
	return 0;
}

static int
op_effect(struct client *cl, size_t i)
{
	char	csid[160];

	effect_csid(cl, i, csid, sizeof csid);
	return effect_run(cl, csid, i);
}

static int
setup_effect(struct client *cl)
{
	return client_connect(cl);
}

/*
 * This client's share of the ids committed before the barrier, each by
 * commit (a whole effect on idemd or on Redis), so that the retries
 * timed after it find every one of them committed.
 */
static int
commit_share(struct client *cl, int (*commit)(struct client *, const char *,
    size_t))
{
	const struct idem_scenario	*s = cl->job->arg;
	char				 csid[160];
	size_t				 g;

	for (g = (size_t)cl->index; g < s->ids; g += (size_t)cl->job->clients) {
		effect_csid(cl, g, csid, sizeof csid);
		if (commit(cl, csid, g) != 0)
			return -1;
	}
	if (cl->report->errors > 0 || cl->report->unexpected > 0)
		return -1;
	cl->report->created = 0;
	return 0;
}

static int
setup_effect_reuse(struct client *cl)
{
	if (setup_effect(cl) != 0)
		return -1;
	return commit_share(cl, effect_run);
}

/*
 * A retry of a committed effect: begin answers reused, and its result,
 * as libidem gives it, is parsed as a caller would (op_redis_get parses
 * the value GET returns).
 */
static int
op_effect_reuse(struct client *cl, size_t i)
{
	const struct idem_scenario	*s = cl->job->arg;
	struct idem_effect		 out;
	char				 csid[160];
	size_t				 g;
	json_t				*j = NULL;

	g = ((size_t)cl->index * (s->ids / (size_t)cl->job->clients) + i) %
	    s->ids;
	effect_csid(cl, g, csid, sizeof csid);
	if (effect_begin(cl, csid, i, &out) != 0)
		return -1;
	if (out.disposition == IDEM_EFFECT_REUSED && out.result != NULL &&
	    (j = json_loads(out.result, 0, NULL)) != NULL)
		cl->report->reused++;
	else {
		cl->report->unexpected++;
		client_error(cl, "retry %zu: begin answered %s",
		    i, effect_disposition_name(out.disposition));
	}
	json_decref(j);
	idem_effect_clear(&out);
	return 0;
}

/* Redis: connect to its Unix socket. */
static int
setup_redis(struct client *cl)
{
	struct sockaddr_un	sun;

	cl->buf = xcalloc(1, BENCH_EFFECT_LINE_BYTES + BENCH_REDIS_BUF_BYTES);
	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	snprintf(sun.sun_path, sizeof sun.sun_path, "%s", cl->job->socket);
	if ((cl->redis_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
	    0)) == -1 || connect(cl->redis_fd, (struct sockaddr *)&sun,
	    sizeof sun) == -1) {
		client_error(cl, "connect %s: %s", cl->job->socket,
		    strerror(errno));
		return -1;
	}
	return 0;
}

static void
cleanup_redis(struct client *cl)
{
	if (cl->redis_fd != -1)
		close(cl->redis_fd);
	cl->redis_fd = -1;
}

/*
 * Send a command of argc bulk strings; read one reply.  *value is a
 * status or error line (its first byte kept: '+', '-', ':') or a bulk
 * string's bytes, NUL-terminated, in cl->buf; NULL for a nil.  -1
 * (counted) when the connection failed.  The reply is awaited in
 * poll(2), then read, as libidem awaits idemd's (client.c,
 * client_wait_readable): a sleeper in read(2) is woken for nothing when
 * the server reads the command, and that wake-up would be charged to
 * Redis and not to idemd.
 */
static int
redis_call(struct client *cl, size_t i, int argc, const char *const *argv,
    char **value, size_t *length)
{
	struct pollfd	 pfd;
	char		*cmd = cl->buf, *in = cl->buf + BENCH_EFFECT_LINE_BYTES;
	char		*crlf;
	size_t		 n = 0, have = 0, need, a, len;
	ssize_t		 got = -1;
	long		 bulk;

	n += (size_t)snprintf(cmd + n, BENCH_EFFECT_LINE_BYTES - n, "*%d\r\n",
	    argc);
	for (a = 0; a < (size_t)argc; a++) {
		len = strlen(argv[a]);
		if (n + len + 32 > BENCH_EFFECT_LINE_BYTES)
			errx(1, "redis_call: command too long");
		n += (size_t)snprintf(cmd + n, BENCH_EFFECT_LINE_BYTES - n,
		    "$%zu\r\n", len);
		memcpy(cmd + n, argv[a], len);
		memcpy(cmd + n + len, "\r\n", 2);
		n += len + 2;
	}
	if (write_all(cl->redis_fd, cmd, n) == -1)
		goto fail;
	for (;;) {
		pfd.fd = cl->redis_fd;
		pfd.events = POLLIN;
		pfd.revents = 0;
		if (poll(&pfd, 1, -1) == -1) {
			if (errno == EINTR)
				continue;
			goto fail;
		}
		got = read(cl->redis_fd, in + have, BENCH_REDIS_BUF_BYTES - 1 -
		    have);
		if (got == -1 && errno == EINTR)
			continue;
		if (got <= 0)
			goto fail;
		have += (size_t)got;
		if ((crlf = memmem(in, have, "\r\n", 2)) == NULL)
			continue;
		if (in[0] != '$') {
			*crlf = '\0';
			*value = in;
			*length = (size_t)(crlf - in);
			return 0;
		}
		if ((bulk = strtol(in + 1, NULL, 10)) < 0) {
			*value = NULL;
			*length = 0;
			return 0;
		}
		need = (size_t)(crlf - in) + 2 + (size_t)bulk + 2;
		if (need >= BENCH_REDIS_BUF_BYTES)
			errx(1, "redis_call: a reply of %ld bytes", bulk);
		if (have < need)
			continue;
		*value = crlf + 2;
		*length = (size_t)bulk;
		(*value)[bulk] = '\0';
		return 0;
	}
fail:
	cl->report->errors++;
	client_error(cl, "redis %zu: %s", i, got == 0 ? "connection closed" :
	    strerror(errno));
	return -1;
}

/* One reply expected to be +OK. */
static int
redis_ok(struct client *cl, size_t i, int argc, const char *const *argv)
{
	char	*v;
	size_t	 n;

	if (redis_call(cl, i, argc, argv, &v, &n) != 0)
		return -1;
	if (v == NULL || strcmp(v, "+OK") != 0) {
		cl->report->unexpected++;
		client_error(cl, "redis %zu: %s answered %s", i, argv[0],
		    v != NULL ? v : "nil");
		return 1;
	}
	return 0;
}

/* An effect the Powertools way: SET NX PX to reserve, SET XX to commit. */
static int
redis_effect(struct client *cl, const char *csid, size_t i)
{
	char		 key[200], req[BENCH_EFFECT_REQUEST_BYTES + 1];
	char		 result[BENCH_EFFECT_RESULT_BYTES + 1];
	const char	*reserve[] = { "SET", key, req, "NX", "PX",
			    BENCH_EFFECT_LEASE_MS };
	const char	*commit[] = { "SET", key, result, "XX" };
	int		 rc;

	snprintf(key, sizeof key, BENCH_EFFECT_KIND ":%s", csid);
	effect_json(req, sizeof req - 1, csid);
	if ((rc = redis_ok(cl, i, 6, reserve)) != 0)
		return rc < 0 ? -1 : 0;
	effect_json(result, sizeof result - 1, csid);
	if ((rc = redis_ok(cl, i, 4, commit)) != 0)
		return rc < 0 ? -1 : 0;
	cl->report->created++;
	return 0;
}

static int
op_redis_effect(struct client *cl, size_t i)
{
	char	csid[160];

	effect_csid(cl, i, csid, sizeof csid);
	return redis_effect(cl, csid, i);
}

static int
setup_redis_get(struct client *cl)
{
	if (setup_redis(cl) != 0)
		return -1;
	return commit_share(cl, redis_effect);
}

/* The committed result found by GET and parsed, as a caller would. */
static int
op_redis_get(struct client *cl, size_t i)
{
	const struct idem_scenario	*s = cl->job->arg;
	json_error_t			 jerr;
	const char			*get[] = { "GET", NULL };
	char				 key[200], csid[160], *v;
	size_t				 g, n;
	json_t				*j;

	g = ((size_t)cl->index * (s->ids / (size_t)cl->job->clients) + i) %
	    s->ids;
	effect_csid(cl, g, csid, sizeof csid);
	snprintf(key, sizeof key, BENCH_EFFECT_KIND ":%s", csid);
	get[1] = key;
	if (redis_call(cl, i, 2, get, &v, &n) != 0)
		return -1;
	if (v == NULL || n != BENCH_EFFECT_RESULT_BYTES ||
	    (j = json_loadb(v, n, 0, &jerr)) == NULL) {
		cl->report->unexpected++;
		client_error(cl, "GET %zu: not the committed result", i);
		return 0;
	}
	json_decref(j);
	cl->report->reused++;
	return 0;
}

/* Redis's processes at the release (and strace, with --syscalls). */
static void
redis_snapshot(void *arg)
{
	struct stats_snapshot	*ss = arg;

	ss->strace = -1;
	proc_sample(ss->master, &ss->proc);
	if (opt.syscalls && ss->proc.ok)
		ss->strace = strace_attach(&ss->proc, ss->strace_out);
}

static void
run_redis(const char *name, int clients, size_t total_ops, size_t ids,
    const struct redis *rs, int (*setup)(struct client *),
    int (*op)(struct client *, size_t))
{
	struct stats_snapshot	 ss;
	struct idem_scenario	 s;
	struct result		*r = result_new(name, clients);
	struct job		 job;

	memset(&s, 0, sizeof s);
	snprintf(s.tag, sizeof s.tag, "%s-%s-k%d", id_prefix, name, clients);
	s.ids = ids;
	memset(&ss, 0, sizeof ss);
	ss.master = rs->pid;
	ss.who = "redis-server";
	snprintf(ss.strace_out, sizeof ss.strace_out, "%s/%s-k%d.strace", top,
	    name, clients);
	memset(&job, 0, sizeof job);
	job.clients = clients;
	job.ops = total_ops / (size_t)clients > 0 ? total_ops /
	    (size_t)clients : 1;
	job.seed = (uint64_t)clients * 1000003u + (uint64_t)name[0];
	job.setup = setup;
	job.op = op;
	job.cleanup = cleanup_redis;
	job.at_release = redis_snapshot;
	job.at_release_arg = &ss;
	job.socket = rs->socket;
	job.arg = &s;
	run_job(&job, r);
	broker_costs(&ss, r);
	if (r->unexpected > 0 || r->errors > 0) {
		r->failed = 1;
		result_note(r, "%" PRIu64 " unexpected replies, %" PRIu64
		    " errors", r->unexpected, r->errors);
	}
}

/*
 * At one K: Redis's effects, idemd's, Redis's GETs of committed ones,
 * idemd's retries of committed ones; one fresh Redis and (run_idem_op)
 * one fresh idemd each.  Without redis-server the scenario is not run,
 * said once in a failed row (as the cluster's is without PostgreSQL).
 */
void
run_effects(int clients, size_t effect_ops, size_t reuse_ops, size_t ids)
{
	static int	 missing;
	struct redis	 rs;
	struct result	*r;
	const char	*server, *why;
	char		 dir[PATH_MAX];

	if (missing)
		return;
	if ((server = redis_server_path()) == NULL) {
		missing = 1;
		r = result_new("effects", 0);
		r->failed = 1;
		result_note(r, "not run: redis-server not found (Debian: "
		    "apt-get install redis-server; or IDEM_REDIS_SERVER)");
		return;
	}
	snprintf(dir, sizeof dir, "%s/redis-k%d", top, clients);
	if ((why = redis_start(&rs, server, dir)) != NULL) {
		r = result_new("redis-effect", clients);
		r->failed = 1;
		result_note(r, "not run: %s", why);
		return;
	}
	run_redis("redis-effect", clients, effect_ops, 0, &rs, setup_redis,
	    op_redis_effect);
	run_idem_op("effect", clients, effect_ops, 0, setup_effect, op_effect);
	run_redis("redis-get", clients, reuse_ops, ids, &rs, setup_redis_get,
	    op_redis_get);
	run_idem_op("effect-reuse", clients, reuse_ops, ids,
	    setup_effect_reuse, op_effect_reuse);
	if (redis_stop(&rs) != 0) {
		r = result_new("redis-effect", clients);
		r->failed = 1;
		result_note(r, "redis-server did not stop cleanly (log %s)",
		    rs.log);
	}
}
