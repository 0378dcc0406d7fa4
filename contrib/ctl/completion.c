/* SPDX-License-Identifier: ISC */
/*
 * completion.c: idemctl completion bash|zsh|fish, the shells' completion
 * scripts, written from the command table (idemctl.c's ctl_commands:
 * each command's name, summary, subcommands and the very getopt_long
 * table it parses with), so a command or option added there is offered
 * without anyone editing a script.  make install installs the three
 * (Makefile.am runs this at build).  idemctl completion list prints the
 * table as the tests read it: "COMMAND --option..." and "COMMAND
 * word..." lines.
 *
 * The scripts complete: the commands (with their summaries in zsh and
 * fish) and the options before one; a command's own options after it;
 * its subcommands as its first word (journal dump, effects list|show,
 * store init|...); after an option that takes a value, file names.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "idem.h"
#include "idemctl.h"

const struct option ctl_completion_options[] = {
	COMMON_OPTIONS,
	{ NULL, 0, NULL, 0 }
};

/* The options idemctl's main takes before a command. */
static const struct option global_options[] = {
	COMMON_OPTIONS,
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 }
};

/* Each long option of a command (both its tables), once. */
typedef void (*option_fn)(const struct option *, void *arg);

static void
each_option(const struct command *c, option_fn fn, void *arg)
{
	const struct option	*o, *p;
	int			 seen;

	for (o = c->options; o != NULL && o->name != NULL; o++)
		fn(o, arg);
	for (o = c->also; o != NULL && o->name != NULL; o++) {
		seen = 0;
		for (p = c->options; p != NULL && p->name != NULL; p++)
			seen |= strcmp(p->name, o->name) == 0;
		if (!seen)
			fn(o, arg);
	}
}

/* A summary inside '...' for the shell: ' as '\'' (zsh, bash). */
static void
quoted(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s != '\0'; s++) {
		if (*s == '\'')
			fputs("'\\''", f);
		else
			fputc(*s, f);
	}
	fputc('\'', f);
}

/* fish: inside '...', \ and ' escaped with a backslash. */
static void
fish_quoted(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s != '\0'; s++) {
		if (*s == '\'' || *s == '\\')
			fputc('\\', f);
		fputc(*s, f);
	}
	fputc('\'', f);
}

struct words_out {
	FILE		*f;
	int		 values;	/* only those taking a value */
	const char	*sep;
};

static void
word_out(const struct option *o, void *arg)
{
	struct words_out	*w = arg;

	if (w->values && o->has_arg != required_argument)
		return;
	fprintf(w->f, "%s--%s", w->sep, o->name);
	w->sep = " ";
}

/* "--a --b" (values: only those taking a value) of one command. */
static void
option_words(FILE *f, const struct command *c, int values)
{
	struct words_out	w = { f, values, "" };

	each_option(c, word_out, &w);
}

static void
subcommand_words(FILE *f, const struct command *c)
{
	const char *const	*w;

	for (w = c->words; w != NULL && *w != NULL; w++)
		fprintf(f, "%s%s", w == c->words ? "" : " ", *w);
}

static const struct command global_command = {
	"", NULL, "", "", "", global_options, NULL, NULL, 1
};

/* ---- bash ---------------------------------------------------------------- */

static void
bash_case(FILE *f, const char *label, const struct command *c, int commands)
{
	size_t	i;

	fprintf(f, "\t%s)\n\t\topts='", label);
	option_words(f, c, 0);
	fprintf(f, "'\n\t\tvalues=' ");
	option_words(f, c, 1);
	fprintf(f, " '\n\t\twords='");
	if (commands) {
		for (i = 0; i < ctl_command_count; i++)
			if (!ctl_commands[i].hidden)
				fprintf(f, "%s%s", i == 0 ? "" : " ",
				    ctl_commands[i].name);
	} else
		subcommand_words(f, c);
	fprintf(f, "'\n\t\t;;\n");
}

static void
bash(FILE *f)
{
	size_t	i;

	fputs("# bash completion for idemctl, made by `idemctl completion "
	    "bash` from its\n# command table: do not edit.\n"
	    "_idemctl_options()\n{\n\tcase $1 in\n", f);
	bash_case(f, "''", &global_command, 1);
	for (i = 0; i < ctl_command_count; i++)
		if (!ctl_commands[i].hidden)
			bash_case(f, ctl_commands[i].name, &ctl_commands[i], 0);
	fputs("\t*)\n\t\topts= values=' ' words=\n\t\t;;\n\tesac\n}\n\n", f);
	fputs(
"_idemctl()\n"
"{\n"
"\tlocal cur=${COMP_WORDS[COMP_CWORD]} prev= cmd= at=0 i w npos=0\n"
"\tlocal opts values words\n"
"\tCOMPREPLY=()\n"
"\t[ \"$COMP_CWORD\" -gt 0 ] && prev=${COMP_WORDS[COMP_CWORD-1]}\n"
"\t# The command: the first word that is no option nor an option's value.\n"
"\t_idemctl_options ''\n"
"\tfor ((i = 1; i < COMP_CWORD; i++)); do\n"
"\t\tw=${COMP_WORDS[i]}\n"
"\t\tcase $w in\n"
"\t\t--*=*) ;;\n"
"\t\t-*) [[ $values == *\" $w \"* ]] && ((i++)) ;;\n"
"\t\t*) cmd=$w at=$i; break ;;\n"
"\t\tesac\n"
"\tdone\n"
"\t_idemctl_options \"$cmd\"\n"
"\t# Its words so far, options and their values aside.\n"
"\tfor ((i = at + 1; at > 0 && i < COMP_CWORD; i++)); do\n"
"\t\tw=${COMP_WORDS[i]}\n"
"\t\tcase $w in\n"
"\t\t--*=*) ;;\n"
"\t\t-*) [[ $values == *\" $w \"* ]] && ((i++)) ;;\n"
"\t\t*) ((npos++)) ;;\n"
"\t\tesac\n"
"\tdone\n"
"\t# A value: bash's own file names (complete -o default).\n"
"\t[[ $values == *\" $prev \"* ]] && return 0\n"
"\tif [[ $cur == -* ]]; then\n"
"\t\tCOMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
"\telif [ \"$npos\" -eq 0 ] && [ -n \"$words\" ]; then\n"
"\t\tCOMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
"\tfi\n"
"\treturn 0\n"
"}\n"
"complete -o default -F _idemctl idemctl\n", f);
}

/* ---- zsh ----------------------------------------------------------------- */

static void
zsh_case(FILE *f, const char *label, const struct command *c)
{
	fprintf(f, "\t%s)\n\t\topts=(", label);
	option_words(f, c, 0);
	fprintf(f, ")\n\t\tvalues=(");
	option_words(f, c, 1);
	fprintf(f, ")\n\t\tsubs=(");
	subcommand_words(f, c);
	fprintf(f, ")\n\t\t;;\n");
}

static void
zsh(FILE *f)
{
	size_t	i;

	fputs("#compdef idemctl\n# zsh completion for idemctl, made by "
	    "`idemctl completion zsh` from its\n# command table: do not "
	    "edit.\n_idemctl() {\n\tlocal cmd= w\n\tinteger at=0 i npos=0\n"
	    "\tlocal -a opts values subs commands\n\tcommands=(\n", f);
	for (i = 0; i < ctl_command_count; i++) {
		char	entry[256];

		if (ctl_commands[i].hidden)
			continue;
		snprintf(entry, sizeof entry, "%s:%s", ctl_commands[i].name,
		    ctl_commands[i].summary);
		fputs("\t\t", f);
		quoted(f, entry);
		fputc('\n', f);
	}
	fputs("\t)\n\tvalues=(", f);
	option_words(f, &global_command, 1);
	fputs(")\n"
"\t# The command: the first word that is no option nor an option's value.\n"
"\tfor (( i = 2; i < CURRENT; i++ )); do\n"
"\t\tw=${words[i]}\n"
"\t\tcase $w in\n"
"\t\t--*=*) ;;\n"
"\t\t-*) (( ${values[(Ie)$w]} )) && (( i++ )) ;;\n"
"\t\t*) cmd=$w at=$i; break ;;\n"
"\t\tesac\n"
"\tdone\n"
"\tcase $cmd in\n", f);
	zsh_case(f, "''", &global_command);
	for (i = 0; i < ctl_command_count; i++)
		if (!ctl_commands[i].hidden)
			zsh_case(f, ctl_commands[i].name, &ctl_commands[i]);
	fputs("\t*)\n\t\topts=() values=() subs=()\n\t\t;;\n\tesac\n", f);
	fputs(
"\tfor (( i = at + 1; at > 0 && i < CURRENT; i++ )); do\n"
"\t\tw=${words[i]}\n"
"\t\tcase $w in\n"
"\t\t--*=*) ;;\n"
"\t\t-*) (( ${values[(Ie)$w]} )) && (( i++ )) ;;\n"
"\t\t*) (( npos++ )) ;;\n"
"\t\tesac\n"
"\tdone\n"
"\tif (( CURRENT > 2 && ${values[(Ie)${words[CURRENT-1]}]} )); then\n"
"\t\t_files\n"
"\telif [[ ${words[CURRENT]} == -* ]]; then\n"
"\t\tcompadd -- $opts\n"
"\telif [[ -z $cmd ]]; then\n"
"\t\t_describe -t commands 'idemctl command' commands\n"
"\telif (( npos == 0 && ${#subs} )); then\n"
"\t\tcompadd -- $subs\n"
"\telse\n"
"\t\t_files\n"
"\tfi\n"
"}\n"
"if [[ $zsh_eval_context[-1] == loadautofunc ]]; then\n"
"\t_idemctl \"$@\"\n"
"else\n"
"\tcompdef _idemctl idemctl\n"
"fi\n", f);
}

/* ---- fish ---------------------------------------------------------------- */

struct fish_out {
	FILE		*f;
	const char	*condition;
};

static void
fish_option(const struct option *o, void *arg)
{
	struct fish_out	*w = arg;

	fprintf(w->f, "complete -c idemctl -n %s -l %s%s\n", w->condition,
	    o->name, o->has_arg == required_argument ? " -r -F" : "");
}

static void
fish(FILE *f)
{
	struct fish_out		 w = { f, "__fish_use_subcommand" };
	const struct command	*c;
	const char *const	*word;
	char			 condition[512];
	size_t			 i;

	fputs("# fish completion for idemctl, made by `idemctl completion "
	    "fish` from its\n# command table: do not edit.\n"
	    "complete -c idemctl -f\n", f);
	each_option(&global_command, fish_option, &w);
	for (i = 0; i < ctl_command_count; i++) {
		c = &ctl_commands[i];
		if (c->hidden)
			continue;
		fprintf(f, "complete -c idemctl -n __fish_use_subcommand -a %s "
		    "-d ", c->name);
		fish_quoted(f, c->summary);
		fputc('\n', f);
	}
	for (i = 0; i < ctl_command_count; i++) {
		c = &ctl_commands[i];
		if (c->hidden)
			continue;
		snprintf(condition, sizeof condition,
		    "'__fish_seen_subcommand_from %s'", c->name);
		w.condition = condition;
		each_option(c, fish_option, &w);
		if (c->words == NULL)
			continue;
		/* A subcommand only as the command's first word. */
		fprintf(f, "complete -c idemctl -n '__fish_seen_subcommand_from "
		    "%s; and not __fish_seen_subcommand_from", c->name);
		for (word = c->words; *word != NULL; word++)
			fprintf(f, " %s", *word);
		fprintf(f, "' -a '");
		subcommand_words(f, c);
		fprintf(f, "'\n");
	}
}

/* ---- list: the table, for the tests ------------------------------------- */

static void
list(FILE *f)
{
	const struct command	*c;
	size_t			 i;

	fputs("- ", f);
	option_words(f, &global_command, 0);
	fputc('\n', f);
	for (i = 0; i < ctl_command_count; i++) {
		c = &ctl_commands[i];
		if (c->hidden)
			continue;
		fprintf(f, "%s ", c->name);
		option_words(f, c, 0);
		fputc('\n', f);
		if (c->words != NULL) {
			fprintf(f, "%s ", c->name);
			subcommand_words(f, c);
			fputc('\n', f);
		}
	}
}

int
cmd_completion(struct idemctl *ctl, int argc, char **argv)
{
	static const struct {
		const char	*shell;
		void		(*write)(FILE *);
	} shells[] = {
		{ "bash", bash }, { "zsh", zsh }, { "fish", fish },
		{ "list", list }
	};
	size_t	i;

	while (ctl_next_option(ctl, argc, argv, ctl_completion_options) !=
	    -1)
		ctl_usage_error(ctl, "no options of its own");
	if (optind + 1 != argc)
		ctl_usage_error(ctl, "which shell: bash, zsh or fish?");
	for (i = 0; i < sizeof shells / sizeof shells[0]; i++)
		if (strcmp(argv[optind], shells[i].shell) == 0) {
			shells[i].write(stdout);
			return IDEMCTL_EXIT_OK;
		}
	ctl_usage_error(ctl, "no completion for \"%s\": bash, zsh or fish",
	    argv[optind]);
}
