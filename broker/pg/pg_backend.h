/* SPDX-License-Identifier: ISC */
/*
 * pg_backend.h: the PostgreSQL backend (several brokers on one
 * workspace, doc/cluster.md), as backend.c sees it, and the calls its
 * files share.  Only backend.c and broker/pg/ include it.
 */
#ifndef PG_BACKEND_H
#define PG_BACKEND_H

#include "backend.h"

extern const struct backend pg_backend;

/* An effect's request's room (backend_effect_state): the row as read. */
struct pg_effect {
	uint8_t		 found_state;	/* the state the row was read in */
	unsigned	 cluster_reads;
};

/* pg_read.c: get_submission's row, diagnose's rows, stats' history. */
int	pg_get(struct idemd *, enum subtab_kind, const char *key,
	    size_t key_length, struct backend_row *, struct backend_error *);
int	pg_diagnose(struct idemd *, backend_row_fn, void *,
	    uint32_t tasks[SUBTAB_STATE_COUNT],
	    uint32_t effects[SUBTAB_STATE_COUNT], struct backend_error *);
int	pg_history(struct idemd *, struct backend_history *);

/* pg_effect.c: effect_begin, _complete and _resolve on the row. */
void	pg_effect_begin(struct pending *, backend_effect_done_fn);
void	pg_effect_claim(struct pending *, backend_effect_done_fn);
void	pg_effect_record(struct pending *, backend_effect_done_fn);
void	pg_effect_release(struct pending *);
/* pg_create.c: backend.h's create (write_task, write_report). */
void	pg_create(struct pending *, backend_create_done_fn);
/*
 * A store of this worker's on d's workspace (a creation thread's, or
 * the loop's): 0, or -1 and *cause.
 */
struct pgstore;
int	pg_store_init(struct idemd *, struct pgstore *, char **cause);

#endif
