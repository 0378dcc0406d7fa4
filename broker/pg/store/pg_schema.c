/* SPDX-License-Identifier: ISC */
/*
 * pg_schema.c: the PostgreSQL store's schema and its migrations
 * (idemctl store init|migrate).  One row of idem_schema_version says
 * which version a database has; each migration brings it from N - 1 to
 * N in the same transaction that records N, so a migration is applied
 * whole or not at all.  The tables are described in doc/cluster.md.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "pg.h"

/* migrations[N - 1] brings the schema from N - 1 to N. */
static const char *const migrations[] = {
	/* 1: submissions, the day counters, legacy numbers. */
	"CREATE TABLE idem_counter ("
	"  workspace_id uuid NOT NULL,"
	"  kind smallint NOT NULL,"
	"  date integer NOT NULL,"
	"  next_seq integer NOT NULL,"
	"  PRIMARY KEY (workspace_id, kind, date));"
	"CREATE TABLE idem_submission ("
	"  workspace_id uuid NOT NULL,"
	"  kind smallint NOT NULL,"
	"  scope text NOT NULL,"
	"  client_submission_id text NOT NULL,"
	"  digest_schema smallint NOT NULL,"
	"  request_digest text NOT NULL,"
	"  state smallint NOT NULL,"
	"  date integer NOT NULL,"
	"  seq integer NOT NULL,"
	"  task_id text NOT NULL,"
	"  task_path text NOT NULL,"
	"  sender text NOT NULL,"
	"  recipient text NOT NULL,"
	"  created_at_ms bigint NOT NULL,"
	"  reserved_at timestamptz NOT NULL,"
	"  updated_at timestamptz NOT NULL,"
	"  file_digest text,"
	"  receipt text,"
	"  epoch bigint NOT NULL,"
	"  owner_host text NOT NULL,"
	"  owner_token text NOT NULL,"
	"  owner_pid integer,"
	"  owner_started timestamptz,"
	"  lease_expires timestamptz NOT NULL,"
	"  lease_granted boolean NOT NULL DEFAULT false,"
	"  PRIMARY KEY (workspace_id, kind, scope, client_submission_id),"
	"  UNIQUE (workspace_id, kind, date, seq));"
	"CREATE INDEX idem_submission_unfinished ON idem_submission"
	"  (workspace_id, reserved_at) WHERE state < 3;"
	"CREATE TABLE idem_legacy ("
	"  workspace_id uuid NOT NULL,"
	"  kind smallint NOT NULL,"
	"  date integer NOT NULL,"
	"  seq integer NOT NULL,"
	"  PRIMARY KEY (workspace_id, kind, date, seq));",
	/*
	 * 2: tombstones (state 10, pg.h) and the history's counts.  The
	 * index serves stats' counts by state and compaction's scan of
	 * the committed rows by age; the version says that rows may be
	 * tombstones, which a broker of version 1 would not answer.
	 */
	"CREATE INDEX idem_submission_state ON idem_submission"
	"  (workspace_id, state, created_at_ms);",
	/*
	 * 3: the key as one indexed value, PGSTORE_KEY_SQL, which every
	 * lookup of a key matches (pg.h, PGSTORE_KEY_WHERE).  Matched
	 * column by column, a key's equalities also fit the leading
	 * (workspace_id, kind) of the number's unique index and the
	 * workspace_id of the others; until the table had statistics the
	 * planner took the smallest such index and read every row of the
	 * workspace for each lookup (and with them, the unfinished rows'
	 * index, dead entries included): O(rows) a statement.
	 */
	"CREATE UNIQUE INDEX idem_submission_key ON idem_submission"
	"  ((" PGSTORE_KEY_SQL("workspace_id", "kind", "scope",
	"client_submission_id") "));"
};
#define MIGRATION_COUNT	(sizeof migrations / sizeof migrations[0])
_Static_assert(MIGRATION_COUNT == PGSTORE_SCHEMA_VERSION,
    "one migration per schema version");

/* Any key: only idem's migrations take this advisory lock. */
#define PGSTORE_MIGRATE_LOCK	"7291540391"

static int
exec_ok(PGconn *conn, const char *sql, const char *what, char **cause)
{
	PGresult	*res = PQexec(conn, sql);

	if (PQresultStatus(res) != PGRES_COMMAND_OK &&
	    PQresultStatus(res) != PGRES_TUPLES_OK)
		return pgstore_conn_failed(conn, res, what, cause);
	PQclear(res);
	return 0;
}

int
pgstore_schema_version(struct pg_conn *conn, int *version, char **cause)
{
	PGresult	*res;

	res = PQexec(conn, "SELECT to_regclass('idem_schema_version') "
	    "IS NOT NULL");
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		return pgstore_conn_failed(conn, res,
		    "reading the schema version", cause);
	if (strcmp(PQgetvalue(res, 0, 0), "t") != 0) {
		PQclear(res);
		*version = 0;
		return 0;
	}
	PQclear(res);
	res = PQexec(conn, "SELECT max(version) FROM idem_schema_version");
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		return pgstore_conn_failed(conn, res,
		    "reading the schema version", cause);
	*version = PQgetisnull(res, 0, 0) ? 0 : atoi(PQgetvalue(res, 0, 0));
	PQclear(res);
	return 0;
}

int
pgstore_migrate(struct pg_conn *conn, int *from, int *to, char **cause)
{
	char	sql[128];
	int	version;
	size_t	i;

	if (exec_ok(conn, "BEGIN", "BEGIN", cause) != 0)
		return -1;
	if (exec_ok(conn, "SELECT pg_advisory_xact_lock("
	    PGSTORE_MIGRATE_LOCK ")", "taking the migration lock", cause) != 0 ||
	    exec_ok(conn, "CREATE TABLE IF NOT EXISTS idem_schema_version ("
	    "version integer NOT NULL, applied_at timestamptz NOT NULL "
	    "DEFAULT now())", "creating idem_schema_version", cause) != 0 ||
	    pgstore_schema_version(conn, &version, cause) != 0)
		goto fail;
	*from = version;
	if (version > PGSTORE_SCHEMA_VERSION) {
		asprintf(cause, "the database's idem schema is version %d, "
		    "newer than this build's %d: use a newer idemctl", version,
		    PGSTORE_SCHEMA_VERSION);
		errno = EPROTO;
		goto fail;
	}
	for (i = (size_t)version; i < MIGRATION_COUNT; i++) {
		snprintf(sql, sizeof sql, "INSERT INTO idem_schema_version "
		    "(version) VALUES (%zu)", i + 1);
		if (exec_ok(conn, migrations[i], "migrating", cause) != 0 ||
		    exec_ok(conn, sql, "recording the version", cause) != 0)
			goto fail;
	}
	if (exec_ok(conn, "COMMIT", "COMMIT", cause) != 0)
		return -1;
	*to = PGSTORE_SCHEMA_VERSION;
	return 0;
fail:
	version = errno;
	PQclear(PQexec(conn, "ROLLBACK"));
	errno = version;
	return -1;
}
