/* SPDX-License-Identifier: ISC */
/*
 * idemctl: the operator's tool for idemd.
 *
 * Online commands (status, stats, diagnose, show, submit) talk to the
 * broker over its socket, one request per line through libidem's
 * idem_call_raw, and print what it answers.  Offline commands (verify,
 * journal dump) read the journal and the FCoP workspace directly: they
 * replay the journal read-only (JOURNAL_REPLAY_READONLY) and never write,
 * move or delete anything, so they are safe beside a running broker and
 * after a crash, when the broker may refuse to start.
 *
 * Human text by default; --json prints JSON (online: the broker's own
 * answer).  A failure is one line on stderr.  Exit status, for scripts:
 * 0 ok; 1 the broker answered an error or a conflict, or verify found
 * problems; 2 usage; 3 the broker is unreachable or the files cannot be
 * read.  After 3 from submit, retrying with the same --id is safe.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#ifndef _GNU_SOURCE
#define _GNU_SOURCE		/* asprintf */
#endif

#include <sys/stat.h>
#include <sys/types.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "idem.h"
#include "digest.h"
#include "store.h"
#include "idemctl_store.h"

#define IDEMCTL_EXIT_OK			0
#define IDEMCTL_EXIT_PROBLEM		1	/* error, conflict, problems */
#define IDEMCTL_EXIT_USAGE		2
#define IDEMCTL_EXIT_UNREACHABLE	3	/* or: cannot read the files */

#define IDEMCTL_DEFAULT_STALE_AFTER_MS	30000
/* A --file task, like any request, must fit one line. */
#define IDEMCTL_MAX_FILE_BYTES		IDEM_MAX_LINE_BYTES
/*
 * How deep verify looks for TASK files below _lifecycle/ and history/:
 * _lifecycle/history/<date>/<task_id>/<task_id>.md is four directories.
 */
#define IDEMCTL_WALK_MAX_DEPTH		4
#define IDEMCTL_TABLE_MAX_COLUMNS	10

/* Long-only options; values past any character getopt could return. */
enum {
	OPT_JSON = 256,
	OPT_SOCKET,
	OPT_ROOT,
	OPT_STALE_AFTER,
	OPT_PROMETHEUS,
	OPT_FILE,
	OPT_REFERENCE,
	OPT_DEPENDS_ON,
	OPT_TEXT,
	OPT_SEQUENCE_DIGITS
};

#define COMMON_OPTIONS							\
	{ "json", no_argument, NULL, OPT_JSON },			\
	{ "socket", required_argument, NULL, OPT_SOCKET },		\
	{ "root", required_argument, NULL, OPT_ROOT },			\
	{ "help", no_argument, NULL, 'h' }

#define COMMON_HELP							\
"  --json            print JSON\n"					\
"  --socket PATH     the broker's socket (else $IDEM_SOCKET, else\n"	\
"                    ROOT/.idem/idemd.sock)\n"				\
"  --root DIR        the FCoP workspace (else $IDEM_ROOT, else ./fcop)\n" \
"  --help            this text\n"					\
"\n"									\
"Exit status: 0 ok, 1 error, conflict or problems found, 2 usage,\n"	\
"3 broker unreachable or files unreadable.\n"

struct idemctl;

struct command {
	const char	*name;
	int		(*run)(struct idemctl *, int, char **);
	const char	*summary;	/* for idemctl --help */
	const char	*synopsis;
	const char	*help;
};

struct idemctl {
	const struct command	*command;
	const char		*socket_path;	/* --socket */
	const char		*root;		/* --root */
	int			 json;
	struct idem_conn	*conn;
	char			 socket_buf[PATH_MAX];
};

static void	usage(FILE *, int) __attribute__((noreturn));
static void	ctl_usage_error(struct idemctl *, const char *, ...)
		    __attribute__((format(printf, 2, 3), noreturn));
static int	ctl_fail(struct idemctl *, int, const char *, ...)
		    __attribute__((format(printf, 3, 4)));

/* ---- messages and options ------------------------------------------------ */

static void
command_help(const struct command *c, FILE *out)
{
	fprintf(out, "usage: idemctl %s%s%s\n\n%s\noptions:\n%s",
	    c->name, c->synopsis[0] != '\0' ? " " : "", c->synopsis,
	    c->help, COMMON_HELP);
}

/* One line on stderr, pointing at --help, then exit 2. */
static void
ctl_usage_error(struct idemctl *ctl, const char *fmt, ...)
{
	va_list	ap;

	fprintf(stderr, "idemctl %s: ", ctl->command->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see idemctl %s --help)\n", ctl->command->name);
	exit(IDEMCTL_EXIT_USAGE);
}

/* One line on stderr; returns status so callers can return ctl_fail(). */
static int
ctl_fail(struct idemctl *ctl, int status, const char *fmt, ...)
{
	va_list	ap;

	fprintf(stderr, "idemctl %s: ", ctl->command->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return status;
}

/*
 * The next of the command's own options, -1 at the end.  The options
 * every command shares are handled here, so they may come anywhere.
 */
static int
ctl_next_option(struct idemctl *ctl, int argc, char **argv,
    const struct option *options)
{
	int	ch;

	opterr = 0;	/* our own one-line messages */
	for (;;) {
		ch = getopt_long(argc, argv, ":h", options, NULL);
		switch (ch) {
		case OPT_JSON:
			ctl->json = 1;
			break;
		case OPT_SOCKET:
			ctl->socket_path = optarg;
			break;
		case OPT_ROOT:
			ctl->root = optarg;
			break;
		case 'h':
			command_help(ctl->command, stdout);
			exit(IDEMCTL_EXIT_OK);
		case ':':
			ctl_usage_error(ctl, "%s needs a value",
			    argv[optind - 1]);
		case '?':
			ctl_usage_error(ctl, "unknown option %s",
			    argv[optind - 1]);
		default:
			return ch;
		}
	}
}

static const char *
ctl_root(struct idemctl *ctl)
{
	const char	*env;

	if (ctl->root != NULL)
		return ctl->root;
	if ((env = getenv("IDEM_ROOT")) != NULL && *env != '\0')
		return env;
	return IDEM_DEFAULT_ROOT;
}

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

static void
print_json(json_t *j)
{
	json_dumpf(j, stdout, JSON_COMPACT);
	fputc('\n', stdout);
}

/* ---- formatting ---------------------------------------------------------- */

/* "500ms", "30s", "1.5s", "5m", "2h"; a bare number is seconds. */
static int
parse_duration_ms(const char *s, int64_t *ms)
{
	static const struct {
		const char	*suffix;
		double		 ms;
	} units[] = {
		{ "ms", 1 }, { "s", 1000 }, { "", 1000 }, { "m", 60000 },
		{ "h", 3600000 }, { "d", 86400000 }
	};
	char	*end;
	double	 v;
	size_t	 i;

	if (!((*s >= '0' && *s <= '9') || *s == '.'))
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s)
		return -1;
	for (i = 0; i < sizeof units / sizeof units[0]; i++) {
		if (strcmp(end, units[i].suffix) == 0) {
			v *= units[i].ms;
			/* Also refuses NaN and infinity. */
			if (!(v >= 0 && v < (double)INT64_MAX / 2))
				return -1;
			*ms = (int64_t)(v + 0.5);
			return 0;
		}
	}
	return -1;
}

/* An age or uptime, short and readable: 850ms, 12.3s, 4m05s, 2h03m, 3d02h. */
static void
format_duration(int64_t ms, char *out, size_t size)
{
	int64_t	s;

	if (ms < 0)
		ms = 0;
	s = ms / 1000;
	if (ms < 1000)
		snprintf(out, size, "%" PRId64 "ms", ms);
	else if (s < 60)
		snprintf(out, size, "%.1fs", (double)ms / 1000);
	else if (s < 3600)
		snprintf(out, size, "%" PRId64 "m%02" PRId64 "s", s / 60,
		    s % 60);
	else if (s < 86400)
		snprintf(out, size, "%" PRId64 "h%02" PRId64 "m", s / 3600,
		    s / 60 % 60);
	else
		snprintf(out, size, "%" PRId64 "d%02" PRId64 "h", s / 86400,
		    s / 3600 % 24);
}

static const char *
yes_no(json_t *v)
{
	if (json_is_true(v))
		return "yes";
	if (json_is_false(v))
		return "no";
	return "-";
}

static json_int_t
int_member(json_t *object, const char *key)
{
	return json_integer_value(json_object_get(object, key));
}

static const char *
string_member(json_t *object, const char *key, const char *absent)
{
	const char	*s = json_string_value(json_object_get(object, key));

	return s != NULL ? s : absent;
}

/*
 * A table printed with aligned columns.  Cells are copied; the last
 * column is not padded, so lines carry no trailing blanks.
 */
struct table {
	size_t	  columns;
	size_t	  rows;
	size_t	  width[IDEMCTL_TABLE_MAX_COLUMNS];
	char	**cells;
};

static int
table_add(struct table *t, const char *const *row)
{
	char	**cells;
	size_t	  i, n;

	cells = reallocarray(t->cells, (t->rows + 1) * t->columns,
	    sizeof *cells);
	if (cells == NULL)
		return -1;
	t->cells = cells;
	for (i = 0; i < t->columns; i++) {
		if ((cells[t->rows * t->columns + i] = strdup(row[i])) == NULL)
			return -1;
		if ((n = strlen(row[i])) > t->width[i])
			t->width[i] = n;
	}
	t->rows++;
	return 0;
}

static void
table_print(struct table *t, const char *indent)
{
	size_t	r, i;

	for (r = 0; r < t->rows; r++) {
		fputs(indent, stdout);
		for (i = 0; i < t->columns; i++) {
			if (i + 1 < t->columns)
				printf("%-*s  ", (int)t->width[i],
				    t->cells[r * t->columns + i]);
			else
				printf("%s\n", t->cells[r * t->columns + i]);
		}
	}
}

static void
table_free(struct table *t)
{
	size_t	i;

	for (i = 0; i < t->rows * t->columns; i++)
		free(t->cells[i]);
	free(t->cells);
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
	const char	*field = string_member(error, "field", NULL);
	const char	*reason = string_member(error, "reason", NULL);

	if (ctl->json)
		print_json(response);
	return ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "%s%s%s: %s%s%s%s",
	    string_member(error, "code", "error"),
	    reason != NULL ? " " : "", reason != NULL ? reason : "",
	    string_member(error, "message", "(no message)"),
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

static int
cmd_status(struct idemctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		COMMON_OPTIONS, { NULL, 0, NULL, 0 }
	};
	json_t		*hello, *stats = NULL, *out;
	json_int_t	 used, capacity;
	char		 uptime[32];
	int		 status = 0;

	while (ctl_next_option(ctl, argc, argv, options) != -1)
		ctl_usage_error(ctl, "no options of its own");
	if (optind != argc)
		ctl_usage_error(ctl, "no arguments expected");
	if ((status = ctl_connect(ctl)) != 0) {
		/* A monitor reading --json still gets an answer. */
		if (ctl->json && status == IDEMCTL_EXIT_UNREACHABLE) {
			out = json_pack("{s:b,s:s}", "up", 0, "socket",
			    ctl_socket_path(ctl));
			print_json(out);
			json_decref(out);
		}
		return status;
	}
	if ((hello = ctl_call_op(ctl, "hello", &status)) == NULL)
		return status;
	if (!json_is_true(json_object_get(hello, "ok"))) {
		status = ctl_answer_error(ctl, hello);
		json_decref(hello);
		return status;
	}
	/* Stats are extra: a broker that cannot give them is still up. */
	if ((stats = ctl_call_op(ctl, "stats", &status)) != NULL &&
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
		print_json(out);
		json_decref(out);
	} else {
		printf("%s %s is up (protocol %" JSON_INTEGER_FORMAT ")\n",
		    string_member(hello, "server", "?"),
		    string_member(hello, "version", "?"),
		    int_member(hello, "protocol"));
		printf("  socket    %s\n", ctl_socket_path(ctl));
		if (stats != NULL) {
			format_duration(int_member(stats, "uptime_ms"), uptime,
			    sizeof uptime);
			used = int_member(stats, "table_used");
			capacity = int_member(stats, "table_capacity");
			printf("  uptime    %s\n", uptime);
			printf("  workers   %" JSON_INTEGER_FORMAT " running, %"
			    JSON_INTEGER_FORMAT " restart%s\n",
			    int_member(stats, "workers"),
			    int_member(stats, "worker_restarts"),
			    int_member(stats, "worker_restarts") == 1 ? "" :
			    "s");
			printf("  table     %" JSON_INTEGER_FORMAT " of %"
			    JSON_INTEGER_FORMAT " submissions used (%.1f%%)\n",
			    used, capacity, capacity > 0 ?
			    100.0 * (double)used / (double)capacity : 0.0);
			printf("  tasks     %" JSON_INTEGER_FORMAT " created, %"
			    JSON_INTEGER_FORMAT " reused, %" JSON_INTEGER_FORMAT
			    " conflicts, %" JSON_INTEGER_FORMAT " legacy\n",
			    int_member(stats, "created"),
			    int_member(stats, "reused"),
			    int_member(stats, "conflict"),
			    int_member(stats, "legacy_created"));
			printf("  errors    %" JSON_INTEGER_FORMAT "\n",
			    int_member(stats, "errors"));
		}
	}
	json_decref(hello);
	json_decref(stats);
	return status;
}

/* ---- stats --------------------------------------------------------------- */

/*
 * How each stat is exposed to Prometheus.  Stats a newer broker adds are
 * exposed as idem_<name>, untyped, rather than dropped.
 */
static const struct metric {
	const char	*stat;
	const char	*name;
	const char	*type;
	double		 scale;
	const char	*help;
} metrics[] = {
	{ "created", "idem_created_total", "counter", 1,
	    "Idempotent write_task calls that created their task." },
	{ "reused", "idem_reused_total", "counter", 1,
	    "write_task calls answered with the first call's receipt." },
	{ "conflict", "idem_conflict_total", "counter", 1,
	    "write_task calls refused as a conflict." },
	{ "legacy_created", "idem_legacy_created_total", "counter", 1,
	    "Tasks created by legacy calls, without a client_submission_id." },
	{ "reports_created", "idem_reports_created_total", "counter", 1,
	    "REPORT files written." },
	{ "reports_deduplicated", "idem_reports_deduplicated_total",
	    "counter", 1,
	    "write_report calls answered with an earlier report." },
	{ "errors", "idem_errors_total", "counter", 1,
	    "Requests answered with an error." },
	{ "journal_records", "idem_journal_records_total", "counter", 1,
	    "Journal records written." },
	{ "journal_fsyncs", "idem_journal_fsyncs_total", "counter", 1,
	    "Journal fdatasync calls (one per group commit)." },
	{ "worker_restarts", "idem_worker_restarts_total", "counter", 1,
	    "Worker processes replaced after they died." },
	{ "table_used", "idem_table_used", "gauge", 1,
	    "Submission table slots in use." },
	{ "table_capacity", "idem_table_capacity", "gauge", 1,
	    "Submission table slots in all." },
	{ "workers", "idem_workers", "gauge", 1,
	    "Worker processes running." },
	{ "uptime_ms", "idem_uptime_seconds", "gauge", 0.001,
	    "Seconds since the broker started." },
	{ "effects_proceed", "idem_effects_proceed_total", "counter", 1,
	    "effect_begin calls answered proceed." },
	{ "effects_reused", "idem_effects_reused_total", "counter", 1,
	    "effect_begin calls answered with the committed receipt." },
	{ "effects_in_progress", "idem_effects_in_progress_total", "counter",
	    1, "effect_begin calls refused: another caller holds the lease." },
	{ "effects_outcome_unknown", "idem_effects_outcome_unknown_total",
	    "counter", 1,
	    "effect_begin calls answered outcome_unknown (a lease lapsed)." },
	{ "effects_committed", "idem_effects_committed_total", "counter", 1,
	    "Effects committed by effect_complete or effect_resolve." },
	{ "effects_released", "idem_effects_released_total", "counter", 1,
	    "Effects released (not applied)." },
	{ "effects_resolved", "idem_effects_resolved_total", "counter", 1,
	    "effect_resolve calls that recorded evidence." },
	{ "effects_stale_fence", "idem_effects_stale_fence_total", "counter",
	    1, "effect_complete calls refused with a stale fence." },
	{ "result_arena_used", "idem_result_arena_used_bytes", "gauge", 1,
	    "Bytes of committed effects' results in memory." },
	{ "result_arena_bytes", "idem_result_arena_bytes", "gauge", 1,
	    "The result arena's size (--result-bytes)." }
};

static void
print_metric(const char *name, const char *type, const char *help,
    const char *labels, double value)
{
	printf("# HELP %s %s\n# TYPE %s %s\n%s%s %.17g\n", name, help, name,
	    type, name, labels, value);
}

static void
print_prometheus(json_t *hello, json_t *stats)
{
	const struct metric	*m;
	const char		*key, *p;
	json_t			*value;
	char			 name[128], labels[256];
	size_t			 i, n;

	print_metric("idem_up", "gauge", "1 if the broker answered.", "", 1);
	snprintf(labels, sizeof labels, "{version=\"%s\",protocol=\"%"
	    JSON_INTEGER_FORMAT "\"}", string_member(hello, "version", ""),
	    int_member(hello, "protocol"));
	print_metric("idem_build_info", "gauge", "The broker's version.",
	    labels, 1);
	json_object_foreach(stats, key, value) {
		if (!json_is_number(value))
			continue;
		m = NULL;
		for (i = 0; i < sizeof metrics / sizeof metrics[0]; i++) {
			if (strcmp(metrics[i].stat, key) == 0)
				m = &metrics[i];
		}
		if (m != NULL) {
			print_metric(m->name, m->type, m->help, "",
			    json_number_value(value) * m->scale);
			continue;
		}
		/* Metric names allow [a-zA-Z0-9_:] only. */
		n = (size_t)snprintf(name, sizeof name, "idem_");
		for (p = key; *p != '\0' && n + 1 < sizeof name; p++)
			name[n++] = (*p >= 'a' && *p <= 'z') ||
			    (*p >= 'A' && *p <= 'Z') ||
			    (*p >= '0' && *p <= '9') ? *p : '_';
		name[n] = '\0';
		print_metric(name, "untyped", "A stat this idemctl does not "
		    "know yet.", "", json_number_value(value));
	}
}

static int
cmd_stats(struct idemctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		COMMON_OPTIONS,
		{ "prometheus", no_argument, NULL, OPT_PROMETHEUS },
		{ NULL, 0, NULL, 0 }
	};
	struct table	 t = { .columns = 2 };
	json_t		*hello = NULL, *stats, *value;
	const char	*key;
	char		 number[64];
	int		 ch, prometheus = 0, status;

	while ((ch = ctl_next_option(ctl, argc, argv, options)) != -1) {
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
	if (prometheus && (hello = ctl_call_op(ctl, "hello", &status)) == NULL)
		return status;
	if ((stats = ctl_call_op(ctl, "stats", &status)) == NULL) {
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
		print_json(stats);
	else if (prometheus)
		print_prometheus(hello, stats);
	else {
		json_object_foreach(stats, key, value) {
			if (strcmp(key, "uptime_ms") == 0)
				format_duration(json_integer_value(value),
				    number, sizeof number);
			else if (json_is_integer(value))
				snprintf(number, sizeof number, "%"
				    JSON_INTEGER_FORMAT,
				    json_integer_value(value));
			else
				continue;
			if (table_add(&t, (const char *[]){ key, number }) ==
			    -1) {
				status = ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM,
				    "out of memory");
				break;
			}
		}
		table_print(&t, "");
		table_free(&t);
	}
	json_decref(stats);
	json_decref(hello);
	return status;
}

/* ---- diagnose ------------------------------------------------------------ */

static int
cmd_diagnose(struct idemctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		COMMON_OPTIONS,
		{ "stale-after", required_argument, NULL, OPT_STALE_AFTER },
		{ NULL, 0, NULL, 0 }
	};
	static const char *const header[] = {
		"CLIENT_SUBMISSION_ID", "STATE", "AGE", "TASK_ID", "EXISTS",
		"REQUEST_DIGEST", "FILE_DIGEST", "IN_FLIGHT", "STALLED"
	};
	struct table	 t = { .columns = 9 };
	json_t		*response, *entries, *entry, *counts;
	int64_t		 stale_after_ms = IDEMCTL_DEFAULT_STALE_AFTER_MS;
	size_t		 i, stalled = 0, effects = 0;
	char		 age[32];
	int		 ch, status;

	while ((ch = ctl_next_option(ctl, argc, argv, options)) != -1) {
		if (ch == OPT_STALE_AFTER &&
		    parse_duration_ms(optarg, &stale_after_ms) == -1)
			ctl_usage_error(ctl, "--stale-after: \"%s\" is not a "
			    "duration (like 500ms, 30s, 5m)", optarg);
	}
	if (optind != argc)
		ctl_usage_error(ctl, "no arguments expected");
	if ((status = ctl_connect(ctl)) != 0)
		return status;
	response = ctl_call_ok(ctl, json_pack("{s:s,s:I}", "op", "diagnose",
	    "stale_after_ms", (json_int_t)stale_after_ms), &status);
	if (response == NULL)
		return status;
	entries = json_object_get(response, "entries");
	counts = json_object_get(response, "counts");
	/* Effects have their own view (idemctl effects): tasks here. */
	for (i = 0; i < json_array_size(entries);) {
		entry = json_array_get(entries, i);
		if (json_object_get(entry, "effect_kind") != NULL &&
		    !ctl->json) {
			effects++;
			json_array_remove(entries, i);
			continue;
		}
		if (json_is_true(json_object_get(entry, "stalled")))
			stalled++;
		i++;
	}

	if (ctl->json) {
		strip_envelope(response);
		print_json(response);
	} else if (json_array_size(entries) == 0)
		printf("no intermediate submissions (%" JSON_INTEGER_FORMAT
		    " committed)\n", int_member(counts, "committed"));
	else {
		if (table_add(&t, header) == -1)
			goto nomem;
		json_array_foreach(entries, i, entry) {
			format_duration(int_member(entry, "age_ms"), age,
			    sizeof age);
			if (table_add(&t, (const char *[]){
			    string_member(entry, "client_submission_id", "?"),
			    string_member(entry, "state", "?"), age,
			    string_member(entry, "task_id", "-"),
			    yes_no(json_object_get(entry, "task_exists")),
			    yes_no(json_object_get(entry,
			    "request_digest_matches")),
			    yes_no(json_object_get(entry,
			    "file_digest_matches")),
			    yes_no(json_object_get(entry, "in_flight")),
			    yes_no(json_object_get(entry, "stalled")) }) == -1)
				goto nomem;
		}
		table_print(&t, "");
		printf("\n%zu intermediate (%" JSON_INTEGER_FORMAT
		    " reserved, %" JSON_INTEGER_FORMAT " task_created), %zu "
		    "stalled (no "
		    "progress for %" PRId64 " ms), %" JSON_INTEGER_FORMAT
		    " committed\n", json_array_size(entries),
		    int_member(counts, "reserved"),
		    int_member(counts, "task_created"), stalled,
		    stale_after_ms, int_member(counts, "committed"));
		if (stalled > 0)
			printf("A retry with the same client_submission_id and "
			    "request completes a stalled submission.\n");
	}
	if (effects > 0 && !ctl->json)
		printf("%zu unfinished effects: see idemctl effects\n",
		    effects);
	table_free(&t);
	json_decref(response);
	/* Something is stuck: a monitor wants to know without parsing. */
	return stalled > 0 ? IDEMCTL_EXIT_PROBLEM : IDEMCTL_EXIT_OK;

nomem:
	table_free(&t);
	json_decref(response);
	return ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "out of memory");
}

/* ---- show ---------------------------------------------------------------- */

static void
print_fields(json_t *object, const char *const *keys, const char *indent)
{
	struct table	 t = { .columns = 2 };
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
		if (s == NULL || table_add(&t,
		    (const char *[]){ keys[i], s }) == -1) {
			free(s);
			break;
		}
		free(s);
	}
	table_print(&t, indent);
	table_free(&t);
}

static int
cmd_show(struct idemctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		COMMON_OPTIONS, { NULL, 0, NULL, 0 }
	};
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

	while (ctl_next_option(ctl, argc, argv, options) != -1)
		ctl_usage_error(ctl, "no options of its own");
	if (optind + 1 != argc)
		ctl_usage_error(ctl, "one CLIENT_SUBMISSION_ID expected");
	if ((status = ctl_connect(ctl)) != 0)
		return status;
	response = ctl_call_ok(ctl, json_pack("{s:s,s:s}", "op",
	    "get_submission", "client_submission_id", argv[optind]), &status);
	if (response == NULL)
		return status;
	strip_envelope(response);
	if (ctl->json)
		print_json(response);
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
	"updated_at", "lease_expires_at", "lease_live", "in_flight",
	"recovered", NULL
};
static const char *const effect_receipt_keys[] = {
	"attempt", "external_key", "result", "state", "committed_at", NULL
};

/* effects [list]: the unfinished effects, outcome_unknown first. */
static int
effects_list(struct idemctl *ctl)
{
	static const char *const header[] = {
		"EFFECT_KIND", "CLIENT_SUBMISSION_ID", "STATE", "ATTEMPT",
		"AGE", "EXTERNAL_KEY"
	};
	struct table	 t = { .columns = 6 };
	json_t		*response, *entries, *entry, *counts, *list;
	size_t		 i, unknown = 0;
	char		 age[32], attempt[16];
	int		 status;

	if ((status = ctl_connect(ctl)) != 0)
		return status;
	response = ctl_call_ok(ctl, json_pack("{s:s}", "op", "diagnose"),
	    &status);
	if (response == NULL)
		return status;
	entries = json_object_get(response, "entries");
	counts = json_object_get(response, "effect_counts");
	list = json_array();
	json_array_foreach(entries, i, entry) {
		if (json_object_get(entry, "effect_kind") == NULL)
			continue;
		json_array_append(list, entry);
		if (strcmp(string_member(entry, "state", ""),
		    "outcome_unknown") == 0)
			unknown++;
	}
	if (ctl->json) {
		entry = json_pack("{s:O,s:O}", "effects", list, "counts",
		    counts != NULL ? counts : json_null());
		print_json(entry);
		json_decref(entry);
	} else {
		if (table_add(&t, header) == -1)
			goto nomem;
		json_array_foreach(list, i, entry) {
			format_duration(int_member(entry, "age_ms"), age,
			    sizeof age);
			snprintf(attempt, sizeof attempt, "%" JSON_INTEGER_FORMAT,
			    int_member(entry, "attempt"));
			if (table_add(&t, (const char *[]){
			    string_member(entry, "effect_kind", "?"),
			    string_member(entry, "client_submission_id", "?"),
			    string_member(entry, "state", "?"), attempt, age,
			    string_member(entry, "external_key", "?") }) == -1)
				goto nomem;
		}
		if (json_array_size(list) > 0)
			table_print(&t, "");
		printf("%s%zu unfinished effects: %" JSON_INTEGER_FORMAT
		    " outcome_unknown, %" JSON_INTEGER_FORMAT " with a live "
		    "lease, %" JSON_INTEGER_FORMAT " released; %"
		    JSON_INTEGER_FORMAT " committed\n", json_array_size(list) >
		    0 ? "\n" : "", json_array_size(list),
		    int_member(counts, "outcome_unknown"),
		    int_member(counts, "reserved"),
		    int_member(counts, "released"),
		    int_member(counts, "committed"));
		if (unknown > 0)
			printf("An outcome_unknown effect may or may not have "
			    "happened: look downstream by its external key,\n"
			    "then: idemctl resolve KIND ID applied|not_applied"
			    "|unknown\n");
	}
	table_free(&t);
	json_decref(list);
	json_decref(response);
	/* Something needs a decision: a monitor wants to know. */
	return unknown > 0 ? IDEMCTL_EXIT_PROBLEM : IDEMCTL_EXIT_OK;

nomem:
	table_free(&t);
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
	    "get_submission", "client_submission_id", id, "effect_kind", kind),
	    &status);
	if (response == NULL)
		return status;
	strip_envelope(response);
	if (ctl->json)
		print_json(response);
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

static int
cmd_effects(struct idemctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		COMMON_OPTIONS, { NULL, 0, NULL, 0 }
	};

	while (ctl_next_option(ctl, argc, argv, options) != -1)
		ctl_usage_error(ctl, "no options of its own");
	if (optind == argc || (optind + 1 == argc &&
	    strcmp(argv[optind], "list") == 0))
		return effects_list(ctl);
	if (optind + 3 == argc && strcmp(argv[optind], "show") == 0)
		return effects_show(ctl, argv[optind + 1], argv[optind + 2]);
	ctl_usage_error(ctl, "expected \"list\" or \"show KIND ID\"");
}

static int
cmd_resolve(struct idemctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		COMMON_OPTIONS,
		{ "result", required_argument, NULL, 'r' },
		{ "source", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 }
	};
	static const char *const observed[] = {
		"applied", "not_applied", "unknown", NULL
	};
	json_t		*evidence, *response, *result = NULL;
	json_error_t	 jerr;
	const char	*source = NULL;
	char		 who[128];
	int		 ch, status, i;

	while ((ch = ctl_next_option(ctl, argc, argv, options)) != -1) {
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
	    "effect_resolve", "effect_kind", argv[optind],
	    "client_submission_id", argv[optind + 1], "evidence", evidence),
	    &status);
	if (response == NULL)
		return status;
	strip_envelope(response);
	if (ctl->json)
		print_json(response);
	else {
		printf("%s%s%s\n", string_member(response, "state", "?"),
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

	disposition = string_member(response, "disposition", "");
	if (strcmp(disposition, "conflict") == 0) {
		if (ctl->json)
			print_json(response);
		error = json_object_get(response, "error");
		existing = json_object_get(response, "existing");
		return ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "conflict (%s): "
		    "\"%s\" is already bound to %s (%s, request_digest %s); "
		    "no task was created",
		    string_member(error, "reason", "?"),
		    string_member(existing, "client_submission_id", "?"),
		    string_member(existing, "task_id", "?"),
		    string_member(existing, "state", "?"),
		    string_member(existing, "request_digest", "?"));
	}
	if (!json_is_true(json_object_get(response, "ok")))
		return ctl_answer_error(ctl, response);
	if (ctl->json) {
		print_json(response);
		return IDEMCTL_EXIT_OK;
	}
	printf("%s%s%s: %s (%s)\n", disposition,
	    json_is_true(json_object_get(response, "recovered")) ?
	    ", recovered" : "",
	    json_is_false(json_object_get(response, "idempotent")) ?
	    ", legacy: not idempotent" : "",
	    string_member(receipt, "task_id", "?"),
	    string_member(receipt, "task_path", "?"));
	if (strcmp(disposition, "reused") == 0)
		printf("  the first call's receipt, created %s; nothing was "
		    "written\n", string_member(receipt, "created_at", "?"));
	return IDEMCTL_EXIT_OK;
}

static int
cmd_submit(struct idemctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
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
	json_t		*request = NULL, *task, *response, *op;
	const char	*id = NULL, *file = NULL;
	int		 ch, status, task_flags = 0;

	if ((task = json_object()) == NULL)
		return ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "out of memory");
	while ((ch = ctl_next_option(ctl, argc, argv, options)) != -1) {
		if (ch != 'i' && ch != OPT_FILE)
			task_flags = 1;
		switch (ch) {
		case 'i':
			id = optarg;
			break;
		case OPT_FILE:
			file = optarg;
			break;
		case 's':
			json_object_set_new(task, "sender",
			    json_string(optarg));
			break;
		case 'r':
			json_object_set_new(task, "recipient",
			    json_string(optarg));
			break;
		case 'S':
			json_object_set_new(task, "subject",
			    json_string(optarg));
			break;
		case 'b':
			json_object_set_new(task, "body", json_string(optarg));
			break;
		case 'p':
			json_object_set_new(task, "priority",
			    json_string(optarg));
			break;
		case 'l':
			json_object_set_new(task, "risk_level",
			    json_string(optarg));
			break;
		case 't':
			json_object_set_new(task, "thread_key",
			    json_string(optarg));
			break;
		case 'P':
			json_object_set_new(task, "parent",
			    json_string(optarg));
			break;
		case OPT_REFERENCE:
		case OPT_DEPENDS_ON:
			if (json_object_get(task, ch == OPT_REFERENCE ?
			    "references" : "depends_on") == NULL)
				json_object_set_new(task, ch == OPT_REFERENCE ?
				    "references" : "depends_on", json_array());
			json_array_append_new(json_object_get(task,
			    ch == OPT_REFERENCE ? "references" : "depends_on"),
			    json_string(optarg));
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
		    strcmp(json_string_value(op), "write_task") != 0)) {
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
	json_object_set_new(request, "op", json_string("write_task"));
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

/* ---- journal records as text -------------------------------------------- */

static const char *
kind_name(unsigned kind)
{
	return kind == SUBTAB_KIND_REPORT ? "report" :
	    kind == SUBTAB_KIND_EFFECT ? "effect" : "task";
}

/* TASK-... or REPORT-... of an entry. */
static void
entry_id(const struct subtab_entry *e, char *out, size_t size)
{
	taskfile_format_id(e->kind, e->date, e->seq, e->sender,
	    e->sender_length, e->recipient, e->recipient_length, out, size);
}

/*
 * The submission id of a key: a task's key is its id; a report's is its
 * task_id, a newline and the id.  NULL for a legacy entry (no key).
 */
static const char *
key_submission_id(const struct subtab_entry *e, const char *key)
{
	const char	*nl;

	if (e->key_length == 0)
		return NULL;
	if (e->kind == SUBTAB_KIND_REPORT &&
	    (nl = memchr(key, '\n', e->key_length)) != NULL)
		return nl + 1;
	return key;
}

static json_t *
time_or_null(int64_t ms)
{
	char	at[TASKFILE_TIME_BYTES];

	if (ms == 0)
		return json_null();
	taskfile_format_time(ms, at);
	return json_string(at);
}

/*
 * One record of the audit trail, every fact it holds, and where it is:
 * a journal segment and offset, or the checkpoint continued by segment.
 */
static json_t *
record_json(const struct journal_record *r, int checkpoint, uint64_t segment,
    uint64_t offset)
{
	const struct subtab_entry *e = &r->entry;
	char		 id[IDEM_MAX_TASK_ID_BYTES + 16];
	char		 path[IDEM_MAX_TASK_PATH_BYTES + 16];
	char		 hex[IDEM_DIGEST_HEX_SIZE];
	const char	*csid, *schema = subtab_schema_name(e->schema);
	const char	*sep;
	json_t		*j;

	if (r->type == JOURNAL_RECORD_EFFECT) {
		sep = memchr(r->key, SUBTAB_EFFECT_SEPARATOR, e->key_length);
		j = json_pack("{s:s,s:I,s:o,s:s,s:s,s:s}", "source",
		    checkpoint ? "checkpoint" : "journal", "segment",
		    (json_int_t)segment, "offset", checkpoint ? json_null() :
		    json_integer((json_int_t)offset), "type", "effect", "kind",
		    "effect", "state", subtab_state_name(e->state));
		json_object_set_new(j, "effect_kind", sep != NULL ?
		    json_stringn(r->key, (size_t)(sep - r->key)) : json_null());
		json_object_set_new(j, "client_submission_id", sep != NULL ?
		    json_stringn(sep + 1, e->key_length - (size_t)(sep + 1 -
		    r->key)) : json_null());
		json_object_set_new(j, "schema", schema != NULL ?
		    json_string(schema) : json_null());
		digest_to_hex(e->request_digest, hex);
		json_object_set_new(j, "request_digest", json_string(hex));
		json_object_set_new(j, "attempt", json_integer(e->attempt));
		json_object_set_new(j, "recovered", json_boolean(
		    e->effect_flags & SUBTAB_EFFECT_RECOVERED));
		json_object_set_new(j, "lease_expires_at",
		    time_or_null(e->lease_expires_ms));
		digest_to_hex(e->file_digest, hex);
		json_object_set_new(j, "result_digest", e->state ==
		    SUBTAB_COMMITTED ? json_string(hex) : json_null());
		json_object_set_new(j, "result", e->result_length > 0 ?
		    json_loadb((const char *)r->result, e->result_length,
		    JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL) : json_null());
		json_object_set_new(j, "reserved_at",
		    time_or_null(e->reserved_at_ms));
		json_object_set_new(j, "updated_at",
		    time_or_null(e->updated_at_ms));
		json_object_set_new(j, "committed_at",
		    time_or_null(e->created_at_ms));
		json_object_set_new(j, "peer_uid", json_integer(e->peer_uid));
		json_object_set_new(j, "peer_pid", json_integer(e->peer_pid));
		return j;
	}
	entry_id(e, id, sizeof id);
	taskfile_format_path(e->kind, id, path, sizeof path);
	csid = key_submission_id(e, r->key);
	j = json_pack("{s:s,s:I,s:o,s:s,s:s,s:s}", "source", checkpoint ?
	    "checkpoint" : "journal", "segment", (json_int_t)segment, "offset",
	    checkpoint ? json_null() : json_integer((json_int_t)offset),
	    "type", r->type == JOURNAL_RECORD_ENTRY ? "entry" : "?", "kind",
	    kind_name(e->kind), "state", subtab_state_name(e->state));
	json_object_set_new(j, "client_submission_id", csid != NULL ?
	    json_stringn(csid, e->key_length - (size_t)(csid - r->key)) :
	    json_null());
	if (e->kind == SUBTAB_KIND_REPORT) {
		json_object_set_new(j, "task_id", csid != NULL &&
		    csid > r->key ? json_stringn(r->key,
		    (size_t)(csid - r->key) - 1) : json_null());
		json_object_set_new(j, "report_id", json_string(id));
		json_object_set_new(j, "report_path", json_string(path));
	} else {
		json_object_set_new(j, "task_id", json_string(id));
		json_object_set_new(j, "task_path", json_string(path));
	}
	json_object_set_new(j, "schema", schema != NULL ? json_string(schema) :
	    json_null());
	digest_to_hex(e->request_digest, hex);
	json_object_set_new(j, "request_digest", schema != NULL ?
	    json_string(hex) : json_null());
	digest_to_hex(e->file_digest, hex);
	json_object_set_new(j, "file_digest", e->state >= SUBTAB_TASK_CREATED ?
	    json_string(hex) : json_null());
	json_object_set_new(j, "reserved_at", time_or_null(e->reserved_at_ms));
	json_object_set_new(j, "updated_at", time_or_null(e->updated_at_ms));
	json_object_set_new(j, "created_at", time_or_null(e->created_at_ms));
	json_object_set_new(j, "peer_uid", json_integer(e->peer_uid));
	json_object_set_new(j, "peer_pid", json_integer(e->peer_pid));
	return j;
}

static int
journal_dir(struct idemctl *ctl, char *out, size_t size)
{
	if (snprintf(out, size, "%s/%s", ctl_root(ctl), IDEM_JOURNAL_DIR) >=
	    (int)size)
		return ctl_fail(ctl, IDEMCTL_EXIT_USAGE, "root path too long");
	return 0;
}

/* What journal_read found. */
struct journal_read {
	struct journal_replay_stats	stats;
	uint64_t			checkpoint;	/* its segment, or 0 */
	uint64_t			checkpoint_records;
	int				damaged;	/* not an I/O error */
};

/*
 * What the broker would rebuild its table from at start-up, read-only:
 * the newest checkpoint (a snapshot of the table; it keeps no legacy
 * records), then the segments from the one it names.  While apply sees
 * the checkpoint's records, jr->stats.at_segment is 0.
 */
static int
journal_read(const char *dir, journal_apply_fn apply, void *arg,
    struct journal_read *jr, char **cause)
{
	struct seqalloc_state	alloc[SUBTAB_KIND_COUNT];

	memset(jr, 0, sizeof *jr);
	*cause = NULL;
	if (checkpoint_load(dir, apply, arg, alloc, &jr->checkpoint,
	    &jr->checkpoint_records, cause) != 0) {
		/* checkpoint_load sets no errno for damage; its cause says. */
		jr->damaged = *cause != NULL && strstr(*cause, " is corrupt") !=
		    NULL;
		return -1;
	}
	if (journal_replay_from(dir, jr->checkpoint, JOURNAL_REPLAY_READONLY,
	    apply, arg, &jr->stats, cause) != 0) {
		jr->damaged = errno == EINVAL;
		return -1;
	}
	return 0;
}

/* ---- journal dump -------------------------------------------------------- */

struct dump {
	struct journal_read	*jr;
	int			 text;
};

static int
dump_apply(const struct journal_record *r, void *arg)
{
	struct dump	*d = arg;
	json_t		*j;
	char		 at[64];
	int		 checkpoint = d->jr->stats.at_segment == 0;

	if ((j = record_json(r, checkpoint, checkpoint ? d->jr->checkpoint :
	    d->jr->stats.at_segment, d->jr->stats.at_offset)) == NULL)
		return -1;
	if (checkpoint)
		snprintf(at, sizeof at, "ckpt-%" PRIu64, d->jr->checkpoint);
	else
		snprintf(at, sizeof at, "%" PRIu64 ":%" PRIu64,
		    d->jr->stats.at_segment, d->jr->stats.at_offset);
	if (d->text)
		printf("%-10s %-6s %-12s %-24s %-36s %s\n", at,
		    kind_name(r->entry.kind), subtab_state_name(r->entry.state),
		    string_member(j, "client_submission_id", "(legacy)"),
		    string_member(j, r->entry.kind == SUBTAB_KIND_REPORT ?
		    "report_id" : r->entry.kind == SUBTAB_KIND_EFFECT ?
		    "effect_kind" : "task_id", "?"),
		    string_member(j, "updated_at", "-"));
	else
		print_json(j);
	json_decref(j);
	return 0;
}

static int
cmd_journal_dump(struct idemctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		COMMON_OPTIONS,
		{ "text", no_argument, NULL, OPT_TEXT },
		{ NULL, 0, NULL, 0 }
	};
	struct journal_read	 jr;
	struct dump		 d = { &jr, 0 };
	char			 dir[PATH_MAX];
	char			*cause = NULL;
	int			 ch, status;

	while ((ch = ctl_next_option(ctl, argc, argv, options)) != -1) {
		if (ch == OPT_TEXT)
			d.text = 1;
	}
	if (optind != argc)
		ctl_usage_error(ctl, "no arguments expected");
	if (d.text && ctl->json)
		ctl_usage_error(ctl, "--json and --text exclude each other");
	if ((status = journal_dir(ctl, dir, sizeof dir)) != 0)
		return status;
	if (access(ctl_root(ctl), R_OK | X_OK) == -1)
		return ctl_fail(ctl, IDEMCTL_EXIT_UNREACHABLE, "cannot read "
		    "root %s: %s", ctl_root(ctl), strerror(errno));
	if (d.text)
		printf("%-10s %-6s %-12s %-24s %-36s %s\n", "SEG:OFFSET",
		    "KIND", "STATE", "CLIENT_SUBMISSION_ID", "TASK/REPORT_ID",
		    "UPDATED_AT");
	if (journal_read(dir, dump_apply, &d, &jr, &cause) != 0) {
		fflush(stdout);
		status = ctl_fail(ctl, jr.damaged ? IDEMCTL_EXIT_PROBLEM :
		    IDEMCTL_EXIT_UNREACHABLE, "%s", cause != NULL ? cause :
		    strerror(errno));
		free(cause);
		return status;
	}
	fflush(stdout);
	if (jr.stats.torn_segment != 0)
		fprintf(stderr, "idemctl journal dump: warning: torn tail in "
		    "segment %016" PRIx64 ".jnl at offset %" PRIu64 " (%s): %"
		    PRIu64 " bytes of an append that never completed (or is "
		    "in flight)\n", jr.stats.torn_segment,
		    jr.stats.torn_offset, jr.stats.torn_why != NULL ?
		    jr.stats.torn_why : "?", jr.stats.truncated_bytes);
	return IDEMCTL_EXIT_OK;
}

static const struct command journal_commands[] = {
	{ "journal dump", cmd_journal_dump, "the journal as an audit trail",
	    "[--root DIR] [--json | --text]",
"Print the journal, the broker's durable audit trail, one JSON object per\n"
"line and record, oldest first: where it is (source \"journal\" with its\n"
"segment and offset, or \"checkpoint\": a snapshot of the table that\n"
"replaced the segments before it, without legacy records), type, kind,\n"
"state, client_submission_id (and task_id for a report), the task or\n"
"report id and path, schema, request and file digests (hex), reserved,\n"
"updated and created times (ISO 8601, UTC) and the peer's uid and pid.\n"
"A submission has one record per transition; the last one holds.  --text\n"
"prints one aligned line per record instead.\n"
"\n"
"Read-only, safe beside a running broker: a torn tail (an append in\n"
"flight, or one a crash cut short) is a warning on stderr, corruption an\n"
"error naming the offset (exit 1) after the records before it.\n" }
};

static int
cmd_journal(struct idemctl *ctl, int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "dump") == 0) {
		ctl->command = &journal_commands[0];
		return cmd_journal_dump(ctl, argc - 1, argv + 1);
	}
	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "-h") == 0)) {
		command_help(ctl->command, stdout);
		return IDEMCTL_EXIT_OK;
	}
	ctl_usage_error(ctl, argc < 2 ? "which journal command?" :
	    "unknown journal command");
}

/* ---- verify -------------------------------------------------------------- */

/* The last record of one key (or one legacy record). */
struct vrecord {
	struct subtab_entry	entry;
	char			key[SUBTAB_MAX_KEY_BYTES + 1];
	char			id[IDEM_MAX_TASK_ID_BYTES + 16];
	uint64_t		segment;	/* checkpoint: its segment */
	uint64_t		offset;
	int			checkpoint;	/* from the checkpoint */
};

struct verify {
	struct idemctl			*ctl;
	const char			*root;
	int				 root_fd;
	struct journal_read		 jr;
	struct vrecord			*records;
	size_t				 count, cap;
	json_t				*by_key;	/* key: index */
	json_t				*by_id;		/* TASK-...: index */
	json_t				*seen_files;	/* task_id: path */
	int				 journal_complete;
	unsigned			 sequence_digits;	/* idemd's */
	/* What was found. */
	json_t				*problems;
	json_t				*foreign;
	unsigned			 errors, warnings, unreadable;
	unsigned			 submissions, legacy, reports;
	unsigned			 intermediate, present, moved;
	unsigned			 files, files_idem, files_legacy;
	unsigned			 reports_checked, not_fcop;
};

/* How bad a finding is; unreadable makes verify exit 3, not 1. */
enum { NOTE_ERROR, NOTE_WARNING, NOTE_UNREADABLE };

static void	verify_note(struct verify *, int, const char *, json_t *,
		    const char *, ...) __attribute__((format(printf, 5, 6)));

/*
 * One finding, with a message for people and the facts (details, which
 * this consumes) for scripts.
 */
static void
verify_note(struct verify *v, int severity, const char *check,
    json_t *details, const char *fmt, ...)
{
	va_list	 ap;
	char	*message;

	va_start(ap, fmt);
	if (vasprintf(&message, fmt, ap) == -1)
		message = NULL;
	va_end(ap);
	if (details == NULL)
		details = json_object();
	json_object_set_new(details, "severity", json_string(
	    severity == NOTE_WARNING ? "warning" : "error"));
	json_object_set_new(details, "check", json_string(check));
	json_object_set_new(details, "message", json_string(message != NULL ?
	    message : check));
	json_array_append_new(v->problems, details);
	free(message);
	if (severity == NOTE_WARNING)
		v->warnings++;
	else if (severity == NOTE_UNREADABLE)
		v->unreadable++;
	else
		v->errors++;
}

static int
verify_apply(const struct journal_record *r, void *arg)
{
	struct verify		*v = arg;
	struct vrecord		*vr, *nv;
	json_t			*at;
	size_t			 index;
	int			 overwrite = 0;
	char			 id[sizeof vr->id], key[sizeof vr->key];

	/* Effects have no file in the workspace to agree with. */
	if (r->entry.kind == SUBTAB_KIND_EFFECT)
		return 0;
	/* A key of the largest size fills r->key: no NUL after it. */
	memcpy(key, r->key, r->entry.key_length);
	key[r->entry.key_length] = '\0';
	entry_id(&r->entry, id, sizeof id);
	if (r->entry.key_length > 0 &&
	    (at = json_object_get(v->by_key, key)) != NULL) {
		index = (size_t)json_integer_value(at);
		overwrite = 1;
	} else {
		if (v->count == v->cap) {
			v->cap = v->cap == 0 ? 1024 : v->cap * 2;
			if ((nv = reallocarray(v->records, v->cap,
			    sizeof *nv)) == NULL)
				return -1;
			v->records = nv;
		}
		index = v->count++;
	}
	vr = &v->records[index];
	/* A submission moved to a fresh number no longer owns the old one. */
	if (overwrite && strcmp(vr->id, id) != 0 &&
	    (at = json_object_get(v->by_id, vr->id)) != NULL &&
	    (size_t)json_integer_value(at) == index)
		json_object_del(v->by_id, vr->id);

	/* Numbers are never handed out twice (SPEC.md, "Names"). */
	if ((at = json_object_get(v->by_id, id)) != NULL &&
	    (size_t)json_integer_value(at) != index)
		verify_note(v, NOTE_ERROR, "number_reused", json_pack(
		    "{s:s,s:I,s:I}", "id", id, "segment",
		    (json_int_t)v->jr.stats.at_segment, "offset",
		    (json_int_t)v->jr.stats.at_offset), "%s is recorded for "
		    "two submissions (\"%s\" and \"%.*s\"): a number was "
		    "handed out twice", id,
		    v->records[json_integer_value(at)].key,
		    (int)r->entry.key_length, r->key);

	vr->entry = r->entry;
	memcpy(vr->key, key, sizeof key);
	memcpy(vr->id, id, sizeof vr->id);
	vr->checkpoint = v->jr.stats.at_segment == 0;
	vr->segment = vr->checkpoint ? v->jr.checkpoint :
	    v->jr.stats.at_segment;
	vr->offset = v->jr.stats.at_offset;
	if ((r->entry.key_length > 0 && !overwrite &&
	    json_object_set_new(v->by_key, key,
	    json_integer((json_int_t)index)) == -1) ||
	    json_object_set_new(v->by_id, id,
	    json_integer((json_int_t)index)) == -1)
		return -1;
	return 0;
}

static json_t *
vrecord_details(const struct vrecord *vr, const char *path)
{
	const char	*csid = key_submission_id(&vr->entry, vr->key);
	json_t		*j;

	j = json_pack("{s:s,s:s,s:s,s:s,s:I,s:o}", "kind",
	    kind_name(vr->entry.kind), "id", vr->id, "state",
	    subtab_state_name(vr->entry.state), "source", vr->checkpoint ?
	    "checkpoint" : "journal", "segment", (json_int_t)vr->segment,
	    "offset", vr->checkpoint ? json_null() :
	    json_integer((json_int_t)vr->offset));
	json_object_set_new(j, "client_submission_id", csid != NULL ?
	    json_string(csid) : json_null());
	if (path != NULL)
		json_object_set_new(j, "path", json_string(path));
	return j;
}

/* How a record is named in messages: TASK-... (submission "x", committed). */
static void
vrecord_name(const struct vrecord *vr, char *out, size_t size)
{
	const char	*csid = key_submission_id(&vr->entry, vr->key);

	if (csid != NULL)
		snprintf(out, size, "%s (submission \"%s\", %s)", vr->id, csid,
		    subtab_state_name(vr->entry.state));
	else
		snprintf(out, size, "%s (legacy %s)", vr->id,
		    kind_name(vr->entry.kind));
}

/*
 * Journal to workspace: every task or report the journal says was
 * created is somewhere in the workspace, and, where idem put it and FCoP
 * tools have not moved it yet, byte for byte what idem wrote.
 */
static void
verify_records(struct verify *v)
{
	struct taskfile_facts	 facts;
	struct vrecord		*vr;
	char			 found[PATH_MAX];
	char			 where[IDEM_MAX_TASK_PATH_BYTES + 16];
	char			 name[512], want[IDEM_DIGEST_HEX_SIZE];
	char			 have[IDEM_DIGEST_HEX_SIZE];
	char			*cause;
	const char		*csid;
	size_t			 i;
	int			 rc;

	for (i = 0; i < v->count; i++) {
		vr = &v->records[i];
		csid = key_submission_id(&vr->entry, vr->key);
		if (vr->entry.kind == SUBTAB_KIND_REPORT)
			v->reports++;
		else if (csid == NULL)
			v->legacy++;
		else
			v->submissions++;
		vrecord_name(vr, name, sizeof name);
		if (vr->entry.state == SUBTAB_RESERVED) {
			v->intermediate++;
			verify_note(v, NOTE_WARNING, "intermediate",
			    vrecord_details(vr, NULL), "%s: reserved, no file "
			    "recorded yet; a retry of the same request "
			    "completes it", name);
			continue;
		}
		if (vr->entry.state == SUBTAB_TASK_CREATED) {
			v->intermediate++;
			verify_note(v, NOTE_WARNING, "intermediate",
			    vrecord_details(vr, NULL), "%s: file recorded but "
			    "not committed; a retry of the same request "
			    "commits it", name);
		}

		rc = taskfile_find(v->root_fd, vr->id, found, sizeof found);
		if (rc == -1) {
			verify_note(v, NOTE_UNREADABLE, "unreadable",
			    vrecord_details(vr, NULL), "%s: cannot look for "
			    "its file: %s", name, strerror(errno));
			continue;
		}
		if (rc == 0) {
			verify_note(v, NOTE_ERROR, "missing",
			    vrecord_details(vr, NULL), "%s: %s.md is nowhere "
			    "in the workspace (not in _lifecycle/, history/ or "
			    "reports/)", name, vr->id);
			continue;
		}
		v->present++;
		taskfile_format_path(vr->entry.kind, vr->id, where,
		    sizeof where);
		if (strcmp(found, where) != 0) {
			/* FCoP tools may rewrite what they move: no digest. */
			v->moved++;
			continue;
		}
		if (taskfile_inspect(v->root_fd, found, &facts, &cause) == -1) {
			verify_note(v, NOTE_UNREADABLE, "unreadable",
			    vrecord_details(vr, found), "%s", cause != NULL ?
			    cause : strerror(errno));
			free(cause);
			continue;
		}
		if (memcmp(facts.file_digest, vr->entry.file_digest,
		    IDEM_SHA256_BYTES) != 0) {
			digest_to_hex(vr->entry.file_digest, want);
			digest_to_hex(facts.file_digest, have);
			verify_note(v, NOTE_ERROR, "file_digest",
			    vrecord_details(vr, found), "%s: %s has file "
			    "digest %s, the journal recorded %s (changed after "
			    "idem wrote it)", name, found, have, want);
		} else if (csid != NULL && facts.has_client_submission_id &&
		    strcmp(facts.client_submission_id, csid) != 0)
			verify_note(v, NOTE_ERROR, "identity",
			    vrecord_details(vr, found), "%s: %s names "
			    "client_submission_id \"%s\"", name, found,
			    facts.client_submission_id);
	}
}

/*
 * Would FCoP's reference library parse this TASK or REPORT file (its
 * name and its front matter)?  A file it cannot parse is invisible to
 * every FCoP tool: an error, whoever wrote it.
 */
static void
verify_fcop(struct verify *v, const char *path, const char *file,
    const struct taskfile_facts *facts)
{
	const char	*why;

	if ((why = taskfile_fcop_problem(file, v->sequence_digits,
	    facts)) == NULL)
		return;
	v->not_fcop++;
	verify_note(v, NOTE_ERROR, "not_fcop", json_pack("{s:s,s:s}", "path",
	    path, "reason", why), "%s: FCoP tools cannot read it: %s", path,
	    why);
}

/* A REPORT file under reports/: only FCoP's rules are checked here. */
static void
verify_report_file(struct verify *v, const char *path, const char *file)
{
	struct taskfile_facts	 facts;
	char			*cause;

	v->reports_checked++;
	if (taskfile_inspect(v->root_fd, path, &facts, &cause) == -1) {
		verify_note(v, NOTE_UNREADABLE, "unreadable", json_pack("{s:s}",
		    "path", path), "%s", cause != NULL ? cause :
		    strerror(errno));
		free(cause);
		return;
	}
	verify_fcop(v, path, file, &facts);
}

/* One TASK file found on disk: is it idem's, and does the journal agree? */
static void
verify_file(struct verify *v, const char *path, const char *file)
{
	struct taskfile_facts	 facts;
	struct vrecord		*vr;
	json_t			*at;
	char			 task_id[NAME_MAX + 1], name[512];
	char			*cause;
	size_t			 length;

	length = strlen(file) - 3;	/* ".md" */
	memcpy(task_id, file, length);
	task_id[length] = '\0';
	v->files++;
	if ((at = json_object_get(v->seen_files, task_id)) != NULL) {
		verify_note(v, NOTE_WARNING, "duplicate", json_pack("{s:s,s:s}",
		    "id", task_id, "path", path), "%s is also at %s; FCoP "
		    "tools and idem see only one of them", path,
		    json_string_value(at));
		return;
	}
	json_object_set_new(v->seen_files, task_id, json_string(path));
	if (taskfile_inspect(v->root_fd, path, &facts, &cause) == -1) {
		verify_note(v, NOTE_UNREADABLE, "unreadable", json_pack("{s:s}",
		    "path", path), "%s", cause != NULL ? cause :
		    strerror(errno));
		free(cause);
		return;
	}
	verify_fcop(v, path, file, &facts);
	if (facts.has_client_submission_id) {
		at = json_object_get(v->by_key, facts.client_submission_id);
		if (at == NULL) {
			verify_note(v, NOTE_ERROR, "unknown_submission",
			    json_pack("{s:s,s:s,s:s}", "id", task_id, "path",
			    path, "client_submission_id",
			    facts.client_submission_id), "%s names "
			    "client_submission_id \"%s\", which no journal "
			    "record holds (not written by this broker, or the "
			    "journal lost it)", path,
			    facts.client_submission_id);
			return;
		}
		vr = &v->records[json_integer_value(at)];
		if (strcmp(vr->id, task_id) != 0) {
			vrecord_name(vr, name, sizeof name);
			verify_note(v, NOTE_ERROR, "task_id_mismatch",
			    vrecord_details(vr, path), "%s names "
			    "client_submission_id \"%s\", but the journal "
			    "binds it to %s", path, facts.client_submission_id,
			    name);
			return;
		}
		v->files_idem++;
		return;
	}
	/* No submission id: idem's legacy task, or another FCoP writer's. */
	if ((at = json_object_get(v->by_id, task_id)) != NULL) {
		vr = &v->records[json_integer_value(at)];
		if (vr->entry.key_length == 0 || !facts.has_front_matter) {
			v->files_legacy += vr->entry.key_length == 0;
			v->files_idem += vr->entry.key_length != 0;
			return;
		}
		vrecord_name(vr, name, sizeof name);
		verify_note(v, vr->entry.state == SUBTAB_RESERVED ?
		    NOTE_WARNING : NOTE_ERROR, "identity",
		    vrecord_details(vr, path), "%s has the name of %s but no "
		    "client_submission_id%s", path, name,
		    vr->entry.state == SUBTAB_RESERVED ? " (another writer "
		    "took the name; a retry answers conflict target_mismatch)" :
		    "");
		return;
	}
	json_array_append_new(v->foreign, json_string(path));
}

/* Every TASK-*.md below path, to depth directories down. */
static void
verify_walk(struct verify *v, const char *path, int depth)
{
	struct dirent	*de;
	struct stat	 st;
	DIR		*d;
	size_t		 length;
	char		 child[PATH_MAX];
	int		 fd;

	if ((fd = openat(v->root_fd, path, O_RDONLY | O_DIRECTORY |
	    O_CLOEXEC | O_NOFOLLOW)) == -1) {
		if (errno != ENOENT)
			verify_note(v, NOTE_UNREADABLE, "unreadable",
			    json_pack("{s:s}", "path", path), "cannot read "
			    "directory %s: %s", path, strerror(errno));
		return;
	}
	if ((d = fdopendir(fd)) == NULL) {
		close(fd);
		return;
	}
	for (;;) {
		errno = 0;
		if ((de = readdir(d)) == NULL) {
			if (errno != 0)
				verify_note(v, NOTE_UNREADABLE, "unreadable",
				    json_pack("{s:s}", "path", path), "reading "
				    "directory %s: %s", path, strerror(errno));
			break;
		}
		/* Dot files: ., .., and idem's temporaries. */
		if (de->d_name[0] == '.')
			continue;
		if ((size_t)snprintf(child, sizeof child, "%s/%s", path,
		    de->d_name) >= sizeof child)
			continue;
		if (fstatat(v->root_fd, child, &st, AT_SYMLINK_NOFOLLOW) == -1)
			continue;
		length = strlen(de->d_name);
		if (S_ISDIR(st.st_mode) && depth > 0)
			verify_walk(v, child, depth - 1);
		else if (S_ISREG(st.st_mode) &&
		    strncmp(de->d_name, "TASK-", 5) == 0 && length > 8 &&
		    strcmp(de->d_name + length - 3, ".md") == 0)
			verify_file(v, child, de->d_name);
		else if (S_ISREG(st.st_mode) &&
		    strncmp(de->d_name, "REPORT-", 7) == 0 && length > 10 &&
		    strcmp(de->d_name + length - 3, ".md") == 0)
			verify_report_file(v, child, de->d_name);
	}
	closedir(d);
}

static void
verify_print(struct verify *v, const char *dir)
{
	json_t		*p;
	size_t		 i;
	const char	*severity;

	const struct journal_replay_stats *st = &v->jr.stats;

	printf("root        %s\n", v->root);
	if (v->jr.checkpoint != 0)
		printf("checkpoint  %s/checkpoint-%016" PRIx64 ".snap: %" PRIu64
		    " submissions\n", dir, v->jr.checkpoint,
		    v->jr.checkpoint_records);
	printf("journal     %s: %" PRIu64 " records in %u segment%s, %s\n",
	    dir, st->records, st->segments, st->segments == 1 ? "" : "s",
	    !v->journal_complete ? "CORRUPT" : st->torn_segment != 0 ?
	    "torn tail" : "intact");
	printf("journal has %u submissions, %u legacy, %u reports: "
	    "%u present (%u moved by FCoP tools), %u intermediate\n",
	    v->submissions, v->legacy, v->reports, v->present, v->moved,
	    v->intermediate);
	if (v->journal_complete)
		printf("workspace   %u TASK files: %u idem, %u idem legacy, "
		    "%zu foreign\n", v->files, v->files_idem,
		    v->files_legacy, json_array_size(v->foreign));
	else
		printf("workspace   not checked against the journal: it is "
		    "corrupt, so a file may name a record past the damage\n");
	json_array_foreach(v->problems, i, p) {
		severity = string_member(p, "severity", "error");
		printf("%s: %s\n", severity, string_member(p, "message", "?"));
	}
	if (json_array_size(v->foreign) > 0) {
		printf("foreign TASK files (not written by idem%s; not an "
		    "error):\n", v->jr.checkpoint != 0 ? ", or legacy tasks "
		    "from before the checkpoint, which keeps no legacy "
		    "records" : "");
		json_array_foreach(v->foreign, i, p)
			printf("  %s\n", json_string_value(p));
	}
	printf("verify: %s: %u problem%s, %u warning%s, %zu foreign file%s\n",
	    v->errors + v->unreadable > 0 ? "PROBLEMS" : "clean",
	    v->errors + v->unreadable, v->errors + v->unreadable == 1 ? "" :
	    "s", v->warnings, v->warnings == 1 ? "" : "s",
	    json_array_size(v->foreign), json_array_size(v->foreign) == 1 ?
	    "" : "s");
}

static void
verify_print_json(struct verify *v, const char *dir, const char *corrupt)
{
	const struct journal_replay_stats *st = &v->jr.stats;
	json_t	*j, *journal;

	journal = json_pack("{s:s,s:I,s:I,s:I,s:i,s:b}", "dir", dir,
	    "checkpoint_records", (json_int_t)v->jr.checkpoint_records,
	    "records", (json_int_t)st->records, "bytes",
	    (json_int_t)st->bytes, "segments", (int)st->segments, "intact",
	    v->journal_complete && st->torn_segment == 0);
	json_object_set_new(journal, "checkpoint", v->jr.checkpoint != 0 ?
	    json_integer((json_int_t)v->jr.checkpoint) : json_null());
	json_object_set_new(journal, "corrupt", corrupt != NULL ?
	    json_string(corrupt) : json_null());
	if (st->torn_segment != 0)
		json_object_set_new(journal, "torn_tail", json_pack(
		    "{s:I,s:I,s:I,s:s}", "segment",
		    (json_int_t)st->torn_segment, "offset",
		    (json_int_t)st->torn_offset, "bytes",
		    (json_int_t)st->truncated_bytes, "reason",
		    st->torn_why != NULL ? st->torn_why : "?"));
	else
		json_object_set_new(journal, "torn_tail", json_null());
	j = json_pack("{s:b,s:s,s:o,s:{s:i,s:i,s:i,s:i,s:i,s:i},"
	    "s:{s:b,s:i,s:i,s:i},s:O,s:O,s:i,s:i}",
	    "ok", v->errors + v->unreadable == 0, "root", v->root,
	    "journal", journal,
	    "records", "submissions", (int)v->submissions, "legacy",
	    (int)v->legacy, "reports", (int)v->reports, "present",
	    (int)v->present, "moved", (int)v->moved, "intermediate",
	    (int)v->intermediate,
	    "files", "checked", v->journal_complete, "task_files",
	    (int)v->files, "idem", (int)v->files_idem, "legacy",
	    (int)v->files_legacy,
	    "problems", v->problems, "foreign", v->foreign,
	    "errors", (int)(v->errors + v->unreadable), "warnings",
	    (int)v->warnings);
	print_json(j);
	json_decref(j);
}

/* The offset in a corruption cause ("... offset <X>: ..."), -1 if none. */
static json_int_t
cause_offset(const char *cause)
{
	const char	*p;

	if (cause == NULL || (p = strstr(cause, " offset ")) == NULL)
		return -1;
	return (json_int_t)strtoll(p + 8, NULL, 10);
}

static int
cmd_verify(struct idemctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		COMMON_OPTIONS,
		{ "sequence-digits", required_argument, NULL,
		    OPT_SEQUENCE_DIGITS },
		{ NULL, 0, NULL, 0 }
	};
	struct verify	 v;
	unsigned	 digits = IDEM_DEFAULT_SEQUENCE_DIGITS;
	char		*end;
	long		 n;
	int		 ch;
	struct stat	 st;
	json_t		*details;
	json_int_t	 offset;
	char		 dir[PATH_MAX];
	char		*cause = NULL;
	int		 status;
	size_t		 i;
	static const char *const walk[] = { "_lifecycle", "history",
	    IDEM_REPORTS_DIR };

	while ((ch = ctl_next_option(ctl, argc, argv, options)) != -1) {
		if (ch != OPT_SEQUENCE_DIGITS)
			continue;
		errno = 0;
		n = strtol(optarg, &end, 10);
		if (errno != 0 || *end != '\0' || end == optarg ||
		    n < IDEM_MIN_SEQUENCE_DIGITS ||
		    n > IDEM_MAX_SEQUENCE_DIGITS)
			ctl_usage_error(ctl, "--sequence-digits must be %d to "
			    "%d (idemd's own)", IDEM_MIN_SEQUENCE_DIGITS,
			    IDEM_MAX_SEQUENCE_DIGITS);
		digits = (unsigned)n;
	}
	if (optind != argc)
		ctl_usage_error(ctl, "no arguments expected");
	if ((status = journal_dir(ctl, dir, sizeof dir)) != 0)
		return status;

	memset(&v, 0, sizeof v);
	v.ctl = ctl;
	v.root = ctl_root(ctl);
	v.journal_complete = 1;
	memset(&st, 0, sizeof st);
	v.sequence_digits = digits;
	if ((v.root_fd = open(v.root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) ==
	    -1)
		return ctl_fail(ctl, IDEMCTL_EXIT_UNREACHABLE, "cannot read "
		    "root %s: %s", v.root, strerror(errno));
	/*
	 * Without .idem/ (a real directory) this is not a root idemd ever
	 * served: "clean" would be a claim about nothing (a mistyped --root).
	 */
	if (fstatat(v.root_fd, IDEM_STATE_DIR, &st, AT_SYMLINK_NOFOLLOW) ==
	    -1 || !S_ISDIR(st.st_mode)) {
		status = ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "%s is not an idem "
		    "workspace: %s/%s %s; nothing to verify (check --root or "
		    "IDEM_ROOT)", v.root, v.root, IDEM_STATE_DIR,
		    S_ISLNK(st.st_mode) ? "is a symlink" :
		    !S_ISDIR(st.st_mode) && st.st_mode != 0 ?
		    "is not a directory" : "does not exist");
		close(v.root_fd);
		return status;
	}
	v.by_key = json_object();
	v.by_id = json_object();
	v.seen_files = json_object();
	v.problems = json_array();
	v.foreign = json_array();
	if (v.by_key == NULL || v.by_id == NULL || v.seen_files == NULL ||
	    v.problems == NULL || v.foreign == NULL) {
		status = ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "out of memory");
		goto out;
	}

	if (stat(dir, &st) == -1 && errno == ENOENT)
		verify_note(&v, NOTE_WARNING, "no_journal", NULL, "no journal "
		    "at %s: idemd never ran on this root, so every TASK file "
		    "is foreign", dir);
	if (journal_read(dir, verify_apply, &v, &v.jr, &cause) != 0) {
		if (!v.jr.damaged) {
			/* Not damage: we could not read it (or ran out). */
			status = ctl_fail(ctl, IDEMCTL_EXIT_UNREACHABLE,
			    "cannot read the journal: %s", cause != NULL ?
			    cause : strerror(errno));
			goto out;
		}
		v.journal_complete = 0;
		details = json_pack("{s:I}", "segment",
		    (json_int_t)v.jr.stats.at_segment);
		offset = cause_offset(cause);
		json_object_set_new(details, "offset", offset >= 0 ?
		    json_integer(offset) : json_null());
		verify_note(&v, NOTE_ERROR, "journal_corrupt", details, "%s",
		    cause != NULL ? cause : "journal corrupt");
	} else if (v.jr.stats.torn_segment != 0)
		verify_note(&v, NOTE_WARNING, "torn_tail", json_pack(
		    "{s:I,s:I,s:I}", "segment",
		    (json_int_t)v.jr.stats.torn_segment, "offset",
		    (json_int_t)v.jr.stats.torn_offset, "bytes",
		    (json_int_t)v.jr.stats.truncated_bytes), "journal %s/%016"
		    PRIx64 ".jnl: torn tail at offset %" PRIu64 " (%s): %"
		    PRIu64 " bytes of an append that never completed, or is "
		    "in flight; idemd cuts it at start-up", dir,
		    v.jr.stats.torn_segment, v.jr.stats.torn_offset,
		    v.jr.stats.torn_why != NULL ? v.jr.stats.torn_why : "?",
		    v.jr.stats.truncated_bytes);

	verify_records(&v);
	if (v.journal_complete) {
		for (i = 0; i < sizeof walk / sizeof walk[0]; i++)
			verify_walk(&v, walk[i], IDEMCTL_WALK_MAX_DEPTH);
	}

	if (ctl->json)
		verify_print_json(&v, dir, v.journal_complete ? NULL : cause);
	else
		verify_print(&v, dir);
	if (v.unreadable > 0)
		status = ctl_fail(ctl, IDEMCTL_EXIT_UNREACHABLE, "%u file%s or "
		    "director%s could not be read", v.unreadable,
		    v.unreadable == 1 ? "" : "s", v.unreadable == 1 ? "y" :
		    "ies");
	else if (v.errors > 0)
		status = ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "%u problem%s "
		    "found", v.errors, v.errors == 1 ? "" : "s");

out:
	free(cause);
	free(v.records);
	json_decref(v.by_key);
	json_decref(v.by_id);
	json_decref(v.seen_files);
	json_decref(v.problems);
	json_decref(v.foreign);
	close(v.root_fd);
	return status;
}

/* ---- main ---------------------------------------------------------------- */

static const struct command commands[] = {
	{ "status", cmd_status, "is the broker up; version, workers, table", "",
"Is the broker up?  Its version and protocol, uptime, workers, how full\n"
"the submission table is, and what it has done since it started.  Exit 3\n"
"if it does not answer (with --json, {\"up\":false,...} on stdout too).\n" },
	{ "stats", cmd_stats, "counters, also for Prometheus",
	    "[--json | --prometheus]",
"The broker's counters.  --prometheus prints the Prometheus text format\n"
"(counters idem_<name>_total, gauges idem_table_used, idem_table_capacity,\n"
"idem_workers, idem_uptime_seconds, and idem_up, which is 0 when the\n"
"broker does not answer), for a textfile collector or a scrape wrapper.\n" },
	{ "diagnose", cmd_diagnose, "unfinished submissions, stalled ones",
	    "[--stale-after DURATION]",
"List the submissions in an intermediate state (reserved, task_created):\n"
"age, task_id, whether the task file exists, whether its request and file\n"
"digests match the record, whether a request is working on it now, and\n"
"whether it is stalled (no progress for DURATION: 500ms, 30s, 5m, 2h;\n"
"default 30s).  Read-only: a retry of the same request completes a\n"
"stalled submission.  Exit 1 if any submission is stalled.\n" },
	{ "show", cmd_show, "one submission and its receipt",
	    "CLIENT_SUBMISSION_ID",
"One submission: its state, task, digests and times, and its receipt once\n"
"committed.  Exit 1 if the broker knows no such submission.\n" },
	{ "submit", cmd_submit, "create a task (write_task)",
"[--id ID] --sender R --recipient R --subject S [--body B]\n"
"              [--priority P] [--risk-level L] [--thread-key K]\n"
"              [--parent T] [--reference R]... [--depends-on T]...\n"
"       idemctl submit [--id ID] --file FILE",
"Create a task through write_task and print the disposition: created,\n"
"reused (the first call's receipt: nothing was written) or conflict.\n"
"Without an id (--id or the file's client_submission_id) it is a legacy\n"
"call: a new task every time.  --file FILE (- for stdin) holds\n"
"{\"client_submission_id\":...,\"task\":{...}} and optionally meta,\n"
"digest_schema and request_digest.\n"
"\n"
"Exit 0 created or reused, 1 conflict or refused (the error's code on\n"
"stderr), 2 usage, 3 unreachable or the connection lost: the outcome is\n"
"unknown, and running the same command again with the same id is safe.\n" },
	{ "effects", cmd_effects, "unfinished effects; one effect",
	    "[list] | show EFFECT_KIND CLIENT_SUBMISSION_ID",
"List the effects (effect_begin) that are not committed, outcome_unknown\n"
"first: kind, id, state (outcome_unknown, reserved with a live lease,\n"
"released), attempt, age and the external key to look for downstream.\n"
"Exit 1 if any outcome is unknown: it waits for idemctl resolve.  show\n"
"prints one effect, its lease and, once committed, its receipt (exit 1\n"
"if there is no such effect).\n" },
	{ "resolve", cmd_resolve, "settle an outcome_unknown effect",
	    "[--result JSON] [--source TEXT] EFFECT_KIND CLIENT_SUBMISSION_ID\n"
"              applied|not_applied|unknown",
"Settle an effect whose outcome is unknown, with what you found downstream\n"
"(by its external key): applied commits it (--result, the result to keep\n"
"in its receipt; later begins answer reused, recovered), not_applied\n"
"releases it (the next begin proceeds, same external key), unknown keeps\n"
"it listed.  --source says who or what saw it (logged by idemd).  Exit 1\n"
"on a conflict (evidence against a committed receipt, no such effect) or\n"
"while a caller still holds a live lease (in_progress).\n" },
	{ "verify", cmd_verify, "offline: journal and workspace agree?",
	    "[--root DIR] [--sequence-digits N]",
"Check, offline, that the journal and the FCoP workspace agree; the\n"
"broker may be running or not, nothing is changed.  The journal must be\n"
"intact (corruption is an error naming the offset; a torn tail, which\n"
"idemd cuts at start-up, a warning).  Every task or report the journal\n"
"records as created must exist (in any _lifecycle/ stage or history/),\n"
"with the recorded file digest while still where idem put it.  Every\n"
"TASK file naming a client_submission_id must have the journal record\n"
"of that id and task_id.  TASK files without one that idem did not\n"
"write are listed as foreign, which is not an error.  Every TASK and\n"
"REPORT file, whoever wrote it, must be one FCoP's reference library\n"
"parses: its name (a number of exactly three digits; up to N with\n"
"--sequence-digits N, idemd's option) and its front matter.\n"
"\n"
"Exit 0 clean (warnings allowed), 1 problems found, 3 cannot read.\n" },
	{ "journal", cmd_journal, "journal dump: the audit trail, offline",
	    "dump [--root DIR] [--json | --text]",
"Journal commands.  See idemctl journal dump --help.\n" }
};

static void
usage(FILE *out, int status)
{
	size_t	i;

	fprintf(out, "usage: idemctl [--socket PATH] [--root DIR] [--json] "
	    "COMMAND [ARGS]\n\ncommands:\n");
	for (i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(out, "  %-10s %s\n", commands[i].name,
		    commands[i].summary);
	fprintf(out, "  %-10s %s\n", "store",
	    "init|migrate: the PostgreSQL store's schema");
	fprintf(out, "\nidemctl COMMAND --help says more.\n\n%s", COMMON_HELP);
	exit(status);
}

int
main(int argc, char **argv)
{
	static const struct option options[] = {
		COMMON_OPTIONS,
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 }
	};
	struct idemctl	ctl;
	size_t		i;
	int		ch, status;

	memset(&ctl, 0, sizeof ctl);
	/* Options before the command only ("+"); it parses the rest. */
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "+h", options, NULL)) != -1) {
		switch (ch) {
		case OPT_JSON:
			ctl.json = 1;
			break;
		case OPT_SOCKET:
			ctl.socket_path = optarg;
			break;
		case OPT_ROOT:
			ctl.root = optarg;
			break;
		case 'V':
			printf("idemctl %s\n", PACKAGE_VERSION);
			return IDEMCTL_EXIT_OK;
		case 'h':
			usage(stdout, IDEMCTL_EXIT_OK);
		default:
			fprintf(stderr, "idemctl: unknown option %s (see "
			    "idemctl --help)\n", argv[optind - 1]);
			return IDEMCTL_EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "idemctl: which command? (see idemctl "
		    "--help)\n");
		return IDEMCTL_EXIT_USAGE;
	}
	argc -= optind;
	argv += optind;
	/* The PostgreSQL store's schema (contrib/idemctl_store.c). */
	if (strcmp(argv[0], "store") == 0)
		return idemctl_store(argc, argv);
	for (i = 0; i < sizeof commands / sizeof commands[0]; i++) {
		if (strcmp(argv[0], commands[i].name) != 0)
			continue;
		ctl.command = &commands[i];
		optind = 0;	/* restart getopt on the command's arguments */
		status = commands[i].run(&ctl, argc, argv);
		idem_close(ctl.conn);
		if (fflush(stdout) == EOF && status == IDEMCTL_EXIT_OK) {
			fprintf(stderr, "idemctl: writing output: %s\n",
			    strerror(errno));
			status = IDEMCTL_EXIT_PROBLEM;
		}
		return status;
	}
	fprintf(stderr, "idemctl: unknown command \"%s\" (see idemctl "
	    "--help)\n", argv[0]);
	return IDEMCTL_EXIT_USAGE;
}
