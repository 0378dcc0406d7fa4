/* SPDX-License-Identifier: ISC */
/*
 * idemctl: the operator's tool for idemd.
 *
 * Online commands (status, stats, diagnose, show, submit) talk to the
 * broker over its socket, one request per line through libidem's
 * idem_call_raw, and print what it answers.  Offline commands (verify,
 * journal dump) read the journal and the FCoP workspace through the
 * store (store_verify, store_records), read-only: they never write,
 * move or delete anything, so they are safe beside a running broker and
 * after a crash, when the broker may refuse to start.
 *
 * Human text by default; --json prints JSON (online: the broker's own
 * answer).  A failure is one line on stderr.  Exit status, for scripts:
 * 0 ok; 1 the broker answered an error or a conflict, or verify found
 * problems; 2 usage; 3 the broker is unreachable or the files cannot be
 * read.  After 3 from submit, retrying with the same --id is safe.
 *
 * This file: options, messages and the command table.  The commands are
 * in ctl/online.c (the broker's socket) and ctl/offline.c (the
 * files, through the storage API of store.h, which owns every check).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "idem.h"
#include "store.h"
#include "idemctl_store.h"
#include "ctl/idemctl.h"

#define COMMON_HELP							\
"  --json            print JSON\n"					\
"  --socket PATH     the broker's socket (else $IDEM_SOCKET, else\n"	\
"                    ROOT/.idem/idemd.sock)\n"				\
"  --root DIR        the FCoP workspace (else $IDEM_ROOT, else ./fcop)\n" \
"  --help            this text\n"					\
"\n"									\
"Exit status: 0 ok, 1 error, conflict or problems found, 2 usage,\n"	\
"3 broker unreachable or files unreadable.\n"

static void	usage(FILE *, int) __attribute__((noreturn));
static int	cmd_store(struct idemctl *, int, char **);

/* ---- messages and options ------------------------------------------------ */

void
ctl_command_help(const struct command *c, FILE *out)
{
	fprintf(out, "usage: idemctl %s%s%s\n\n%s\noptions:\n%s",
	    c->name, c->synopsis[0] != '\0' ? " " : "", c->synopsis,
	    c->help, COMMON_HELP);
}

/* One line on stderr, pointing at --help, then exit 2. */
void
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
int
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
int
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
			ctl_command_help(ctl->command, stdout);
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

const char *
ctl_root(struct idemctl *ctl)
{
	const char	*env;

	if (ctl->root != NULL)
		return ctl->root;
	if ((env = getenv("IDEM_ROOT")) != NULL && *env != '\0')
		return env;
	return IDEM_DEFAULT_ROOT;
}

void
ctl_print_json(json_t *j)
{
	json_dumpf(j, stdout, JSON_COMPACT);
	fputc('\n', stdout);
}

const char *
ctl_string_member(json_t *object, const char *key, const char *absent)
{
	const char	*s = json_string_value(json_object_get(object, key));

	return s != NULL ? s : absent;
}

/* ---- main ---------------------------------------------------------------- */

static const char *const journal_words[] = { "dump", NULL };
static const char *const effects_words[] = { "list", "show", NULL };
static const char *const completion_words[] = {
	"bash", "zsh", "fish", "list", NULL
};

/* A command's entry ends with its options: what completion offers. */
const struct command ctl_commands[] = {
	{ "status", cmd_status, "is the broker up; version, workers, table", "",
"Is the broker up?  Its version and protocol, uptime, workers, how full\n"
"the submission table is, and what it has done since it started.  Exit 3\n"
"if it does not answer (with --json, {\"up\":false,...} on stdout too).\n",
	    ctl_status_options, NULL, NULL, 0 },
	{ "stats", cmd_stats, "counters, also for Prometheus",
	    "[--json | --prometheus]",
"The broker's stats, each with its value and unit (--json: the reply as\n"
"it is).  --prometheus prints the Prometheus text format, for a textfile\n"
"collector or a scrape wrapper: idem_<name>, counters ending _total, a\n"
"stat in bytes _bytes, one in ms in _seconds; and idem_up, which is 0\n"
"when the broker does not answer.  Every stat: doc/metrics.md.\n",
	    ctl_stats_options, NULL, NULL, 0 },
	{ "diagnose", cmd_diagnose, "unfinished submissions and effects",
	    "[--stale-after DURATION]",
"List the submissions in an intermediate state (reserved, task_created):\n"
"age, task_id, whether the task file exists, whether its request and file\n"
"digests match the record, whether a request is working on it now, and\n"
"whether it is stalled (no progress for DURATION: 500ms, 30s, 5m, 2h;\n"
"default 30s).  Read-only: a retry of the same request completes a\n"
"stalled submission.  Then the unfinished effects, as idemctl effects\n"
"lists them.  Exit 1 if any submission is stalled, or any effect's\n"
"outcome is unknown or its reservation stalled (see idemctl resolve).\n",
	    ctl_diagnose_options, NULL, NULL, 0 },
	{ "show", cmd_show, "one submission and its receipt",
	    "CLIENT_SUBMISSION_ID",
"One submission: its state, task, digests and times, and its receipt once\n"
"committed.  Exit 1 if the broker knows no such submission.\n",
	    ctl_show_options, NULL, NULL, 0 },
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
"unknown, and running the same command again with the same id is safe.\n",
	    ctl_submit_options, NULL, NULL, 0 },
	{ "effects", cmd_effects, "unfinished effects; one effect",
	    "[list] | show EFFECT_KIND CLIENT_SUBMISSION_ID",
"List the effects (effect_begin) that are not committed, outcome_unknown\n"
"first: kind, id, state (outcome_unknown, reserved with a live lease,\n"
"released), attempt, age and the external key to look for downstream.\n"
"Exit 1 if any outcome is unknown: it waits for idemctl resolve.  show\n"
"prints one effect, its lease and, once committed, its receipt (exit 1\n"
"if there is no such effect).\n",
	    ctl_effects_options, NULL, effects_words, 0 },
	{ "resolve", cmd_resolve, "settle an outcome_unknown effect",
	    "[--result JSON] [--source TEXT] EFFECT_KIND CLIENT_SUBMISSION_ID\n"
"              applied|not_applied|unknown",
"Settle an effect whose outcome is unknown, with what you found downstream\n"
"(by its external key): applied commits it (--result, the result to keep\n"
"in its receipt; later begins answer reused, recovered), not_applied\n"
"releases it (the next begin proceeds, same external key), unknown keeps\n"
"it listed.  --source says who or what saw it (logged by idemd).  Exit 1\n"
"on a conflict (evidence against a committed receipt, no such effect) or\n"
"while a caller still holds a live lease (in_progress).\n",
	    ctl_resolve_options, NULL, NULL, 0 },
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
"--sequence-digits N, idemd's option) and its front matter.  The index\n"
"of committed receipts (.idem/index) must decode entry by entry, agree\n"
"with the checkpoint and journal where they hold the same key (tasks,\n"
"reports and effects: an effect's digest, attempt, result and\n"
"committed_at; a tombstone on what it keeps), hold every receipt of\n"
"the checkpoint it was written with, and the files of the tasks and\n"
"reports only it holds must exist too.\n"
"\n"
"Exit 0 clean (warnings allowed), 1 problems found, 3 cannot read.\n",
	    ctl_verify_options, idemctl_store_options, NULL, 0 },
	{ "compact", cmd_compact, "prune old receipt bodies, keep tombstones",
	    "--older-than DAYS [--root DIR] [--store URI | --store-file PATH]",
"Replace each receipt in the index committed more than DAYS days ago by\n"
"its tombstone: the id, kind, digest schema, request digest, task_id (or\n"
"the result's digest for an effect) and committed_at.  Nothing is ever\n"
"deleted: a retry of a compacted id answers reused with\n"
"\"receipt_pruned\":true and the tombstone's facts, never a second\n"
"execution, and another request under it still conflict.  Receipts still\n"
"in the broker's table keep their body until they leave it.  The broker\n"
"may be running.  With --store postgresql://... the workspace DIR's rows\n"
"in PostgreSQL are compacted the same way (one transaction, beside\n"
"running brokers); --store-file PATH reads that URI from PATH (mode 0600,\n"
"yours or root's), keeping its password out of the command line.\n"
"Exit 0 done, 1 refused, 2 usage, 3 cannot read.\n",
	    ctl_compact_options, NULL, NULL, 0 },
	{ "backup", cmd_backup, "a consistent copy of the state, broker running",
	    "[--root DIR] [--with-workspace] DEST",
"Copy the root's state into DEST (a new or empty directory, never a\n"
"symlink) while the broker runs, with no window where an acknowledged\n"
"receipt is missing from the copy: the newest checkpoint and every\n"
"journal segment after it (held open, so a checkpoint's pruning cannot\n"
"take one away mid-copy; a record being written is cut), the index\n"
"(LMDB's own compacted copy), and .idem/'s small files (workspace-id,\n"
"imported, sequence-digits).  The workspace's files are listed with their\n"
"SHA-256 in DEST/.idem/backup-manifest (sha256sum -c reads it) and copied\n"
"only with --with-workspace; DEST/.idem/backup-info says what was taken.\n"
"Every file is fsync'd.  Restore: stop idemd, copy DEST's contents into\n"
"an empty root (cp -a DEST/. ROOT/), run idemctl verify --root ROOT.\n"
"Exit 0 done, 1 failed (the cause on stderr), 2 usage, or DEST not empty\n"
"or a symlink.\n",
	    ctl_backup_options, NULL, NULL, 0 },
	{ "journal", cmd_journal, "journal dump: the audit trail, offline",
	    "dump [--root DIR] [--json | --text]",
"Journal commands.  See idemctl journal dump --help.\n",
	    ctl_journal_dump_options, NULL, journal_words, 0 },
	{ "store", cmd_store, "init|migrate|verify|import: the PostgreSQL store",
	    "init|migrate|verify|import --store URI [--root DIR]",
"The PostgreSQL store's schema and history.  See idemctl store --help.\n",
	    idemctl_store_options, NULL, idemctl_store_commands, 0 },
	{ "completion", cmd_completion, "shell completion", "bash|zsh|fish|list",
"Print idemctl's completion for bash, zsh or fish, made from its command\n"
"table (make install installs them); list prints each command's options.\n",
	    ctl_completion_options, NULL, completion_words, 1 }
};
const size_t ctl_command_count = sizeof ctl_commands / sizeof ctl_commands[0];

/* The PostgreSQL store's commands (contrib/idemctl_store.c). */
static int
cmd_store(struct idemctl *ctl, int argc, char **argv)
{
	(void)ctl;
	return idemctl_store(argc, argv);
}

static void
usage(FILE *out, int status)
{
	size_t	i;

	fprintf(out, "usage: idemctl [--socket PATH] [--root DIR] [--json] "
	    "COMMAND [ARGS]\n\ncommands:\n");
	for (i = 0; i < ctl_command_count; i++)
		if (!ctl_commands[i].hidden)
			fprintf(out, "  %-10s %s\n", ctl_commands[i].name,
			    ctl_commands[i].summary);
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
	/* verify --store URI: the store's rows against the workspace. */
	for (i = 1; strcmp(argv[0], "verify") == 0 && i < (size_t)argc; i++)
		if (strncmp(argv[i], "--store", 7) == 0) {
			argv[0] = "verify";
			return idemctl_store_verify(argc, argv);
		}
	for (i = 0; i < ctl_command_count; i++) {
		if (strcmp(argv[0], ctl_commands[i].name) != 0)
			continue;
		ctl.command = &ctl_commands[i];
		optind = 0;	/* restart getopt on the command's arguments */
		status = ctl_commands[i].run(&ctl, argc, argv);
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
