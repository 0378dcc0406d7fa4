/* SPDX-License-Identifier: ISC */
/*
 * pg_int.h: what the PostgreSQL store's files share and no caller sees:
 * the row's columns and the key's condition, a statement's parameters,
 * and the helpers pg_conn.c lends pg_effects.c (a connection, a
 * statement, a failure, a row read into a pgstore_row).
 */
#ifndef IDEM_PG_INT_H
#define IDEM_PG_INT_H

#include <libpq-fe.h>

#include "pg.h"

/*
 * The row's columns read into a pgstore_row, in pg_row_fill's order.  The
 * owner's session is looked up in pg_stat_activity (a copy of every
 * backend's status) only for an unfinished row with an owner: it
 * decides nothing for a finished one, and a claim that finds no row
 * need not make that copy.
 */
#define ROW_COLUMNS \
	"state, digest_schema, request_digest, date, seq, sender, " \
	"recipient, created_at_ms, " \
	"(extract(epoch from reserved_at) * 1000)::bigint, " \
	"(extract(epoch from updated_at) * 1000)::bigint, " \
	"file_digest, receipt, epoch, owner_token, owner_host, " \
	"lease_granted, " \
	"(extract(epoch from (lease_expires - clock_timestamp())) * 1000)" \
	"::bigint, " \
	"CASE WHEN owner_pid IS NULL OR state >= 3 THEN false WHEN " \
	"owner_pid = pg_backend_pid() THEN true ELSE EXISTS (SELECT 1 FROM " \
	"pg_stat_activity a WHERE a.pid = owner_pid AND " \
	"a.backend_start = owner_started) END"
#define ROW_COLUMN_COUNT	18

/* The key's row, $1 to $4 (pg.h: one indexed value, not four columns). */
#define KEY_WHERE	PGSTORE_KEY_WHERE

/* This session's identity, for "is the owner's session gone?". */
#define SESSION_STARTED \
	"(SELECT backend_start FROM pg_stat_activity WHERE " \
	"pid = pg_backend_pid())"

/* The key's four parameters, then up to sixteen more. */
struct pg_params {
	const char	*v[20];
	int		 n;
	char		 kind[4];
};

/* How a row of a result becomes a pgstore_row: pg_row_fill, effect_fill. */
typedef int (*pg_row_fill_fn)(PGresult *, int, int, enum subtab_kind,
    struct pgstore_row *, char **);

/*
 * The statements of every creation, prepared once per session: parsing
 * and planning them each time cost more of the server's CPU than
 * running them (the claim's most: measured, 430 creations/s against
 * 250 with it planned each time).  The batches' are pg_batch.c's.
 */
enum pg_prepared {
	PG_PREP_CLAIM,
	PG_PREP_READ,
	PG_PREP_GRANT,
	PG_PREP_COMMIT,
	PG_PREP_STEP_BATCH,
	PG_PREP_COUNT
};
extern const char *const pg_prepared_names[PG_PREP_COUNT];

/*
 * The grant and the commit of one row under its fence ($1..$4 the key,
 * $5 epoch, $6 token; the grant's $7 the lease in ms, the commit's $7
 * the file's digest, $8 the receipt): 1 row changed, or 0.
 */
#define GRANT_SQL \
	"UPDATE idem_submission SET lease_granted = true, lease_expires = " \
	"clock_timestamp() + $7::integer * interval '1 millisecond', " \
	"updated_at = clock_timestamp() WHERE " KEY_WHERE " AND epoch = $5 " \
	"AND owner_token = $6 AND state < 3"
#define COMMIT_SQL \
	"UPDATE idem_submission SET state = 3, file_digest = $7, receipt = " \
	"$8, updated_at = clock_timestamp() WHERE " KEY_WHERE " AND epoch = " \
	"$5 AND owner_token = $6 AND state < 3"

/* A grant's or a commit's parameters; the buffers hold their text. */
struct pg_fence_text {
	char	epoch[24];
	char	lease[16];
	char	digest[2 * IDEM_SHA256_BYTES + 1];
};

/* ---- pg_claim.c ----------------------------------------------------- */

/* The claim's turn as its statement's parameters. */
void	 pg_claim_params(const struct pgstore *, const struct pgstore_claim *,
	    struct pg_params *);
extern const char pg_claim_sql[];

/* ---- pg_conn.c ------------------------------------------------------ */

/* sql as the prepared statement which, prepared on this session first. */
PGresult *pg_exec_prepared(struct pgstore *, PGconn *, enum pg_prepared,
	    const char *sql, const struct pg_params *);

void	 pg_grant_params(const struct pgstore *, const struct pgstore_key *,
	    int64_t epoch, const char *token, struct pg_params *,
	    struct pg_fence_text *);
void	 pg_commit_params(const struct pgstore *, const struct pgstore_key *,
	    int64_t epoch, const char *token, const uint8_t *file_digest,
	    const char *receipt, struct pg_params *, struct pg_fence_text *);
/* A task's id and path from its entry's kind, day, number and roles. */
void	 pg_name_of(const struct subtab_entry *,
	    char id[IDEM_MAX_TASK_ID_BYTES + 16],
	    char path[IDEM_MAX_TASK_PATH_BYTES]);

/* Prepare which as sql on this session unless it has it: NULL, or the failure. */
PGresult *pg_prepare(struct pgstore *, PGconn *, enum pg_prepared which,
	    const char *sql);
/* The last result of the command sent on conn: its answer. */
PGresult *pg_last_result(PGconn *);
/* Did res fail with this SQLSTATE? */
int	 pg_sqlstate(const PGresult *, const char *code);

/* st's connection, made again unless it is OK; NULL with *cause. */
PGconn	*pg_conn(struct pgstore *, char **cause);
/* A failed statement: -1 (pgstore_conn_failed on st's connection). */
int	 pg_failed(struct pgstore *, PGresult *, const char *what,
	    char **cause);
void	 pg_params_key(struct pg_params *, const struct pgstore *,
	    const struct pgstore_key *);
PGresult *pg_exec(PGconn *, const char *sql, const struct pg_params *);
/* A column as a number; NULL reads 0. */
int64_t	 pg_value_i64(PGresult *, int row, int column);
void	 pg_row_head(PGresult *, int i, int first, enum subtab_kind,
	    struct pgstore_row *);
int	 pg_row_fill(PGresult *, int i, int first, enum subtab_kind,
	    struct pgstore_row *, char **cause);
int	 pg_one_row(struct pgstore *, PGresult *, pg_row_fill_fn,
	    enum subtab_kind, struct pgstore_row *, const char *what,
	    char **cause);

#endif
