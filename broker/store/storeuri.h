/* SPDX-License-Identifier: ISC */
/*
 * storeuri.h: the PostgreSQL store's URI as a secret (issue #27): read
 * from a file only its owner can read (--store-file), and its password
 * overwritten where it must not be seen (a process's command line).
 * Shared by idemd and idemctl; nothing here needs libpq.
 */
#ifndef IDEM_STOREURI_H
#define IDEM_STOREURI_H

/* What a --store-file may hold, at most (a URI is far shorter). */
#define STOREURI_FILE_MAX	4096

/*
 * Overwrite, in place, every byte of uri's password with 'x': the
 * user's password in "postgresql://user:PASSWORD@..." and the value of
 * any "password" parameter after "?", as libpq reads them (the key may
 * be percent-encoded).  The length stays, so that it can be done to a
 * process's own argv, which is what ps shows.  Returns how many bytes
 * were overwritten.
 */
size_t	storeuri_redact(char *uri);
/*
 * Overwrite with 'x', in text, every copy of a password uri holds: for
 * a message about the URI from elsewhere (libpq quotes a malformed part
 * of a URI, which may be the password, in its message).
 */
void	storeuri_scrub(char *text, const char *uri);
/* Does --store's text name a PostgreSQL store (postgresql://, postgres://)? */
int	storeuri_is_postgresql(const char *uri);
/* Does uri hold a password (storeuri_redact would change it)? */
int	storeuri_has_password(const char *uri);
/*
 * The URI in the file at path: refused unless it is a regular file
 * owned by uid or by root and neither group nor others have any access
 * (like libpq's ~/.pgpass); one line, surrounding white space ignored.
 * A malloc'd string, or NULL with *cause (malloc'd) naming the path and,
 * for a refused mode, the mode and the chmod that fixes it.
 */
char	*storeuri_read_file(const char *path, unsigned uid, char **cause);

#endif
