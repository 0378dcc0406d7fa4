/* SPDX-License-Identifier: ISC */
/*
 * pg_conn.c: the PostgreSQL store's steps (doc/cluster.md, "Creation, step
 * by step" and "Takeover"): read, grant, renumber, commit, take over,
 * and the legacy numbers (the claim, a reservation, is pg_claim.c's).  Each is one transaction; each
 * change of an existing row is a compare-and-set on (epoch, token), so
 * a broker that lost its lease changes nothing.  Times that decide
 * between brokers (leases, the day of a number, created_at) are the
 * server's clock_timestamp(), never the host's.
 *
 * It never retries a failed statement by itself: a failure is reported
 * (the caller answers storage_unavailable) and the connection is
 * re-established at the next call.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>
#include <sodium.h>

#include "digest.h"
#include "pg_int.h"
#include "storeuri.h"
#include "store.h"

/*
 * A failed statement (res, or the connection's message without one):
 * *cause names it, errno is EIO, res is cleared.  The schema's code
 * (pg_schema.c), which has a connection and no store, calls it too.
 */
int
pgstore_conn_failed(struct pg_conn *pgconn, struct pg_result *pgres,
    const char *what, char **cause)
{
	PGconn		*conn = (PGconn *)pgconn;
	PGresult	*res = (PGresult *)pgres;
	const char	*msg = res != NULL ? PQresultErrorMessage(res) : "";

	if ((msg == NULL || *msg == '\0') && conn != NULL)
		msg = PQerrorMessage(conn);
	if (msg == NULL || *msg == '\0')
		msg = "no connection";
	if (asprintf(cause, "PostgreSQL: %s: %s", what, msg) == -1)
		*cause = NULL;
	else
		(*cause)[strcspn(*cause, "\n")] = '\0';
	PQclear(res);
	errno = EIO;
	return -1;
}

int
pg_failed(struct pgstore *st, PGresult *res, const char *what, char **cause)
{
	return pgstore_conn_failed(st->conn, (struct pg_result *)res, what,
	    cause);
}

struct pg_conn *
pgstore_connect(const char *uri, char **cause)
{
	/*
	 * A server that does not answer must not hold a worker for ever:
	 * a connect timeout, and keepalives and a TCP user timeout (pg.h),
	 * unless the URI sets its own (its parameters, expanded after
	 * these, win).
	 */
	static const char *const keywords[] = { "connect_timeout",
	    "keepalives", "keepalives_idle", "keepalives_interval",
	    "keepalives_count", "tcp_user_timeout", "dbname", NULL };
	const char	*values[] = { PGSTORE_CONNECT_TIMEOUT_S, "1",
	    PGSTORE_KEEPALIVES_IDLE_S, PGSTORE_KEEPALIVES_INTERVAL_S,
	    PGSTORE_KEEPALIVES_COUNT, PGSTORE_TCP_USER_TIMEOUT_MS, uri, NULL };
	PGconn		*conn;
	PGresult	*res;

	conn = PQconnectdbParams(keywords, values, 1);
	if (conn == NULL || PQstatus(conn) != CONNECTION_OK) {
		if (asprintf(cause, "PostgreSQL: connecting: %s",
		    conn != NULL ? PQerrorMessage(conn) : "out of memory") ==
		    -1)
			*cause = NULL;
		else {
			(*cause)[strcspn(*cause, "\n")] = '\0';
			/* libpq may quote a malformed part: the password. */
			storeuri_scrub(*cause, uri);
		}
		PQfinish(conn);
		errno = EIO;
		return NULL;
	}
	/*
	 * A commit is durable when it returns, whatever the server's
	 * default (and with synchronous standbys, on them too).
	 */
	res = PQexec(conn, "SET synchronous_commit = on");
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		if (asprintf(cause, "PostgreSQL: SET synchronous_commit: %s",
		    PQresultErrorMessage(res)) == -1)
			*cause = NULL;
		PQclear(res);
		PQfinish(conn);
		errno = EIO;
		return NULL;
	}
	PQclear(res);
	return (struct pg_conn *)conn;
}

void
pgstore_disconnect(struct pg_conn *conn)
{
	PQfinish((PGconn *)conn);
}

/* A working connection, made again if it was lost. */
PGconn *
pg_conn(struct pgstore *st, char **cause)
{
	if (st->conn != NULL && PQstatus((PGconn *)st->conn) == CONNECTION_OK)
		return (PGconn *)st->conn;
	PQfinish((PGconn *)st->conn);
	st->prepared = 0;		/* a new session has none */
	st->session_pid = 0;		/* nor the old one's identity */
	st->conn = pgstore_connect(st->uri, cause);
	return (PGconn *)st->conn;
}

void
pgstore_drop(struct pgstore *st)
{
	PQfinish((PGconn *)st->conn);
	st->conn = NULL;
	st->prepared = 0;
	st->session_pid = 0;
}

struct pg_conn *
pgstore_conn(struct pgstore *st, char **cause)
{
	return (struct pg_conn *)pg_conn(st, cause);
}

int
pgstore_failed(struct pgstore *st, struct pg_result *res, const char *what,
    char **cause)
{
	return pg_failed(st, res, what, cause);
}

int
pgstore_open(struct pgstore *st, const char *uri, char **cause)
{
	int	version;

	if ((st->uri = strdup(uri)) == NULL) {
		*cause = strdup("out of memory");
		return -1;
	}
	if (pg_conn(st, cause) == NULL)
		return -1;
	if (pgstore_schema_version(st->conn, &version, cause) != 0)
		return -1;
	if (version != PGSTORE_SCHEMA_VERSION) {
		if (version == 0)
			asprintf(cause, "the database has no idem schema: run "
			    "idemctl store init --store URI");
		else
			asprintf(cause, "the database's idem schema is version "
			    "%d, this idemd needs %d: run %s", version,
			    PGSTORE_SCHEMA_VERSION, version <
			    PGSTORE_SCHEMA_VERSION ? "idemctl store migrate "
			    "--store URI" : "a newer idemd");
		errno = EPROTO;
		return -1;
	}
	return 0;
}

void
pgstore_close(struct pgstore *st)
{
	PQfinish((PGconn *)st->conn);
	st->conn = NULL;
	free(st->uri);
	st->uri = NULL;
}

void
pgstore_row_clear(struct pgstore_row *row)
{
	free(row->receipt);
	memset(row, 0, sizeof *row);
}

void
pgstore_new_token(char out[PGSTORE_TOKEN_BYTES + 1])
{
	uint8_t	raw[PGSTORE_TOKEN_BYTES / 2];

	randombytes_buf(raw, sizeof raw);
	sodium_bin2hex(out, PGSTORE_TOKEN_BYTES + 1, raw, sizeof raw);
}

void
pg_params_key(struct pg_params *p, const struct pgstore *st,
    const struct pgstore_key *key)
{
	snprintf(p->kind, sizeof p->kind, "%d", (int)key->kind);
	p->v[0] = st->workspace;
	p->v[1] = p->kind;
	p->v[2] = key->scope;
	p->v[3] = key->id;
	p->n = 4;
}

PGresult *
pg_exec(PGconn *conn, const char *sql, const struct pg_params *p)
{
	return PQexecParams(conn, sql, p != NULL ? p->n : 0, NULL,
	    p != NULL ? p->v : NULL, NULL, NULL, 0);
}

/*
 * The last result of the command sent on conn, the earlier ones freed:
 * it is the command's answer, as PQexec's.  libpq hands over an
 * update's CommandComplete before ReadyForQuery, and the implicit
 * transaction commits between the two: a commit that fails (a deferred
 * constraint), or a session that ends there (an immediate shutdown, the
 * WAL flush perhaps not done), comes as a later result, never as the
 * rows alone.  Reading to the end also frees the connection.
 */
PGresult *
pg_last_result(PGconn *conn)
{
	PGresult	*res, *extra;

	res = PQgetResult(conn);
	while ((extra = PQgetResult(conn)) != NULL) {
		PQclear(res);
		res = extra;
	}
	return res;
}

/* Did res fail with this SQLSTATE? */
int
pg_sqlstate(const PGresult *res, const char *code)
{
	const char	*state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	return state != NULL && strcmp(state, code) == 0;
}

/* The names of pg_int.h's prepared statements, one per session. */
const char *const pg_prepared_names[PG_PREP_COUNT] = {
	/* Not "idem_claim": that was the older claim's second statement. */
	"idem_reserve", "idem_read", "idem_grant", "idem_commit",
	"idem_step_batch"
};

/* Prepare which on this session unless it has it: NULL, or the failure. */
PGresult *
pg_prepare(struct pgstore *st, PGconn *conn, enum pg_prepared which,
    const char *sql)
{
	PGresult	*res;

	if (st->prepared & (1u << which))
		return NULL;
	res = PQprepare(conn, pg_prepared_names[which], sql, 0, NULL);
	/* 42P05: the session had it already. */
	if (PQresultStatus(res) != PGRES_COMMAND_OK &&
	    !pg_sqlstate(res, "42P05"))
		return res;
	PQclear(res);
	st->prepared |= 1u << which;
	return NULL;
}

/*
 * sql as the prepared statement which (prepared first if this session
 * has not yet); a session that lost it (a pooler's) prepares it again.
 * The result, as PQexecParams's (a failed PQprepare's if that failed).
 */
PGresult *
pg_exec_prepared(struct pgstore *st, PGconn *conn, enum pg_prepared which,
    const char *sql, const struct pg_params *p)
{
	const char	*name = pg_prepared_names[which];
	PGresult	*res;
	int		 tries;

	for (tries = 0;; tries++) {
		if ((res = pg_prepare(st, conn, which, sql)) != NULL)
			return res;
		res = PQexecPrepared(conn, name, p->n, p->v, NULL, NULL, 0);
		/* 26000: the session has it no longer. */
		if (tries > 0 || !pg_sqlstate(res, "26000"))
			return res;
		PQclear(res);
		st->prepared &= ~(1u << which);
	}
}

int64_t
pg_value_i64(PGresult *res, int row, int column)
{
	return PQgetisnull(res, row, column) ? 0 :
	    strtoll(PQgetvalue(res, row, column), NULL, 10);
}

/* Copy a role; 0, or -1 if it does not fit (a row idem did not write). */
static int
copy_role(char *out, size_t size, uint8_t *length, const char *in)
{
	size_t	n = strlen(in);

	if (n > size)
		return -1;
	memcpy(out, in, n);
	*length = (uint8_t)n;
	return 0;
}

/*
 * The head both row kinds share: state at column first, schema at first + 1.
 * A compacted row reads as committed and pruned (a submission is then
 * answered from its facts, an effect from its result's digest).
 */
void
pg_row_head(PGresult *res, int i, int first, enum subtab_kind kind,
    struct pgstore_row *row)
{
	struct subtab_entry	*e = &row->entry;

	memset(row, 0, sizeof *row);
	e->kind = (uint8_t)kind;
	e->state = (uint8_t)pg_value_i64(res, i, first + 0);
	if (pg_value_i64(res, i, first + 0) == PGSTORE_STATE_TOMBSTONE) {
		e->state = SUBTAB_COMMITTED;
		row->pruned = 1;
	}
	e->schema = (uint8_t)pg_value_i64(res, i, first + 1);
}

/* One row of ROW_COLUMNS starting at column first. */
int
pg_row_fill(PGresult *res, int i, int first, enum subtab_kind kind,
    struct pgstore_row *row, char **cause)
{
	struct subtab_entry	*e = &row->entry;

	pg_row_head(res, i, first, kind, row);
	if (digest_from_hex(PQgetvalue(res, i, first + 2),
	    e->request_digest) != 0)
		goto bad;
	e->date = (uint32_t)pg_value_i64(res, i, first + 3);
	e->seq = (uint32_t)pg_value_i64(res, i, first + 4);
	if (copy_role(e->sender, sizeof e->sender, &e->sender_length,
	    PQgetvalue(res, i, first + 5)) != 0 ||
	    copy_role(e->recipient, sizeof e->recipient, &e->recipient_length,
	    PQgetvalue(res, i, first + 6)) != 0)
		goto bad;
	e->created_at_ms = pg_value_i64(res, i, first + 7);
	e->reserved_at_ms = pg_value_i64(res, i, first + 8);
	e->updated_at_ms = pg_value_i64(res, i, first + 9);
	if (!PQgetisnull(res, i, first + 10) &&
	    digest_from_hex(PQgetvalue(res, i, first + 10),
	    e->file_digest) != 0)
		goto bad;
	if (!PQgetisnull(res, i, first + 11) &&
	    (row->receipt = strdup(PQgetvalue(res, i, first + 11))) == NULL) {
		*cause = strdup("out of memory");
		errno = ENOMEM;
		return -1;
	}
	row->epoch = pg_value_i64(res, i, first + 12);
	snprintf(row->token, sizeof row->token, "%s",
	    PQgetvalue(res, i, first + 13));
	snprintf(row->owner, sizeof row->owner, "%s",
	    PQgetvalue(res, i, first + 14));
	row->lease_granted = strcmp(PQgetvalue(res, i, first + 15), "t") == 0;
	row->lease_ms_left = pg_value_i64(res, i, first + 16);
	row->owner_alive = strcmp(PQgetvalue(res, i, first + 17), "t") == 0;
	return 0;
bad:
	free(row->receipt);
	row->receipt = NULL;
	asprintf(cause, "PostgreSQL: a row of idem_submission that idem did "
	    "not write (bad digest or role)");
	errno = EPROTO;
	return -1;
}

/* A statement's result of at most one row: 1 filled, 0 none, -1. */
int
pg_one_row(struct pgstore *st, PGresult *res, pg_row_fill_fn fill,
    enum subtab_kind kind, struct pgstore_row *row, const char *what,
    char **cause)
{
	int	rc;

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return pg_failed(st, res, what, cause);
	if (PQntuples(res) == 0) {
		PQclear(res);
		return 0;
	}
	rc = fill(res, 0, 0, kind, row, cause);
	PQclear(res);
	return rc == 0 ? 1 : -1;
}

/*
 * A statement on the key's row returning ROW_COLUMNS (prepared as prep;
 * PG_PREP_COUNT: not prepared): 1, 0 none, -1.
 */
static int
key_row(struct pgstore *st, const struct pgstore_key *key,
    enum pg_prepared prep, const char *sql, struct pgstore_row *row,
    const char *what, char **cause)
{
	PGconn		*conn;
	struct pg_params p;

	if ((conn = pg_conn(st, cause)) == NULL)
		return -1;
	pg_params_key(&p, st, key);
	return pg_one_row(st, prep != PG_PREP_COUNT ? pg_exec_prepared(st,
	    conn, prep, sql, &p) : pg_exec(conn, sql, &p), pg_row_fill,
	    key->kind, row, what, cause);
}

int
pgstore_read(struct pgstore *st, const struct pgstore_key *key,
    struct pgstore_row *row, char **cause)
{
	return key_row(st, key, PG_PREP_READ, "SELECT " ROW_COLUMNS " FROM "
	    "idem_submission "
	    "WHERE " KEY_WHERE, row, "reading a submission", cause);
}

static void
pg_rollback(PGconn *conn)
{
	if (PQstatus(conn) == CONNECTION_OK)
		PQclear(PQexec(conn, "ROLLBACK"));
}

static int
pg_command(struct pgstore *st, PGconn *conn, const char *sql,
    const struct pg_params *p, const char *what, char **cause)
{
	PGresult	*res = pg_exec(conn, sql, p);

	if (PQresultStatus(res) != PGRES_COMMAND_OK &&
	    PQresultStatus(res) != PGRES_TUPLES_OK)
		return pg_failed(st, res, what, cause);
	PQclear(res);
	return 0;
}

/*
 * Inside a transaction: the server's time, and a number for its day from
 * the counter, past the highest number on disk that day.  -1 with
 * ERANGE when the day's numbers are used up.
 */
static int
pg_number(struct pgstore *st, PGconn *conn, enum subtab_kind kind,
    uint32_t *date, uint32_t *seq, int64_t *now_ms, char **cause)
{
	PGresult	*res;
	struct pg_params p;
	char		 kind_s[4], date_s[16], low_s[16];
	uint32_t	 disk = 0;

	res = PQexec(conn, "SELECT (extract(epoch from clock_timestamp()) "
	    "* 1000)::bigint");
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		return pg_failed(st, res, "reading the server's clock", cause);
	*now_ms = pg_value_i64(res, 0, 0);
	PQclear(res);
	*date = taskfile_date_of(*now_ms);
	if (st->scan != NULL && st->scan(kind, *date, &disk, st->scan_arg) !=
	    0) {
		asprintf(cause, "scanning the workspace for numbers in use: %s",
		    strerror(errno));
		return -1;
	}
	snprintf(kind_s, sizeof kind_s, "%d", (int)kind);
	snprintf(date_s, sizeof date_s, "%" PRIu32, *date);
	snprintf(low_s, sizeof low_s, "%" PRIu32, disk + 1);
	p.v[0] = st->workspace;
	p.v[1] = kind_s;
	p.v[2] = date_s;
	p.v[3] = low_s;
	p.n = 4;
	/* next_seq is the next free number; low the lowest one disk allows. */
	res = pg_exec(conn, "INSERT INTO idem_counter AS c (workspace_id, "
	    "kind, date, next_seq) VALUES ($1, $2, $3, $4::integer + 1) "
	    "ON CONFLICT (workspace_id, kind, date) DO UPDATE SET next_seq = "
	    "greatest(c.next_seq, $4::integer) + 1 RETURNING c.next_seq - 1",
	    &p);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		return pg_failed(st, res, "taking a number", cause);
	*seq = (uint32_t)pg_value_i64(res, 0, 0);
	PQclear(res);
	if (*seq > st->max_seq) {
		errno = ERANGE;
		*cause = NULL;
		return -1;
	}
	return 0;
}

void
pg_name_of(const struct subtab_entry *e, char id[IDEM_MAX_TASK_ID_BYTES + 16],
    char path[IDEM_MAX_TASK_PATH_BYTES])
{
	taskfile_format_id(e->kind, e->date, e->seq, e->sender,
	    e->sender_length, e->recipient, e->recipient_length, id,
	    IDEM_MAX_TASK_ID_BYTES + 16);
	taskfile_format_path(e->kind, id, path, IDEM_MAX_TASK_PATH_BYTES);
}

/* After a failed step inside a transaction: roll back, keep errno. */
static int
pg_abort(PGconn *conn)
{
	int	saved = errno;

	pg_rollback(conn);
	errno = saved;
	return -1;
}

int
pgstore_read_durable(struct pgstore *st, const struct pgstore_key *key,
    struct pgstore_row *row, char **cause)
{
	*cause = NULL;
	/*
	 * An update that changes nothing but writes a row version, committed
	 * synchronously: when it returns, the WAL is flushed past it, so past
	 * the commit of whatever it read (doc/cluster.md).
	 */
	return key_row(st, key, PG_PREP_COUNT, "UPDATE idem_submission SET "
	    "updated_at = "
	    "updated_at WHERE " KEY_WHERE " RETURNING " ROW_COLUMNS, row,
	    "making a submission durable", cause);
}

/* A fenced UPDATE's result, cleared: 1 changed, 0 fenced, -1. */
static int
pg_fenced_result(struct pgstore *st, PGresult *res, const char *what,
    char **cause)
{
	int	changed;

	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		return pg_failed(st, res, what, cause);
	changed = strcmp(PQcmdTuples(res), "0") != 0;
	PQclear(res);
	return changed;
}

/* An UPDATE under the fence, prepared as prep: 1 changed, 0 fenced. */
static int
pg_fenced_update(struct pgstore *st, enum pg_prepared prep, const char *sql,
    struct pg_params *p, const char *what, char **cause)
{
	PGconn		*conn;

	if ((conn = pg_conn(st, cause)) == NULL)
		return -1;
	return pg_fenced_result(st, pg_exec_prepared(st, conn, prep, sql, p),
	    what, cause);
}

void
pg_grant_params(const struct pgstore *st, const struct pgstore_key *key,
    int64_t epoch, const char *token, struct pg_params *p,
    struct pg_fence_text *t)
{
	pg_params_key(p, st, key);
	snprintf(t->epoch, sizeof t->epoch, "%" PRId64, epoch);
	snprintf(t->lease, sizeof t->lease, "%d", st->lease_ms);
	p->v[p->n++] = t->epoch;
	p->v[p->n++] = token;
	p->v[p->n++] = t->lease;
}

void
pg_commit_params(const struct pgstore *st, const struct pgstore_key *key,
    int64_t epoch, const char *token, const uint8_t *file_digest,
    const char *receipt, struct pg_params *p, struct pg_fence_text *t)
{
	pg_params_key(p, st, key);
	snprintf(t->epoch, sizeof t->epoch, "%" PRId64, epoch);
	digest_to_hex(file_digest, t->digest);
	p->v[p->n++] = t->epoch;
	p->v[p->n++] = token;
	p->v[p->n++] = t->digest;
	p->v[p->n++] = receipt;
}

int
pgstore_grant(struct pgstore *st, const struct pgstore_key *key,
    int64_t epoch, const char *token, char **cause)
{
	if (pgstore_grant_send(st, key, epoch, token, cause) != 0)
		return -1;
	return pgstore_grant_wait(st, key, epoch, token, cause);
}

int
pgstore_grant_send(struct pgstore *st, const struct pgstore_key *key,
    int64_t epoch, const char *token, char **cause)
{
	PGconn		*conn;
	PGresult	*res;
	struct pg_params p;
	struct pg_fence_text t;

	*cause = NULL;
	if ((conn = pg_conn(st, cause)) == NULL)
		return -1;
	if ((res = pg_prepare(st, conn, PG_PREP_GRANT, GRANT_SQL)) != NULL)
		return pg_failed(st, res, "preparing the grant", cause);
	pg_grant_params(st, key, epoch, token, &p, &t);
	/* A blocking connection: the whole message is sent, or it failed. */
	if (PQsendQueryPrepared(conn, pg_prepared_names[PG_PREP_GRANT], p.n,
	    p.v, NULL, NULL, 0) != 1)
		return pg_failed(st, NULL, "granting a lease", cause);
	return 0;
}

int
pgstore_grant_wait(struct pgstore *st, const struct pgstore_key *key,
    int64_t epoch, const char *token, char **cause)
{
	PGresult	*res;
	struct pg_params p;
	struct pg_fence_text t;

	*cause = NULL;
	/* Its last result, never "UPDATE 1" alone (pg_last_result). */
	res = pg_last_result((PGconn *)st->conn);
	if (pg_sqlstate(res, "26000")) {
		/*
		 * A session that lost the statement (a pooler's): prepared
		 * again and run, as every prepared statement is.
		 */
		PQclear(res);
		st->prepared &= ~(1u << PG_PREP_GRANT);
		pg_grant_params(st, key, epoch, token, &p, &t);
		return pg_fenced_update(st, PG_PREP_GRANT, GRANT_SQL, &p,
		    "granting a lease", cause);
	}
	return pg_fenced_result(st, res, "granting a lease", cause);
}

int
pgstore_commit(struct pgstore *st, const struct pgstore_key *key,
    int64_t epoch, const char *token, const uint8_t *file_digest,
    const char *receipt, char **cause)
{
	struct pg_params p;
	struct pg_fence_text t;

	*cause = NULL;
	pg_commit_params(st, key, epoch, token, file_digest, receipt, &p, &t);
	return pg_fenced_update(st, PG_PREP_COMMIT, COMMIT_SQL, &p,
	    "committing", cause);
}

int
pgstore_renumber(struct pgstore *st, const struct pgstore_key *key,
    int64_t epoch, const char *token, struct pgstore_row *row, char **cause)
{
	PGconn		*conn;
	struct pg_params p;
	struct subtab_entry e = row->entry;
	PGresult	*res;
	char		 id[IDEM_MAX_TASK_ID_BYTES + 16];
	char		 path[IDEM_MAX_TASK_PATH_BYTES];
	char		 epoch_s[24], date[16], seq[16];
	int64_t		 now;
	int		 changed;

	*cause = NULL;
	if ((conn = pg_conn(st, cause)) == NULL)
		return -1;
	if (pg_command(st, conn, "BEGIN", NULL, "BEGIN", cause) != 0)
		return -1;
	if (pg_number(st, conn, key->kind, &e.date, &e.seq, &now, cause) != 0)
		return pg_abort(conn);
	/*
	 * Today's number, as the local store does (seqalloc_next): the
	 * name's day is the day the name was taken.
	 */
	pg_name_of(&e, id, path);
	pg_params_key(&p, st, key);
	snprintf(epoch_s, sizeof epoch_s, "%" PRId64, epoch);
	snprintf(date, sizeof date, "%" PRIu32, e.date);
	snprintf(seq, sizeof seq, "%" PRIu32, e.seq);
	p.v[p.n++] = epoch_s;
	p.v[p.n++] = token;
	p.v[p.n++] = seq;
	p.v[p.n++] = id;
	p.v[p.n++] = path;
	p.v[p.n++] = date;
	res = pg_exec(conn, "UPDATE idem_submission SET seq = $7, task_id = "
	    "$8, task_path = $9, date = $10, updated_at = clock_timestamp() WHERE "
	    KEY_WHERE " AND epoch = $5 AND owner_token = $6 AND state < 3",
	    &p);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		return pg_failed(st, res, "renumbering", cause), pg_abort(conn);
	changed = strcmp(PQcmdTuples(res), "0") != 0;
	PQclear(res);
	if (!changed) {
		pg_rollback(conn);
		return 0;
	}
	if (pg_command(st, conn, "COMMIT", NULL, "committing a new number",
	    cause) != 0)
		return -1;
	row->entry.date = e.date;
	row->entry.seq = e.seq;
	return 1;
}

int
pgstore_takeover(struct pgstore *st, const struct pgstore_key *key,
    int64_t epoch, struct pgstore_row *row, char **cause)
{
	PGconn		*conn;
	PGresult	*res;
	struct pg_params p;
	char		 epoch_s[24], token[PGSTORE_TOKEN_BYTES + 1], lease[16];

	*cause = NULL;
	if ((conn = pg_conn(st, cause)) == NULL)
		return -1;
	pgstore_new_token(token);
	pg_params_key(&p, st, key);
	snprintf(epoch_s, sizeof epoch_s, "%" PRId64, epoch);
	snprintf(lease, sizeof lease, "%d", st->lease_ms);
	p.v[p.n++] = epoch_s;		/* $5 */
	p.v[p.n++] = st->host;		/* $6 */
	p.v[p.n++] = token;		/* $7 */
	p.v[p.n++] = lease;		/* $8 */
	/*
	 * Allowed when the lease expired by the server's clock, when the
	 * owner's session is gone, or when the owner is this very session
	 * (a session carries one creation at a time, to its answer: a row
	 * it owns is not in flight, it was left by a request that failed;
	 * broker/pg_pool.c).
	 */
	res = pg_exec(conn, "UPDATE idem_submission SET epoch = epoch + 1, "
	    "owner_host = $6, owner_token = $7, owner_pid = pg_backend_pid(), "
	    "owner_started = " SESSION_STARTED ", lease_expires = "
	    "clock_timestamp() + $8::integer * interval '1 millisecond', "
	    "lease_granted = false, updated_at = clock_timestamp() WHERE "
	    KEY_WHERE " AND epoch = $5 AND state < 3 AND (lease_expires < "
	    "clock_timestamp() OR owner_pid = pg_backend_pid() OR NOT EXISTS "
	    "(SELECT 1 FROM pg_stat_activity a WHERE a.pid = owner_pid AND "
	    "a.backend_start = owner_started)) RETURNING " ROW_COLUMNS, &p);
	return pg_one_row(st, res, pg_row_fill, key->kind, row, "taking over",
	    cause);
}

int
pgstore_legacy_number(struct pgstore *st, enum subtab_kind kind,
    uint32_t *date, uint32_t *seq, int64_t *now_ms, char **cause)
{
	PGconn		*conn;
	struct pg_params p;
	char		 kind_s[4], date_s[16], seq_s[16];

	*cause = NULL;
	if ((conn = pg_conn(st, cause)) == NULL)
		return -1;
	if (pg_command(st, conn, "BEGIN", NULL, "BEGIN", cause) != 0)
		return -1;
	if (pg_number(st, conn, kind, date, seq, now_ms, cause) != 0)
		return pg_abort(conn);
	snprintf(kind_s, sizeof kind_s, "%d", (int)kind);
	snprintf(date_s, sizeof date_s, "%" PRIu32, *date);
	snprintf(seq_s, sizeof seq_s, "%" PRIu32, *seq);
	p.v[0] = st->workspace;
	p.v[1] = kind_s;
	p.v[2] = date_s;
	p.v[3] = seq_s;
	p.n = 4;
	if (pg_command(st, conn, "INSERT INTO idem_legacy (workspace_id, kind, "
	    "date, seq) VALUES ($1, $2, $3, $4)", &p, "recording a number",
	    cause) != 0)
		return pg_abort(conn);
	return pg_command(st, conn, "COMMIT", NULL, "committing a number",
	    cause);
}

int
pgstore_counts(struct pgstore *st, enum subtab_kind kind,
    uint32_t counts[SUBTAB_STATE_COUNT], char **cause)
{
	PGconn		*conn;
	PGresult	*res;
	struct pg_params p;
	char		 kind_s[4];
	int		 i, state;

	*cause = NULL;
	memset(counts, 0, sizeof counts[0] * SUBTAB_STATE_COUNT);
	if ((conn = pg_conn(st, cause)) == NULL)
		return -1;
	snprintf(kind_s, sizeof kind_s, "%d", (int)kind);
	p.v[0] = st->workspace;
	p.v[1] = kind_s;
	p.n = 2;
	/* A tombstone is a committed submission without its receipt. */
	res = pg_exec(conn, "SELECT CASE WHEN state = "
	    PGSTORE_STATE_TOMBSTONE_S " THEN 3 ELSE state END, count(*) FROM "
	    "idem_submission WHERE workspace_id = $1 AND kind = $2 GROUP BY 1",
	    &p);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return pg_failed(st, res, "counting submissions", cause);
	for (i = 0; i < PQntuples(res); i++) {
		state = (int)pg_value_i64(res, i, 0);
		if (state >= 0 && state < SUBTAB_STATE_COUNT)
			counts[state] = (uint32_t)pg_value_i64(res, i, 1);
	}
	PQclear(res);
	return 0;
}
