/* SPDX-License-Identifier: ISC */
/*
 * pg_effects.c: the PostgreSQL store's effect ledger (doc/cluster.md,
 * "Effects"): read, reserve, begin the next attempt, settle, extend a
 * lease, each one compare-and-set on (epoch, token); and the unfinished
 * rows of both kinds that diagnose lists.  The connection, the
 * statements and the row's head are pg_conn.c's (pg_int.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>
#include <sodium.h>

#include "digest.h"
#include "pg_int.h"
#include "store.h"

/* An effect's columns, in effect_fill's order. */
#define EFFECT_COLUMNS \
	"state, digest_schema, request_digest, epoch, owner_token, " \
	"created_at_ms, (extract(epoch from reserved_at) * 1000)::bigint, " \
	"(extract(epoch from updated_at) * 1000)::bigint, file_digest, " \
	"receipt, lease_granted, " \
	"(extract(epoch from (lease_expires - clock_timestamp())) * 1000)" \
	"::bigint, owner_host"

#define LEASE_FROM_NOW(param) \
	"clock_timestamp() + " param "::integer * interval '1 millisecond'"

static int
effect_fill(PGresult *res, int i, int first, enum subtab_kind kind,
    struct pgstore_row *row, char **cause)
{
	struct subtab_entry	*e = &row->entry;
	const char		*result;

	pg_row_head(res, i, first, kind, row);
	if (digest_from_hex(PQgetvalue(res, i, first + 2),
	    e->request_digest) != 0 || (!PQgetisnull(res, i, first + 8) &&
	    digest_from_hex(PQgetvalue(res, i, first + 8),
	    e->file_digest) != 0) || strlen(PQgetvalue(res, i, first + 4)) !=
	    PGSTORE_TOKEN_BYTES) {
		asprintf(cause, "PostgreSQL: an effect row of idem_submission "
		    "that idem did not write (bad digest or token)");
		errno = EPROTO;
		return -1;
	}
	row->epoch = pg_value_i64(res, i, first + 3);
	e->attempt = (uint32_t)row->epoch;
	snprintf(row->token, sizeof row->token, "%s",
	    PQgetvalue(res, i, first + 4));
	e->fence = strtoull(row->token, NULL, 16);
	e->created_at_ms = pg_value_i64(res, i, first + 5);
	e->reserved_at_ms = pg_value_i64(res, i, first + 6);
	e->updated_at_ms = pg_value_i64(res, i, first + 7);
	if (!PQgetisnull(res, i, first + 9)) {
		result = PQgetvalue(res, i, first + 9);
		if ((row->receipt = strdup(result)) == NULL) {
			*cause = strdup("out of memory");
			errno = ENOMEM;
			return -1;
		}
		e->result_length = (uint32_t)strlen(result);
	}
	if (strcmp(PQgetvalue(res, i, first + 10), "t") == 0)
		e->effect_flags |= SUBTAB_EFFECT_RECOVERED;
	row->lease_ms_left = pg_value_i64(res, i, first + 11);
	snprintf(row->owner, sizeof row->owner, "%s",
	    PQgetvalue(res, i, first + 12));
	return 0;
}

/* A statement returning at most one effect row: 1 filled, 0 none. */
static int
effect_exec(struct pgstore *st, const char *sql, const struct pg_params *p,
    struct pgstore_row *row, const char *what, char **cause)
{
	PGconn		*conn;
	PGresult	*res;

	*cause = NULL;
	if ((conn = pg_conn(st, cause)) == NULL)
		return -1;
	res = pg_exec(conn, sql, p);
	return pg_one_row(st, res, effect_fill, SUBTAB_KIND_EFFECT, row, what,
	    cause);
}

int
pgstore_effect_read(struct pgstore *st, const struct pgstore_key *key,
    struct pgstore_row *row, char **cause)
{
	struct pg_params p;

	pg_params_key(&p, st, key);
	return effect_exec(st, "SELECT " EFFECT_COLUMNS " FROM idem_submission "
	    "WHERE " KEY_WHERE, &p, row, "reading an effect", cause);
}

int
pgstore_effect_reserve(struct pgstore *st, const struct pgstore_key *key,
    const uint8_t *request_digest, int64_t lease_ms, struct pgstore_row *row,
    char **cause)
{
	struct pg_params p;
	char		schema[4], digest[IDEM_DIGEST_HEX_SIZE], seq[16];
	char		token[PGSTORE_TOKEN_BYTES + 1], lease[24];

	pg_params_key(&p, st, key);
	snprintf(schema, sizeof schema, "%d", SUBTAB_SCHEMA_GENERIC_JSON_V1);
	digest_to_hex(request_digest, digest);
	/*
	 * An effect has no number, but the table's UNIQUE (kind, date, seq)
	 * holds for it too: day 0 and a random positive seq, without a
	 * counter every begin would wait for.  A collision inserts nothing
	 * (ON CONFLICT without a target), like an existing key: the caller
	 * reads again, finds no row, and reserves with another seq.
	 */
	snprintf(seq, sizeof seq, "%" PRIu32,
	    randombytes_uniform(INT32_MAX) + 1);
	pgstore_new_token(token);
	snprintf(lease, sizeof lease, "%" PRId64, lease_ms);
	p.v[p.n++] = schema;		/* $5 */
	p.v[p.n++] = digest;		/* $6 */
	p.v[p.n++] = seq;		/* $7 */
	p.v[p.n++] = st->host;		/* $8 */
	p.v[p.n++] = token;		/* $9 */
	p.v[p.n++] = lease;		/* $10 */
	return effect_exec(st, "INSERT INTO idem_submission (workspace_id, "
	    "kind, scope, client_submission_id, digest_schema, request_digest, "
	    "state, date, seq, task_id, task_path, sender, recipient, "
	    "created_at_ms, reserved_at, updated_at, epoch, owner_host, "
	    "owner_token, owner_pid, owner_started, lease_expires) VALUES "
	    "($1, $2, $3, $4, $5, $6, 1, 0, $7, '', '', '', '', "
	    "(extract(epoch from clock_timestamp()) * 1000)::bigint, "
	    "clock_timestamp(), clock_timestamp(), 1, $8, $9, pg_backend_pid(), "
	    SESSION_STARTED ", " LEASE_FROM_NOW("$10") ") ON CONFLICT DO "
	    "NOTHING RETURNING " EFFECT_COLUMNS, &p, row, "reserving an effect",
	    cause);
}

int
pgstore_effect_rebegin(struct pgstore *st, const struct pgstore_key *key,
    int64_t epoch, const char *token, int64_t lease_ms,
    struct pgstore_row *row, char **cause)
{
	struct pg_params p;
	char		epoch_s[24], fresh[PGSTORE_TOKEN_BYTES + 1], lease[24];

	pg_params_key(&p, st, key);
	snprintf(epoch_s, sizeof epoch_s, "%" PRId64, epoch);
	pgstore_new_token(fresh);
	snprintf(lease, sizeof lease, "%" PRId64, lease_ms);
	p.v[p.n++] = epoch_s;		/* $5 */
	p.v[p.n++] = token;		/* $6 */
	p.v[p.n++] = st->host;		/* $7 */
	p.v[p.n++] = fresh;		/* $8 */
	p.v[p.n++] = lease;		/* $9 */
	return effect_exec(st, "UPDATE idem_submission SET state = 1, "
	    "epoch = epoch + 1, owner_host = $7, owner_token = $8, owner_pid = "
	    "pg_backend_pid(), owner_started = " SESSION_STARTED ", "
	    "lease_expires = " LEASE_FROM_NOW("$9") ", updated_at = "
	    "clock_timestamp() WHERE " KEY_WHERE " AND epoch = $5 AND "
	    "owner_token = $6 AND state = 4 RETURNING " EFFECT_COLUMNS, &p, row,
	    "beginning an effect's next attempt", cause);
}

int
pgstore_effect_settle(struct pgstore *st, const struct pgstore_key *key,
    const struct pgstore_effect_change *c, struct pgstore_row *row,
    char **cause)
{
	struct pg_params p;
	char		epoch_s[24], from[4], to[4];
	char		digest[IDEM_DIGEST_HEX_SIZE];

	pg_params_key(&p, st, key);
	snprintf(epoch_s, sizeof epoch_s, "%" PRId64, c->epoch);
	snprintf(from, sizeof from, "%d", c->from_state);
	snprintf(to, sizeof to, "%d", c->to_state);
	if (c->result_digest != NULL)
		digest_to_hex(c->result_digest, digest);
	p.v[p.n++] = epoch_s;		/* $5 */
	p.v[p.n++] = c->token;		/* $6 */
	p.v[p.n++] = from;		/* $7 */
	p.v[p.n++] = to;		/* $8 */
	p.v[p.n++] = c->result;		/* $9: NULL unless committed */
	p.v[p.n++] = c->result_digest != NULL ? digest : NULL;	/* $10 */
	p.v[p.n++] = c->recovered ? "t" : "f";			/* $11 */
	p.v[p.n++] = c->lapsed_only ? "t" : "f";		/* $12 */
	/*
	 * committed_at is the server's clock at the commit, so every broker
	 * renders the same receipt from the row.
	 */
	return effect_exec(st, "UPDATE idem_submission SET state = "
	    "$8::smallint, receipt = $9, file_digest = $10, lease_granted = "
	    "$11::boolean, created_at_ms = CASE WHEN $8::smallint = 3 THEN "
	    "(extract(epoch from clock_timestamp()) * 1000)::bigint ELSE "
	    "created_at_ms END, updated_at = clock_timestamp() WHERE "
	    KEY_WHERE " AND epoch = $5 AND owner_token = $6 AND state = "
	    "$7::smallint AND (NOT $12::boolean OR state <> 1 OR "
	    "lease_expires <= clock_timestamp()) RETURNING " EFFECT_COLUMNS, &p,
	    row, "recording an effect's outcome", cause);
}

int
pgstore_effect_extend(struct pgstore *st, const struct pgstore_key *key,
    int64_t epoch, const char *token, int64_t lease_ms,
    struct pgstore_row *row, char **cause)
{
	struct pg_params p;
	char		epoch_s[24], lease[24];

	pg_params_key(&p, st, key);
	snprintf(epoch_s, sizeof epoch_s, "%" PRId64, epoch);
	snprintf(lease, sizeof lease, "%" PRId64, lease_ms);
	p.v[p.n++] = epoch_s;		/* $5 */
	p.v[p.n++] = token;		/* $6 */
	p.v[p.n++] = lease;		/* $7 */
	/*
	 * A lapsed lease is never revived, by the server's clock: another
	 * broker may already have answered outcome_unknown for it.
	 */
	return effect_exec(st, "UPDATE idem_submission SET lease_expires = "
	    LEASE_FROM_NOW("$7") ", updated_at = clock_timestamp() WHERE "
	    KEY_WHERE " AND epoch = $5 AND "
	    "owner_token = $6 AND state = 1 AND lease_expires > "
	    "clock_timestamp() RETURNING " EFFECT_COLUMNS, &p, row,
	    "extending an effect's lease", cause);
}

/* Each row of sql ($1 the workspace: kind, scope, id, then fill's). */
static int
pg_each(struct pgstore *st, const char *sql, pg_row_fill_fn fill,
    int (*fn)(const char *scope, const char *id, const struct pgstore_row *,
    void *), void *arg, const char *what, char **cause)
{
	PGconn		*conn;
	PGresult	*res;
	struct pg_params p;
	struct pgstore_row row;
	int		 i, rc = 0;

	*cause = NULL;
	if ((conn = pg_conn(st, cause)) == NULL)
		return -1;
	p.v[0] = st->workspace;
	p.n = 1;
	res = pg_exec(conn, sql, &p);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return pg_failed(st, res, what, cause);
	for (i = 0; i < PQntuples(res) && rc == 0; i++) {
		if (fill(res, i, 3, (enum subtab_kind)pg_value_i64(res, i, 0),
		    &row, cause) != 0) {
			rc = -1;
			break;
		}
		rc = fn(PQgetvalue(res, i, 1), PQgetvalue(res, i, 2), &row,
		    arg);
		pgstore_row_clear(&row);
	}
	PQclear(res);
	return rc;
}

int
pgstore_unfinished(struct pgstore *st, int (*fn)(const char *scope,
    const char *id, const struct pgstore_row *, void *), void *arg,
    char **cause)
{
	/* Effects have their own columns: pgstore_effects_unfinished. */
	return pg_each(st, "SELECT kind, scope, client_submission_id, "
	    ROW_COLUMNS " FROM idem_submission WHERE workspace_id = $1 AND "
	    "state < 3 AND kind <> 3 ORDER BY reserved_at", pg_row_fill, fn,
	    arg, "listing unfinished submissions", cause);
}

int
pgstore_effects_unfinished(struct pgstore *st, int (*fn)(const char *scope,
    const char *id, const struct pgstore_row *, void *), void *arg,
    char **cause)
{
	return pg_each(st, "SELECT kind, scope, client_submission_id, "
	    EFFECT_COLUMNS " FROM idem_submission WHERE workspace_id = $1 AND "
	    "kind = 3 AND state IN (1, 4, 5) ORDER BY reserved_at",
	    effect_fill, fn, arg, "listing unfinished effects", cause);
}
