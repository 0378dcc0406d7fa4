/* SPDX-License-Identifier: ISC */
/*
 * pg_claim.c: the claim, a creation's reservation (doc/cluster.md,
 * "Creation, step by step", 3): a number and the row in one statement,
 * committed without waiting for the WAL flush.  A
 * claim's turn is made (pgstore_claim_begin), sent (on the claiming
 * thread's own connection, or in its worker's round on another
 * thread's: pg_batch.c) and judged (pgstore_claim_end); the turns that
 * follow a lost race or a day that changed run on its own connection
 * (pgstore_claim_next).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "digest.h"
#include "pg_int.h"
#include "store.h"

/*
 * The reservation in one statement, its own implicit transaction
 * committed without waiting for the WAL flush (doc/cluster.md, "The
 * claim and the counter: why no flush is needed"); the grant, which
 * follows before any file is linked and any answer given, commits
 * synchronously and so flushes it (the WAL is one ordered stream).
 *
 * It reads the server's clock and day, and the row of the key if it
 * exists (then nothing else happens: the caller judges the row as a
 * read's); otherwise, if the day is the one the disk was scanned for,
 * it takes a number from the day's counter past the disk's highest
 * (none past max_seq) and inserts the row with it: reserved, epoch 1,
 * the caller's token, created_at the clock reading the day came from,
 * the lease from now, its name built here from the number as
 * taskfile_format_id does (pgstore_claim_end checks that the two
 * agree).  A row of the key inserted meanwhile by another broker
 * violates the primary key: the whole statement is rolled back, the
 * counter's raise with it, and the caller takes another turn.
 *
 * Until 5 Dec 2026 these were two statements, each its own transaction
 * (the number, then the row, the number passed through a session
 * setting), so that the counter row's lock was held for the number
 * alone.  One statement holds it across the row's insert too (tens of
 * microseconds more, and a worker's claims go on one session in its
 * round anyway), and saves a statement, a transaction and its commit
 * record a creation: the server's CPU a creation is mostly what each
 * statement and transaction costs, not what it does (doc/cluster.md,
 * "Where the server's time goes").
 *
 * $1..$4 the key, $5 the day scanned, $6 the disk's highest number that
 * day, $7 max_seq, $8 schema, $9 request digest, $10 the kind's prefix,
 * $11 "-<sender>-to-<recipient>", $12 the kind's directory, $13 sender,
 * $14 recipient, $15 host, $16 token, $17 lease (ms), $18 and $19 the
 * owner's session: the pid and the start (us since 1970) of the
 * claiming thread's own session, passed by value because a round may
 * send the claim on another thread's session (pg_batch.c): a row's
 * owner is the session of the thread that goes on to grant, link and
 * commit it, never the leader's, which is nobody's identity
 * (doc/cluster.md, "Whose session owns a claimed row").  Columns: the
 * server's clock (ms), its day, the number taken (NULL if none), the
 * task_id inserted (NULL if none), the setting made (so that it is
 * made), then ROW_COLUMNS of the key's row as it was (NULL if none).
 */
const char pg_claim_sql[] =
	"WITH clock AS (SELECT (extract(epoch from clock_timestamp()) * "
	"1000)::bigint AS now_ms, set_config('synchronous_commit', 'off', "
	"true) AS async), "
	"day AS (SELECT now_ms, async, to_char(date '1970-01-01' + "
	"(now_ms / 86400000)::integer, 'YYYYMMDD')::integer AS today "
	"FROM clock), "
	"found AS (SELECT " ROW_COLUMNS " FROM idem_submission WHERE "
	KEY_WHERE "), "
	"num AS (INSERT INTO idem_counter AS c (workspace_id, kind, date, "
	"next_seq) SELECT $1::uuid, $2::smallint, today, $6::integer + 2 "
	"FROM day WHERE "
	"today = $5::integer AND $6::integer + 1 <= $7::integer AND NOT "
	"EXISTS (SELECT 1 FROM found) ON CONFLICT (workspace_id, kind, "
	"date) DO UPDATE SET next_seq = greatest(c.next_seq, $6::integer + "
	"1) + 1 WHERE greatest(c.next_seq, $6::integer + 1) <= $7::integer "
	"RETURNING c.next_seq - 1 AS got), "
	"named AS (SELECT got AS seq, today, now_ms, $10::text || '-' || "
	"today || '-' || CASE WHEN got < 1000 THEN lpad(got::text, 3, '0') "
	"ELSE got::text END || $11::text AS name FROM num, day), "
	"ins AS (INSERT INTO idem_submission (workspace_id, kind, scope, "
	"client_submission_id, digest_schema, request_digest, state, date, "
	"seq, task_id, task_path, sender, recipient, created_at_ms, "
	"reserved_at, updated_at, epoch, owner_host, owner_token, "
	"owner_pid, owner_started, lease_expires) SELECT $1::uuid, "
	"$2::smallint, $3::text, $4::text, $8::smallint, $9::text, 1, "
	"today, seq, name, $12::text || '/' || name || '.md', "
	"$13::text, $14::text, now_ms, to_timestamp(now_ms / 1000.0), "
	"to_timestamp(now_ms / 1000.0), 1, $15::text, $16::text, "
	"$18::integer, to_timestamp(0) + $19::bigint * interval "
	"'1 microsecond', clock_timestamp() + $17::integer * "
	"interval '1 millisecond' FROM named RETURNING task_id) "
	"SELECT day.now_ms, day.today, (SELECT got FROM num), "
	"(SELECT task_id FROM ins), day.async, found.* FROM day LEFT JOIN "
	"found ON true";
#define CLAIM_ROW_FIRST	5	/* ROW_COLUMNS start here */

/* The host's guess of the server's day, for the first disk scan. */
static uint32_t
host_day(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return taskfile_date_of((int64_t)ts.tv_sec * 1000 +
	    ts.tv_nsec / 1000000);
}

/* How many times a reservation starts again (another day, a lost race). */
#define CLAIM_TRIES		8

/*
 * st's session as an owner (its pid and start), asked once a session:
 * a claim records them by value, whichever session sends it.
 */
static int
claim_identity(struct pgstore *st, PGconn *conn, char **cause)
{
	PGresult	*res;

	if (st->session_pid != 0 && st->session_pid == PQbackendPID(conn))
		return 0;
	res = PQexec(conn, "SELECT pg_backend_pid(), (extract(epoch from "
	    "backend_start) * 1000000)::bigint FROM pg_stat_activity WHERE "
	    "pid = pg_backend_pid()");
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		return pg_failed(st, res, "reading the session's start", cause);
	st->session_pid = (int)pg_value_i64(res, 0, 0);
	snprintf(st->session_started, sizeof st->session_started, "%s",
	    PQgetvalue(res, 0, 1));
	PQclear(res);
	return 0;
}

/* The turn's disk scan (c->day). */
static int
claim_turn(struct pgstore *st, struct pgstore_claim *c, char **cause)
{
	uint32_t	disk = 0;

	/*
	 * Numbers other FCoP writers took that day: st->scan is the
	 * broker's (pg_create.c), which answers from the watch, or scans
	 * under the allocator's lock (the day's first, after a refresh),
	 * or scans under no lock of the segment where the watch cannot
	 * vouch.  No lock of this file's is held.
	 */
	if (st->scan != NULL && st->scan(c->key->kind, c->day, &disk,
	    st->scan_arg) != 0) {
		asprintf(cause, "scanning the workspace for numbers in use: %s",
		    strerror(errno));
		return -1;
	}
	snprintf(c->day_s, sizeof c->day_s, "%" PRIu32, c->day);
	snprintf(c->disk_s, sizeof c->disk_s, "%" PRIu32, disk);
	return 0;
}

int
pgstore_claim_begin(struct pgstore *st, struct pgstore_claim *c,
    const struct pgstore_key *key, const struct subtab_entry *want,
    struct pgstore_row *row, char **cause)
{
	PGconn	*conn;

	*cause = NULL;
	memset(c, 0, sizeof *c);
	memset(row, 0, sizeof *row);
	c->key = key;
	c->want = want;
	c->row = row;
	c->day = host_day();
	snprintf(c->schema, sizeof c->schema, "%u", (unsigned)want->schema);
	digest_to_hex(want->request_digest, c->digest);
	snprintf(c->sender, sizeof c->sender, "%.*s", (int)want->sender_length,
	    want->sender);
	snprintf(c->recipient, sizeof c->recipient, "%.*s",
	    (int)want->recipient_length, want->recipient);
	snprintf(c->roles, sizeof c->roles, "-%s-to-%s", c->sender,
	    c->recipient);
	snprintf(c->max_s, sizeof c->max_s, "%" PRIu32, st->max_seq);
	snprintf(c->lease, sizeof c->lease, "%d", st->lease_ms);
	pgstore_new_token(c->token);
	if ((conn = pg_conn(st, cause)) == NULL ||
	    claim_identity(st, conn, cause) != 0)
		return -1;
	snprintf(c->pid, sizeof c->pid, "%d", st->session_pid);
	snprintf(c->started, sizeof c->started, "%s", st->session_started);
	return claim_turn(st, c, cause);
}

void
pg_claim_params(const struct pgstore *st, const struct pgstore_claim *c,
    struct pg_params *p)
{
	const struct pgstore_key *key = c->key;

	pg_params_key(p, st, key);
	p->v[p->n++] = c->day_s;	/* $5 */
	p->v[p->n++] = c->disk_s;	/* $6 */
	p->v[p->n++] = c->max_s;	/* $7 */
	p->v[p->n++] = c->schema;	/* $8 */
	p->v[p->n++] = c->digest;	/* $9 */
	p->v[p->n++] = taskfile_kind_prefix(key->kind);	/* $10 */
	p->v[p->n++] = c->roles;	/* $11 */
	p->v[p->n++] = key->kind == SUBTAB_KIND_REPORT ?
	    IDEM_REPORTS_DIR : IDEM_INBOX_DIR;	/* $12 */
	p->v[p->n++] = c->sender;	/* $13 */
	p->v[p->n++] = c->recipient;	/* $14 */
	p->v[p->n++] = st->host;	/* $15 */
	p->v[p->n++] = c->token;	/* $16 */
	p->v[p->n++] = c->lease;	/* $17 */
	p->v[p->n++] = c->pid;		/* $18 */
	p->v[p->n++] = c->started;	/* $19 */
}

void
pgstore_claim_clear(struct pgstore_claim *c)
{
	PQclear((PGresult *)c->res);
	c->res = NULL;
}

/* The turn's verdict: 2, another turn (c->tries and c->day moved). */
static int
claim_again(struct pgstore_claim *c)
{
	pgstore_claim_clear(c);
	c->tries++;
	return 2;
}

/* The unique key a failed statement violated, or NULL. */
static const char *
claim_violated(PGresult *res)
{
	if (PQresultStatus(res) != PGRES_FATAL_ERROR)
		return NULL;
	return PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME);
}

/* Another broker's row of the key came first: a unique key refused ours. */
static int
claim_lost_race(PGresult *res)
{
	const char	*constraint = claim_violated(res);

	return constraint != NULL &&
	    (strcmp(constraint, "idem_submission_pkey") == 0 ||
	    strcmp(constraint, "idem_submission_key") == 0);
}

/*
 * A row of the day already has the number the counter gave: the counter
 * is behind the rows (a row restored or written by hand, never by idem,
 * whose every number comes from the counter).  The statement rolled the
 * counter's raise back with the insert, so every later claim would take
 * the same number: the next turn first raises the counter past the
 * day's rows (claim_raise).
 */
static int
claim_number_taken(PGresult *res)
{
	const char	*constraint = claim_violated(res);

	return constraint != NULL && strcmp(constraint,
	    "idem_submission_workspace_id_kind_date_seq_key") == 0;
}

/* The day's counter past the day's highest row (claim_number_taken). */
static const char claim_raise_sql[] =
	"UPDATE idem_counter AS c SET next_seq = r.top + 1 FROM (SELECT "
	"max(seq) AS top FROM idem_submission WHERE workspace_id = $1::uuid "
	"AND kind = $2::smallint AND date = $3::integer) r WHERE "
	"c.workspace_id = $1::uuid AND c.kind = $2::smallint AND c.date = "
	"$3::integer AND c.next_seq <= r.top";

static int
claim_raise(struct pgstore *st, PGconn *conn, struct pgstore_claim *c,
    char **cause)
{
	struct pg_params p;
	PGresult	*res;

	pg_params_key(&p, st, c->key);
	p.v[2] = c->day_s;
	p.n = 3;
	res = pg_exec(conn, claim_raise_sql, &p);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		return pg_failed(st, res, "raising the day's counter past its "
		    "rows", cause);
	store_notice(STORE_NOTICE_WARNING, "PostgreSQL: the counter of day %s was behind its rows "
	    "(%s of them moved it): raised past them", c->day_s,
	    PQcmdTuples(res));
	PQclear(res);
	c->raise = 0;
	return 0;
}

int
pgstore_claim_end(struct pgstore *st, struct pgstore_claim *c, char **cause)
{
	PGresult	*res = (PGresult *)c->res;
	struct subtab_entry *e = &c->row->entry;
	struct pgstore_row *row = c->row;
	char		 id[IDEM_MAX_TASK_ID_BYTES + 16];
	char		 path[IDEM_MAX_TASK_PATH_BYTES];
	int		 i;

	*cause = NULL;
	/* 26000: the session lost it (a pooler's): prepare again. */
	if (pg_sqlstate(res, "26000")) {
		st->prepared &= ~(1u << PG_PREP_CLAIM);
		return claim_again(c);
	}
	/* Reserved by another broker since the turn began. */
	if (claim_lost_race(res))
		return claim_again(c);
	if (claim_number_taken(res)) {
		c->raise = 1;
		return claim_again(c);
	}
	c->res = NULL;
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		return pg_failed(st, res, "reserving", cause);
	if (!PQgetisnull(res, 0, CLAIM_ROW_FIRST)) {
		/* The key's row (nothing was inserted): judge it. */
		i = pg_row_fill(res, 0, CLAIM_ROW_FIRST, c->key->kind, row,
		    cause);
		PQclear(res);
		return i == 0 ? 0 : -1;
	}
	if ((uint32_t)pg_value_i64(res, 0, 1) != c->day) {
		/* The server's day is not the one scanned: again. */
		c->day = (uint32_t)pg_value_i64(res, 0, 1);
		PQclear(res);
		c->tries++;
		return 2;
	}
	if (PQgetisnull(res, 0, 2)) {
		PQclear(res);
		errno = ERANGE;		/* the day's numbers are used up */
		return -1;
	}
	*e = *c->want;
	e->kind = (uint8_t)c->key->kind;
	e->key_length = 0;
	e->state = SUBTAB_RESERVED;
	e->date = c->day;
	e->seq = (uint32_t)pg_value_i64(res, 0, 2);
	e->created_at_ms = pg_value_i64(res, 0, 0);
	e->reserved_at_ms = e->created_at_ms;
	e->updated_at_ms = e->created_at_ms;
	memset(e->file_digest, 0, sizeof e->file_digest);
	pg_name_of(e, id, path);
	if (PQgetisnull(res, 0, 3) || strcmp(PQgetvalue(res, 0, 3), id) != 0) {
		/* Never expected: a number is inserted in the same statement. */
		asprintf(cause, "PostgreSQL: the reservation named %s, idem "
		    "names it %s", PQgetisnull(res, 0, 3) ? "nothing" :
		    PQgetvalue(res, 0, 3), id);
		PQclear(res);
		memset(row, 0, sizeof *row);
		errno = EPROTO;
		return -1;
	}
	PQclear(res);
	snprintf(row->token, sizeof row->token, "%s", c->token);
	row->epoch = 1;
	snprintf(row->owner, sizeof row->owner, "%s", st->host);
	row->lease_ms_left = st->lease_ms;
	row->owner_alive = 1;
	return 1;
}

int
pgstore_claim_next(struct pgstore *st, struct pgstore_claim *c,
    char **cause)
{
	struct pg_params p;
	PGconn		*conn;
	PGresult	*res;
	int		 rc, first = 1;

	*cause = NULL;
	for (; c->tries < CLAIM_TRIES; first = 0) {
		if ((conn = pg_conn(st, cause)) == NULL)
			return -1;
		/* The session is the owner: a new one is another. */
		if (claim_identity(st, conn, cause) != 0)
			return -1;
		snprintf(c->pid, sizeof c->pid, "%d", st->session_pid);
		snprintf(c->started, sizeof c->started, "%s",
		    st->session_started);
		/* _begin made the first turn's scan; the others make theirs. */
		if ((!first || c->tries > 0) && claim_turn(st, c, cause) != 0)
			return -1;
		if (c->raise && claim_raise(st, conn, c, cause) != 0)
			return -1;
		pg_claim_params(st, c, &p);
		res = pg_exec_prepared(st, conn, PG_PREP_CLAIM, pg_claim_sql,
		    &p);
		if (PQresultStatus(res) != PGRES_TUPLES_OK &&
		    PQstatus(conn) != CONNECTION_OK) {
			/*
			 * The connection broke: the outcome is not known.
			 * Dropped, so that a row it may have made has an
			 * owner whose session is gone (a retry takes it over
			 * at once).
			 */
			pg_failed(st, res, "reserving", cause);
			pgstore_drop(st);
			errno = EIO;
			return -1;
		}
		c->res = (struct pg_result *)res;
		if ((rc = pgstore_claim_end(st, c, cause)) != 2)
			return rc;
	}
	asprintf(cause, "PostgreSQL: reserving: no stable outcome after %d "
	    "tries (the key's row came and went, or the day kept changing)",
	    CLAIM_TRIES);
	errno = EAGAIN;
	return -1;
}

int
pgstore_claim(struct pgstore *st, const struct pgstore_key *key,
    const struct subtab_entry *want, struct pgstore_row *row, char **cause)
{
	struct pgstore_claim	c;

	if (pgstore_claim_begin(st, &c, key, want, row, cause) != 0)
		return -1;
	return pgstore_claim_next(st, &c, cause);
}

int
pgstore_reserve(struct pgstore *st, const struct pgstore_key *key,
    const struct subtab_entry *want, struct pgstore_row *row, char **cause)
{
	int	rc = pgstore_claim(st, key, want, row, cause);

	if (rc == 0)
		pgstore_row_clear(row);
	return rc;
}
