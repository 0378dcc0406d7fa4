/* SPDX-License-Identifier: ISC */
/*
 * idemctl_store.c: idemctl store init|migrate|verify, the PostgreSQL
 * store's schema and its rows against the files (doc/cluster.md), and
 * idemctl compact --store; import is idemctl_import.c's.  init creates
 * the schema (or says it is there) and, with --root, the workspace's id;
 * migrate brings an older schema to this build's version.  Both are one
 * transaction each and may run beside running brokers (they serialize
 * on an advisory lock).
 */
#include <sys/stat.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store.h"
#include "storeuri.h"
#include "workspace_id.h"
#ifdef HAVE_POSTGRESQL
#include <jansson.h>

#include "digest.h"
#include "pg.h"
#endif
#include "idemctl_store.h"

#define STORE_EXIT_OK		0
#define STORE_EXIT_PROBLEM	1
#define STORE_EXIT_USAGE	2
#define STORE_EXIT_UNREACHABLE	3

static const char store_help[] =
"usage: idemctl store init --store URI [--root DIR]\n"
"       (everywhere: --store-file PATH instead of --store URI)\n"
"       idemctl store migrate --store URI\n"
"       idemctl store verify --store URI --root DIR   (or idemctl verify\n"
"                                   --store URI --root DIR)\n"
"       idemctl store import --store URI --root DIR\n"
"\n"
"The PostgreSQL store of several brokers on one workspace (doc/cluster.md).\n"
"init creates idem's tables in the database URI names (postgresql://...;\n"
"else $IDEM_STORE), or says they are there already; with --root it also\n"
"gives the workspace DIR its id (DIR/.idem/workspace-id) and prints it.\n"
"migrate brings tables of an older idem to this version.  Both are one\n"
"transaction, safe beside running brokers.  verify reads the workspace's\n"
"rows and files, read-only, and reports: a committed task without its file\n"
"or with other bytes, a number used twice (rows or disk), a task in two\n"
"places, a temporary that no live owner holds, a committed effect whose\n"
"result is not the bytes of its result digest.\n"
"\n"
"import moves the local history of DIR (a workspace served by one idemd\n"
"with --store local: journal, checkpoint and index under DIR/.idem) into\n"
"the database: every committed task, report and effect with its receipt's\n"
"facts (a compacted one as a tombstone), every released effect, every\n"
"number, the counters past them.\n"
"One transaction: a second import changes nothing; a submission the\n"
"database holds with other facts is a conflict and nothing is written.\n"
"It refuses while a local idemd holds DIR, and while the history has\n"
"unfinished submissions (start the local idemd once and retry them: its\n"
"recovery finishes them) or unfinished effects (reserved or\n"
"outcome_unknown: settle them with effect_complete or effect_resolve).\n"
"Afterwards serve DIR with --store URI only.\n"
"\n"
"--store-file PATH reads the URI from PATH, which must be owned by you or\n"
"root and have no group or other access (chmod 600): a password in it is\n"
"then in no command line.  A password given with --store is overwritten in\n"
"idemctl's command line at once, but ps may see it before; libpq's\n"
"PGPASSFILE (~/.pgpass) and PGSERVICE keep it out of the URI altogether.\n"
"\n"
"Exit status: 0 ok, 1 refused (a newer schema, problems, conflicts), 2\n"
"usage, 3 the database cannot be reached.\n";

void
idemctl_store_option(char **uri, char *value)
{
	free(*uri);
	if ((*uri = strdup(value)) == NULL) {
		fprintf(stderr, "idemctl: out of memory\n");
		exit(STORE_EXIT_UNREACHABLE);
	}
	storeuri_redact(value);
}

int
idemctl_store_file(char **uri, const char *path)
{
	char	*cause = NULL;

	if (*uri != NULL) {
		fprintf(stderr, "idemctl: --store and --store-file: choose "
		    "one\n");
		return -1;
	}
	if ((*uri = storeuri_read_file(path, (unsigned)getuid(), &cause)) ==
	    NULL) {
		fprintf(stderr, "idemctl: %s\n", cause != NULL ? cause :
		    strerror(errno));
		free(cause);
		return -1;
	}
	return 0;
}

static int
store_usage(const char *why)
{
	fprintf(stderr, "idemctl store: %s (see idemctl store --help)\n", why);
	return STORE_EXIT_USAGE;
}

#ifdef HAVE_POSTGRESQL
/* DIR/.idem/workspace-id, made if missing; 0 or -1 (said). */
static int
store_workspace(const char *root)
{
	char	 id[WORKSPACE_ID_BYTES + 1], *cause = NULL, state[4096];
	int	 fd, rc;

	if ((fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1) {
		fprintf(stderr, "idemctl store: %s: %s\n", root,
		    strerror(errno));
		return -1;
	}
	snprintf(state, sizeof state, "%s/%s", root, IDEM_STATE_DIR);
	if (nofollow_mkdir(fd, IDEM_STATE_DIR, 0755) != 0 && errno != EEXIST) {
		fprintf(stderr, "idemctl store: %s: %s\n", state,
		    strerror(errno));
		close(fd);
		return -1;
	}
	rc = workspace_id_get(fd, 1, id, &cause);
	close(fd);
	if (rc != 1) {
		fprintf(stderr, "idemctl store: %s: %s\n", root,
		    cause != NULL ? cause : strerror(errno));
		free(cause);
		return -1;
	}
	printf("workspace %s: %s\n", root, id);
	return 0;
}
#endif

#ifdef HAVE_POSTGRESQL
/* ---- verify: rows against files, read-only ---------------------------- */

struct sverify {
	const char	*root;
	json_t		*where;		/* file name -> its first path */
	json_t		*numbers;	/* "kind date seq" -> file name */
	json_t		*temps;		/* temporary name -> its directory */
	json_t		*live;		/* temporaries live owners hold */
	unsigned	 files;
	unsigned	 problems;
};

static void
sv_problem(struct sverify *v, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
sv_problem(struct sverify *v, const char *fmt, ...)
{
	va_list	ap;

	v->problems++;
	fputs("problem: ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
}

/* Every TASK/REPORT file and temporary below dir (relative to root). */
static void
sv_walk(struct sverify *v, const char *rel, int depth)
{
	char		 path[PATH_MAX + NAME_MAX + 2], child[PATH_MAX];
	char		 key[64];
	struct dirent	*de;
	struct stat	 st;
	enum subtab_kind kind;
	uint32_t	 date, seq;
	json_t		*at;
	DIR		*d;

	snprintf(path, sizeof path, "%s/%s", v->root, rel);
	if ((d = opendir(path)) == NULL)
		return;
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(child, sizeof child, "%s/%s", rel, de->d_name);
		snprintf(path, sizeof path, "%s/%s", v->root, child);
		if (lstat(path, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			if (depth > 0)
				sv_walk(v, child, depth - 1);
			continue;
		}
		if (!S_ISREG(st.st_mode))
			continue;
		if (de->d_name[0] == '.' && strstr(de->d_name, ".md.tmp.") !=
		    NULL) {
			json_object_set_new(v->temps, de->d_name,
			    json_string(rel));
			continue;
		}
		if (strlen(de->d_name) < 4 || strcmp(de->d_name +
		    strlen(de->d_name) - 3, ".md") != 0 ||
		    taskfile_parse_name(de->d_name, &kind, &date, &seq) != 1)
			continue;
		v->files++;
		if ((at = json_object_get(v->where, de->d_name)) != NULL) {
			sv_problem(v, "%s is in two places: %s and %s",
			    de->d_name, json_string_value(at), child);
			continue;
		}
		json_object_set_new(v->where, de->d_name, json_string(child));
		snprintf(key, sizeof key, "%d %u %u", (int)kind, date, seq);
		if ((at = json_object_get(v->numbers, key)) != NULL)
			sv_problem(v, "number %u of %u used twice on disk: %s "
			    "and %s", seq, date, json_string_value(at),
			    de->d_name);
		else
			json_object_set_new(v->numbers, key,
			    json_string(de->d_name));
	}
	closedir(d);
}

/* The SHA-256 of root/rel as hex; 0, or -1 if it cannot be read. */
static int
sv_digest(const char *root, const char *rel, char hex[IDEM_DIGEST_HEX_SIZE])
{
	char		 path[PATH_MAX], *data;
	uint8_t		 digest[IDEM_SHA256_BYTES];
	struct stat	 st;
	FILE		*fp;
	size_t		 n;

	snprintf(path, sizeof path, "%s/%s", root, rel);
	if ((fp = fopen(path, "rb")) == NULL)
		return -1;
	if (fstat(fileno(fp), &st) != 0 || (data = malloc((size_t)st.st_size +
	    1)) == NULL) {
		fclose(fp);
		return -1;
	}
	n = fread(data, 1, (size_t)st.st_size, fp);
	fclose(fp);
	digest_sha256(data, n, digest);
	free(data);
	digest_to_hex(digest, hex);
	return 0;
}

/*
 * A committed effect (kind 3: no file, no number): the result kept in
 * the row must be the bytes of its result digest, as the local store's
 * verify checks an index entry.  A tombstone keeps only the digest.
 */
static void
sv_effect(const struct pgstore_verify_row *r, void *arg)
{
	struct sverify	*v = arg;
	char		 hex[IDEM_DIGEST_HEX_SIZE];
	uint8_t		 digest[IDEM_SHA256_BYTES];

	if (r->state != SUBTAB_COMMITTED)
		return;
	if (r->file_digest_hex == NULL || r->receipt == NULL) {
		sv_problem(v, "effect %s/%s is committed without its "
		    "result or its result digest", r->scope,
		    r->client_submission_id);
		return;
	}
	digest_sha256(r->receipt, strlen(r->receipt), digest);
	digest_to_hex(digest, hex);
	if (strcmp(hex, r->file_digest_hex) != 0)
		sv_problem(v, "effect %s/%s: its result is not the "
		    "bytes of its result digest %s", r->scope,
		    r->client_submission_id, r->file_digest_hex);
}

/* The number of effect rows, or -1 if they cannot be read (said). */
static int
sv_effects(struct pg_conn *conn, struct sverify *v, const char *workspace)
{
	char	*cause = NULL;
	int	 rows;

	if ((rows = pgstore_verify_rows(conn, workspace, 1, sv_effect, v,
	    &cause)) < 0) {
		fprintf(stderr, "idemctl store verify: %s", cause != NULL ?
		    cause : "out of memory\n");
		free(cause);
	}
	return rows;
}

/* A task or report row against the files walked. */
static void
sv_row(const struct pgstore_verify_row *r, void *arg)
{
	struct sverify	*v = arg;
	char		 name[2 * NAME_MAX], hex[IDEM_DIGEST_HEX_SIZE];
	const char	*key = r->client_submission_id, *task_id = r->task_id;
	json_t		*at;

	snprintf(name, sizeof name, "%s.md", task_id);
	at = json_object_get(v->where, name);
	if (r->state == SUBTAB_RESERVED) {
		/* Its owner's temporary is not stray. */
		snprintf(name, sizeof name, ".%s.md.tmp.%" PRId64 "-%s",
		    task_id, r->epoch, r->owner_token);
		json_object_set_new(v->live, name, json_true());
		return;
	}
	if (at == NULL) {
		sv_problem(v, "%s (%s) is %s "
		    "but %s.md is nowhere in the workspace", key,
		    task_id, r->state == SUBTAB_COMMITTED ?
		    "committed" : "task_created", task_id);
		return;
	}
	if (r->file_digest_hex != NULL && sv_digest(v->root,
	    json_string_value(at), hex) == 0 &&
	    strcmp(hex, r->file_digest_hex) != 0)
		printf("warning: %s: its bytes changed since idem "
		    "wrote it (an FCoP tool may edit a moved task)\n",
		    json_string_value(at));
}

/* A number more than one row holds. */
static void
sv_number(enum subtab_kind kind, uint32_t date, uint32_t seq,
    unsigned count, void *arg)
{
	struct sverify	*v = arg;

	(void)kind;
	sv_problem(v, "number %u of %u used by %u rows", seq, date, count);
}

static int
store_verify_rows(struct pg_conn *conn, const char *root)
{
	struct sverify	 v;
	char		 workspace[WORKSPACE_ID_BYTES + 1], *cause = NULL;
	const char	*temp_key;
	json_t		*value;
	int		 fd, rc, rows, effects;

	memset(&v, 0, sizeof v);
	v.root = root;
	if ((fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1 ||
	    (rc = workspace_id_get(fd, 0, workspace, &cause)) != 1) {
		fprintf(stderr, "idemctl store verify: %s: %s\n", root,
		    cause != NULL ? cause : fd == -1 ? strerror(errno) :
		    "no .idem/workspace-id: not a workspace of the store");
		free(cause);
		if (fd != -1)
			close(fd);
		return STORE_EXIT_UNREACHABLE;
	}
	close(fd);
	v.where = json_object();
	v.numbers = json_object();
	v.temps = json_object();
	v.live = json_object();
	sv_walk(&v, "_lifecycle", 4);
	sv_walk(&v, "history", 3);
	sv_walk(&v, IDEM_REPORTS_DIR, 0);
	/* Effects (kind 3) have no file and no number: sv_effects. */
	if ((rows = pgstore_verify_rows(conn, workspace, 0, sv_row, &v,
	    &cause)) < 0) {
		fprintf(stderr, "idemctl store verify: %s", cause != NULL ?
		    cause : "out of memory\n");
		free(cause);
		json_decref(v.where);
		json_decref(v.numbers);
		json_decref(v.temps);
		json_decref(v.live);
		return STORE_EXIT_UNREACHABLE;
	}
	/* Numbers used twice by rows: not said if they cannot be read. */
	if (pgstore_verify_numbers(conn, workspace, sv_number, &v,
	    &cause) != 0)
		free(cause);
	json_object_foreach(v.temps, temp_key, value) {
		if (json_object_get(v.live, temp_key) == NULL)
			sv_problem(&v, "%s/%s: a temporary no live owner holds "
			    "(the next takeover of its task removes it)",
			    json_string_value(value), temp_key);
	}
	effects = sv_effects(conn, &v, workspace);
	json_decref(v.where);
	json_decref(v.numbers);
	json_decref(v.temps);
	json_decref(v.live);
	if (effects < 0)
		return STORE_EXIT_UNREACHABLE;
	printf("verify: %d rows, %d effects, %u files, %u problems\n", rows,
	    effects, v.files, v.problems);
	return v.problems > 0 ? STORE_EXIT_PROBLEM : STORE_EXIT_OK;
}
#endif

static int	store_run(const char *what, const char *uri, const char *root);

const struct option idemctl_store_options[] = {
	{ "store", required_argument, NULL, 's' },
	{ "store-file", required_argument, NULL, 'f' },
	{ "root", required_argument, NULL, 'r' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 }
};
const char *const idemctl_store_commands[] = {
	"init", "migrate", "verify", "import", NULL
};

int
idemctl_store(int argc, char **argv)
{
	const struct option	*options = idemctl_store_options;
	const char	*root = NULL, *what, *file = NULL;
	char		*uri = NULL;
	size_t		 known;
	int		 ch, status;

	if (argc < 2)
		return store_usage("which store command?");
	what = argv[1];
	if (strcmp(what, "--help") == 0 || strcmp(what, "-h") == 0) {
		fputs(store_help, stdout);
		return STORE_EXIT_OK;
	}
	for (known = 0; idemctl_store_commands[known] != NULL &&
	    strcmp(what, idemctl_store_commands[known]) != 0; known++)
		;
	if (idemctl_store_commands[known] == NULL)
		return store_usage("unknown store command");
	optind = 0;
	opterr = 0;
	while ((ch = getopt_long(argc - 1, argv + 1, ":h", options, NULL)) !=
	    -1) {
		switch (ch) {
		case 's':
			idemctl_store_option(&uri, optarg);
			break;
		case 'f':
			file = optarg;
			break;
		case 'r':
			root = optarg;
			break;
		case 'h':
			free(uri);
			fputs(store_help, stdout);
			return STORE_EXIT_OK;
		default:
			free(uri);
			return store_usage("unknown option or missing value");
		}
	}
	if (optind != argc - 1) {
		free(uri);
		return store_usage("unexpected argument");
	}
	if (file != NULL && idemctl_store_file(&uri, file) != 0) {
		free(uri);
		return STORE_EXIT_USAGE;
	}
	if (uri == NULL && getenv("IDEM_STORE") != NULL &&
	    (uri = strdup(getenv("IDEM_STORE"))) == NULL)
		return STORE_EXIT_UNREACHABLE;
	status = store_run(what, uri, root);
	if (uri != NULL)
		explicit_bzero(uri, strlen(uri));
	free(uri);
	return status;
}

/* idemctl store WHAT, its options read. */
static int
store_run(const char *what, const char *uri, const char *root)
{
	if (uri == NULL || strncmp(uri, "postgresql://", 13) != 0)
		return store_usage("--store postgresql://... is required");
	if (root != NULL && strcmp(what, "migrate") == 0)
		return store_usage("--root is for init and verify");
	if (root == NULL && (strcmp(what, "verify") == 0 ||
	    strcmp(what, "import") == 0))
		return store_usage("verify and import need --root DIR");
#ifndef HAVE_POSTGRESQL
	fprintf(stderr, "idemctl store: this idemctl was built without "
	    "PostgreSQL: configure --with-postgresql (Debian: libpq-dev)\n");
	return STORE_EXIT_USAGE;
#else
	{
		struct pg_conn	*conn;
		char		*cause = NULL;
		int		 from, to;

		if (strcmp(what, "import") == 0)
			return idemctl_store_import(uri, root);
		if ((conn = pgstore_connect(uri, &cause)) == NULL) {
			fprintf(stderr, "idemctl store: %s\n",
			    cause != NULL ? cause : "cannot connect");
			free(cause);
			return STORE_EXIT_UNREACHABLE;
		}
		if (strcmp(what, "verify") == 0) {
			int	status = store_verify_rows(conn, root);

			pgstore_disconnect(conn);
			return status;
		}
		if (pgstore_migrate(conn, &from, &to, &cause) != 0) {
			int	newer = errno == EPROTO;

			fprintf(stderr, "idemctl store %s: %s\n", what,
			    cause != NULL ? cause : strerror(errno));
			free(cause);
			pgstore_disconnect(conn);
			return newer ? STORE_EXIT_PROBLEM :
			    STORE_EXIT_UNREACHABLE;
		}
		pgstore_disconnect(conn);
		if (from == to)
			printf("schema: version %d, already current\n", to);
		else if (from == 0)
			printf("schema: created, version %d\n", to);
		else
			printf("schema: migrated from version %d to %d\n", from,
			    to);
		if (root != NULL && store_workspace(root) != 0)
			return STORE_EXIT_PROBLEM;
		return STORE_EXIT_OK;
	}
#endif
}

int
idemctl_store_compact(const char *uri, const char *root, int days, int json)
{
#ifndef HAVE_POSTGRESQL
	(void)uri;
	(void)root;
	(void)days;
	(void)json;
	fprintf(stderr, "idemctl compact: this idemctl was built without "
	    "PostgreSQL: configure --with-postgresql (Debian: libpq-dev)\n");
	return STORE_EXIT_USAGE;
#else
	struct pgstore	 st;
	char		*cause = NULL;
	uint64_t	 pruned;
	int		 fd, rc;

	memset(&st, 0, sizeof st);
	if ((fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1 ||
	    (rc = workspace_id_get(fd, 0, st.workspace, &cause)) != 1) {
		fprintf(stderr, "idemctl compact: %s: %s\n", root,
		    cause != NULL ? cause : fd == -1 ? strerror(errno) :
		    "no .idem/workspace-id: not a workspace of the store");
		free(cause);
		if (fd != -1)
			close(fd);
		return STORE_EXIT_PROBLEM;
	}
	close(fd);
	if (pgstore_open(&st, uri, &cause) != 0 ||
	    pgstore_compact(&st, days, &pruned, &cause) != 0) {
		rc = errno == EPROTO ? STORE_EXIT_PROBLEM :
		    STORE_EXIT_UNREACHABLE;
		fprintf(stderr, "idemctl compact: %s\n", cause != NULL ? cause :
		    strerror(errno));
		free(cause);
		pgstore_close(&st);
		return rc;
	}
	pgstore_close(&st);
	if (json) {
		json_t	*j = json_pack("{s:I,s:i}", "pruned",
		    (json_int_t)pruned, "older_than_days", days);

		if (j == NULL || json_dumpf(j, stdout, JSON_COMPACT) != 0) {
			json_decref(j);
			return STORE_EXIT_PROBLEM;
		}
		json_decref(j);
		putchar('\n');
	} else
		printf("compact: %" PRIu64 " receipt%s pruned to tombstones "
		    "(committed more than %d day%s ago)\n", pruned,
		    pruned == 1 ? "" : "s", days, days == 1 ? "" : "s");
	return STORE_EXIT_OK;
#endif
}

int
idemctl_store_verify(int argc, char **argv)
{
	char	**args;
	int	  i, status;

	/* The same as idemctl store verify ARGS. */
	if ((args = calloc((size_t)argc + 2, sizeof *args)) == NULL)
		return STORE_EXIT_UNREACHABLE;
	args[0] = "store";
	for (i = 0; i < argc; i++)
		args[i + 1] = argv[i];
	status = idemctl_store(argc + 1, args);
	free(args);
	return status;
}
