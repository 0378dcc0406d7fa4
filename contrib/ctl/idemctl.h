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
	OPT_STORE_FILE,
	OPT_WITH_WORKSPACE
};

#define COMMON_OPTIONS							\
	{ "json", no_argument, NULL, OPT_JSON },			\
	{ "socket", required_argument, NULL, OPT_SOCKET },		\
	{ "root", required_argument, NULL, OPT_ROOT },			\
	{ "help", no_argument, NULL, 'h' }

struct idemctl;

/*
 * One command: what --help says, and what it parses, which the shell
 * completions are generated from (completion.c), so they offer exactly
 * the options the command takes.
 */
struct command {
	const char	*name;
	int		(*run)(struct idemctl *, int, char **);
	const char	*summary;	/* for idemctl --help */
	const char	*synopsis;
	const char	*help;
	const struct option *options;	/* its getopt_long table */
	const struct option *also;	/* another parser's for it, or NULL */
	const char *const *words;	/* its subcommands, NULL-ended; NULL */
	int		 hidden;	/* not in --help, not completed */
};
/* idemctl.c: every command, in --help's order. */
extern const struct command	ctl_commands[];
extern const size_t		ctl_command_count;

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

/* format.c: how answers print */
#define IDEMCTL_TABLE_MAX_COLUMNS	10
/*
 * A table printed with aligned columns.  Cells are copied; the last
 * column is not padded, so lines carry no trailing blanks.
 */
struct ctl_table {
	size_t	  columns;
	size_t	  rows;
	size_t	  width[IDEMCTL_TABLE_MAX_COLUMNS];
	char	**cells;
};
int	ctl_table_add(struct ctl_table *, const char *const *row);
void	ctl_table_print(struct ctl_table *, const char *indent);
void	ctl_table_free(struct ctl_table *);
/* "500ms", "30s", "1.5s", "5m", "2h"; a bare number is seconds. */
int	ctl_parse_duration_ms(const char *, int64_t *ms);
/* 850ms, 12.3s, 4m05s, 2h03m, 3d02h. */
void	ctl_format_duration(int64_t ms, char *out, size_t size);
const char *ctl_yes_no(json_t *);
json_int_t ctl_int_member(json_t *, const char *key);

/* online.c: the commands that ask the broker */
extern const struct option ctl_status_options[], ctl_stats_options[],
	    ctl_diagnose_options[], ctl_show_options[], ctl_effects_options[],
	    ctl_resolve_options[], ctl_submit_options[];
int	cmd_status(struct idemctl *, int, char **);
int	cmd_stats(struct idemctl *, int, char **);
int	cmd_diagnose(struct idemctl *, int, char **);
int	cmd_show(struct idemctl *, int, char **);
int	cmd_effects(struct idemctl *, int, char **);
int	cmd_resolve(struct idemctl *, int, char **);
int	cmd_submit(struct idemctl *, int, char **);

/* offline.c: the commands that read the files (through the store) */
extern const struct option ctl_verify_options[], ctl_journal_dump_options[],
	    ctl_compact_options[];
int	cmd_verify(struct idemctl *, int, char **);
int	cmd_journal(struct idemctl *, int, char **);
/* compact --older-than DAYS: tombstones for old receipts in the index. */
#define IDEMCTL_MAX_COMPACT_DAYS	36500	/* a century */
int	cmd_compact(struct idemctl *, int, char **);

/* backup.c: a consistent copy of a running broker's state */
extern const struct option ctl_backup_options[];
int	cmd_backup(struct idemctl *, int, char **);

/* completion.c: idemctl completion bash|zsh|fish|list (hidden) */
extern const struct option ctl_completion_options[];
int	cmd_completion(struct idemctl *, int, char **);

#endif
