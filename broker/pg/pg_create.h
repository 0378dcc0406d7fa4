/* SPDX-License-Identifier: ISC */
/*
 * pg_create.h: a creation's state on the PostgreSQL store, in its
 * request's room (s->backend_state, create_state_size bytes): what
 * pg_create.c's steps and threads share, and its size for pg_backend.c's
 * table.  Only broker/pg/ includes it.
 */
#ifndef PG_CREATE_H
#define PG_CREATE_H

#include "pg_backend.h"
#include "pg.h"
#include "pg_group.h"

/* What a creation's run on its thread decided, for the loop to act on. */
enum cl_outcome {
	CL_OUT_NONE,
	CL_OUT_FAIL,		/* err */
	CL_OUT_CONFLICT,	/* reason, message */
	CL_OUT_ANSWER,		/* created or reused (created says which) */
	CL_OUT_WAIT		/* a live owner: read again after CLUSTER_POLL_MS */
};

struct pg_create {
	struct pg_job	 job;		/* first: the pool's handle */
	struct pending		*p;
	struct pgstore		*st;		/* its thread's, while it runs */
	struct pgstore_row	 row;		/* the fence this request holds */
	struct pgstore_key	 key;
	char			 scope[SUBTAB_MAX_KEY_BYTES + 1];
	int			 owner;		/* it holds the fence */
	int			 fresh;		/* it reserved (nothing promised) */
	int			 started;	/* its first turn is done */
	int64_t			 deadline_ms;
	struct event		*timer;
	unsigned		 renumbered;
	enum cl_outcome		 out;
	struct backend_error	 err;
	enum wire_reason	 reason;
	const char		*message;	/* a literal */
	int			 created;
	struct pg_group_member	 member;	/* in its worker's round */
};

/* The worker's disk scans and the claims the watch answered, logged. */
void	pg_create_report(void);

#endif
