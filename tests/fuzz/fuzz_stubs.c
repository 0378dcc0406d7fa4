/*
 * fuzz_stubs.c: the worker-side functions that write_task.c and
 * write_report.c refer to but request_check_line() never reaches.  The
 * request target links these instead of the whole broker (event loop,
 * shared segment, files); any call is a bug in the check, so each one
 * aborts.  A link error naming a new symbol means a stub is missing here.
 */
#include <stdio.h>
#include <stdlib.h>

#include "worker.h"

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
pending_new(struct conn *c, json_t *id)
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
