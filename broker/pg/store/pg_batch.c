/* SPDX-License-Identifier: ISC */
/*
 * pg_batch.c: several creations' grants, or commits, in one statement
 * over arrays (doc/cluster.md, "Group commit at the broker"): one round
 * trip, one implicit transaction, one synchronous commit and so one WAL
 * flush for every member.  broker/pg/pg_group.c forms the batches; this
 * file only sends one and reads what came back.
 *
 * Each member's row changes under its own fence, in the UPDATE's WHERE,
 * exactly as pgstore_grant's or pgstore_commit's lone statement would
 * change it: a row whose epoch or token moved is not changed and not
 * returned.  The rows are locked first, in the order of their keys (a
 * SELECT ... FOR UPDATE in the same statement), so two batches, or a
 * batch and a takeover, never wait for each other in a cycle.  A member
 * learns its outcome only from RETURNING, read once the command's last
 * result (the commit's) is in: a batch that did not commit changed no
 * one's row.
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
 * kinds, scopes, ids, epochs and tokens; the commit's $7 and $8 the file
 * digests and receipts.  Each array is a sub-SELECT, which the planner
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

/* $7 the lease (ms): pgstore_grant's change. */
#define GRANT_BATCH_SQL \
	BATCH_MEMBERS("", "") \
	"UPDATE idem_submission s SET lease_granted = true, lease_expires = " \
	"clock_timestamp() + $7::integer * interval '1 millisecond', " \
	"updated_at = clock_timestamp()" BATCH_FENCE

/* pgstore_commit's change. */
#define COMMIT_BATCH_SQL \
	BATCH_MEMBERS(", digest, receipt", ", " BATCH_ARRAY(7, "text") ", " \
	BATCH_ARRAY(8, "text")) \
	"UPDATE idem_submission s SET state = 3, file_digest = l.digest, " \
	"receipt = l.receipt, updated_at = clock_timestamp()" BATCH_FENCE

/*
 * The generic plan is made once, with the table's statistics of that
 * moment: on a table still small (a new workspace, never analyzed) the
 * planner hashes the members against a scan of every row, and keeps
 * that plan while the table grows (measured: 1 ms a batch at 3,000
 * rows, growing with them).  Every lookup here has the key's index, so
 * the session that sends batches (a creation thread's, whose every
 * statement is a lookup of a key) plans without scans of the table,
 * hash or merge joins: the members in a nested loop over the index.
 */
#define BATCH_PLANNER \
	"SELECT set_config('enable_seqscan', 'off', false), " \
	"set_config('enable_hashjoin', 'off', false), " \
	"set_config('enable_mergejoin', 'off', false)"

/* One array's text form, being written. */
struct batch_array {
	FILE	*f;
	char	*text;
	size_t	 length;
	int	 n;
};

static int
batch_array_open(struct batch_array *a)
{
	memset(a, 0, sizeof *a);
	if ((a->f = open_memstream(&a->text, &a->length)) == NULL)
		return -1;
	fputc('{', a->f);
	return 0;
}

/* An element: quoted, with '\' and '"' escaped (any text), or as it is. */
static void
batch_array_add(struct batch_array *a, const char *v, int quote)
{
	if (a->n++ > 0)
		fputc(',', a->f);
	if (!quote) {
		fputs(v, a->f);
		return;
	}
	fputc('"', a->f);
	for (; *v != '\0'; v++) {
		if (*v == '\\' || *v == '"')
			fputc('\\', a->f);
		fputc(*v, a->f);
	}
	fputc('"', a->f);
}

/* The text, or NULL (out of memory). */
static char *
batch_array_close(struct batch_array *a)
{
	fputc('}', a->f);
	if (fclose(a->f) != 0) {
		free(a->text);
		return NULL;
	}
	return a->text;
}

/* The connection's end, after a batch left it in an unknown state. */
static void
batch_drop(struct pgstore *st)
{
	PQfinish((PGconn *)st->conn);
	st->conn = NULL;
	st->prepared = 0;		/* a new session has none */
}

#define BATCH_ARRAYS	7	/* kinds .. receipts */

int
pgstore_batch_send(struct pgstore *st, enum pgstore_batch step,
    struct pgstore_batch_member *const *m, size_t n, char **cause)
{
	enum pg_prepared which = step == PGSTORE_BATCH_GRANT ?
	    PG_PREP_GRANT_BATCH : PG_PREP_COMMIT_BATCH;
	struct batch_array	 a[BATCH_ARRAYS];
	const char		*v[8];
	char			*text[BATCH_ARRAYS];
	char			 num[24], digest[IDEM_DIGEST_HEX_SIZE], lease[16];
	PGconn			*conn;
	PGresult		*res;
	size_t			 i, arrays;
	int			 j, rc = -1;

	*cause = NULL;
	if ((conn = pg_conn(st, cause)) == NULL)
		return -1;
	if ((st->prepared & (1u << which)) == 0) {
		res = PQexec(conn, BATCH_PLANNER);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			return pg_failed(st, res, "setting the batch's planner",
			    cause);
		PQclear(res);
	}
	if ((res = pg_prepare(st, conn, which, step == PGSTORE_BATCH_GRANT ?
	    GRANT_BATCH_SQL : COMMIT_BATCH_SQL)) != NULL)
		return pg_failed(st, res, "preparing a batch", cause);
	arrays = step == PGSTORE_BATCH_GRANT ? 5 : 7;
	memset(text, 0, sizeof text);
	for (i = 0; i < arrays; i++)
		if (batch_array_open(&a[i]) != 0) {
			while (i-- > 0)
				free(batch_array_close(&a[i]));
			*cause = strdup("out of memory");
			return -1;
		}
	for (i = 0; i < n; i++) {
		snprintf(num, sizeof num, "%d", (int)m[i]->key->kind);
		batch_array_add(&a[0], num, 0);
		batch_array_add(&a[1], m[i]->key->scope, 1);
		batch_array_add(&a[2], m[i]->key->id, 1);
		snprintf(num, sizeof num, "%" PRId64, m[i]->epoch);
		batch_array_add(&a[3], num, 0);
		batch_array_add(&a[4], m[i]->token, 1);
		if (step == PGSTORE_BATCH_COMMIT) {
			digest_to_hex(m[i]->file_digest, digest);
			batch_array_add(&a[5], digest, 1);
			batch_array_add(&a[6], m[i]->receipt, 1);
		}
		m[i]->returned = 0;
	}
	for (i = 0; i < arrays; i++)
		text[i] = batch_array_close(&a[i]);
	for (i = 0; i < arrays; i++)
		if (text[i] == NULL) {
			*cause = strdup("out of memory");
			goto out;
		}
	v[0] = st->workspace;
	for (i = 0; i < 5; i++)
		v[1 + i] = text[i];
	if (step == PGSTORE_BATCH_GRANT) {
		snprintf(lease, sizeof lease, "%d", st->lease_ms);
		v[6] = lease;
		j = 7;
	} else {
		v[6] = text[5];
		v[7] = text[6];
		j = 8;
	}
	/* A blocking connection: the whole message is sent, or it failed. */
	if (PQsendQueryPrepared(conn, pg_prepared_names[which], j, v, NULL,
	    NULL, 0) != 1) {
		pg_failed(st, NULL, "sending a batch", cause);
		batch_drop(st);
		goto out;
	}
	rc = 0;
out:
	for (i = 0; i < arrays; i++)
		free(text[i]);
	if (rc != 0)
		errno = EIO;
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
	if (res == NULL || state == NULL ||
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

int
pgstore_batch_wait(struct pgstore *st, enum pgstore_batch step,
    struct pgstore_batch_member *const *m, size_t n,
    enum pgstore_batch_failure *failure, char **cause)
{
	enum pg_prepared which = step == PGSTORE_BATCH_GRANT ?
	    PG_PREP_GRANT_BATCH : PG_PREP_COMMIT_BATCH;
	PGresult	*res;
	int64_t		 k;
	int		 r;

	*cause = NULL;
	/* Its last result, never the rows alone (pg_last_result). */
	res = pg_last_result((PGconn *)st->conn);
	if (res != NULL && PQresultStatus(res) == PGRES_TUPLES_OK) {
		for (r = 0; r < PQntuples(res); r++) {
			k = pg_value_i64(res, r, 0);
			if (k >= 1 && (size_t)k <= n)
				m[k - 1]->returned = 1;
		}
		PQclear(res);
		return 0;
	}
	*failure = batch_failure(st, res, which);
	pg_failed(st, res, step == PGSTORE_BATCH_GRANT ? "granting a batch "
	    "of leases" : "committing a batch", cause);
	if (*failure == PGSTORE_BATCH_LOST)
		batch_drop(st);
	return -1;
}
