/* SPDX-License-Identifier: ISC */
/*
 * reply.c: what every answer is made of.  The envelope ({"ok":..,"id":..}),
 * an error reply from a struct request_error, the wire's names for the
 * error codes, reasons and dispositions (one table each, generated from
 * protocol.h's X-macros, so that a misspelt code cannot compile), and
 * times in the task files' format.  Nothing here reads a request or
 * changes state.
 */
#include <stdarg.h>
#include <stdio.h>

#include "idemd.h"

static const char *const wire_error_names[] = {
#define WIRE_ERROR_NAME(sym, name)	[WIRE_##sym] = name,
	IDEM_ERROR_CODES(WIRE_ERROR_NAME)
#undef WIRE_ERROR_NAME
};

static const char *const wire_reason_names[] = {
	[REASON_NONE] = NULL,
#define WIRE_REASON_NAME(sym, name)	[REASON_##sym] = name,
	IDEM_CONFLICT_REASONS(WIRE_REASON_NAME)
	IDEM_LIMIT_REASONS(WIRE_REASON_NAME)
#undef WIRE_REASON_NAME
};

static const char *const wire_disposition_names[] = {
	[DISPOSITION_NONE] = NULL,
#define WIRE_DISPOSITION_NAME(sym, name)	[DISPOSITION_##sym] = name,
	IDEM_DISPOSITIONS(WIRE_DISPOSITION_NAME)
#undef WIRE_DISPOSITION_NAME
};

_Static_assert(sizeof wire_error_names / sizeof wire_error_names[0] ==
    WIRE_ERROR_COUNT, "an error code without a name");
_Static_assert(sizeof wire_reason_names / sizeof wire_reason_names[0] ==
    REASON_COUNT, "a reason without a name");
_Static_assert(sizeof wire_disposition_names /
    sizeof wire_disposition_names[0] == DISPOSITION_COUNT,
    "a disposition without a name");

const char *
wire_error_name(enum wire_error code)
{
	if ((unsigned)code >= WIRE_ERROR_COUNT)
		return wire_error_names[WIRE_INTERNAL];
	return wire_error_names[code];
}

/* NULL for REASON_NONE: the reply has no "reason". */
const char *
wire_reason_name(enum wire_reason reason)
{
	if ((unsigned)reason >= REASON_COUNT)
		return NULL;
	return wire_reason_names[reason];
}

const char *
wire_disposition_name(enum wire_disposition disposition)
{
	if ((unsigned)disposition >= DISPOSITION_COUNT)
		return NULL;
	return wire_disposition_names[disposition];
}

json_t *
reply_new(int ok, json_t *id)
{
	json_t	*reply = json_object();

	json_object_set_new(reply, "ok", json_boolean(ok));
	if (id != NULL)
		json_object_set(reply, "id", id);
	return reply;
}

json_t *
reply_error(const struct request_error *err, json_t *id)
{
	json_t	*reply = reply_new(0, id), *error;

	json_object_set_new(reply, "action_taken", json_false());
	error = json_object();
	json_object_set_new(error, "code",
	    json_string(wire_error_name(err->code)));
	json_object_set_new(error, "message", json_string(err->message));
	if (err->field[0] != '\0')
		json_object_set_new(error, "field", json_string(err->field));
	json_object_set_new(error, "retryable", json_boolean(err->retryable));
	json_object_set_new(reply, "error", error);
	return reply;
}

json_t *
reply_error_simple(json_t *id, enum wire_error code, int retryable,
    const char *fmt, ...)
{
	struct request_error	err;
	va_list			ap;

	err.code = code;
	err.retryable = retryable;
	err.field[0] = '\0';
	va_start(ap, fmt);
	vsnprintf(err.message, sizeof err.message, fmt, ap);
	va_end(ap);
	return reply_error(&err, id);
}

json_t *
reply_table_full(json_t *id, enum subtab_full why, uint32_t capacity,
    size_t key_length)
{
	switch (why) {
	case SUBTAB_FULL_KEYS:
		return reply_error_simple(id, WIRE_TABLE_FULL, 1, "the "
		    "submission table's key space (--capacity %u) is held by "
		    "keys in flight or not yet in the index, with no room "
		    "for this %zu-byte key; retry in a moment, or restart "
		    "idemd with a larger --capacity", capacity, key_length);
	case SUBTAB_FULL_MEMORY:
		return reply_error_simple(id, WIRE_TABLE_FULL, 1, "the "
		    "submission table (--capacity %u) could not compact its "
		    "key space for this %zu-byte key: out of memory; retry "
		    "in a moment", capacity, key_length);
	default:
		return reply_error_simple(id, WIRE_TABLE_FULL, 1, "the "
		    "submission table (--capacity %u) holds no entry it may "
		    "evict: every one is in flight or not yet in the index; "
		    "retry in a moment, or restart idemd with a larger "
		    "--capacity", capacity);
	}
}

json_t *
reply_time(int64_t ms)
{
	char	at[TASKFILE_TIME_BYTES];

	taskfile_format_time(ms, at);
	return json_string(at);
}
