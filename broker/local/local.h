/* SPDX-License-Identifier: ISC */
/*
 * local.h: the local backend (the shared-memory table, the journal, the
 * index and the files of one broker), as backend.c sees it, and the
 * calls its files share.  Only backend.c and broker/local/ include it.
 */
#ifndef LOCAL_H
#define LOCAL_H

#include "backend.h"

extern const struct backend local_backend;

/* A creation's request's room (s->backend_state): its claim, its file. */
struct local_create {
	struct subtab_claim	 claim;
	int			 claimed;
	int			 fresh;		/* this call reserved */
	struct fileio_job	 job;		/* its file, while written */
	/*
	 * A fresh submission writes its temporary file while its reservation
	 * is flushed; it is linked once both are done (local_create.c).
	 */
	enum {
		SUB_TEMP_NONE, SUB_TEMP_WRITING, SUB_TEMP_READY, SUB_TEMP_FAILED,
		SUB_TEMP_LINKED		/* linked early, its job's result waits */
	}			 temp_state;
	int			 temp_error;
	int			 reserve_done;	/* the reservation's wait ended */
	int64_t			 file_time;	/* the file's created_at */
	unsigned		 attempts;	/* numbers tried (legacy) */
	/* The index was looked in when the table had evicted this many. */
	int			 index_checked;
	uint64_t		 evictions;
};

/* An effect's request's room (backend_effect_state): its slot. */
struct local_effect {
	struct subtab_claim	 claim;
	int			 claimed;
	uint32_t		 slot;
	uint64_t		 found_end;
	uint64_t		 found_epoch;	/* the journal's, read before it */
	int			 journaled;	/* this call wrote a record */
	int			 index_checked;
	uint64_t		 evictions;
};

/*
 * The halves submission.c and effect.c each have a copy of today, one
 * for both once G2 (local_create.c) and G3 (local_effect.c) call them
 * (local_backend.c; the signatures agreed here, in G1).
 */
/*
 * While the journal is failed only what needs no new record goes on: a
 * committed key (reused) or another request's (conflict).  1: the key
 * with this schema and digest would need a record.
 */
int	local_needs_journal(struct idemd *, const char *key,
	    size_t key_length, uint8_t schema,
	    const uint8_t digest[IDEM_SHA256_BYTES]);
/*
 * Wait until the record that ended at end (of journal epoch epoch) is
 * durable, then next; p->journal_failed if it was lost with the
 * journal.  end SUBTAB_NOT_JOURNALED: nothing to wait for.
 */
void	local_after_durable(struct pending *, uint64_t end, uint64_t epoch,
	    pending_resume_fn next);
/*
 * Let go of the table claim *claimed says p holds on slot (once: it
 * clears *claimed), waking the worker's requests parked on it.
 */
void	local_release_claim(struct pending *, int *claimed, uint32_t slot,
	    const struct subtab_claim *);
/* The journal is failed, reopening: storage_unavailable (retryable). */
int	local_fail_reopening(struct backend_error *);
/* 1 and err if p's wait ended in a journal failure; 0 otherwise. */
int	local_journal_failed(struct pending *, struct backend_error *);

/* local_effect.c: effect_begin, _complete and _resolve on the slot. */
void	local_effect_begin(struct pending *, backend_effect_done_fn);
void	local_effect_claim(struct pending *, backend_effect_done_fn);
void	local_effect_record(struct pending *, backend_effect_done_fn);
void	local_effect_release(struct pending *);
int	local_effect_result(struct pending *, const uint8_t **, int *);
/*
 * The committed result of e (a table entry) into buf (from the arena,
 * else the index): buf, or NULL unreadable; *pruned: a tombstone's.
 */
const uint8_t *local_effect_result_bytes(struct idemd *, const char *key,
	    size_t key_length, const struct subtab_entry *, uint8_t *buf,
	    int *pruned);
/*
 * local_read.c: get_submission's entry, diagnose's entries; each done
 * before the call returns.
 */
void	local_get(struct pending *, backend_read_done_fn);
void	local_diagnose(struct pending *, backend_read_done_fn);
/* local_create.c: backend.h's create (write_task, write_report). */
void	local_create(struct pending *, backend_create_done_fn);

#endif
