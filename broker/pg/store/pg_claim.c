/* SPDX-License-Identifier: ISC */
/*
 * pg_claim.c: the claim, a creation's reservation (doc/cluster.md,
 * "Creation, step by step", 3): a number and the row, two statements in
 * one round trip, each committed without waiting for the WAL flush.  A
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
 * Two prepared statements in one round trip: a libpq pipeline with a
 * sync after each, so that each is its own implicit transaction and the
 * second runs even if the first failed.  0 with both results (each
 * PGRES_TUPLES_OK or an error for the caller to judge), or -1 with
 * *cause: the connection is then dropped (the next call makes a new
 * one), since a pipeline left half read cannot be trusted.
 */
static int
pg_exec_prepared_pair(struct pgstore *st, PGconn *conn,
    enum pg_prepared which[2], const char *sql[2],
    const struct pg_params *p[2], PGresult *res[2], char **cause)
{
	PGresult	*r;
	int		 i;

	res[0] = res[1] = NULL;
	for (i = 0; i < 2; i++)
		if ((r = pg_prepare(st, conn, which[i], sql[i])) != NULL)
			return pg_failed(st, r, "preparing a statement", cause);
	if (PQenterPipelineMode(conn) != 1)
		return pg_failed(st, NULL, "entering pipeline mode", cause);
	for (i = 0; i < 2; i++)
		if (PQsendQueryPrepared(conn, pg_prepared_names[which[i]],
		    p[i]->n, p[i]->v, NULL, NULL, 0) != 1 ||
		    PQpipelineSync(conn) != 1)
			goto broken;
	for (i = 0; i < 2; i++) {
		/* The statement's result, the end of it, the sync. */
		if ((res[i] = PQgetResult(conn)) == NULL)
			goto broken;
		if ((r = PQgetResult(conn)) != NULL) {
			PQclear(r);
			goto broken;
		}
		r = PQgetResult(conn);
		if (PQresultStatus(r) != PGRES_PIPELINE_SYNC) {
			PQclear(r);
			goto broken;
		}
		PQclear(r);
	}
	if (PQexitPipelineMode(conn) != 1)
		goto broken;
	return 0;
broken:
	pg_failed(st, NULL, "a pipelined claim", cause);
	PQclear(res[0]);
	PQclear(res[1]);
	res[0] = res[1] = NULL;
	pgstore_drop(st);
	errno = EIO;
	return -1;
}

/*
 * The reservation in two statements, each its own implicit transaction
 * committed without waiting for the WAL flush (doc/cluster.md, "The
 * claim and the counter: why no flush is needed"); the grant, which
 * follows before any file is linked and any answer given, commits
 * synchronously and so flushes both (the WAL is one ordered stream).
 *
 * pg_number_sql: the server's clock and day, and the row of the key if it
 * exists (then nothing else happens: the caller judges the row as a
 * read's); otherwise, if the day is the one the disk was scanned for, a
 * number from the day's counter past the disk's highest (none past
 * max_seq).  The counter row's lock is held by this short statement
 * alone, not across the row's insert: the claims of a workspace and day
 * queue for the counter only as long as it takes to raise it.
 * $1..$4 the key, $5 the day scanned, $6 the disk's highest number that
 * day, $7 max_seq, $8 this turn's nonce.  Columns: the server's clock
 * (ms), its day, the number taken (NULL if none), the setting below,
 * then ROW_COLUMNS of the key's row (NULL if none).  The number, its day
 * and the clock reading go to pg_claim_sql through the session's setting
 * idem.claim, "<nonce> <number> <day> <ms>" ('' when none was taken),
 * so that the broker sends both statements in one round trip (a libpq
 * pipeline, each its own transaction).
 */
const char pg_number_sql[] =
	"WITH clock AS (SELECT (extract(epoch from clock_timestamp()) * "
	"1000)::bigint AS now_ms, set_config('synchronous_commit', 'off', "
	"true) AS async), "
	"day AS (SELECT now_ms, async, to_char(date '1970-01-01' + "
	"(now_ms / 86400000)::integer, 'YYYYMMDD')::integer AS today "
	"FROM clock), "
	"found AS (SELECT 1 FROM idem_submission WHERE " KEY_WHERE "), "
	"num AS (INSERT INTO idem_counter AS c (workspace_id, kind, date, "
	"next_seq) SELECT $1::uuid, $2::smallint, today, $6::integer + 2 "
	"FROM day WHERE "
	"today = $5::integer AND $6::integer + 1 <= $7::integer AND NOT "
	"EXISTS (SELECT 1 FROM found) ON CONFLICT (workspace_id, kind, "
	"date) DO UPDATE SET next_seq = greatest(c.next_seq, $6::integer + "
	"1) + 1 WHERE greatest(c.next_seq, $6::integer + 1) <= $7::integer "
	"RETURNING c.next_seq - 1 AS got) "
	"SELECT day.now_ms, day.today, (SELECT got FROM num), "
	"set_config('idem.claim', coalesce((SELECT $8::text || ' ' || got "
	"|| ' ' || today || ' ' || now_ms FROM num, day), ''), false) || "
	"day.async, "
	ROW_COLUMNS " FROM day LEFT JOIN idem_submission ON " KEY_WHERE;
#define NUMBER_ROW_FIRST	4	/* ROW_COLUMNS start here */

/*
 * pg_claim_sql: the row with the number pg_number_sql took, reserved, epoch
 * 1, the caller's token, created_at the clock reading the number's day
 * came from, the lease from now; nothing if the session's idem.claim
 * does not carry this turn's nonce (pg_number_sql took no number, failed,
 * or ran on another session: a pooler's).  Its name is built here from
 * the number, as taskfile_format_id does (pgstore_claim checks that the
 * two agree).  A row inserted meanwhile by another broker violates the
 * primary key: the statement is rolled back, and the number stays unused
 * (a gap, as a claim that never comes back leaves).
 * $1..$4 the key, $5 schema, $6 request digest, $7 the nonce, $8 the
 * kind's prefix, $9 "-<sender>-to-<recipient>", $10 the kind's
 * directory, $11 sender, $12 recipient, $13 host, $14 token, $15 lease
 * (ms), $16 and $17 the owner's session: the pid and the start (us
 * since 1970) of the claiming thread's own session, passed by value
 * because a round may send the claim on another thread's session
 * (pg_batch.c): a row's owner is the session of the thread that goes on
 * to grant, link and commit it, never the leader's, which is nobody's
 * identity (doc/cluster.md, "Whose session owns a claimed row").  Columns: the task_id inserted (NULL if none), and the setting
 * made (so that it is made).
 */
const char pg_claim_sql[] =
	"WITH async AS (SELECT set_config('synchronous_commit', 'off', "
	"true) AS off), "
	"got AS (SELECT split_part(v, ' ', 2)::integer AS seq, "
	"split_part(v, ' ', 3)::integer AS today, split_part(v, ' ', 4)"
	"::bigint AS now_ms FROM (SELECT current_setting('idem.claim', "
	"true) AS v FROM async) g WHERE split_part(v, ' ', 1) = $7::text), "
	"named AS (SELECT seq, today, now_ms, $8::text || '-' || today || "
	"'-' || CASE WHEN seq < 1000 THEN lpad(seq::text, 3, '0') ELSE "
	"seq::text END || $9::text AS name FROM got), "
	"ins AS (INSERT INTO idem_submission (workspace_id, kind, scope, "
	"client_submission_id, digest_schema, request_digest, state, date, "
	"seq, task_id, task_path, sender, recipient, created_at_ms, "
	"reserved_at, updated_at, epoch, owner_host, owner_token, "
	"owner_pid, owner_started, lease_expires) SELECT $1::uuid, "
	"$2::smallint, $3::text, $4::text, $5::smallint, $6::text, 1, "
	"today, seq, name, $10::text || '/' || name || '.md', "
	"$11::text, $12::text, now_ms, to_timestamp(now_ms / 1000.0), "
	"to_timestamp(now_ms / 1000.0), 1, $13::text, $14::text, "
	"$16::integer, to_timestamp(0) + $17::bigint * interval "
	"'1 microsecond', clock_timestamp() + $15::integer * "
	"interval '1 millisecond' FROM named RETURNING task_id) "
	"SELECT (SELECT task_id FROM ins), (SELECT off FROM async)";

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

/* The turn's disk scan and nonce (c->tries, c->day). */
static int
claim_turn(struct pgstore *st, struct pgstore_claim *c, char **cause)
{
	uint32_t	disk = 0;

	/* Outside any lock: numbers other FCoP writers took that day. */
	if (st->scan != NULL && st->scan(c->key->kind, c->day, &disk,
	    st->scan_arg) != 0) {
		asprintf(cause, "scanning the workspace for numbers in use: %s",
		    strerror(errno));
		return -1;
	}
	/* A fresh nonce each turn: the turn tells its number apart. */
	snprintf(c->nonce, sizeof c->nonce, "%s-%d", c->token, c->tries);
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
    struct pg_params *p, struct pg_params *q)
{
	const struct pgstore_key *key = c->key;

	pg_params_key(p, st, key);
	p->v[p->n++] = c->day_s;	/* $5 */
	p->v[p->n++] = c->disk_s;	/* $6 */
	p->v[p->n++] = c->max_s;	/* $7 */
	p->v[p->n++] = c->nonce;	/* $8 */
	pg_params_key(q, st, key);
	q->v[q->n++] = c->schema;	/* $5 */
	q->v[q->n++] = c->digest;	/* $6 */
	q->v[q->n++] = c->nonce;	/* $7 */
	q->v[q->n++] = key->kind == SUBTAB_KIND_REPORT ? "REPORT" :
	    "TASK";			/* $8 */
	q->v[q->n++] = c->roles;	/* $9 */
	q->v[q->n++] = key->kind == SUBTAB_KIND_REPORT ?
	    IDEM_REPORTS_DIR : IDEM_INBOX_DIR;	/* $10 */
	q->v[q->n++] = c->sender;	/* $11 */
	q->v[q->n++] = c->recipient;	/* $12 */
	q->v[q->n++] = st->host;	/* $13 */
	q->v[q->n++] = c->token;	/* $14 */
	q->v[q->n++] = c->lease;	/* $15 */
	q->v[q->n++] = c->pid;		/* $16 */
	q->v[q->n++] = c->started;	/* $17 */
}

void
pgstore_claim_clear(struct pgstore_claim *c)
{
	PQclear((PGresult *)c->res[0]);
	PQclear((PGresult *)c->res[1]);
	c->res[0] = c->res[1] = NULL;
}

/* The turn's verdict: 2, another turn (c->tries and c->day moved). */
static int
claim_again(struct pgstore_claim *c)
{
	pgstore_claim_clear(c);
	c->tries++;
	return 2;
}

int
pgstore_claim_end(struct pgstore *st, struct pgstore_claim *c, char **cause)
{
	PGresult	*num = (PGresult *)c->res[0];
	PGresult	*ins = (PGresult *)c->res[1];
	struct subtab_entry *e = &c->row->entry;
	struct pgstore_row *row = c->row;
	const char	*constraint;
	char		 id[IDEM_MAX_TASK_ID_BYTES + 16];
	char		 path[IDEM_MAX_TASK_PATH_BYTES];
	int		 i, lost;

	*cause = NULL;
	/* 26000: the session lost them (a pooler's): prepare again. */
	for (i = 0, lost = 0; i < 2; i++)
		if (pg_sqlstate((PGresult *)c->res[i], "26000")) {
			st->prepared &= ~(1u << (i == 0 ? PG_PREP_NUMBER :
			    PG_PREP_CLAIM));
			lost = 1;
		}
	if (lost)
		return claim_again(c);
	c->res[0] = c->res[1] = NULL;
	if (PQresultStatus(num) != PGRES_TUPLES_OK || PQntuples(num) != 1) {
		PQclear(ins);
		return pg_failed(st, num, "taking a number", cause);
	}
	if (PQresultStatus(ins) == PGRES_FATAL_ERROR &&
	    (constraint = PQresultErrorField(ins,
	    PG_DIAG_CONSTRAINT_NAME)) != NULL &&
	    strcmp(constraint, "idem_submission_pkey") == 0) {
		/* Reserved by another broker since the number was taken. */
		c->res[0] = (struct pg_result *)num;
		c->res[1] = (struct pg_result *)ins;
		return claim_again(c);
	}
	if (PQresultStatus(ins) != PGRES_TUPLES_OK || PQntuples(ins) != 1) {
		PQclear(num);
		return pg_failed(st, ins, "reserving", cause);
	}
	if (!PQgetisnull(num, 0, NUMBER_ROW_FIRST)) {
		/* The key's row (nothing was inserted): judge it. */
		i = pg_row_fill(num, 0, NUMBER_ROW_FIRST, c->key->kind, row,
		    cause);
		PQclear(num);
		PQclear(ins);
		return i == 0 ? 0 : -1;
	}
	if ((uint32_t)pg_value_i64(num, 0, 1) != c->day) {
		/* The server's day is not the one scanned: again. */
		c->day = (uint32_t)pg_value_i64(num, 0, 1);
		PQclear(num);
		PQclear(ins);
		c->tries++;
		return 2;
	}
	if (PQgetisnull(num, 0, 2)) {
		PQclear(num);
		PQclear(ins);
		errno = ERANGE;		/* the day's numbers are used up */
		return -1;
	}
	*e = *c->want;
	e->kind = (uint8_t)c->key->kind;
	e->key_length = 0;
	e->state = SUBTAB_RESERVED;
	e->date = c->day;
	e->seq = (uint32_t)pg_value_i64(num, 0, 2);
	e->created_at_ms = pg_value_i64(num, 0, 0);
	e->reserved_at_ms = e->created_at_ms;
	e->updated_at_ms = e->created_at_ms;
	memset(e->file_digest, 0, sizeof e->file_digest);
	PQclear(num);
	pg_name_of(e, id, path);
	if (PQgetisnull(ins, 0, 0)) {
		/*
		 * A number, no row: the insert did not see it (it ran on
		 * another session, a pooler's).  The number stays unused;
		 * the next turn takes another.
		 */
		PQclear(ins);
		memset(row, 0, sizeof *row);
		c->tries++;
		return 2;
	}
	if (strcmp(PQgetvalue(ins, 0, 0), id) != 0) {
		/* Never expected: the SQL's name is taskfile's. */
		asprintf(cause, "PostgreSQL: the reservation named %s, idem "
		    "names it %s", PQgetvalue(ins, 0, 0), id);
		PQclear(ins);
		memset(row, 0, sizeof *row);
		errno = EPROTO;
		return -1;
	}
	PQclear(ins);
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
	enum pg_prepared which[2] = { PG_PREP_NUMBER, PG_PREP_CLAIM };
	const char	*sql[2] = { pg_number_sql, pg_claim_sql };
	const struct pg_params *pp[2];
	struct pg_params p, q;
	PGconn		*conn;
	PGresult	*res[2];
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
		pg_claim_params(st, c, &p, &q);
		pp[0] = &p;
		pp[1] = &q;
		if (pg_exec_prepared_pair(st, conn, which, sql, pp, res,
		    cause) != 0)
			return -1;
		c->res[0] = (struct pg_result *)res[0];
		c->res[1] = (struct pg_result *)res[1];
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
