/* SPDX-License-Identifier: ISC */
/*
 * pg_batch.c: a worker's round (doc/cluster.md, "Group commit at the
 * broker"): every statement its creation threads have waiting, sent in
 * one libpq pipeline on one session, one round trip: each claim's
 * statement (pg_claim.c's, its own transaction, committed without the
 * flush), then the grants and commits as one statement over arrays
 * (one implicit transaction, one synchronous commit and so one WAL
 * flush, which covers the claims before it: one WAL stream), or a lone
 * grant's or commit's own statement.  broker/pg/pg_group.c forms the
 * rounds; this file only sends one and reads what came back.
 *
 * Each grant or commit member's row changes under its own fence, in the
 * UPDATE's WHERE, exactly as pgstore_grant's or pgstore_commit's lone
 * statement would change it: a row whose epoch or token moved is not
 * changed and not returned.  The rows are locked first, in the order of
 * their keys (a SELECT ... FOR UPDATE in the same statement), so two
 * batches, or a batch and a takeover, never wait for each other in a
 * cycle.  A member learns its outcome only from RETURNING, read once
 * the command's last result (the commit's, at its sync) is in: a batch
 * that did not commit changed no one's row.  A claim member gets its
 * result, judged by its own thread (pgstore_claim_end).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "digest.h"
#include "pg_int.h"

/*
 * The members as rows (b), in the order given (i, from 1), each with its
 * key as the one indexed value (pg.h), then those of them that have a
 * row, locked in key order (locked).  $1 the workspace, $2 to $6 the
 * kinds, scopes, ids, epochs and tokens, then the arrays of cols.  Each array is a sub-SELECT, which the planner
 * cannot see into: with the arrays themselves, a custom plan knows their
 * lengths and costs less than the generic one, so the server planned
 * every batch again (measured: twice the server's CPU a creation of the
 * lone statements); so, the generic plan, made once a session.
 */
#define BATCH_ARRAY(n, type)	"(SELECT $" #n "::" type "[])"
#define BATCH_MEMBERS(cols, arrays) \
	"WITH b AS (SELECT " PGSTORE_KEY_SQL("$1::uuid", "u.kind", "u.scope", \
	"u.id") " AS k, u.* FROM unnest(" BATCH_ARRAY(2, "smallint") ", " \
	BATCH_ARRAY(3, "text") ", " BATCH_ARRAY(4, "text") ", " \
	BATCH_ARRAY(5, "bigint") ", " BATCH_ARRAY(6, "text") arrays ") " \
	"WITH ORDINALITY " \
	"AS u(kind, scope, id, epoch, token" cols ", i)), " \
	"locked AS MATERIALIZED (SELECT b.* FROM b JOIN idem_submission s " \
	"ON (" PGSTORE_KEY_SQL("s.workspace_id", "s.kind", "s.scope", \
	"s.client_submission_id") ") = b.k ORDER BY b.k COLLATE \"C\" " \
	"FOR UPDATE OF s) "
/* Each member's row under its own fence, as the lone statements'. */
#define BATCH_FENCE \
	" FROM locked l WHERE (" PGSTORE_KEY_SQL("s.workspace_id", "s.kind", \
	"s.scope", "s.client_submission_id") ") = l.k AND s.epoch = l.epoch " \
	"AND s.owner_token = l.token AND s.state < 3 RETURNING l.i"

/*
 * Grants and commits together, each member's op ($7: 1 a grant, 2 a
 * commit) choosing its change: pgstore_grant's (the lease: $10 ms) or
 * pgstore_commit's (state committed, $8 the file's digest, $9 the
 * receipt; NULL for a grant).  One transaction: a round's grants and
 * commits share its one synchronous commit.
 */
#define STEP_BATCH_SQL \
	BATCH_MEMBERS(", op, digest, receipt", ", " BATCH_ARRAY(7, \
	"smallint") ", " BATCH_ARRAY(8, "text") ", " BATCH_ARRAY(9, "text")) \
	"UPDATE idem_submission s SET lease_granted = CASE WHEN l.op = 1 " \
	"THEN true ELSE s.lease_granted END, lease_expires = CASE WHEN " \
	"l.op = 1 THEN clock_timestamp() + $10::integer * interval " \
	"'1 millisecond' ELSE s.lease_expires END, state = CASE WHEN l.op = " \
	"2 THEN 3 ELSE s.state END, file_digest = CASE WHEN l.op = 2 THEN " \
	"l.digest ELSE s.file_digest END, receipt = CASE WHEN l.op = 2 THEN " \
	"l.receipt ELSE s.receipt END, updated_at = clock_timestamp()" \
	BATCH_FENCE

/*
 * The generic plan is made once, with the table's statistics of that
 * moment: on a table still small (a new workspace, never analyzed) the
 * planner hashes the members against a scan of every row, and keeps
 * that plan while the table grows (measured: 1 ms a batch at 3,000
 * rows, growing with them).  Every lookup here has the key's index, so
 * the session that sends batches (a creation thread's, whose every
 * statement is a lookup of a key) plans without scans of the table,
 * hash or merge joins: the members in a nested loop over the index.
 * Only creation threads send batches: the effect threads' sessions
 * (pg_pool.c's other pool) and the loop's never do, so they keep the
 * planner's defaults (the effect statements are lookups of one key).
 */
#define BATCH_PLANNER \
	"SELECT set_config('enable_seqscan', 'off', false), " \
	"set_config('enable_hashjoin', 'off', false), " \
	"set_config('enable_mergejoin', 'off', false)"

/*
 * One array's text form, being written: a plain buffer, not a memory
 * stream (stdio's locking per character was 3% of a broker's CPU a
 * creation, measured with perf, for receipts copied byte by byte).
 */
struct batch_array {
	char	*text;
	size_t	 length;
	size_t	 size;
	int	 n;
	int	 failed;
};

/* Room for more bytes; on failure the array is marked and stays put. */
static int
batch_array_room(struct batch_array *a, size_t more)
{
	size_t	 size;
	char	*text;

	if (a->failed)
		return -1;
	if (a->length + more + 1 <= a->size)
		return 0;
	size = a->size > 0 ? a->size : 256;
	while (size < a->length + more + 1)
		size *= 2;
	if ((text = realloc(a->text, size)) == NULL) {
		a->failed = 1;
		return -1;
	}
	a->text = text;
	a->size = size;
	return 0;
}

static int
batch_array_open(struct batch_array *a)
{
	memset(a, 0, sizeof *a);
	if (batch_array_room(a, 1) != 0)
		return -1;
	a->text[a->length++] = '{';
	return 0;
}

/* An element: quoted, with '\' and '"' escaped (any text), or as it is. */
static void
batch_array_add(struct batch_array *a, const char *v, int quote)
{
	size_t	 length = strlen(v);

	/* At worst every byte escaped, the quotes and the comma. */
	if (batch_array_room(a, 2 * length + 3) != 0)
		return;
	if (a->n++ > 0)
		a->text[a->length++] = ',';
	if (!quote) {
		memcpy(a->text + a->length, v, length);
		a->length += length;
		return;
	}
	a->text[a->length++] = '"';
	for (; *v != '\0'; v++) {
		if (*v == '\\' || *v == '"')
			a->text[a->length++] = '\\';
		a->text[a->length++] = *v;
	}
	a->text[a->length++] = '"';
}

/* The text, or NULL (out of memory). */
static char *
batch_array_close(struct batch_array *a)
{
	if (batch_array_room(a, 1) != 0) {
		free(a->text);
		return NULL;
	}
	a->text[a->length++] = '}';
	a->text[a->length] = '\0';
	return a->text;
}

#define BATCH_ARRAYS	8	/* kinds .. receipts */

/*
 * The arrays' text of the grant and commit members of m (n of them; at
 * least 2), in text[], and the statement's parameters in v (10).
 */
static int
batch_params(struct pgstore *st, struct pgstore_batch_member *const *m,
    size_t n, char *text[BATCH_ARRAYS], const char *v[10], char lease[16],
    char **cause)
{
	struct batch_array	 a[BATCH_ARRAYS];
	char			 num[24], digest[IDEM_DIGEST_HEX_SIZE];
	size_t			 i;
	int			 commit;

	memset(text, 0, BATCH_ARRAYS * sizeof *text);
	for (i = 0; i < BATCH_ARRAYS; i++)
		if (batch_array_open(&a[i]) != 0) {
			while (i-- > 0)
				free(batch_array_close(&a[i]));
			*cause = strdup("out of memory");
			return -1;
		}
	for (i = 0; i < n; i++) {
		if (m[i]->op == PGSTORE_OP_CLAIM)
			continue;
		commit = m[i]->op == PGSTORE_OP_COMMIT;
		snprintf(num, sizeof num, "%d", (int)m[i]->key->kind);
		batch_array_add(&a[0], num, 0);
		batch_array_add(&a[1], m[i]->key->scope, 1);
		batch_array_add(&a[2], m[i]->key->id, 1);
		snprintf(num, sizeof num, "%" PRId64, m[i]->epoch);
		batch_array_add(&a[3], num, 0);
		batch_array_add(&a[4], m[i]->token, 1);
		batch_array_add(&a[5], commit ? "2" : "1", 0);
		if (commit)
			digest_to_hex(m[i]->file_digest, digest);
		batch_array_add(&a[6], commit ? digest : "NULL", commit);
		batch_array_add(&a[7], commit ? m[i]->receipt : "NULL",
		    commit);
		m[i]->returned = 0;
	}
	for (i = 0; i < BATCH_ARRAYS; i++)
		text[i] = batch_array_close(&a[i]);
	for (i = 0; i < BATCH_ARRAYS; i++)
		if (text[i] == NULL) {
			for (i = 0; i < BATCH_ARRAYS; i++)
				free(text[i]);
			*cause = strdup("out of memory");
			return -1;
		}
	v[0] = st->workspace;
	for (i = 0; i < BATCH_ARRAYS; i++)
		v[1 + i] = text[i];
	snprintf(lease, 16, "%d", st->lease_ms);
	v[9] = lease;
	return 0;
}

/* The batch's statement and its planner, prepared on this session. */
static int
batch_prepare(struct pgstore *st, PGconn *conn, char **cause)
{
	PGresult	*res;

	if ((st->prepared & (1u << PG_PREP_STEP_BATCH)) == 0) {
		res = PQexec(conn, BATCH_PLANNER);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			return pg_failed(st, res, "setting the batch's planner",
			    cause);
		PQclear(res);
	}
	if ((res = pg_prepare(st, conn, PG_PREP_STEP_BATCH, STEP_BATCH_SQL)) !=
	    NULL)
		return pg_failed(st, res, "preparing a batch", cause);
	return 0;
}

int
pgstore_batch_send(struct pgstore *st, struct pgstore_batch_member *const *m,
    size_t n, char **cause)
{
	const char	*v[10];
	char		*text[BATCH_ARRAYS], lease[16];
	PGconn		*conn;
	size_t		 i;
	int		 rc = 0;

	*cause = NULL;
	if ((conn = pg_conn(st, cause)) == NULL ||
	    batch_prepare(st, conn, cause) != 0 ||
	    batch_params(st, m, n, text, v, lease, cause) != 0)
		return -1;
	/* A blocking connection: the whole message is sent, or it failed. */
	if (PQsendQueryPrepared(conn, pg_prepared_names[PG_PREP_STEP_BATCH],
	    10, v, NULL, NULL, 0) != 1) {
		rc = pg_failed(st, NULL, "sending a batch", cause);
		pgstore_drop(st);
	}
	for (i = 0; i < BATCH_ARRAYS; i++)
		free(text[i]);
	return rc;
}

/* What a failed batch's result says of its outcome and of the session. */
static enum pgstore_batch_failure
batch_failure(struct pgstore *st, PGresult *res, enum pg_prepared which)
{
	const char	*state = res != NULL ?
	    PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	/*
	 * No server's answer (libpq's own error: the connection broke), the
	 * session gone, or it is ending (08: connection exceptions; 57P01
	 * to 57P03: terminated, shutting down): the commit's outcome is
	 * not known.
	 */
	if (res == NULL || state == NULL || st->conn == NULL ||
	    PQstatus((PGconn *)st->conn) != CONNECTION_OK ||
	    strncmp(state, "08", 2) == 0 || strncmp(state, "57P0", 4) == 0)
		return PGSTORE_BATCH_LOST;
	/* 26000: the session lost the statement (a pooler's). */
	if (strcmp(state, "26000") == 0)
		st->prepared &= ~(1u << which);
	/* Rolled back: a deadlock, a serialization failure, a timeout. */
	if (strncmp(state, "40", 2) == 0 || strcmp(state, "57014") == 0)
		return PGSTORE_BATCH_TRANSIENT;
	return PGSTORE_BATCH_FAILED;
}

/* The batch's rows that came back: their members are returned. */
static void
batch_returned(PGresult *res, struct pgstore_batch_member *const *m,
    size_t n)
{
	struct pgstore_batch_member *u[PGSTORE_MAX_CONNECTIONS];
	size_t		 i, nu = 0;
	int64_t		 k;
	int		 r;

	/* The ordinals count the grant and commit members only. */
	for (i = 0; i < n; i++)
		if (m[i]->op != PGSTORE_OP_CLAIM)
			u[nu++] = m[i];
	for (r = 0; r < PQntuples(res); r++) {
		k = pg_value_i64(res, r, 0);
		if (k >= 1 && (size_t)k <= nu)
			u[k - 1]->returned = 1;
	}
}

int
pgstore_batch_wait(struct pgstore *st, struct pgstore_batch_member *const *m,
    size_t n, enum pgstore_batch_failure *failure, char **cause)
{
	PGresult	*res;

	*cause = NULL;
	/* Its last result, never the rows alone (pg_last_result). */
	res = pg_last_result((PGconn *)st->conn);
	if (res != NULL && PQresultStatus(res) == PGRES_TUPLES_OK) {
		batch_returned(res, m, n);
		PQclear(res);
		return 0;
	}
	*failure = batch_failure(st, res, PG_PREP_STEP_BATCH);
	pg_failed(st, res, "granting and committing a batch", cause);
	if (*failure == PGSTORE_BATCH_LOST)
		pgstore_drop(st);
	return -1;
}

/* ---- the round ------------------------------------------------------ */

/* The grant and commit members of m: how many, and the one if alone. */
static size_t
round_steps(struct pgstore_batch_member *const *m, size_t n,
    struct pgstore_batch_member **lone)
{
	size_t	i, nu = 0;

	*lone = NULL;
	for (i = 0; i < n; i++)
		if (m[i]->op != PGSTORE_OP_CLAIM) {
			*lone = m[i];
			nu++;
		}
	return nu;
}

/* One statement and its sync in the pipeline: 0, or -1. */
static int
round_queue(PGconn *conn, enum pg_prepared which, int nparams,
    const char *const *v)
{
	if (PQsendQueryPrepared(conn, pg_prepared_names[which], nparams, v,
	    NULL, NULL, 0) != 1 || PQpipelineSync(conn) != 1)
		return -1;
	return 0;
}

int
pgstore_round_send(struct pgstore *st, struct pgstore_batch_member *const *m,
    size_t n, char **cause)
{
	struct pgstore_batch_member *lone;
	struct pg_params	 p;
	struct pg_fence_text	 t;
	const char		*v[10];
	char			*text[BATCH_ARRAYS], lease[16];
	PGconn			*conn;
	PGresult		*res;
	size_t			 i, nu;
	int			 rc = -1, arrays = 0;

	*cause = NULL;
	memset(text, 0, sizeof text);
	/*
	 * Until the pipeline is entered nothing of the round has gone: a
	 * failure there is -2, and its claims may go alone (the leader's
	 * connection failing must not fail the others').
	 */
	if ((conn = pg_conn(st, cause)) == NULL)
		return -2;
	nu = round_steps(m, n, &lone);
	/* Every statement prepared first: PQprepare is a round trip. */
	if (nu < n && (res = pg_prepare(st, conn, PG_PREP_CLAIM,
	    pg_claim_sql)) != NULL) {
		(void)pg_failed(st, res, "preparing a claim", cause);
		return -2;
	}
	if (nu == 1 && (res = lone->op == PGSTORE_OP_GRANT ? pg_prepare(st,
	    conn, PG_PREP_GRANT, GRANT_SQL) : pg_prepare(st, conn,
	    PG_PREP_COMMIT, COMMIT_SQL)) != NULL) {
		(void)pg_failed(st, res, "preparing a grant or commit", cause);
		return -2;
	}
	if (nu > 1) {
		if (batch_prepare(st, conn, cause) != 0 ||
		    batch_params(st, m, n, text, v, lease, cause) != 0) {
			rc = -2;
			goto out;
		}
		arrays = 1;
	}
	if (PQenterPipelineMode(conn) != 1) {
		pg_failed(st, NULL, "entering pipeline mode", cause);
		rc = -2;
		goto out;
	}
	for (i = 0; i < n; i++) {
		if (m[i]->op != PGSTORE_OP_CLAIM)
			continue;
		m[i]->claim->res = NULL;
		pg_claim_params(st, m[i]->claim, &p);
		if (round_queue(conn, PG_PREP_CLAIM, p.n, p.v) != 0)
			goto broken;
	}
	if (nu == 1) {
		if (lone->op == PGSTORE_OP_GRANT)
			pg_grant_params(st, lone->key, lone->epoch, lone->token,
			    &p, &t);
		else
			pg_commit_params(st, lone->key, lone->epoch,
			    lone->token, lone->file_digest, lone->receipt, &p,
			    &t);
		lone->returned = 0;
		if (round_queue(conn, lone->op == PGSTORE_OP_GRANT ?
		    PG_PREP_GRANT : PG_PREP_COMMIT, p.n, p.v) != 0)
			goto broken;
	} else if (nu > 1 && round_queue(conn, PG_PREP_STEP_BATCH, 10, v) != 0)
		goto broken;
	rc = 0;
	goto out;
broken:
	/*
	 * The last sync did not go: the grants and commits did not commit
	 * (an implicit transaction commits at its sync); a claim sent
	 * before may have.
	 */
	pg_failed(st, NULL, "sending a round", cause);
	pgstore_drop(st);
out:
	if (arrays)
		for (i = 0; i < BATCH_ARRAYS; i++)
			free(text[i]);
	if (rc != 0)
		errno = EIO;
	return rc;
}

/*
 * The next statement's result, then its end and its sync, as a pipeline
 * gives them: the result, or NULL (the pipeline is broken: any of the
 * three missing, the commit at the sync included).
 */
static PGresult *
round_result(PGconn *conn)
{
	PGresult	*res, *r = NULL;

	if ((res = PQgetResult(conn)) == NULL)
		return NULL;
	if (PQresultStatus(res) == PGRES_PIPELINE_SYNC ||
	    (r = PQgetResult(conn)) != NULL) {
		/* A sync where a result was due, or a second result. */
		if (PQresultStatus(res) != PGRES_PIPELINE_SYNC)
			PQclear(r);
		PQclear(res);
		return NULL;
	}
	r = PQgetResult(conn);
	if (PQresultStatus(r) != PGRES_PIPELINE_SYNC) {
		PQclear(r);
		PQclear(res);
		return NULL;
	}
	PQclear(r);
	return res;
}

int
pgstore_round_wait(struct pgstore *st, struct pgstore_batch_member *const *m,
    size_t n, enum pgstore_batch_failure *failure, char **cause)
{
	struct pgstore_batch_member *lone;
	PGconn		*conn = (PGconn *)st->conn;
	PGresult	*res;
	size_t		 i, nu;

	*cause = NULL;
	nu = round_steps(m, n, &lone);
	for (i = 0; i < n; i++) {
		if (m[i]->op != PGSTORE_OP_CLAIM)
			continue;
		if ((res = round_result(conn)) == NULL)
			goto broken;
		/* The leader's session lost it (a pooler's): its bit. */
		if (pg_sqlstate(res, "26000"))
			st->prepared &= ~(1u << PG_PREP_CLAIM);
		m[i]->claim->res = (struct pg_result *)res;
	}
	if (nu == 0)
		goto done;
	if ((res = round_result(conn)) == NULL)
		goto broken;
	if (nu == 1) {
		if (PQresultStatus(res) == PGRES_COMMAND_OK) {
			lone->returned = strcmp(PQcmdTuples(res), "0") != 0;
			PQclear(res);
			goto done;
		}
		*failure = batch_failure(st, res, lone->op == PGSTORE_OP_GRANT ?
		    PG_PREP_GRANT : PG_PREP_COMMIT);
	} else {
		if (PQresultStatus(res) == PGRES_TUPLES_OK) {
			batch_returned(res, m, n);
			PQclear(res);
			goto done;
		}
		*failure = batch_failure(st, res, PG_PREP_STEP_BATCH);
	}
	/* Rolled back: the pipeline is whole, the session fine. */
	pg_failed(st, res, nu == 1 ? (lone->op == PGSTORE_OP_GRANT ?
	    "granting a lease" : "committing") : "granting and committing a "
	    "batch", cause);
	if (*failure == PGSTORE_BATCH_LOST) {
		pgstore_drop(st);
		return -1;
	}
	if (PQexitPipelineMode(conn) != 1) {
		pgstore_drop(st);
		*failure = PGSTORE_BATCH_FAILED;	/* it rolled back */
	}
	return -1;
done:
	if (PQexitPipelineMode(conn) != 1)
		pgstore_drop(st);
	return 0;
broken:
	/*
	 * The connection broke (or the pipeline made no sense): what was
	 * not read is not known, the grants' and commits' commit included.
	 */
	*failure = PGSTORE_BATCH_LOST;
	pg_failed(st, NULL, "reading a round", cause);
	pgstore_drop(st);
	return -1;
}
