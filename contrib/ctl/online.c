/* SPDX-License-Identifier: ISC */
/*
 * online.c: idemctl's commands that ask the broker over its socket
 * (status, stats, diagnose, show, effects, resolve, submit), one request
 * per line through libidem's idem_call_raw, and how their answers print.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE		/* asprintf */
#endif

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "idem.h"
#include "store.h"		/* and through it the protocol's limits */
#include "stats.h"
#include "idemctl.h"

#define IDEMCTL_DEFAULT_STALE_AFTER_MS	30000
/* A --file task, like any request, must fit one line. */
#define IDEMCTL_MAX_FILE_BYTES		IDEM_MAX_LINE_BYTES

/*
 * --socket, else the socket of an explicit --root, else $IDEM_SOCKET,
 * else that of $IDEM_ROOT or ./fcop: a flag beats the environment.
 */
static const char *
ctl_socket_path(struct idemctl *ctl)
{
	const char	*env;

	if (ctl->socket_path != NULL)
		return ctl->socket_path;
	if (ctl->root == NULL && (env = getenv("IDEM_SOCKET")) != NULL &&
	    *env != '\0')
		return env;
	snprintf(ctl->socket_buf, sizeof ctl->socket_buf, "%s/%s",
	    ctl_root(ctl), IDEM_SOCKET_NAME);
	return ctl->socket_buf;
}

/* ---- talking to the broker ----------------------------------------------- */

static int
ctl_connect(struct idemctl *ctl)
{
	struct idem_error	err;

	if ((ctl->conn = idem_connect(ctl_socket_path(ctl), &err)) != NULL)
		return 0;
	if (err.code == IDEM_E_ARGUMENT)
		return ctl_fail(ctl, IDEMCTL_EXIT_USAGE, "%s", err.message);
	return ctl_fail(ctl, IDEMCTL_EXIT_UNREACHABLE,
	    "broker not reachable: %s", err.message);
}

/*
 * Send request (consumed) and parse the answer, an object with a boolean
 * "ok" (which may be false: the caller decides what to say).  NULL after
 * one line on stderr, with *status set: 3 if the broker was lost (a
 * write's outcome is then unknown, and a retry with the same id is safe).
 */
static json_t *
ctl_call(struct idemctl *ctl, json_t *request, int *status)
{
	struct idem_error	 err;
	json_error_t		 jerr;
	json_t			*response;
	char			*line, *answer;
	int			 rc;

	line = json_dumps(request, JSON_COMPACT);
	json_decref(request);
	if (line == NULL) {
		*status = ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "out of memory");
		return NULL;
	}
	rc = idem_call_raw(ctl->conn, line, &answer, &err);
	free(line);
	if (rc != 0) {
		if (err.code == IDEM_E_TRANSPORT)
			*status = ctl_fail(ctl, IDEMCTL_EXIT_UNREACHABLE,
			    "lost the broker: %s", err.message);
		else
			*status = ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "%s",
			    err.message);
		return NULL;
	}
	response = json_loads(answer, JSON_REJECT_DUPLICATES, &jerr);
	free(answer);
	if (response == NULL || !json_is_object(response) ||
	    !json_is_boolean(json_object_get(response, "ok"))) {
		json_decref(response);
		*status = ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "the broker's "
		    "answer is not an object with a boolean \"ok\"");
		return NULL;
	}
	return response;
}

static json_t *
ctl_call_op(struct idemctl *ctl, const char *op, int *status)
{
	return ctl_call(ctl, json_pack("{s:s}", "op", op), status);
}

/* An ok:false answer: its error in one line; the JSON too with --json. */
static int
ctl_answer_error(struct idemctl *ctl, json_t *response)
{
	json_t		*error = json_object_get(response, "error");
	const char	*field = ctl_string_member(error, "field", NULL);
	const char	*reason = ctl_string_member(error, "reason", NULL);

	if (ctl->json)
		ctl_print_json(response);
	return ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "%s%s%s: %s%s%s%s",
	    ctl_string_member(error, "code", "error"),
	    reason != NULL ? " " : "", reason != NULL ? reason : "",
	    ctl_string_member(error, "message", "(no message)"),
	    field != NULL ? " (field " : "", field != NULL ? field : "",
	    field != NULL ? ")" : "");
}

/*
 * ctl_call, and an ok:false answer said (ctl_answer_error) and freed: NULL
 * with *status set unless the broker answered ok:true.
 */
static json_t *
ctl_call_ok(struct idemctl *ctl, json_t *request, int *status)
{
	json_t	*response;

	if ((response = ctl_call(ctl, request, status)) == NULL)
		return NULL;
	if (!json_is_true(json_object_get(response, "ok"))) {
		*status = ctl_answer_error(ctl, response);
		json_decref(response);
		return NULL;
	}
	return response;
}

/* The answer without the envelope (ok, id), for --json output. */
static void
strip_envelope(json_t *response)
{
	json_object_del(response, "ok");
	json_object_del(response, "id");
}

/* ---- status -------------------------------------------------------------- */

const struct option ctl_status_options[] = {
	COMMON_OPTIONS, { NULL, 0, NULL, 0 }
};

int
cmd_status(struct idemctl *ctl, int argc, char **argv)
{
	json_t		*hello, *stats = NULL, *out;
	json_int_t	 used, capacity;
	char		 uptime[32];
	int		 status = 0;

	while (ctl_next_option(ctl, argc, argv, ctl_status_options) != -1)
		ctl_usage_error(ctl, "no options of its own");
	if (optind != argc)
		ctl_usage_error(ctl, "no arguments expected");
	if ((status = ctl_connect(ctl)) != 0) {
		/* A monitor reading --json still gets an answer. */
		if (ctl->json && status == IDEMCTL_EXIT_UNREACHABLE) {
			out = json_pack("{s:b,s:s}", "up", 0, "socket",
			    ctl_socket_path(ctl));
			ctl_print_json(out);
			json_decref(out);
		}
		return status;
	}
	if ((hello = ctl_call_op(ctl, idem_op_names[IDEM_OPC_HELLO],
	    &status)) == NULL)
		return status;
	if (!json_is_true(json_object_get(hello, "ok"))) {
		status = ctl_answer_error(ctl, hello);
		json_decref(hello);
		return status;
	}
	/* Stats are extra: a broker that cannot give them is still up. */
	if ((stats = ctl_call_op(ctl, idem_op_names[IDEM_OPC_STATS],
	    &status)) != NULL &&
	    !json_is_true(json_object_get(stats, "ok"))) {
		json_decref(stats);
		stats = NULL;
	}
	status = 0;

	if (ctl->json) {
		out = json_pack("{s:b,s:s}", "up", 1, "socket",
		    ctl_socket_path(ctl));
		json_object_update(out, hello);
		strip_envelope(out);
		json_object_set_new(out, "up", json_true());
		if (stats != NULL) {
			strip_envelope(stats);
			json_object_set(out, "stats", stats);
		}
		ctl_print_json(out);
		json_decref(out);
	} else {
		printf("%s %s is up (protocol %" JSON_INTEGER_FORMAT ")\n",
		    ctl_string_member(hello, "server", "?"),
		    ctl_string_member(hello, "version", "?"),
		    ctl_int_member(hello, "protocol"));
		printf("  socket    %s\n", ctl_socket_path(ctl));
		if (stats != NULL) {
			ctl_format_duration(ctl_int_member(stats, "uptime_ms"), uptime,
			    sizeof uptime);
			used = ctl_int_member(stats, "table_used");
			capacity = ctl_int_member(stats, "table_capacity");
			printf("  uptime    %s\n", uptime);
			printf("  workers   %" JSON_INTEGER_FORMAT " running, %"
			    JSON_INTEGER_FORMAT " restart%s\n",
			    ctl_int_member(stats, "workers"),
			    ctl_int_member(stats, "worker_restarts"),
			    ctl_int_member(stats, "worker_restarts") == 1 ? "" :
			    "s");
			printf("  table     %" JSON_INTEGER_FORMAT " of %"
			    JSON_INTEGER_FORMAT " submissions used (%.1f%%)\n",
			    used, capacity, capacity > 0 ?
			    100.0 * (double)used / (double)capacity : 0.0);
			printf("  tasks     %" JSON_INTEGER_FORMAT " created, %"
			    JSON_INTEGER_FORMAT " reused, %" JSON_INTEGER_FORMAT
			    " conflicts, %" JSON_INTEGER_FORMAT " legacy\n",
			    ctl_int_member(stats, "created"),
			    ctl_int_member(stats, "reused"),
			    ctl_int_member(stats, "conflict"),
			    ctl_int_member(stats, "legacy_created"));
			printf("  errors    %" JSON_INTEGER_FORMAT "\n",
			    ctl_int_member(stats, "errors"));
		}
	}
	json_decref(hello);
	json_decref(stats);
	return status;
}

/* ---- stats --------------------------------------------------------------- */

/*
 * Every stat's type, unit and help come from libclient/stats.h, the
 * table idemd answers from.  A stat a newer broker adds, not in this
 * idemctl's table, is still shown: untyped for Prometheus, without a
 * unit as text.
 */
static const struct idem_stat_row *
stat_row(const char *name)
{
	size_t	i;

	for (i = 0; i < IDEM_STAT_COUNT; i++) {
		if (strcmp(idem_stat_table[i].name, name) == 0)
			return &idem_stat_table[i];
	}
	return NULL;
}

/* An integer as itself, never through a double (no 196.24600000000001). */
static void
print_metric(const char *name, const char *type, const char *help,
    const char *labels, json_int_t value)
{
	printf("# HELP %s %s\n# TYPE %s %s\n%s%s %" JSON_INTEGER_FORMAT "\n",
	    name, help, name, type, name, labels, value);
}

/* A stat in ms, in seconds: the integer's digits, never through a double. */
static void
print_metric_ms(const char *name, const char *type, const char *help,
    json_int_t ms)
{
	if (ms < 0)
		ms = 0;
	printf("# HELP %s %s\n# TYPE %s %s\n%s %" JSON_INTEGER_FORMAT
	    ".%03d\n", name, help, name, type, name, ms / 1000,
	    (int)(ms % 1000));
}

/* Metric names allow [a-zA-Z0-9_:] only. */
static void
metric_name_of(const char *prefix, const char *key, char *name, size_t size)
{
	size_t		 n;
	const char	*p;

	n = (size_t)snprintf(name, size, "%s", prefix);
	for (p = key; *p != '\0' && n + 1 < size; p++)
		name[n++] = (*p >= 'a' && *p <= 'z') ||
		    (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') ? *p : '_';
	name[n] = '\0';
}

static void
print_prometheus(json_t *hello, json_t *stats)
{
	const struct idem_stat_row	*s;
	const char			*key;
	json_t				*value, *store;
	char				 name[128], labels[256];
	size_t				 i;

	print_metric("idem_up", "gauge", "1 if the broker answered.", "", 1);
	snprintf(labels, sizeof labels, "{version=\"%s\",protocol=\"%"
	    JSON_INTEGER_FORMAT "\"}", ctl_string_member(hello, "version", ""),
	    ctl_int_member(hello, "protocol"));
	print_metric("idem_build_info", "gauge", "The broker's version.",
	    labels, 1);
	/* The table's order, whatever the reply's. */
	for (i = 0; i < IDEM_STAT_COUNT; i++) {
		s = &idem_stat_table[i];
		if (!json_is_integer(value = json_object_get(stats, s->name)))
			continue;
		idem_stat_metric_name(s, name, sizeof name);
		if (s->unit == IDEM_STAT_UNIT_MS)
			print_metric_ms(name, s->type == IDEM_STAT_COUNTER ?
			    "counter" : "gauge", s->help,
			    json_integer_value(value));
		else
			print_metric(name, s->type == IDEM_STAT_COUNTER ?
			    "counter" : "gauge", s->help, "",
			    json_integer_value(value));
	}
	json_object_foreach(stats, key, value) {
		if (!json_is_integer(value) || stat_row(key) != NULL)
			continue;
		metric_name_of("idem_", key, name, sizeof name);
		print_metric(name, "untyped", "A stat this idemctl does not "
		    "know yet.", "", json_integer_value(value));
	}
	/* --store postgresql: the workspace's rows, gauges. */
	store = json_object_get(stats, IDEM_STORE_STATS_MEMBER);
#define STORE_METRIC(member, help)					\
	if (json_is_integer(value = json_object_get(store, #member)))	\
		print_metric("idem_store_" #member, "gauge", help, "",	\
		    json_integer_value(value));
	IDEM_STORE_STATS(STORE_METRIC)
#undef STORE_METRIC
}

/* One row of stats as text: the stat, its value, its unit. */
static int
stats_text_row(struct ctl_table *t, const char *key, json_t *value,
    const struct idem_stat_row *s, const char *unit)
{
	char	number[32], label[64], human[32];

	if (!json_is_integer(value))
		return 0;
	snprintf(number, sizeof number, "%" JSON_INTEGER_FORMAT,
	    json_integer_value(value));
	if (s != NULL && s->unit == IDEM_STAT_UNIT_MS) {
		ctl_format_duration(json_integer_value(value), human,
		    sizeof human);
		snprintf(label, sizeof label, "%s (%s)", unit, human);
		unit = label;
	}
	return ctl_table_add(t, (const char *[]){ key, number, unit });
}

static int
print_stats_text(json_t *stats)
{
	struct ctl_table		 t = { .columns = 3 };
	const struct idem_stat_row	*s;
	const char			*key;
	json_t				*value, *store;
	char				 name[128];
	size_t				 i;
	int				 rc = 0;

	rc |= ctl_table_add(&t, (const char *[]){ "STAT", "VALUE", "UNIT" });
	for (i = 0; i < IDEM_STAT_COUNT; i++) {
		s = &idem_stat_table[i];
		rc |= stats_text_row(&t, s->name, json_object_get(stats,
		    s->name), s, idem_stat_unit_names[s->unit]);
	}
	json_object_foreach(stats, key, value) {
		if (stat_row(key) == NULL)
			rc |= stats_text_row(&t, key, value, NULL, "-");
	}
	store = json_object_get(stats, IDEM_STORE_STATS_MEMBER);
#define STORE_ROW(member, help)						\
	snprintf(name, sizeof name, "%s.%s", IDEM_STORE_STATS_MEMBER,	\
	    #member);							\
	rc |= stats_text_row(&t, name, json_object_get(store, #member),	\
	    NULL, "rows");
	IDEM_STORE_STATS(STORE_ROW)
#undef STORE_ROW
	ctl_table_print(&t, "");
	ctl_table_free(&t);
	return rc;
}

const struct option ctl_stats_options[] = {
	COMMON_OPTIONS,
	{ "prometheus", no_argument, NULL, OPT_PROMETHEUS },
	{ NULL, 0, NULL, 0 }
};

int
cmd_stats(struct idemctl *ctl, int argc, char **argv)
{
	json_t		*hello = NULL, *stats;
	int		 ch, prometheus = 0, status;

	while ((ch = ctl_next_option(ctl, argc, argv,
	    ctl_stats_options)) != -1) {
		if (ch == OPT_PROMETHEUS)
			prometheus = 1;
	}
	if (optind != argc)
		ctl_usage_error(ctl, "no arguments expected");
	if (prometheus && ctl->json)
		ctl_usage_error(ctl, "--json and --prometheus exclude each "
		    "other");
	if ((status = ctl_connect(ctl)) != 0) {
		/* A scrape of a text file still learns the broker is down. */
		if (prometheus && status == IDEMCTL_EXIT_UNREACHABLE)
			print_metric("idem_up", "gauge",
			    "1 if the broker answered.", "", 0);
		return status;
	}
	if (prometheus && (hello = ctl_call_op(ctl,
	    idem_op_names[IDEM_OPC_HELLO], &status)) == NULL)
		return status;
	if ((stats = ctl_call_op(ctl, idem_op_names[IDEM_OPC_STATS],
	    &status)) == NULL) {
		json_decref(hello);
		return status;
	}
	if (!json_is_true(json_object_get(stats, "ok"))) {
		status = ctl_answer_error(ctl, stats);
		json_decref(stats);
		json_decref(hello);
		return status;
	}
	strip_envelope(stats);
	if (ctl->json)
		ctl_print_json(stats);
	else if (prometheus)
		print_prometheus(hello, stats);
	else if (print_stats_text(stats) != 0)
		status = ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "out of memory");
	json_decref(stats);
	json_decref(hello);
	return status;
}

/* ---- diagnose ------------------------------------------------------------ */

/*
 * The effects of a diagnose answer (entries with an effect_kind), one row
 * each, as idemctl effects and idemctl diagnose show them; stalled adds
 * its column (diagnose's), else the external key (effects').  -1: out
 * of memory.
 */
static int
effects_table_print(json_t *list, int stalled)
{
	static const char *const header[] = {
		"EFFECT_KIND", "CLIENT_SUBMISSION_ID", "STATE", "ATTEMPT",
		"AGE", "LEASE_LEFT", NULL
	};
	struct ctl_table	 t = { .columns = 7 };
	json_t			*entry;
	size_t			 i;
	char			 age[32], attempt[16], left[32];

	if (ctl_table_add(&t, (const char *[]){ header[0], header[1],
	    header[2], header[3], header[4], header[5], stalled ? "STALLED" :
	    "EXTERNAL_KEY" }) == -1)
		goto nomem;
	json_array_foreach(list, i, entry) {
		ctl_format_duration(ctl_int_member(entry, "age_ms"), age,
		    sizeof age);
		snprintf(attempt, sizeof attempt, "%" JSON_INTEGER_FORMAT,
		    ctl_int_member(entry, "attempt"));
		/* A live lease's time left (effect_extend moves it). */
		if (json_is_true(json_object_get(entry, "lease_live")))
			ctl_format_duration(ctl_int_member(entry,
			    "lease_ms_left"), left, sizeof left);
		else
			snprintf(left, sizeof left, "-");
		if (ctl_table_add(&t, (const char *[]){
		    ctl_string_member(entry, "effect_kind", "-"),
		    ctl_string_member(entry, "client_submission_id", "-"),
		    ctl_string_member(entry, "state", "-"), attempt, age, left,
		    stalled ? ctl_yes_no(json_object_get(entry, "stalled")) :
		    ctl_string_member(entry, "external_key", "-") }) == -1)
			goto nomem;
	}
	ctl_table_print(&t, "");
	ctl_table_free(&t);
	return 0;

nomem:
	ctl_table_free(&t);
	return -1;
}

/*
 * An effect that needs someone: its outcome unknown, or reserved with no
 * progress (stalled).  A released one waits for nothing: its next begin
 * proceeds.
 */
static int
effect_needs_attention(json_t *entry)
{
	const char	*state = ctl_string_member(entry, "state", "");

	return strcmp(state, "outcome_unknown") == 0 ||
	    (strcmp(state, "reserved") == 0 &&
	    json_is_true(json_object_get(entry, "stalled")));
}

const struct option ctl_diagnose_options[] = {
	COMMON_OPTIONS,
	{ "stale-after", required_argument, NULL, OPT_STALE_AFTER },
	{ NULL, 0, NULL, 0 }
};

int
cmd_diagnose(struct idemctl *ctl, int argc, char **argv)
{
	static const char *const header[] = {
		"CLIENT_SUBMISSION_ID", "STATE", "AGE", "TASK_ID", "EXISTS",
		"REQUEST_DIGEST", "FILE_DIGEST", "IN_FLIGHT", "STALLED"
	};
	struct ctl_table	 t = { .columns = 9 };
	json_t		*response, *entries, *entry, *counts, *effect_counts;
	json_t		*tasks = NULL, *effects = NULL;
	int64_t		 stale_after_ms = IDEMCTL_DEFAULT_STALE_AFTER_MS;
	size_t		 i, stalled = 0, attention = 0;
	char		 age[32];
	int		 ch, status;

	while ((ch = ctl_next_option(ctl, argc, argv,
	    ctl_diagnose_options)) != -1) {
		if (ch == OPT_STALE_AFTER &&
		    ctl_parse_duration_ms(optarg, &stale_after_ms) == -1)
			ctl_usage_error(ctl, "--stale-after: \"%s\" is not a "
			    "duration (like 500ms, 30s, 5m)", optarg);
	}
	if (optind != argc)
		ctl_usage_error(ctl, "no arguments expected");
	if ((status = ctl_connect(ctl)) != 0)
		return status;
	response = ctl_call_ok(ctl, json_pack("{s:s,s:I}", "op",
	    idem_op_names[IDEM_OPC_DIAGNOSE], "stale_after_ms",
	    (json_int_t)stale_after_ms), &status);
	if (response == NULL)
		return status;
	entries = json_object_get(response, "entries");
	counts = json_object_get(response, "counts");
	effect_counts = json_object_get(response, "effect_counts");
	/*
	 * Tasks and effects apart: a stalled task, and an effect whose
	 * outcome is unknown or that is stalled, each need someone.
	 */
	if ((tasks = json_array()) == NULL || (effects = json_array()) == NULL)
		goto nomem;
	json_array_foreach(entries, i, entry) {
		if (json_object_get(entry, "effect_kind") != NULL) {
			if (json_array_append(effects, entry) != 0)
				goto nomem;
			if (effect_needs_attention(entry))
				attention++;
			continue;
		}
		if (json_array_append(tasks, entry) != 0)
			goto nomem;
		if (json_is_true(json_object_get(entry, "stalled")))
			stalled++;
	}

	if (ctl->json) {
		strip_envelope(response);
		ctl_print_json(response);
	} else if (json_array_size(tasks) == 0)
		printf("no intermediate submissions (%" JSON_INTEGER_FORMAT
		    " committed)\n", ctl_int_member(counts, "committed"));
	else {
		if (ctl_table_add(&t, header) == -1)
			goto nomem;
		json_array_foreach(tasks, i, entry) {
			ctl_format_duration(ctl_int_member(entry, "age_ms"), age,
			    sizeof age);
			if (ctl_table_add(&t, (const char *[]){
			    ctl_string_member(entry, "client_submission_id",
			    "-"), ctl_string_member(entry, "state", "-"), age,
			    ctl_string_member(entry, "task_id", "-"),
			    ctl_yes_no(json_object_get(entry, "task_exists")),
			    ctl_yes_no(json_object_get(entry,
			    "request_digest_matches")),
			    ctl_yes_no(json_object_get(entry,
			    "file_digest_matches")),
			    ctl_yes_no(json_object_get(entry, "in_flight")),
			    ctl_yes_no(json_object_get(entry, "stalled")) }) == -1)
				goto nomem;
		}
		ctl_table_print(&t, "");
		printf("\n%zu intermediate (%" JSON_INTEGER_FORMAT
		    " reserved, %" JSON_INTEGER_FORMAT " task_created), %zu "
		    "stalled (no "
		    "progress for %" PRId64 " ms), %" JSON_INTEGER_FORMAT
		    " committed\n", json_array_size(tasks),
		    ctl_int_member(counts, "reserved"),
		    ctl_int_member(counts, "task_created"), stalled,
		    stale_after_ms, ctl_int_member(counts, "committed"));
		if (stalled > 0)
			printf("A retry with the same client_submission_id and "
			    "request completes a stalled submission.\n");
	}
	if (!ctl->json && json_array_size(effects) > 0) {
		printf("\n");
		if (effects_table_print(effects, 1) != 0)
			goto nomem;
		printf("\n%zu unfinished effect%s (%" JSON_INTEGER_FORMAT
		    " outcome_unknown, %" JSON_INTEGER_FORMAT " with a live "
		    "lease, %" JSON_INTEGER_FORMAT " released), %zu needing a "
		    "decision; %" JSON_INTEGER_FORMAT " committed\n",
		    json_array_size(effects),
		    json_array_size(effects) == 1 ? "" : "s",
		    ctl_int_member(effect_counts, "outcome_unknown"),
		    ctl_int_member(effect_counts, "reserved"),
		    ctl_int_member(effect_counts, "released"), attention,
		    ctl_int_member(effect_counts, "committed"));
		if (attention > 0)
			printf("An effect whose outcome is unknown, or that "
			    "made no progress, may or may not have happened:\n"
			    "look downstream by its external key (idemctl "
			    "effects show KIND ID), then:\n"
			    "idemctl resolve KIND ID applied|not_applied|"
			    "unknown\n");
	}
	ctl_table_free(&t);
	json_decref(tasks);
	json_decref(effects);
	json_decref(response);
	/* Something is stuck: a monitor wants to know without parsing. */
	return stalled > 0 || attention > 0 ? IDEMCTL_EXIT_PROBLEM :
	    IDEMCTL_EXIT_OK;

nomem:
	ctl_table_free(&t);
	json_decref(tasks);
	json_decref(effects);
	json_decref(response);
	return ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "out of memory");
}

/* ---- show ---------------------------------------------------------------- */

static void
print_fields(json_t *object, const char *const *keys, const char *indent)
{
	struct ctl_table	 t = { .columns = 2 };
	json_t		*v;
	char		*s;
	size_t		 i;

	for (i = 0; keys[i] != NULL; i++) {
		if ((v = json_object_get(object, keys[i])) == NULL)
			continue;
		if (json_is_string(v))
			s = strdup(json_string_value(v));
		else
			s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
		if (s == NULL || ctl_table_add(&t,
		    (const char *[]){ keys[i], s }) == -1) {
			free(s);
			break;
		}
		free(s);
	}
	ctl_table_print(&t, indent);
	ctl_table_free(&t);
}

const struct option ctl_show_options[] = {
	COMMON_OPTIONS, { NULL, 0, NULL, 0 }
};

int
cmd_show(struct idemctl *ctl, int argc, char **argv)
{
	static const char *const submission_keys[] = {
		"client_submission_id", "state", "task_id", "task_path",
		"current_path", "digest_schema", "request_digest",
		"reserved_at", "updated_at", NULL
	};
	static const char *const receipt_keys[] = {
		"task_id", "task_path", "digest_schema", "request_digest",
		"file_digest", "state", "created_at", NULL
	};
	json_t	*response, *submission, *receipt;
	int	 status;

	while (ctl_next_option(ctl, argc, argv, ctl_show_options) != -1)
		ctl_usage_error(ctl, "no options of its own");
	if (optind + 1 != argc)
		ctl_usage_error(ctl, "one CLIENT_SUBMISSION_ID expected");
	if ((status = ctl_connect(ctl)) != 0)
		return status;
	response = ctl_call_ok(ctl, json_pack("{s:s,s:s}", "op",
	    idem_op_names[IDEM_OPC_GET_SUBMISSION], "client_submission_id",
	    argv[optind]), &status);
	if (response == NULL)
		return status;
	strip_envelope(response);
	if (ctl->json)
		ctl_print_json(response);
	if (!json_is_true(json_object_get(response, "found"))) {
		json_decref(response);
		return ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "no submission "
		    "\"%s\"", argv[optind]);
	}
	submission = json_object_get(response, "submission");
	if (!ctl->json) {
		print_fields(submission, submission_keys, "");
		receipt = json_object_get(submission, "receipt");
		if (receipt != NULL) {
			printf("receipt\n");
			print_fields(receipt, receipt_keys, "  ");
		} else
			printf("receipt               none yet: not committed "
			    "(a retry of the same request completes it)\n");
	}
	json_decref(response);
	return status;
}

/* ---- effects and resolve ------------------------------------------------------ */

static const char *const effect_keys[] = {
	"client_submission_id", "effect_kind", "state", "attempt",
	"external_key", "digest_schema", "request_digest", "reserved_at",
	"updated_at", "lease_expires_at", "lease_live", "lease_ms_left",
	"in_flight", "recovered", NULL
};
static const char *const effect_receipt_keys[] = {
	"attempt", "external_key", "result", "state", "committed_at", NULL
};

/* effects [list]: the unfinished effects, outcome_unknown first. */
static int
effects_list(struct idemctl *ctl)
{
	json_t		*response, *entries, *entry, *counts, *list;
	size_t		 i, unknown = 0;
	int		 status;

	if ((status = ctl_connect(ctl)) != 0)
		return status;
	response = ctl_call_ok(ctl, json_pack("{s:s}", "op",
	    idem_op_names[IDEM_OPC_DIAGNOSE]), &status);
	if (response == NULL)
		return status;
	entries = json_object_get(response, "entries");
	counts = json_object_get(response, "effect_counts");
	list = json_array();
	json_array_foreach(entries, i, entry) {
		if (json_object_get(entry, "effect_kind") == NULL)
			continue;
		json_array_append(list, entry);
		if (strcmp(ctl_string_member(entry, "state", ""),
		    "outcome_unknown") == 0)
			unknown++;
	}
	if (ctl->json) {
		entry = json_pack("{s:O,s:O}", "effects", list, "counts",
		    counts != NULL ? counts : json_null());
		ctl_print_json(entry);
		json_decref(entry);
	} else {
		if (json_array_size(list) > 0 &&
		    effects_table_print(list, 0) != 0)
			goto nomem;
		printf("%s%zu unfinished effects: %" JSON_INTEGER_FORMAT
		    " outcome_unknown, %" JSON_INTEGER_FORMAT " with a live "
		    "lease, %" JSON_INTEGER_FORMAT " released; %"
		    JSON_INTEGER_FORMAT " committed\n", json_array_size(list) >
		    0 ? "\n" : "", json_array_size(list),
		    ctl_int_member(counts, "outcome_unknown"),
		    ctl_int_member(counts, "reserved"),
		    ctl_int_member(counts, "released"),
		    ctl_int_member(counts, "committed"));
		if (unknown > 0)
			printf("An outcome_unknown effect may or may not have "
			    "happened: look downstream by its external key,\n"
			    "then: idemctl resolve KIND ID applied|not_applied"
			    "|unknown\n");
	}
	json_decref(list);
	json_decref(response);
	/* Something needs a decision: a monitor wants to know. */
	return unknown > 0 ? IDEMCTL_EXIT_PROBLEM : IDEMCTL_EXIT_OK;

nomem:
	json_decref(list);
	json_decref(response);
	return ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "out of memory");
}

static int
effects_show(struct idemctl *ctl, const char *kind, const char *id)
{
	json_t	*response, *submission, *receipt;
	int	 status;

	if ((status = ctl_connect(ctl)) != 0)
		return status;
	response = ctl_call_ok(ctl, json_pack("{s:s,s:s,s:s}", "op",
	    idem_op_names[IDEM_OPC_GET_SUBMISSION], "client_submission_id", id,
	    "effect_kind", kind), &status);
	if (response == NULL)
		return status;
	strip_envelope(response);
	if (ctl->json)
		ctl_print_json(response);
	if (!json_is_true(json_object_get(response, "found"))) {
		json_decref(response);
		return ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "no effect %s "
		    "\"%s\"", kind, id);
	}
	submission = json_object_get(response, "submission");
	if (!ctl->json) {
		print_fields(submission, effect_keys, "");
		if ((receipt = json_object_get(submission, "receipt")) != NULL) {
			printf("receipt\n");
			print_fields(receipt, effect_receipt_keys, "  ");
		}
	}
	json_decref(response);
	return status;
}

const struct option ctl_effects_options[] = {
	COMMON_OPTIONS, { NULL, 0, NULL, 0 }
};

int
cmd_effects(struct idemctl *ctl, int argc, char **argv)
{

	while (ctl_next_option(ctl, argc, argv, ctl_effects_options) != -1)
		ctl_usage_error(ctl, "no options of its own");
	if (optind == argc || (optind + 1 == argc &&
	    strcmp(argv[optind], "list") == 0))
		return effects_list(ctl);
	if (optind + 3 == argc && strcmp(argv[optind], "show") == 0)
		return effects_show(ctl, argv[optind + 1], argv[optind + 2]);
	ctl_usage_error(ctl, "expected \"list\" or \"show KIND ID\"");
}

const struct option ctl_resolve_options[] = {
	COMMON_OPTIONS,
	{ "result", required_argument, NULL, 'r' },
	{ "source", required_argument, NULL, 's' },
	{ NULL, 0, NULL, 0 }
};

int
cmd_resolve(struct idemctl *ctl, int argc, char **argv)
{
	static const char *const observed[] = {
		"applied", "not_applied", "unknown", NULL
	};
	json_t		*evidence, *response, *result = NULL;
	json_error_t	 jerr;
	const char	*source = NULL;
	char		 who[128];
	int		 ch, status, i;

	while ((ch = ctl_next_option(ctl, argc, argv,
	    ctl_resolve_options)) != -1) {
		if (ch == 'r') {
			json_decref(result);
			result = json_loads(optarg, JSON_DECODE_ANY |
			    JSON_REJECT_DUPLICATES, &jerr);
			if (result == NULL)
				ctl_usage_error(ctl, "--result: not JSON: %s",
				    jerr.text);
		} else if (ch == 's')
			source = optarg;
	}
	if (optind + 3 != argc)
		ctl_usage_error(ctl, "KIND ID applied|not_applied|unknown "
		    "expected");
	for (i = 0; observed[i] != NULL; i++)
		if (strcmp(argv[optind + 2], observed[i]) == 0)
			break;
	if (observed[i] == NULL)
		ctl_usage_error(ctl, "\"%s\" is not applied, not_applied or "
		    "unknown", argv[optind + 2]);
	if (source == NULL) {
		snprintf(who, sizeof who, "idemctl resolve (uid %u)",
		    (unsigned)getuid());
		source = who;
	}
	evidence = json_pack("{s:s,s:s}", "observed", observed[i], "source",
	    source);
	if (result != NULL)
		json_object_set_new(evidence, "result", result);
	if ((status = ctl_connect(ctl)) != 0) {
		json_decref(evidence);
		return status;
	}
	response = ctl_call_ok(ctl, json_pack("{s:s,s:s,s:s,s:o}", "op",
	    idem_op_names[IDEM_OPC_EFFECT_RESOLVE], "effect_kind", argv[optind],
	    "client_submission_id", argv[optind + 1], "evidence", evidence),
	    &status);
	if (response == NULL)
		return status;
	strip_envelope(response);
	if (ctl->json)
		ctl_print_json(response);
	else {
		printf("%s%s%s\n", ctl_string_member(response, "state", "?"),
		    json_is_true(json_object_get(response, "recovered")) ?
		    " (recovered)" : "", json_is_true(json_object_get(response,
		    "action_taken")) ? "" : " (already so: nothing changed)");
		if (json_object_get(response, "receipt") != NULL)
			print_fields(json_object_get(response, "receipt"),
			    effect_receipt_keys, "  ");
	}
	json_decref(response);
	return IDEMCTL_EXIT_OK;
}

/* ---- submit -------------------------------------------------------------- */

/* Read a whole file, or stdin for "-", as one JSON object. */
static json_t *
read_json_file(struct idemctl *ctl, const char *path, int *status)
{
	json_error_t	 jerr;
	json_t		*j;
	FILE		*f;
	char		*buf;
	size_t		 n;
	int		 saved_errno;

	if (strcmp(path, "-") == 0)
		f = stdin;
	else if ((f = fopen(path, "r")) == NULL) {
		*status = ctl_fail(ctl, IDEMCTL_EXIT_UNREACHABLE, "%s: %s",
		    path, strerror(errno));
		return NULL;
	}
	if ((buf = malloc(IDEMCTL_MAX_FILE_BYTES + 1)) == NULL) {
		*status = ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "out of memory");
		goto out;
	}
	n = fread(buf, 1, IDEMCTL_MAX_FILE_BYTES + 1, f);
	saved_errno = errno;
	if (ferror(f)) {
		*status = ctl_fail(ctl, IDEMCTL_EXIT_UNREACHABLE, "%s: %s",
		    path, strerror(saved_errno));
		goto out;
	}
	if (n > IDEMCTL_MAX_FILE_BYTES) {
		*status = ctl_fail(ctl, IDEMCTL_EXIT_USAGE, "%s: over %d "
		    "bytes, more than one request may hold", path,
		    IDEMCTL_MAX_FILE_BYTES);
		goto out;
	}
	j = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &jerr);
	if (j == NULL || !json_is_object(j)) {
		*status = ctl_fail(ctl, IDEMCTL_EXIT_USAGE, "%s: %s", path,
		    j == NULL ? jerr.text : "not a JSON object");
		json_decref(j);
		goto out;
	}
	free(buf);
	if (f != stdin)
		fclose(f);
	return j;

out:
	free(buf);
	if (f != stdin)
		fclose(f);
	return NULL;
}

static int
submit_answer(struct idemctl *ctl, json_t *response)
{
	json_t		*receipt = json_object_get(response, "receipt");
	json_t		*error, *existing;
	const char	*disposition;

	disposition = ctl_string_member(response, "disposition", "");
	if (strcmp(disposition, "conflict") == 0) {
		if (ctl->json)
			ctl_print_json(response);
		error = json_object_get(response, "error");
		existing = json_object_get(response, "existing");
		return ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "conflict (%s): "
		    "\"%s\" is already bound to %s (%s, request_digest %s); "
		    "no task was created",
		    ctl_string_member(error, "reason", "?"),
		    ctl_string_member(existing, "client_submission_id", "?"),
		    ctl_string_member(existing, "task_id", "?"),
		    ctl_string_member(existing, "state", "?"),
		    ctl_string_member(existing, "request_digest", "?"));
	}
	if (!json_is_true(json_object_get(response, "ok")))
		return ctl_answer_error(ctl, response);
	if (ctl->json) {
		ctl_print_json(response);
		return IDEMCTL_EXIT_OK;
	}
	printf("%s%s%s: %s (%s)\n", disposition,
	    json_is_true(json_object_get(response, "recovered")) ?
	    ", recovered" : "",
	    json_is_false(json_object_get(response, "idempotent")) ?
	    ", legacy: not idempotent" : "",
	    ctl_string_member(receipt, "task_id", "?"),
	    ctl_string_member(receipt, "task_path", "?"));
	if (strcmp(disposition, "reused") == 0)
		printf("  the first call's receipt, created %s; nothing was "
		    "written\n", ctl_string_member(receipt, "created_at", "?"));
	return IDEMCTL_EXIT_OK;
}

const struct option ctl_submit_options[] = {
	COMMON_OPTIONS,
	{ "id", required_argument, NULL, 'i' },
	{ "sender", required_argument, NULL, 's' },
	{ "recipient", required_argument, NULL, 'r' },
	{ "subject", required_argument, NULL, 'S' },
	{ "body", required_argument, NULL, 'b' },
	{ "priority", required_argument, NULL, 'p' },
	{ "risk-level", required_argument, NULL, 'l' },
	{ "thread-key", required_argument, NULL, 't' },
	{ "parent", required_argument, NULL, 'P' },
	{ "reference", required_argument, NULL, OPT_REFERENCE },
	{ "depends-on", required_argument, NULL, OPT_DEPENDS_ON },
	{ "file", required_argument, NULL, OPT_FILE },
	{ NULL, 0, NULL, 0 }
};

/*
 * The task's members that submit's flags set (ctl_submit_options): a
 * string each, or a list that each use of the flag adds to.
 */
static const struct submit_task_flag {
	int		 option;
	const char	*member;
	int		 list;
} submit_task_flags[] = {
	{ 's', "sender", 0 },
	{ 'r', "recipient", 0 },
	{ 'S', "subject", 0 },
	{ 'b', "body", 0 },
	{ 'p', "priority", 0 },
	{ 'l', "risk_level", 0 },
	{ 't', "thread_key", 0 },
	{ 'P', "parent", 0 },
	{ OPT_REFERENCE, "references", 1 },
	{ OPT_DEPENDS_ON, "depends_on", 1 },
};

/*
 * Set the member of option (a task flag) to value.  A value that is not
 * valid UTF-8 sets nothing: json_string refuses it, and a required
 * member found missing says so.
 */
static void
submit_task_member(json_t *task, int option, const char *value)
{
	const struct submit_task_flag	*f;
	json_t				*list;
	size_t				 i;

	for (i = 0; i < sizeof submit_task_flags /
	    sizeof submit_task_flags[0]; i++) {
		f = &submit_task_flags[i];
		if (f->option != option)
			continue;
		if (!f->list) {
			json_object_set_new(task, f->member,
			    json_string(value));
			return;
		}
		if ((list = json_object_get(task, f->member)) == NULL) {
			list = json_array();
			json_object_set_new(task, f->member, list);
		}
		json_array_append_new(list, json_string(value));
		return;
	}
}

int
cmd_submit(struct idemctl *ctl, int argc, char **argv)
{
	json_t		*request = NULL, *task, *response, *op;
	const char	*id = NULL, *file = NULL;
	int		 ch, status, task_flags = 0;

	if ((task = json_object()) == NULL)
		return ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "out of memory");
	while ((ch = ctl_next_option(ctl, argc, argv,
	    ctl_submit_options)) != -1) {
		if (ch != 'i' && ch != OPT_FILE)
			task_flags = 1;
		switch (ch) {
		case 'i':
			id = optarg;
			break;
		case OPT_FILE:
			file = optarg;
			break;
		default:
			submit_task_member(task, ch, optarg);
			break;
		}
	}
	if (optind != argc)
		ctl_usage_error(ctl, "unexpected argument \"%s\"",
		    argv[optind]);

	if (file != NULL) {
		/* One source of the task, so nothing is merged by surprise. */
		if (task_flags)
			ctl_usage_error(ctl, "--file holds the task: give "
			    "no task flags with it");
		json_decref(task);
		if ((request = read_json_file(ctl, file, &status)) == NULL)
			return status;
		op = json_object_get(request, "op");
		if (op != NULL && (!json_is_string(op) ||
		    strcmp(json_string_value(op),
		    idem_op_names[IDEM_OPC_WRITE_TASK]) != 0)) {
			json_decref(request);
			ctl_usage_error(ctl, "%s: \"op\" must be write_task "
			    "or absent", file);
		}
		if (!json_is_object(json_object_get(request, "task"))) {
			json_decref(request);
			ctl_usage_error(ctl, "%s: no \"task\" object", file);
		}
	} else {
		/* Strings from argv may be invalid UTF-8: json_string says. */
		if (json_object_get(task, "sender") == NULL ||
		    json_object_get(task, "recipient") == NULL ||
		    json_object_get(task, "subject") == NULL)
			ctl_usage_error(ctl, "--sender, --recipient and "
			    "--subject are required (or --file)");
		request = json_pack("{s:o}", "task", task);
	}
	if (request == NULL)
		return ctl_fail(ctl, IDEMCTL_EXIT_USAGE, "an argument is not "
		    "valid UTF-8");
	json_object_set_new(request, "op",
	    json_string(idem_op_names[IDEM_OPC_WRITE_TASK]));
	if (id != NULL &&
	    json_object_set_new(request, "client_submission_id",
	    json_string(id)) == -1) {
		json_decref(request);
		return ctl_fail(ctl, IDEMCTL_EXIT_USAGE, "--id is not valid "
		    "UTF-8");
	}

	if ((status = ctl_connect(ctl)) != 0) {
		json_decref(request);
		return status;
	}
	if ((response = ctl_call(ctl, request, &status)) == NULL)
		return status;
	status = submit_answer(ctl, response);
	json_decref(response);
	return status;
}

