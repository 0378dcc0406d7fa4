/* SPDX-License-Identifier: ISC */
/* idemctl_store.h: idemctl store (idemctl_store.c). */
#ifndef IDEMCTL_STORE_H
#define IDEMCTL_STORE_H

#include <getopt.h>

/* argv[0] is "store"; returns idemctl's exit status. */
int	idemctl_store(int argc, char **argv);
/* What idemctl store (and verify --store) parses: for the completions. */
extern const struct option idemctl_store_options[];
extern const char *const idemctl_store_commands[];
/* idemctl verify --store URI --root DIR: argv[0] is "verify". */
int	idemctl_store_verify(int argc, char **argv);
/*
 * idemctl compact --older-than DAYS --store URI (the workspace root's
 * rows): idemctl's exit status.
 */
int	idemctl_store_compact(const char *uri, const char *root, int days,
	    int json);

/*
 * --store VALUE: a copy in *uri (the one before freed), and the
 * password in the command line overwritten (ps shows it to anyone).
 */
void	idemctl_store_option(char **uri, char *value);
/*
 * --store-file PATH: *uri read from it (storeuri.h's checks); refused
 * if --store gave one.  0, or -1 with the message printed.
 */
int	idemctl_store_file(char **uri, const char *path);

/* ---- idemctl_import.c ----------------------------------------------- */

/* idemctl store import --store URI --root DIR. */
int	idemctl_store_import(const char *uri, const char *root);

#endif
