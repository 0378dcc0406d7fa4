/* SPDX-License-Identifier: ISC */
/*
 * proxy_tools.c: which of the downstream's tools `idem-mcp proxy` wraps,
 * and the two answers it rewrites on their way to the client.
 *
 * A tool is wrapped unless --pass names it, or its annotations say
 * readOnlyHint: true or idempotentHint: true and --wrap does not name it
 * (MCP's defaults for both are false: a tool without annotations is
 * wrapped).  A tool that already has an argument named idempotency_key
 * is passed: its own key is not ours to take.  What is learnt from every
 * tools/list answer is kept in a table by name; a tool not seen yet is
 * PROXY_UNKNOWN and proxy_call.c lists the tools itself first.
 *
 * A call is judged by its key too, not only by the listing, unless
 * --pass names its tool or the tool owns the argument: a call that
 * carries a key (the argument or params.idempotencyKey) of a tool never
 * listed is wrapped (it has no annotations: SPEC's default), and one of
 * a tool the listing passes is keyed only if the ledger already holds
 * that key for the tool (PROXY_LOOKUP: proxy_call.c asks the broker),
 * else passed unchanged, as SPEC says.  The listing is the server's
 * word and may change under a running proxy, or between two proxies:
 * a client that retries a tool turned read-only with the key it was
 * given must still get the first answer, never a second execution; but
 * a read-only tool's call with a fresh key (a client that sends one on
 * every call) must not become a ledger entry kept for ever, nor answer
 * a later read with a stale result (proxy_call_wrap).
 *
 * initialize's result gains capabilities.tools.idempotency (the
 * capability of SEP-3182: a client may send the key as
 * params.idempotencyKey), and its serverInfo.name names the kinds.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "proxy.h"
#include "protocol.h"

const char proxy_key_description[] =
    "Idempotency key of this call (1-200 printable ASCII characters, no "
    "spaces). Choose one key per intent, naming the task and the step it "
    "serves (e.g. \"release-1.4/move-changelog\"), not a counter or a "
    "time, and send the same key with the same arguments on every retry "
    "of that intent (after an error, a timeout or no answer): the tool "
    "then acts at most once and every retry gets the first call's result. "
    "A new intent, or a new attempt after a result you want to redo, "
    "needs a new key.";

struct proxy_tool {
	char		*name;
	enum proxy_wrap	 wrap;
	int		 has_output_schema;
	int		 owns_key;	/* its schema has idempotency_key */
};

static pthread_mutex_t	 tools_lock = PTHREAD_MUTEX_INITIALIZER;
static struct proxy_tool *tools;
static size_t		 ntools, tools_size;

static int
tools_named(const char **list, const char *name)
{
	for (; *list != NULL; list++)
		if (strcmp(*list, name) == 0)
			return 1;
	return 0;
}

static struct proxy_tool *
tools_find(const char *name)
{
	size_t	i;

	for (i = 0; i < ntools; i++)
		if (strcmp(tools[i].name, name) == 0)
			return &tools[i];
	return NULL;
}

static void
tools_learn(const char *name, enum proxy_wrap wrap, int has_output_schema,
    int owns_key)
{
	struct proxy_tool	*t, *p;

	pthread_mutex_lock(&tools_lock);
	if ((t = tools_find(name)) == NULL) {
		if (ntools == tools_size) {
			tools_size = tools_size == 0 ? 32 : tools_size * 2;
			if ((p = realloc(tools, tools_size * sizeof *p)) ==
			    NULL) {
				pthread_mutex_unlock(&tools_lock);
				proxy_log("out of memory");
				return;
			}
			tools = p;
		}
		t = &tools[ntools];
		if ((t->name = strdup(name)) == NULL) {
			pthread_mutex_unlock(&tools_lock);
			proxy_log("out of memory");
			return;
		}
		ntools++;
	}
	t->wrap = wrap;
	t->has_output_schema = has_output_schema;
	t->owns_key = owns_key;
	pthread_mutex_unlock(&tools_lock);
}

enum proxy_wrap
proxy_tool_wrap(const char *name, int *has_output_schema)
{
	struct proxy_tool	*t;
	enum proxy_wrap		 wrap;

	if (has_output_schema != NULL)
		*has_output_schema = 0;
	if (tools_named(proxy_cfg.pass, name))
		return PROXY_PASSED;
	pthread_mutex_lock(&tools_lock);
	if ((t = tools_find(name)) != NULL) {
		wrap = t->wrap;
		if (has_output_schema != NULL)
			*has_output_schema = t->has_output_schema;
	} else
		wrap = tools_named(proxy_cfg.wrap, name) ? PROXY_WRAPPED :
		    PROXY_UNKNOWN;
	pthread_mutex_unlock(&tools_lock);
	return wrap;
}

/*
 * Does the call carry a key, SEP-3182's member or else the argument (as
 * proxy_call.c reads it)?  Only a string is one: "idempotency_key": null
 * or a number is an argument of the tool's, not a key of ours.
 */
static int
tools_call_keyed(json_t *params)
{
	json_t	*key = json_object_get(params, PROXY_KEY_PARAM);

	if (key == NULL || json_is_null(key))
		key = json_object_get(json_object_get(params, "arguments"),
		    PROXY_KEY_ARGUMENT);
	return json_is_string(key);
}

enum proxy_wrap
proxy_call_wrap(const char *name, json_t *params, int listed,
    int *has_output_schema)
{
	struct proxy_tool	*t;
	enum proxy_wrap		 wrap;
	int			 owns_key = 0;

	wrap = proxy_tool_wrap(name, has_output_schema);
	if (wrap == PROXY_WRAPPED || tools_named(proxy_cfg.pass, name) ||
	    (wrap == PROXY_UNKNOWN && !listed))
		return wrap;
	pthread_mutex_lock(&tools_lock);
	if ((t = tools_find(name)) != NULL)
		owns_key = t->owns_key;
	pthread_mutex_unlock(&tools_lock);
	if (owns_key || !tools_call_keyed(params))
		return wrap;
	/* Never listed, keyed: wrapped; passed by the listing: look. */
	return wrap == PROXY_UNKNOWN ? PROXY_WRAPPED : PROXY_LOOKUP;
}

static int
tools_hint(json_t *tool, const char *hint)
{
	return json_is_true(json_object_get(json_object_get(tool,
	    "annotations"), hint));
}

/* Add the required idempotency_key; 0, or -1 if the schema has it. */
static int
tools_add_key(json_t *tool)
{
	json_t	*schema, *properties, *required, *property, *annotations;

	schema = json_object_get(tool, "inputSchema");
	if (!json_is_object(schema)) {
		schema = json_pack("{s:s}", "type", "object");
		json_object_set_new(tool, "inputSchema", schema);
	}
	properties = json_object_get(schema, "properties");
	if (!json_is_object(properties)) {
		properties = json_object();
		json_object_set_new(schema, "properties", properties);
	}
	if (json_object_get(properties, PROXY_KEY_ARGUMENT) != NULL)
		return -1;
	property = json_pack("{s:s, s:i, s:i, s:s, s:s}", "type", "string",
	    "minLength", 1, "maxLength", IDEM_MAX_SUBMISSION_ID_BYTES,
	    "pattern", "^[!-~]+$", "description", proxy_key_description);
	json_object_set_new(properties, PROXY_KEY_ARGUMENT, property);
	required = json_object_get(schema, "required");
	if (!json_is_array(required)) {
		required = json_array();
		json_object_set_new(schema, "required", required);
	}
	json_array_append_new(required, json_string(PROXY_KEY_ARGUMENT));
	annotations = json_object_get(tool, "annotations");
	if (!json_is_object(annotations)) {
		annotations = json_object();
		json_object_set_new(tool, "annotations", annotations);
	}
	json_object_set_new(annotations, "idempotentHint", json_true());
	return 0;
}

void
proxy_tools_list_result(json_t *result)
{
	json_t		*tool;
	const char	*name;
	enum proxy_wrap	 wrap;
	size_t		 i;
	int		 owns_key;

	json_array_foreach(json_object_get(result, "tools"), i, tool) {
		if ((name = json_string_value(json_object_get(tool,
		    "name"))) == NULL)
			continue;
		owns_key = json_object_get(json_object_get(json_object_get(
		    tool, "inputSchema"), "properties"), PROXY_KEY_ARGUMENT) !=
		    NULL;
		if (tools_named(proxy_cfg.pass, name))
			wrap = PROXY_PASSED;
		else if (tools_named(proxy_cfg.wrap, name))
			wrap = PROXY_WRAPPED;
		else if (tools_hint(tool, "readOnlyHint") ||
		    tools_hint(tool, "idempotentHint"))
			wrap = PROXY_PASSED;
		else
			wrap = PROXY_WRAPPED;
		if (wrap == PROXY_WRAPPED && tools_add_key(tool) != 0) {
			proxy_log("tool %s has an argument %s of its own: "
			    "passed unwrapped", name, PROXY_KEY_ARGUMENT);
			wrap = PROXY_PASSED;
		}
		tools_learn(name, wrap,
		    json_object_get(tool, "outputSchema") != NULL, owns_key);
	}
}

void
proxy_initialize_result(json_t *result)
{
	json_t		*tools_cap;
	const char	*name;

	tools_cap = json_object_get(json_object_get(result, "capabilities"),
	    "tools");
	if (json_is_object(tools_cap))
		json_object_set_new(tools_cap, "idempotency", json_object());
	name = json_string_value(json_object_get(json_object_get(result,
	    "serverInfo"), "name"));
	if (name != NULL)
		proxy_set_server_name(name);
}
