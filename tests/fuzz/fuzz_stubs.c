/* SPDX-License-Identifier: ISC */
/*
 * fuzz_stubs.c: the worker-side functions that write_task.c,
 * write_report.c and the op table (optable.c) refer to but
 * request_check_line() never reaches.  The
 * request target links these instead of the whole broker (event loop,
 * shared segment, files); any call is a bug in the check, so each one
 * aborts.  A link error naming a new symbol means a stub is missing here.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fastpath.h"
#include "idemd.h"

static void __attribute__((noreturn))
fuzz_unreachable(const char *name)
{
	fprintf(stderr, "fuzz: %s called: request_check_line must not reach "
	    "the worker\n", name);
	abort();
}

struct idemd *
conn_idemd(struct conn *c)
{
	fuzz_unreachable(__func__);
}

struct pending *
pending_new_op(struct conn *c, json_t *id, size_t op_size,
    void (*op_free)(void *))
{
	fuzz_unreachable(__func__);
}

void
pending_reply(struct pending *p, json_t *reply)
{
	fuzz_unreachable(__func__);
}

void
submission_start(struct pending *p)
{
	fuzz_unreachable(__func__);
}

int
taskfile_find(int root_fd, const char *id, char *relpath,
    size_t relpath_size)
{
	fuzz_unreachable(__func__);
}

void
taskfile_format_id(enum subtab_kind kind, uint32_t date, uint32_t seq,
    const char *sender, size_t sender_length, const char *recipient,
    size_t recipient_length, char *out, size_t out_size)
{
	fuzz_unreachable(__func__);
}

void
taskfile_format_path(enum subtab_kind kind, const char *id, char *out,
    size_t out_size)
{
	fuzz_unreachable(__func__);
}

void
taskfile_format_time(int64_t ms, char out[TASKFILE_TIME_BYTES])
{
	fuzz_unreachable(__func__);
}

int
taskfile_render_task(const struct taskfile_task *t, char **out,
    size_t *length)
{
	fuzz_unreachable(__func__);
}

int
taskfile_render_report(const struct taskfile_report *r, char **out,
    size_t *length)
{
	fuzz_unreachable(__func__);
}

int
taskfile_current_path(int root_fd, const char *id, const char *recorded,
    char *relpath, size_t relpath_size)
{
	fuzz_unreachable(__func__);
}

/* request_check_line passes no root: fcop_workspace never reads one. */
int
taskfile_workspace_id(int root_fd, char out[IDEM_WORKSPACE_ID_BYTES + 1],
    const char **cause)
{
	fuzz_unreachable(__func__);
}

const char *
subtab_schema_name(unsigned schema)
{
	fuzz_unreachable(__func__);
}

void
conn_reply(struct conn *c, json_t *reply)
{
	fuzz_unreachable(__func__);
}

void
op_get_submission(struct conn *c, json_t *request, json_t *id)
{
	fuzz_unreachable(__func__);
}

void
op_diagnose(struct conn *c, json_t *request, json_t *id)
{
	fuzz_unreachable(__func__);
}

void
op_stats(struct conn *c, json_t *request, json_t *id)
{
	fuzz_unreachable(__func__);
}

/* effect.c: its parsing is request_check_line's; the rest is not. */
enum subtab_verdict
subtab_acquire(struct shm_segment *seg, struct subtab_acquire *a)
{
	fuzz_unreachable(__func__);
}

enum subtab_verdict
subtab_claim_key(struct shm_segment *seg, struct subtab_acquire *a)
{
	fuzz_unreachable(__func__);
}

int
subtab_release(struct shm_segment *seg, uint32_t slot,
    const struct subtab_claim *claim)
{
	fuzz_unreachable(__func__);
}

const char *
subtab_state_name(unsigned state)
{
	fuzz_unreachable(__func__);
}

int
arena_put(struct shm_segment *seg, const void *data, size_t length,
    uint64_t *offset)
{
	fuzz_unreachable(__func__);
}

const uint8_t *
arena_get(struct shm_segment *seg, uint64_t offset, size_t length)
{
	fuzz_unreachable(__func__);
}

void
worker_wake_all(struct worker *w)
{
	fuzz_unreachable(__func__);
}

void
pending_journal_slot(struct pending *p, const struct journal_record *record,
    uint32_t slot, const struct subtab_claim *claim,
    const struct subtab_entry *entry, pending_resume_fn resume)
{
	fuzz_unreachable(__func__);
}

void
pending_wait_durable(struct pending *p, uint64_t end, uint64_t epoch,
    pending_resume_fn resume)
{
	fuzz_unreachable(__func__);
}

uint64_t
handoff_epoch(const struct shm_header *h)
{
	fuzz_unreachable(__func__);
}

int
handoff_is_durable(const struct shm_header *h, uint64_t end, uint64_t epoch)
{
	fuzz_unreachable(__func__);
}

void
pending_wait_claim(struct pending *p, pending_resume_fn resume)
{
	fuzz_unreachable(__func__);
}

#ifdef IDEM_FAULT_INJECTION
void
crash_point(enum crash_point point)
{
	fuzz_unreachable(__func__);
}
#endif

int64_t
shm_now_ms(void)
{
	fuzz_unreachable(__func__);
}

void
conn_peer(const struct conn *c, uint32_t *uid, uint32_t *pid)
{
	fuzz_unreachable(__func__);
}

int
subtab_lookup(struct shm_segment *seg, const char *key, size_t key_length,
    struct subtab_entry *entry, uint32_t *slot)
{
	fuzz_unreachable(__func__);
}

void
fastpath_hint_take(struct fastpath_hint *hint)
{
	fuzz_unreachable(__func__);
}

void
fastpath_remember(struct idemd *d, const struct fastpath_hint *hint,
    const struct submission *sub, json_t *receipt)
{
	fuzz_unreachable(__func__);
}
