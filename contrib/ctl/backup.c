/* SPDX-License-Identifier: ISC */
/*
 * backup.c: idemctl backup DEST: a consistent copy of a root's state
 * beside a running broker (the store's store_backup does the work and
 * says why it is consistent), and what it took, printed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem.h"
#include "store.h"
#include "idemctl.h"

const struct option ctl_backup_options[] = {
	COMMON_OPTIONS,
	{ "with-workspace", no_argument, NULL, OPT_WITH_WORKSPACE },
	{ NULL, 0, NULL, 0 }
};

int
cmd_backup(struct idemctl *ctl, int argc, char **argv)
{
	struct store_backup	 b;
	char			*cause = NULL;
	int			 ch, status;

	memset(&b, 0, sizeof b);
	while ((ch = ctl_next_option(ctl, argc, argv, ctl_backup_options)) !=
	    -1)
		if (ch == OPT_WITH_WORKSPACE)
			b.with_workspace = 1;
	if (optind + 1 != argc)
		ctl_usage_error(ctl, "one DEST expected");
	b.root = ctl_root(ctl);
	b.dest = argv[optind];
	if (store_backup(&b, &cause) != 0) {
		status = ctl_fail(ctl, errno == EEXIST || errno == ELOOP ?
		    IDEMCTL_EXIT_USAGE : IDEMCTL_EXIT_PROBLEM, "%s",
		    cause != NULL ? cause : strerror(errno));
		free(cause);
		return status;
	}
	if (ctl->json) {
		json_t	*j = json_pack("{s:s,s:s,s:b,s:I,s:I,s:I,s:I,s:I,s:I,"
		    "s:b,s:I,s:I,s:I,s:i,s:I,s:I,s:i}",
		    "root", b.root, "dest", b.dest,
		    "with_workspace", b.with_workspace,
		    "started_ms", (json_int_t)b.started_ms,
		    "checkpoint", (json_int_t)b.checkpoint,
		    "first_segment", (json_int_t)b.first_segment,
		    "last_segment", (json_int_t)b.last_segment,
		    "journal_bytes", (json_int_t)b.journal_bytes,
		    "records", (json_int_t)b.records,
		    "index", b.index_copied,
		    "index_entries", (json_int_t)b.index.entries,
		    "index_bytes", (json_int_t)b.index_bytes,
		    "torn_bytes", (json_int_t)b.torn_bytes,
		    "state_files", (int)b.state_files,
		    "workspace_files", (json_int_t)b.workspace_files,
		    "workspace_bytes", (json_int_t)b.workspace_bytes,
		    "after_cut", (int)b.after_cut);

		if (j == NULL)
			return ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM,
			    "out of memory");
		ctl_print_json(j);
		json_decref(j);
		return IDEMCTL_EXIT_OK;
	}
	printf("backup of %s in %s\n", b.root, b.dest);
	if (b.checkpoint != 0)
		printf("  checkpoint %llu, ", (unsigned long long)b.checkpoint);
	else
		printf("  no checkpoint, ");
	printf("segments %llu..%llu: %llu records, %llu bytes",
	    (unsigned long long)b.first_segment,
	    (unsigned long long)b.last_segment,
	    (unsigned long long)b.records,
	    (unsigned long long)b.journal_bytes);
	if (b.torn_bytes > 0)
		printf(" (%llu bytes of a record being written cut)",
		    (unsigned long long)b.torn_bytes);
	printf("\n  index: %s", b.index_copied ? "" : "none\n");
	if (b.index_copied)
		printf("%llu receipts, %llu bytes\n",
		    (unsigned long long)b.index.entries,
		    (unsigned long long)b.index_bytes);
	printf("  state files: %u\n  workspace: %llu files listed in "
	    "%s/.idem/%s", b.state_files,
	    (unsigned long long)b.workspace_files, b.dest,
	    STORE_BACKUP_MANIFEST);
	if (b.with_workspace)
		printf(", copied (%llu bytes)",
		    (unsigned long long)b.workspace_bytes);
	printf("\n");
	if (b.after_cut > 0)
		printf("  %u TASK or REPORT file%s made after the journal's cut "
		    "left out (named in %s/.idem/%s)\n", b.after_cut,
		    b.after_cut == 1 ? "" : "s", b.dest, STORE_BACKUP_INFO);
	return IDEMCTL_EXIT_OK;
}
