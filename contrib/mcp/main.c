/* SPDX-License-Identifier: ISC */
/*
 * main.c: idem-mcp's options and its stdio loop.  It reads stdin one
 * line at a time, at most IDEM_MCP_MAX_LINE_BYTES each (a longer line is
 * discarded to its newline and answered with an error, so the stream
 * stays in step), hands each line to session.c and writes what that
 * returns, one line each, to stdout.  stdout carries MCP messages only;
 * diagnostics go to stderr.  End of stdin ends the program.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mcp.h"
#include "proxy.h"
#include "protocol.h"

#define MCP_READ_BYTES		65536	/* one read(2) from stdin */

enum {
	OPT_SOCKET = 256,
	OPT_ROOT,
	OPT_PAGE_SIZE
};

static void	usage(FILE *, int) __attribute__((noreturn));

/* The tools, from the tool table (tools.c): each name and its title. */
static void
usage_tools(FILE *out)
{
	json_t	*tool;
	size_t	 i;

	if (mcp_tools_init() != 0)
		return;
	for (i = 0; i < mcp_tools_count(); i++) {
		if ((tool = mcp_tools_describe(i)) == NULL)
			continue;
		fprintf(out, "  %-20s %s\n", json_string_value(json_object_get(
		    tool, "name")), json_string_value(json_object_get(tool,
		    "title")));
		json_decref(tool);
	}
	mcp_tools_free();
}

static void
usage(FILE *out, int status)
{
	fprintf(out,
"usage: idem-mcp [--root DIR | --socket PATH] [--tools-page-size N]\n"
"       idem-mcp proxy [OPTION]... -- COMMAND [ARG...]  (see proxy --help)\n"
"\n"
"An MCP server over stdio exposing idemd's idempotent calls as tools:\n"
"\n");
	usage_tools(out);
	fprintf(out,
"\n"
"  --root DIR             the FCoP workspace whose broker to use (its\n"
"                         socket is DIR/.idem/idemd.sock)\n"
"  --socket PATH          the broker's socket\n"
"                         (default: $IDEM_SOCKET, else the socket of\n"
"                         $IDEM_ROOT, else of ./fcop)\n"
"  --tools-page-size N    tools per tools/list page (default %d)\n"
"  --version, --help\n", IDEM_MCP_TOOLS_PAGE_SIZE);
	exit(status);
}

/* Write one message and its newline; a closed stdout ends us. */
static void
emit(char *line)
{
	if (line == NULL)
		return;
	if (fputs(line, stdout) == EOF || fputc('\n', stdout) == EOF ||
	    fflush(stdout) == EOF) {
		fprintf(stderr, "idem-mcp: stdout: %s\n", strerror(errno));
		exit(1);
	}
	free(line);
}

/*
 * Read stdin to its end, one message per line.  The buffer holds at
 * most one line and the read past it; skipping: the current line went
 * over the limit and is being discarded up to its newline.
 */
static int
serve(struct mcp_session *s)
{
	char	*buf, *nl;
	size_t	 length = 0, size = IDEM_MCP_MAX_LINE_BYTES + MCP_READ_BYTES;
	size_t	 line;
	ssize_t	 r;
	int	 skipping = 0;

	if ((buf = malloc(size)) == NULL) {
		fprintf(stderr, "idem-mcp: out of memory\n");
		return 1;
	}
	for (;;) {
		r = read(STDIN_FILENO, buf + length, size - length);
		if (r == -1 && errno == EINTR)
			continue;
		if (r == -1) {
			fprintf(stderr, "idem-mcp: stdin: %s\n",
			    strerror(errno));
			free(buf);
			return 1;
		}
		if (r == 0)
			break;
		length += (size_t)r;
		while ((nl = memchr(buf, '\n', length)) != NULL) {
			line = (size_t)(nl - buf);
			if (!skipping && line + 1 > IDEM_MCP_MAX_LINE_BYTES)
				emit(mcp_session_oversized(s));
			else if (!skipping)
				emit(mcp_session_line(s, buf,
				    line > 0 && buf[line - 1] == '\r' ?
				    line - 1 : line));
			skipping = 0;
			length -= line + 1;
			memmove(buf, nl + 1, length);
		}
		if (length + 1 > IDEM_MCP_MAX_LINE_BYTES) {
			/* No newline within the limit: answer it now. */
			if (!skipping)
				emit(mcp_session_oversized(s));
			skipping = 1;
			length = 0;
		}
	}
	/* A last message without its newline is still one message. */
	if (length > 0 && !skipping)
		emit(mcp_session_line(s, buf, length));
	free(buf);
	return 0;
}

int
main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "socket", required_argument, NULL, OPT_SOCKET },
		{ "root", required_argument, NULL, OPT_ROOT },
		{ "tools-page-size", required_argument, NULL, OPT_PAGE_SIZE },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	static char		 socket_buf[PATH_MAX];
	struct mcp_config	 cfg;
	struct mcp_session	*s;
	const char		*root = NULL;
	char			*end;
	long			 n;
	int			 ch, status;

	/* `idem-mcp proxy ...`: the proxy in front of another server. */
	if (argc > 1 && strcmp(argv[1], "proxy") == 0)
		return proxy_main(argc - 1, argv + 1);
	memset(&cfg, 0, sizeof cfg);
	cfg.tools_page_size = IDEM_MCP_TOOLS_PAGE_SIZE;
	while ((ch = getopt_long(argc, argv, "hV", options, NULL)) != -1) {
		switch (ch) {
		case OPT_SOCKET:
			cfg.socket_path = optarg;
			break;
		case OPT_ROOT:
			root = optarg;
			break;
		case OPT_PAGE_SIZE:
			errno = 0;
			n = strtol(optarg, &end, 10);
			if (errno != 0 || *end != '\0' || n < 1 || n > 1000) {
				fprintf(stderr, "idem-mcp: --tools-page-size: "
				    "a number from 1 to 1000\n");
				return 2;
			}
			cfg.tools_page_size = (size_t)n;
			break;
		case 'V':
			printf("idem-mcp %s\n", PACKAGE_VERSION);
			return 0;
		case 'h':
			usage(stdout, 0);
		default:
			usage(stderr, 2);
		}
	}
	if (optind != argc)
		usage(stderr, 2);
	/*
	 * As idemctl: --socket, else an explicit --root's socket, else
	 * libidem's lookup ($IDEM_SOCKET, $IDEM_ROOT, ./fcop).
	 */
	if (cfg.socket_path == NULL && root != NULL) {
		if ((size_t)snprintf(socket_buf, sizeof socket_buf, "%s/%s",
		    root, IDEM_SOCKET_NAME) >= sizeof socket_buf) {
			fprintf(stderr, "idem-mcp: --root: path too long\n");
			return 2;
		}
		cfg.socket_path = socket_buf;
	}

	/* A client that went away is a write error, not a signal. */
	signal(SIGPIPE, SIG_IGN);
	if (mcp_tools_init() != 0)
		return 1;
	if ((s = mcp_session_new(&cfg)) == NULL) {
		fprintf(stderr, "idem-mcp: out of memory\n");
		return 1;
	}
	status = serve(s);
	mcp_session_free(s);
	mcp_tools_free();
	return status;
}
