/* SPDX-License-Identifier: ISC */
/*
 * pg_verify.c: the rows idemctl store verify reads (doc/cluster.md):
 * every task and report row, every effect row, and the numbers more than
 * one row holds, each handed to the caller as it is read.  Read-only, on
 * a connection of pgstore_connect; idemctl walks the files and judges
 * (contrib/idemctl_store.c), so that no SQL is sent past the store.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "pg.h"
#include "store.h"

/* The column's text, or NULL if it is NULL. */
static const char *
pv_value(const PGresult *res, int i, int column)
{
	return PQgetisnull(res, i, column) ? NULL : PQgetvalue(res, i,
	    column);
}

int
pgstore_verify_rows(struct pg_conn *pconn, const char *workspace,
    int effects, void (*fn)(const struct pgstore_verify_row *, void *),
    void *arg, char **cause)
{
	PGconn			*conn = (PGconn *)pconn;
	PGresult		*res;
	const char		*params[1] = { workspace };
	struct pgstore_verify_row row;
	int			 i, rows;

	*cause = NULL;
	if (effects)
		res = PQexecParams(conn, "SELECT scope, client_submission_id, "
		    "state, file_digest, receipt FROM idem_submission WHERE "
		    "workspace_id = $1 AND kind = 3", 1, NULL, params, NULL,
		    NULL, 0);
	else
		res = PQexecParams(conn, "SELECT kind, client_submission_id, "
		    "state, task_id, file_digest, epoch, owner_token FROM "
		    "idem_submission WHERE workspace_id = $1 AND kind <> 3", 1,
		    NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		*cause = strdup(PQresultErrorMessage(res));
		PQclear(res);
		return -1;
	}
	rows = PQntuples(res);
	for (i = 0; i < rows; i++) {
		memset(&row, 0, sizeof row);
		if (effects) {
			row.kind = SUBTAB_KIND_EFFECT;
			row.scope = PQgetvalue(res, i, 0);
			row.client_submission_id = PQgetvalue(res, i, 1);
			row.state = atoi(PQgetvalue(res, i, 2));
			row.task_id = "";
			row.file_digest_hex = pv_value(res, i, 3);
			row.owner_token = "";
			row.receipt = pv_value(res, i, 4);
		} else {
			row.kind = (enum subtab_kind)atoi(PQgetvalue(res, i,
			    0));
			row.scope = "";
			row.client_submission_id = PQgetvalue(res, i, 1);
			row.state = atoi(PQgetvalue(res, i, 2));
			row.task_id = PQgetvalue(res, i, 3);
			row.file_digest_hex = pv_value(res, i, 4);
			row.epoch = strtoll(PQgetvalue(res, i, 5), NULL, 10);
			row.owner_token = PQgetvalue(res, i, 6);
		}
		fn(&row, arg);
	}
	PQclear(res);
	return rows;
}

int
pgstore_verify_numbers(struct pg_conn *pconn, const char *workspace,
    void (*fn)(enum subtab_kind, uint32_t date, uint32_t seq, unsigned count,
    void *), void *arg, char **cause)
{
	PGconn		*conn = (PGconn *)pconn;
	PGresult	*res;
	const char	*params[1] = { workspace };
	int		 i;

	*cause = NULL;
	res = PQexecParams(conn, "SELECT kind, date, seq, count(*) FROM "
	    "idem_submission WHERE workspace_id = $1 AND kind <> 3 GROUP BY "
	    "kind, date, seq "
	    "HAVING count(*) > 1", 1, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		*cause = strdup(PQresultErrorMessage(res));
		PQclear(res);
		return -1;
	}
	for (i = 0; i < PQntuples(res); i++)
		fn((enum subtab_kind)atoi(PQgetvalue(res, i, 0)),
		    (uint32_t)strtoul(PQgetvalue(res, i, 1), NULL, 10),
		    (uint32_t)strtoul(PQgetvalue(res, i, 2), NULL, 10),
		    (unsigned)strtoul(PQgetvalue(res, i, 3), NULL, 10), arg);
	PQclear(res);
	return 0;
}
