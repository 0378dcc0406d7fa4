/* SPDX-License-Identifier: ISC */
/*
 * workspace_id.h: ROOT/.idem/workspace-id (doc/cluster.md), the UUID
 * that names a workspace in the PostgreSQL store, and ROOT/.idem/imported,
 * the mark that the workspace's local history was moved into that store.
 */
#ifndef IDEM_WORKSPACE_ID_H
#define IDEM_WORKSPACE_ID_H

#define WORKSPACE_ID_NAME	".idem/workspace-id"
#define WORKSPACE_ID_BYTES	36	/* a UUID, without its newline */
#define WORKSPACE_IMPORTED_NAME	".idem/imported"

/* A lower-case UUID, 36 characters? */
int	workspace_id_valid(const char *);
/*
 * The workspace's id: 1 and out filled; 0 if there is none and create
 * is 0; with create, one is made (temporary, fsync, link that never
 * replaces, directory fsync) unless another process made it first, whose
 * id is then read.  -1 with *cause (malloc'd) on an error or a file that
 * is not idem's.
 */
int	workspace_id_get(int root_fd, int create,
	    char out[WORKSPACE_ID_BYTES + 1], char **cause);
/*
 * Was the workspace's local history imported into the PostgreSQL store
 * (idemctl store import)?  1 or 0; -1 with errno if it cannot be told.
 */
int	workspace_imported(int root_fd);
/*
 * After an import has committed: the mark, holding the workspace's id,
 * made durably as the id is (an existing mark is kept).  0, or -1 with
 * *cause (malloc'd).
 */
int	workspace_mark_imported(int root_fd,
	    const char workspace[WORKSPACE_ID_BYTES + 1], char **cause);

#endif
