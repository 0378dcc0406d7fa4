/* SPDX-License-Identifier: ISC */
/*
 * optable.c: the ops this broker serves, in one table (as tmux's
 * cmd_table): each row names an op, the handler a worker dispatches it
 * to, the check that validates it without touching any state, and
 * whether it is still served while the broker drains.  The worker's
 * dispatcher (worker.c), the stateless check (request_check_line) and
 * hello's "ops" all read this table, so an op is added by adding a row
 * here and nowhere else.  Also hello itself, which describes the broker.
 */
#include <string.h>
#include <unistd.h>

#include "idemd.h"

static void	op_hello(struct conn *, json_t *, json_t *);

/* Keep in the order SPEC.md lists the ops: hello shows this order. */
static const struct op_entry optable[] = {
	{ "hello", op_hello, NULL, OP_WHILE_DRAINING },
	{ "write_task", op_write_task, write_task_check, 0 },
	{ "write_report", op_write_report, write_report_check, 0 },
	{ "get_submission", op_get_submission, NULL, 0 },
	{ "diagnose", op_diagnose, NULL, 0 },
	{ "stats", op_stats, NULL, 0 },
	{ "effect_begin", op_effect_begin, effect_begin_check,
	    OP_LOCAL_STORE_ONLY },
	{ "effect_complete", op_effect_complete, effect_complete_check,
	    OP_LOCAL_STORE_ONLY },
	{ "effect_resolve", op_effect_resolve, effect_resolve_check,
	    OP_LOCAL_STORE_ONLY },
};

/* --store postgresql://...: the ops the cluster store does not serve. */
static int	optable_cluster;

void
optable_set_cluster(int cluster)
{
	optable_cluster = cluster;
}

static int
optable_served(const struct op_entry *op)
{
	return !optable_cluster || !(op->flags & OP_LOCAL_STORE_ONLY);
}

const struct op_entry *
optable_find(const char *name)
{
	size_t	i;

	for (i = 0; i < sizeof optable / sizeof optable[0]; i++) {
		if (strcmp(optable[i].name, name) == 0)
			return optable_served(&optable[i]) ? &optable[i] :
			    NULL;
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
	for (i = 0; i < sizeof optable / sizeof optable[0]; i++)
		if (optable_served(&optable[i]))
			json_array_append_new(names,
			    json_string(optable[i].name));
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
