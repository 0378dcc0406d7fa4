/* SPDX-License-Identifier: ISC */
/*
 * optable.c: the ops this broker serves, in one table (as tmux's
 * cmd_table), made from the IDEM_OPS list (idemd.h): each row is an op
 * of IDEM_OP_NAMES (protocol.h), the handler a worker dispatches it to,
 * the check that validates it without touching any state, and whether
 * it is still served while the broker drains.  The worker's dispatcher
 * (worker.c) and hello's "ops" read this table; the stateless check
 * (request_check_line) reads the same list's checks without the
 * handlers.  Also hello itself, which describes the broker.
 */
#include <string.h>
#include <unistd.h>

#include "idemd.h"

static void	op_hello(struct conn *, json_t *, json_t *);

/* Row IDEM_OPC_x serves idem_op_names[IDEM_OPC_x]: SPEC.md's order. */
static const struct op_entry optable[IDEM_OPC_COUNT] = {
#define OPTABLE_ROW(sym, handler, check, flags)				\
	[IDEM_OPC_##sym] = { handler, check, flags },
	IDEM_OPS(OPTABLE_ROW)
#undef OPTABLE_ROW
};

/* A row for every op of IDEM_OP_NAMES (-Woverride-init: no two). */
#define OPTABLE_ONE(sym, handler, check, flags)	+ 1
_Static_assert(0 IDEM_OPS(OPTABLE_ONE) == IDEM_OPC_COUNT,
    "IDEM_OPS and IDEM_OP_NAMES list different ops");
#undef OPTABLE_ONE

const struct op_entry *
optable_find(const char *name)
{
	size_t	i;

	for (i = 0; i < IDEM_OPC_COUNT; i++) {
		if (strcmp(idem_op_names[i], name) == 0)
			return &optable[i];
	}
	return NULL;
}

/* ["hello","write_task",...]: every op served. */
json_t *
optable_names(void)
{
	json_t	*names;
	size_t	 i;

	if ((names = json_array()) == NULL)
		return NULL;
	for (i = 0; i < IDEM_OPC_COUNT; i++)
		json_array_append_new(names, json_string(idem_op_names[i]));
	return names;
}

/*
 * Who is listening: the version, the schemas and ops it serves, and the
 * master's pid and root, so that a second idemd refusing to displace
 * this one can name it (main.c).  Members besides op and id are
 * ignored, so that any client can say hello.
 */
static void
op_hello(struct conn *c, json_t *request, json_t *id)
{
	struct idemd	*d = conn_idemd(c);
	json_t		*reply = reply_new(1, id), *schemas;

	(void)request;
	json_object_set_new(reply, "server", json_string("idemd"));
	json_object_set_new(reply, "version", json_string(PACKAGE_VERSION));
	json_object_set_new(reply, "protocol",
	    json_integer(IDEM_PROTOCOL_VERSION));
	/* The schemas a client may name in write_task's digest_schema. */
	schemas = json_array();
	json_array_append_new(schemas, json_string(IDEM_SCHEMA_WRITE_TASK_V1));
	json_array_append_new(schemas, json_string(IDEM_SCHEMA_GENERIC_JSON_V1));
	json_array_append_new(schemas,
	    json_string(IDEM_SCHEMA_FCOP_CREATE_TASK_V1));
	json_object_set_new(reply, "digest_schemas", schemas);
	json_object_set_new(reply, "ops", optable_names());
	json_object_set_new(reply, "pid", json_integer(d->master_pid));
	json_object_set_new(reply, "root", json_string(d->root_real));
	conn_reply(c, reply);
}
