/* SPDX-License-Identifier: ISC */
/*
 * idemctl_store.c: idemctl store init|migrate, the PostgreSQL store's
 * schema (doc/cluster.md).  init creates the schema (or says it is
 * there) and, with --root, the workspace's id; migrate brings an older
 * schema to this build's version.  Both are one transaction each and may
 * run beside running brokers (they serialize on an advisory lock).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store.h"
#include "workspace_id.h"
#ifdef HAVE_POSTGRESQL
#include "pg.h"
#endif
#include "idemctl_store.h"

#define STORE_EXIT_OK		0
#define STORE_EXIT_PROBLEM	1
#define STORE_EXIT_USAGE	2
#define STORE_EXIT_UNREACHABLE	3

static const char store_help[] =
"usage: idemctl store init --store URI [--root DIR]\n"
"       idemctl store migrate --store URI\n"
"\n"
"The PostgreSQL store of several brokers on one workspace (doc/cluster.md).\n"
"init creates idem's tables in the database URI names (postgresql://...;\n"
"else $IDEM_STORE), or says they are there already; with --root it also\n"
"gives the workspace DIR its id (DIR/.idem/workspace-id) and prints it.\n"
"migrate brings tables of an older idem to this version.  Both are one\n"
"transaction, safe beside running brokers.\n"
"\n"
"Exit status: 0 ok, 1 refused (a newer schema), 2 usage, 3 the database\n"
"cannot be reached.\n";

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

int
idemctl_store(int argc, char **argv)
{
	static const struct option options[] = {
		{ "store", required_argument, NULL, 's' },
		{ "root", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char	*uri = getenv("IDEM_STORE"), *root = NULL, *what;
	int		 ch;

	if (argc < 2)
		return store_usage("which store command?");
	what = argv[1];
	if (strcmp(what, "--help") == 0 || strcmp(what, "-h") == 0) {
		fputs(store_help, stdout);
		return STORE_EXIT_OK;
	}
	if (strcmp(what, "init") != 0 && strcmp(what, "migrate") != 0)
		return store_usage("unknown store command");
	optind = 0;
	opterr = 0;
	while ((ch = getopt_long(argc - 1, argv + 1, ":h", options, NULL)) !=
	    -1) {
		switch (ch) {
		case 's':
			uri = optarg;
			break;
		case 'r':
			root = optarg;
			break;
		case 'h':
			fputs(store_help, stdout);
			return STORE_EXIT_OK;
		default:
			return store_usage("unknown option or missing value");
		}
	}
	if (optind != argc - 1)
		return store_usage("unexpected argument");
	if (uri == NULL || strncmp(uri, "postgresql://", 13) != 0)
		return store_usage("--store postgresql://... is required");
	if (root != NULL && strcmp(what, "init") != 0)
		return store_usage("--root is for init");
#ifndef HAVE_POSTGRESQL
	fprintf(stderr, "idemctl store: this idemctl was built without "
	    "PostgreSQL: configure --with-postgresql (Debian: libpq-dev)\n");
	return STORE_EXIT_USAGE;
#else
	{
		struct pg_conn	*conn;
		char		*cause = NULL;
		int		 from, to;

		if ((conn = pgstore_connect(uri, &cause)) == NULL) {
			fprintf(stderr, "idemctl store: %s\n",
			    cause != NULL ? cause : "cannot connect");
			free(cause);
			return STORE_EXIT_UNREACHABLE;
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
