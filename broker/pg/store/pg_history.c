/* SPDX-License-Identifier: ISC */
/*
 * pg_history.c: the PostgreSQL store's history in bulk (doc/cluster.md,
 * "Reports, effects, history"): a local history imported into the rows
 * (idemctl store import), committed rows compacted to tombstones
 * (idemctl compact --store) and the workspace's counts (stats).
 *
 * The import is one transaction that the caller opens, feeds and
 * finishes: a row already there with the same facts is left alone, one
 * with other facts (or another submission on the same number) is a
 * conflict, and a conflict rolls everything back.  Nothing here reads
 * the local store: idemctl reads it through store.h and gives the rows.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>
#include <sodium.h>

#include "digest.h"
#include "pg.h"
#include "store.h"

/* owner_host of an imported row: no broker ever held it. */
#define PGSTORE_IMPORT_OWNER	"idemctl-import"

static int
ph_command(struct pgstore *st, const char *sql, int n,
    const char *const *values, const char *what, char **cause)
{
	PGresult	*res;

	res = PQexecParams((PGconn *)st->conn, sql, n, NULL, values, NULL,
	    NULL, 0);
	if (PQresultStatus(res) != PGRES_COMMAND_OK &&
	    PQresultStatus(res) != PGRES_TUPLES_OK)
		return pgstore_failed(st, (struct pg_result *)res, what, cause);
	PQclear(res);
	return 0;
}

/* A query's rows (PQclear them), or NULL with *cause (pgstore_failed). */
static PGresult *
ph_query(struct pgstore *st, const char *sql, int n,
    const char *const *values, const char *what, char **cause)
{
	PGresult	*res;

	res = PQexecParams((PGconn *)st->conn, sql, n, NULL, values, NULL,
	    NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		(void)pgstore_failed(st, (struct pg_result *)res, what, cause);
		return NULL;
	}
	return res;
}

/* A number as text parameters: $1 the workspace, $2 kind, $3 date, $4 seq. */
struct ph_number {
	char		 kind[4], date[16], seq[16];
	const char	*v[4];
};

static void
ph_number(struct pgstore *st, enum subtab_kind kind, uint32_t date,
    uint32_t seq, struct ph_number *n)
{
	snprintf(n->kind, sizeof n->kind, "%d", (int)kind);
	snprintf(n->date, sizeof n->date, "%" PRIu32, date);
	snprintf(n->seq, sizeof n->seq, "%" PRIu32, seq);
	n->v[0] = st->workspace;
	n->v[1] = n->kind;
	n->v[2] = n->date;
	n->v[3] = n->seq;
}

int
pgstore_import_begin(struct pgstore *st, char **cause)
{
	*cause = NULL;
	if (pgstore_conn(st, cause) == NULL)
		return -1;
	return ph_command(st, "BEGIN", 0, NULL, "BEGIN", cause);
}

static void
ph_conflict(char **cause, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
ph_conflict(char **cause, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	if (vasprintf(cause, fmt, ap) == -1)
		*cause = NULL;
	va_end(ap);
}

/* Is (kind, date, seq) another's (a row, or a legacy number)? */
static int
ph_number_taken(struct pgstore *st, const char *kind, const char *date,
    const char *seq, const char *scope, const char *id, char **holder,
    char **cause)
{
	const char	*v[6] = { st->workspace, kind, date, seq, scope, id };
	PGresult	*res;

	/* A legacy number (id NULL) is checked against every row. */
	if ((res = ph_query(st, "SELECT client_submission_id FROM "
	    "idem_submission WHERE workspace_id = $1 AND kind = $2 AND "
	    "date = $3 AND seq = $4 AND NOT (scope = coalesce($5, '') AND "
	    "client_submission_id = coalesce($6, '')) UNION ALL SELECT "
	    "'(a call without an id)' FROM idem_legacy WHERE workspace_id = "
	    "$1 AND kind = $2 AND date = $3 AND seq = $4 AND $6 IS NOT NULL "
	    "LIMIT 1", 6, v, "looking a number up", cause)) == NULL)
		return -1;
	*holder = NULL;
	if (PQntuples(res) > 0 &&
	    (*holder = strdup(PQgetvalue(res, 0, 0))) == NULL) {
		PQclear(res);
		errno = ENOMEM;
		*cause = strdup("out of memory");
		return -1;
	}
	PQclear(res);
	return *holder != NULL;
}

/* A time in ms as text: an int64's 20 characters and the NUL. */
#define PH_MS_SIZE	24

/* The times of an imported row as text. */
static void
ph_times(const struct subtab_entry *e, char created[PH_MS_SIZE],
    char reserved[PH_MS_SIZE], char updated[PH_MS_SIZE])
{
	snprintf(created, PH_MS_SIZE, "%" PRId64, e->created_at_ms);
	/* A tombstone of the local index keeps no other time. */
	snprintf(reserved, PH_MS_SIZE, "%" PRId64, e->reserved_at_ms != 0 ?
	    e->reserved_at_ms : e->created_at_ms);
	snprintf(updated, PH_MS_SIZE, "%" PRId64, e->updated_at_ms != 0 ?
	    e->updated_at_ms : e->created_at_ms);
}

/* The facts an import compares, column 3 the kind's own (task_id, epoch). */
#define PH_ROW_OF_KEY(column) "SELECT digest_schema, request_digest, " \
	"state, " column ", created_at_ms FROM idem_submission WHERE " \
	PGSTORE_KEY_WHERE

/*
 * The row of this key, if the store has it (NULL with *cause on an
 * error).  v[0] to v[3] are set to the key's $1 to $4: the caller's
 * INSERT goes on from them.
 */
static PGresult *
ph_row_of_key(struct pgstore *st, const char **v, const char *kind,
    const struct pgstore_key *key, const char *sql, const char *what,
    char **cause)
{
	v[0] = st->workspace;
	v[1] = kind;
	v[2] = key->scope;
	v[3] = key->id;
	return ph_query(st, sql, 4, v, what, cause);
}

int
pgstore_import_row(struct pgstore *st, const struct pgstore_key *key,
    const struct subtab_entry *e, const char *receipt,
    enum pgstore_import_result *result, char **cause)
{
	PGresult	*res;
	const char	*v[20];
	char		 kind[4], schema[4], digest[IDEM_DIGEST_HEX_SIZE];
	char		 file[IDEM_DIGEST_HEX_SIZE], state[4], date[16], seq[16];
	char		 id[IDEM_MAX_TASK_ID_BYTES + 16];
	char		 path[IDEM_MAX_TASK_PATH_BYTES];
	char		 created[PH_MS_SIZE], reserved[PH_MS_SIZE];
	char		 updated[PH_MS_SIZE];
	char		 sender[IDEM_MAX_ROLE_BYTES + 1];
	char		 recipient[IDEM_MAX_RECIPIENT_BYTES + 1], *holder;
	int		 rc;

	*cause = NULL;
	snprintf(kind, sizeof kind, "%d", (int)key->kind);
	snprintf(schema, sizeof schema, "%u", (unsigned)e->schema);
	digest_to_hex(e->request_digest, digest);
	digest_to_hex(e->file_digest, file);
	snprintf(state, sizeof state, "%d", receipt != NULL ?
	    SUBTAB_COMMITTED : PGSTORE_STATE_TOMBSTONE);
	snprintf(date, sizeof date, "%" PRIu32, e->date);
	snprintf(seq, sizeof seq, "%" PRIu32, e->seq);
	taskfile_format_id(e->kind, e->date, e->seq, e->sender,
	    e->sender_length, e->recipient, e->recipient_length, id,
	    sizeof id);
	taskfile_format_path(e->kind, id, path, sizeof path);
	snprintf(sender, sizeof sender, "%.*s", (int)e->sender_length,
	    e->sender);
	snprintf(recipient, sizeof recipient, "%.*s",
	    (int)e->recipient_length, e->recipient);
	ph_times(e, created, reserved, updated);

	if ((res = ph_row_of_key(st, v, kind, key, PH_ROW_OF_KEY("task_id"),
	    "reading a submission", cause)) == NULL)
		return -1;
	if (PQntuples(res) == 1) {
		int	s = atoi(PQgetvalue(res, 0, 2));

		/*
		 * The same binding and the same receipt's facts: imported
		 * before (a tombstone on either side is the same history).
		 */
		if (strcmp(PQgetvalue(res, 0, 0), schema) == 0 &&
		    strcmp(PQgetvalue(res, 0, 1), digest) == 0 &&
		    strcmp(PQgetvalue(res, 0, 3), id) == 0 &&
		    strcmp(PQgetvalue(res, 0, 4), created) == 0 &&
		    (s == SUBTAB_COMMITTED || s == PGSTORE_STATE_TOMBSTONE))
			*result = PGSTORE_IMPORT_PRESENT;
		else {
			*result = PGSTORE_IMPORT_CONFLICT;
			ph_conflict(cause, "the store holds it with other "
			    "facts: %s, %s, digest %.12s..., created_at_ms %s "
			    "(the local history: %s, committed, digest "
			    "%.12s..., created_at_ms %s)",
			    PQgetvalue(res, 0, 3), s == SUBTAB_COMMITTED ?
			    "committed" : s == PGSTORE_STATE_TOMBSTONE ?
			    "tombstone" : "unfinished", PQgetvalue(res, 0, 1),
			    PQgetvalue(res, 0, 4), id, digest, created);
		}
		PQclear(res);
		return 0;
	}
	PQclear(res);
	if ((rc = ph_number_taken(st, kind, date, seq, key->scope, key->id,
	    &holder, cause)) != 0) {
		if (rc < 0)
			return -1;
		*result = PGSTORE_IMPORT_CONFLICT;
		ph_conflict(cause, "its number (%s) is another submission's "
		    "in the store: %s", id, holder);
		free(holder);
		return 0;
	}
	v[4] = schema;			/* $5 */
	v[5] = digest;			/* $6 */
	v[6] = state;			/* $7 */
	v[7] = date;			/* $8 */
	v[8] = seq;			/* $9 */
	v[9] = id;			/* $10 */
	v[10] = path;			/* $11 */
	v[11] = sender;			/* $12 */
	v[12] = recipient;		/* $13 */
	v[13] = created;		/* $14 */
	v[14] = reserved;		/* $15 */
	v[15] = updated;		/* $16 */
	v[16] = receipt != NULL ? file : NULL;	/* $17: none kept */
	v[17] = receipt;		/* $18 */
	v[18] = PGSTORE_IMPORT_OWNER;	/* $19 */
	if (ph_command(st, "INSERT INTO idem_submission (workspace_id, kind, "
	    "scope, client_submission_id, digest_schema, request_digest, "
	    "state, date, seq, task_id, task_path, sender, recipient, "
	    "created_at_ms, reserved_at, updated_at, file_digest, receipt, "
	    "epoch, owner_host, owner_token, lease_expires, lease_granted) "
	    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, "
	    "$14, to_timestamp($15::bigint / 1000.0), "
	    "to_timestamp($16::bigint / 1000.0), $17, $18, 1, $19, '', "
	    "clock_timestamp(), true)", 19, v, "importing a submission",
	    cause) != 0)
		return -1;
	*result = PGSTORE_IMPORT_ADDED;
	return 0;
}

int
pgstore_import_effect(struct pgstore *st, const struct pgstore_key *key,
    const struct subtab_entry *e, const char *result, int tombstone,
    enum pgstore_import_result *out, char **cause)
{
	PGresult	*res;
	const char	*v[16];
	char		 schema[4], digest[IDEM_DIGEST_HEX_SIZE];
	char		 file[IDEM_DIGEST_HEX_SIZE], state[4], seq[16];
	char		 created[PH_MS_SIZE], reserved[PH_MS_SIZE];
	char		 updated[PH_MS_SIZE], epoch[16];
	char		 token[PGSTORE_TOKEN_BYTES + 1];
	int		 s, tries;

	*cause = NULL;
	snprintf(schema, sizeof schema, "%u", (unsigned)e->schema);
	digest_to_hex(e->request_digest, digest);
	digest_to_hex(e->file_digest, file);
	snprintf(state, sizeof state, "%d", tombstone ?
	    PGSTORE_STATE_TOMBSTONE : (int)e->state);
	ph_times(e, created, reserved, updated);
	snprintf(epoch, sizeof epoch, "%" PRIu32, e->attempt);
	/* The fence's token: effect.c's "<attempt>-<16 hex>". */
	snprintf(token, sizeof token, "%016" PRIx64, e->fence);

	if ((res = ph_row_of_key(st, v, "3", key, PH_ROW_OF_KEY("epoch"),
	    "reading an effect", cause)) == NULL)
		return -1;
	if (PQntuples(res) == 1) {
		s = atoi(PQgetvalue(res, 0, 2));
		/* The same binding, attempt and outcome: imported before. */
		if (strcmp(PQgetvalue(res, 0, 0), schema) == 0 &&
		    strcmp(PQgetvalue(res, 0, 1), digest) == 0 &&
		    strcmp(PQgetvalue(res, 0, 3), epoch) == 0 &&
		    strcmp(PQgetvalue(res, 0, 4), created) == 0 &&
		    ((e->state == SUBTAB_COMMITTED && (s == SUBTAB_COMMITTED ||
		    s == PGSTORE_STATE_TOMBSTONE)) || s == (int)e->state))
			*out = PGSTORE_IMPORT_PRESENT;
		else {
			*out = PGSTORE_IMPORT_CONFLICT;
			ph_conflict(cause, "the store holds this effect with "
			    "other facts: state %d, attempt %s, digest "
			    "%.12s..., created_at_ms %s (the local history: "
			    "%s, attempt %s, digest %.12s..., created_at_ms "
			    "%s)", s, PQgetvalue(res, 0, 3),
			    PQgetvalue(res, 0, 1), PQgetvalue(res, 0, 4),
			    subtab_state_name(e->state), epoch, digest,
			    created);
		}
		PQclear(res);
		return 0;
	}
	PQclear(res);
	v[4] = schema;			/* $5 */
	v[5] = digest;			/* $6 */
	v[6] = state;			/* $7 */
	v[7] = seq;			/* $8 */
	v[8] = created;			/* $9 */
	v[9] = reserved;		/* $10 */
	v[10] = updated;		/* $11 */
	v[11] = e->state == SUBTAB_COMMITTED ? file : NULL;	/* $12 */
	v[12] = tombstone ? NULL : result;	/* $13 */
	v[13] = epoch;			/* $14 */
	v[14] = PGSTORE_IMPORT_OWNER;	/* $15 */
	v[15] = token;			/* $16 */
	/*
	 * Day 0 and a random seq, as a begin reserves (pg_conn.c): a
	 * collision with another effect's number inserts nothing (no error,
	 * so the transaction goes on), and the next try draws again.  Only that
	 * conflict: the same key, begun by a broker meanwhile, is an error
	 * that names itself (and the import is rolled back).
	 */
	for (tries = 0; tries < 16; tries++) {
		snprintf(seq, sizeof seq, "%" PRIu32,
		    randombytes_uniform(INT32_MAX) + 1);
		res = PQexecParams((PGconn *)st->conn, "INSERT INTO "
		    "idem_submission (workspace_id, kind, scope, "
		    "client_submission_id, digest_schema, request_digest, "
		    "state, date, seq, task_id, task_path, sender, recipient, "
		    "created_at_ms, reserved_at, updated_at, file_digest, "
		    "receipt, epoch, owner_host, owner_token, lease_expires, "
		    "lease_granted) VALUES ($1, $2, $3, $4, $5, $6, $7, 0, $8, "
		    "'', '', '', '', $9, to_timestamp($10::bigint / 1000.0), "
		    "to_timestamp($11::bigint / 1000.0), $12, $13, $14, $15, "
		    "$16, clock_timestamp(), $17) ON CONFLICT (workspace_id, "
		    "kind, date, seq) DO NOTHING",
		    17, NULL, (const char *const[]){ v[0], v[1], v[2], v[3],
		    v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12],
		    v[13], v[14], v[15], (e->effect_flags &
		    SUBTAB_EFFECT_RECOVERED) ? "true" : "false" }, NULL, NULL,
		    0);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			return pgstore_failed(st, (struct pg_result *)res,
			    "importing an effect", cause);
		s = strcmp(PQcmdTuples(res), "1") == 0;
		PQclear(res);
		if (s) {
			*out = PGSTORE_IMPORT_ADDED;
			return 0;
		}
	}
	errno = EPROTO;
	*cause = strdup("importing an effect: no free seq on day 0 after 16 "
	    "draws");
	return -1;
}

int
pgstore_import_legacy(struct pgstore *st, enum subtab_kind kind,
    uint32_t date, uint32_t seq, enum pgstore_import_result *result,
    char **cause)
{
	PGresult		*res;
	struct ph_number	 n;
	char			*holder;
	int			 rc;

	*cause = NULL;
	ph_number(st, kind, date, seq, &n);
	if ((res = ph_query(st, "SELECT 1 FROM idem_legacy WHERE "
	    "workspace_id = $1 AND kind = $2 AND date = $3 AND seq = $4", 4,
	    n.v, "reading a legacy number", cause)) == NULL)
		return -1;
	rc = PQntuples(res);
	PQclear(res);
	if (rc > 0) {
		*result = PGSTORE_IMPORT_PRESENT;
		return 0;
	}
	if ((rc = ph_number_taken(st, n.kind, n.date, n.seq, NULL, NULL,
	    &holder, cause)) != 0) {
		if (rc < 0)
			return -1;
		*result = PGSTORE_IMPORT_CONFLICT;
		ph_conflict(cause, "number %s of %s, taken by a call without "
		    "an id, is another submission's in the store: %s", n.seq,
		    n.date, holder);
		free(holder);
		return 0;
	}
	if (ph_command(st, "INSERT INTO idem_legacy (workspace_id, kind, date, "
	    "seq) VALUES ($1, $2, $3, $4)", 4, n.v,
	    "importing a legacy number", cause) != 0)
		return -1;
	*result = PGSTORE_IMPORT_ADDED;
	return 0;
}

int
pgstore_import_counter(struct pgstore *st, enum subtab_kind kind,
    uint32_t date, uint32_t next_seq, char **cause)
{
	struct ph_number	n;

	*cause = NULL;
	ph_number(st, kind, date, next_seq, &n);
	return ph_command(st, "INSERT INTO idem_counter AS c (workspace_id, "
	    "kind, date, next_seq) VALUES ($1, $2, $3, $4) ON CONFLICT "
	    "(workspace_id, kind, date) DO UPDATE SET next_seq = "
	    "excluded.next_seq WHERE c.next_seq < excluded.next_seq", 4, n.v,
	    "raising a counter", cause);
}

int
pgstore_import_finish(struct pgstore *st, int commit, char **cause)
{
	const char	*v[1] = { st->workspace };

	*cause = NULL;
	if (!commit) {
		if (PQstatus((PGconn *)st->conn) == CONNECTION_OK)
			PQclear(PQexec((PGconn *)st->conn, "ROLLBACK"));
		return 0;
	}
	/*
	 * Every day's counter past the highest number of the workspace's
	 * rows and legacy numbers: a counter only ever rises.
	 */
	if (ph_command(st, "INSERT INTO idem_counter AS c (workspace_id, "
	    "kind, date, next_seq) SELECT $1, kind, date, max(seq) + 1 FROM "
	    "(SELECT kind, date, seq FROM idem_submission WHERE "
	    "workspace_id = $1 AND kind IN (1, 2) UNION ALL SELECT kind, "
	    "date, seq FROM idem_legacy WHERE workspace_id = $1) n GROUP BY "
	    "kind, date ON CONFLICT (workspace_id, kind, date) DO UPDATE SET "
	    "next_seq = greatest(c.next_seq, excluded.next_seq) WHERE "
	    "c.next_seq < excluded.next_seq", 1, v, "raising the counters",
	    cause) != 0 ||
	    ph_command(st, "COMMIT", 0, NULL, "committing the import",
	    cause) != 0) {
		if (PQstatus((PGconn *)st->conn) == CONNECTION_OK)
			PQclear(PQexec((PGconn *)st->conn, "ROLLBACK"));
		return -1;
	}
	return 0;
}

int
pgstore_compact(struct pgstore *st, int days, uint64_t *pruned,
    char **cause)
{
	PGresult	*res;
	const char	*v[2];
	char		 days_s[16];

	*cause = NULL;
	*pruned = 0;
	if (pgstore_conn(st, cause) == NULL)
		return -1;
	snprintf(days_s, sizeof days_s, "%d", days);
	v[0] = st->workspace;
	v[1] = days_s;
	/*
	 * committed_at is created_at, as the local index's compaction
	 * reads it; the server's clock, as every time between brokers.
	 * The tombstone keeps the key, kind, schema, request digest, number
	 * (task_id) and created_at: the receipt without its file digest.
	 * An effect's tombstone keeps its result's digest (file_digest),
	 * as the local index's does: the receipt_pruned answer shows it,
	 * and a complete with the same result is judged by it.
	 */
	res = PQexecParams((PGconn *)st->conn, "UPDATE idem_submission SET "
	    "state = " PGSTORE_STATE_TOMBSTONE_S ", receipt = NULL, "
	    "file_digest = CASE WHEN kind = 3 THEN file_digest END WHERE "
	    "workspace_id = $1 AND kind IN (1, 2, 3) AND state = 3 AND "
	    "created_at_ms < (extract(epoch from clock_timestamp()) * "
	    "1000)::bigint - $2::bigint * 86400000", 2, NULL, v, NULL, NULL,
	    0);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		return pgstore_failed(st, (struct pg_result *)res, "compacting",
		    cause);
	*pruned = strtoull(PQcmdTuples(res), NULL, 10);
	PQclear(res);
	return 0;
}

int
pgstore_history_counts(struct pgstore *st, struct pgstore_history *h,
    char **cause)
{
	PGresult	*res;
	const char	*v[1] = { st->workspace };
	uint64_t	 n;
	int		 i, state;

	*cause = NULL;
	memset(h, 0, sizeof *h);
	if (pgstore_conn(st, cause) == NULL)
		return -1;
	if ((res = ph_query(st, "SELECT state, kind, count(*) FROM "
	    "idem_submission WHERE workspace_id = $1 AND kind IN (1, 2, 3) "
	    "GROUP BY state, kind", 1, v, "counting the history", cause)) ==
	    NULL)
		return -1;
	for (i = 0; i < PQntuples(res); i++) {
		state = atoi(PQgetvalue(res, i, 0));
		n = strtoull(PQgetvalue(res, i, 2), NULL, 10);
		h->submissions += n;
		if (atoi(PQgetvalue(res, i, 1)) == SUBTAB_KIND_EFFECT)
			h->effects += n;
		if (state == SUBTAB_COMMITTED)
			h->committed += n;
		else if (state == PGSTORE_STATE_TOMBSTONE)
			h->tombstones += n;
		else if (state == SUBTAB_RESERVED ||
		    state == SUBTAB_TASK_CREATED ||
		    state == SUBTAB_OUTCOME_UNKNOWN)
			h->in_flight += n;	/* an effect's: not settled */
	}
	PQclear(res);
	return 0;
}
