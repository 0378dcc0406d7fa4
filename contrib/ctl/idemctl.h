/* SPDX-License-Identifier: ISC */
/*
 * idemctl.h: what idemctl's files share: exit statuses, the options
 * every command takes, the command table's entry, and the helpers that
 * print a message or parse an option.  Grouped by the file that owns
 * them.  idemctl sees only libidem (idem.h) and the storage API (store.h).
 */
#ifndef IDEMCTL_H
#define IDEMCTL_H

#include <getopt.h>
#include <limits.h>
#include <stdio.h>

#include <jansson.h>

#include "idem.h"

#define IDEMCTL_EXIT_OK			0
#define IDEMCTL_EXIT_PROBLEM		1	/* error, conflict, problems */
#define IDEMCTL_EXIT_USAGE		2
#define IDEMCTL_EXIT_UNREACHABLE	3	/* or: cannot read the files */

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
	OPT_SEQUENCE_DIGITS,
	OPT_OLDER_THAN,
	OPT_STORE,
	OPT_STORE_FILE
};

#define COMMON_OPTIONS							\
	{ "json", no_argument, NULL, OPT_JSON },			\
	{ "socket", required_argument, NULL, OPT_SOCKET },		\
	{ "root", required_argument, NULL, OPT_ROOT },			\
	{ "help", no_argument, NULL, 'h' }

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

/* idemctl.c: messages, options, main */
void	ctl_command_help(const struct command *, FILE *);
void	ctl_usage_error(struct idemctl *, const char *, ...)
	    __attribute__((format(printf, 2, 3), noreturn));
int	ctl_fail(struct idemctl *, int, const char *, ...)
	    __attribute__((format(printf, 3, 4)));
int	ctl_next_option(struct idemctl *, int, char **,
	    const struct option *);
const char *ctl_root(struct idemctl *);
void	ctl_print_json(json_t *);
const char *ctl_string_member(json_t *, const char *, const char *);

/* online.c: the commands that ask the broker */
int	cmd_status(struct idemctl *, int, char **);
int	cmd_stats(struct idemctl *, int, char **);
int	cmd_diagnose(struct idemctl *, int, char **);
int	cmd_show(struct idemctl *, int, char **);
int	cmd_effects(struct idemctl *, int, char **);
int	cmd_resolve(struct idemctl *, int, char **);
int	cmd_submit(struct idemctl *, int, char **);

/* offline.c: the commands that read the files (through the store) */
int	cmd_verify(struct idemctl *, int, char **);
int	cmd_journal(struct idemctl *, int, char **);
/* compact --older-than DAYS: tombstones for old receipts in the index. */
#define IDEMCTL_MAX_COMPACT_DAYS	36500	/* a century */
int	cmd_compact(struct idemctl *, int, char **);

#endif
