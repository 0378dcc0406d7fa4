/* SPDX-License-Identifier: ISC */
/*
 * names.c: what the table's numbers mean on the wire and on disk (the
 * names of states and digest schemas), and the one place that proves
 * shm/'s own sizes equal the protocol's limits.  shm/ knows neither the
 * protocol nor its strings; the store, which writes both the table and
 * the journal, ties them together here.  And a --host-id's spelling,
 * which names a directory (.idem/hosts/<host-id>) whatever the store.
 */
#include <string.h>

#include "store.h"

/* shm.h's layout sizes are protocol.h's limits (shm.h, "The sizes"). */
_Static_assert(SHM_MAX_WORKERS == IDEM_MAX_WORKERS, "worker slots");
_Static_assert(SHM_SHA256_BYTES == IDEM_SHA256_BYTES, "digest bytes");
_Static_assert(SHM_MAX_ROLE_BYTES == IDEM_MAX_ROLE_BYTES, "role bytes");
_Static_assert(SHM_MAX_RECIPIENT_BYTES == IDEM_MAX_RECIPIENT_BYTES,
    "recipient bytes");
_Static_assert(SHM_MAX_EFFECT_KIND_BYTES == IDEM_MAX_EFFECT_KIND_BYTES,
    "effect kind bytes");
_Static_assert(SHM_MAX_SUBMISSION_ID_BYTES == IDEM_MAX_SUBMISSION_ID_BYTES,
    "submission id bytes");
_Static_assert(SHM_ARENA_BYTES_PER_SLOT == IDEM_RESULT_ARENA_BYTES_PER_SLOT,
    "result arena bytes per slot");
_Static_assert(SHM_ARENA_MIN_BYTES == IDEM_MIN_RESULT_ARENA_BYTES,
    "result arena floor");
_Static_assert(SHM_ARENA_MAX_BYTES == IDEM_MAX_DEFAULT_RESULT_ARENA_BYTES,
    "result arena ceiling");
_Static_assert(SHM_MAX_CAPACITY == IDEM_MAX_CAPACITY, "capacity");
_Static_assert(SHM_MAX_RESULT_BYTES == IDEM_MAX_EFFECT_RESULT_BYTES,
    "result bytes");
/* The arena holds at least a few of the largest results. */
_Static_assert(SHM_ARENA_MIN_BYTES >= 16 * (IDEM_MAX_EFFECT_RESULT_BYTES +
    SHM_RING_RECORD_HEADER_BYTES), "result arena floor");
/* A key is a task id or an effect kind, a separator, a submission id. */
_Static_assert(IDEM_MAX_EFFECT_KIND_BYTES >= IDEM_MAX_TASK_ID_BYTES,
    "the effect key is the longest");

/* The wire and journal names of a state and of a digest schema. */
const char *
subtab_state_name(unsigned state)
{
	switch (state) {
	case SUBTAB_RESERVED:
		return "reserved";
	case SUBTAB_TASK_CREATED:
		return "task_created";
	case SUBTAB_COMMITTED:
		return "committed";
	case SUBTAB_RELEASED:
		return "released";
	case SUBTAB_OUTCOME_UNKNOWN:
		return "outcome_unknown";
	}
	return "empty";
}

const char *
subtab_schema_name(unsigned schema)
{
	switch (schema) {
	case SUBTAB_SCHEMA_WRITE_TASK_V1:
		return IDEM_SCHEMA_WRITE_TASK_V1;
	case SUBTAB_SCHEMA_WRITE_REPORT_V1:
		return IDEM_SCHEMA_WRITE_REPORT_V1;
	case SUBTAB_SCHEMA_GENERIC_JSON_V1:
		return IDEM_SCHEMA_GENERIC_JSON_V1;
	case SUBTAB_SCHEMA_FCOP_CREATE_TASK_V1:
		return IDEM_SCHEMA_FCOP_CREATE_TASK_V1;
	}
	return NULL;
}

int
store_host_id_valid(const char *s)
{
	size_t	n = strlen(s);

	if (n == 0 || n > IDEM_STORE_MAX_HOST_ID_BYTES ||
	    strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
		return 0;
	return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	    "0123456789._-") == n;
}
