/* SPDX-License-Identifier: ISC */
/*
 * proxy_options.c: the command line of `idem-mcp proxy`.  It owns the
 * usage, reading the options into proxy_cfg (each checked: a kind's
 * parts, the lease's range, the broker's socket from --root) and the
 * line limit a test may lower (IDEM_MCP_PROXY_MAX_LINE_BYTES, only in a
 * build with fault injection), then hands the downstream's command to
 * proxy.c (proxy_run).  It starts nothing and reads no message.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy.h"
#include "protocol.h"

enum {
	OPT_SOCKET = 256,
	OPT_ROOT,
	OPT_NAME,
	OPT_SCOPE,
	OPT_WRAP,
	OPT_PASS,
	OPT_LEASE
};

static void	proxy_usage(FILE *, int) __attribute__((noreturn));

static void
proxy_usage(FILE *out, int status)
{
	fprintf(out,
"usage: idem-mcp proxy [--root DIR | --socket PATH] [--name NAME] [--scope S]\n"
"                      [--wrap TOOL]... [--pass TOOL]... [--lease-ms N]\n"
"                      -- COMMAND [ARG...]\n"
"\n"
"Serve MCP on stdio in front of the MCP server COMMAND, making its tools\n"
"with side effects idempotent: each gains a required idempotency_key\n"
"argument, and a call is performed at most once per key (idemd keeps the\n"
"first result and answers every retry with it).  Every other message\n"
"passes unchanged.\n"
"\n"
"  --root DIR, --socket PATH  the broker, as for idem-mcp\n"
"  --name NAME     the server's name in effect kinds, mcp/NAME/TOOL\n"
"                  (default: the server's serverInfo.name)\n"
"  --scope S       a namespace of this proxy's keys: kinds S/mcp/NAME/TOOL\n"
"  --wrap TOOL     wrap TOOL even if it says it is read-only or idempotent\n"
"  --pass TOOL     never wrap TOOL\n"
"  --lease-ms N    the lease of a call at the broker (default %d); kept\n"
"                  alive while the server works on the call\n",
	    PROXY_DEFAULT_LEASE_MS);
	exit(status);
}

/* Append s to a NULL-terminated list. */
static const char **
proxy_list_add(const char **list, size_t *n, const char *s)
{
	const char	**p;

	if ((p = realloc(list, (*n + 2) * sizeof *p)) == NULL) {
		proxy_log("out of memory");
		exit(1);
	}
	p[(*n)++] = s;
	p[*n] = NULL;
	return p;
}

/* Printable ASCII without '/', as a part of a kind must be. */
static int
proxy_kind_part_ok(const char *s)
{
	if (*s == '\0')
		return 0;
	for (; *s != '\0'; s++)
		if (*s < 0x21 || *s > 0x7e)
			return 0;
	return 1;
}

/*
 * The line limit: PROXY_MAX_LINE_BYTES, or, in a build with fault
 * injection only, IDEM_MCP_PROXY_MAX_LINE_BYTES (a line just over 256
 * MiB costs a test that much memory twice over and seconds on each side;
 * the limit's arithmetic is the same at any size).  Set in a build
 * without, or not a whole number of bytes within [PROXY_MIN_TEST_LINE_BYTES,
 * PROXY_MAX_LINE_BYTES], it is refused, as idemd refuses its IDEM_CRASH_*:
 * a knob silently ignored or misread ("1M" as 1) would test something
 * else.  Read once, before any thread.  -1 if refused (said).
 */
static int
proxy_line_limit(size_t *limit)
{
	const char	*value = getenv("IDEM_MCP_PROXY_MAX_LINE_BYTES");
#ifdef IDEM_FAULT_INJECTION
	char		*end;
	long long	 n;
#endif

	*limit = PROXY_MAX_LINE_BYTES;
	if (value == NULL)
		return 0;
#ifdef IDEM_FAULT_INJECTION
	errno = 0;
	n = strtoll(value, &end, 10);
	if (errno != 0 || end == value || *end != '\0' ||
	    n < PROXY_MIN_TEST_LINE_BYTES || n > PROXY_MAX_LINE_BYTES) {
		proxy_log("IDEM_MCP_PROXY_MAX_LINE_BYTES=%s: not a number of "
		    "bytes from %d to %d", value, PROXY_MIN_TEST_LINE_BYTES,
		    PROXY_MAX_LINE_BYTES);
		return -1;
	}
	*limit = (size_t)n;
	return 0;
#else
	proxy_log("IDEM_MCP_PROXY_MAX_LINE_BYTES is set, but this idem-mcp "
	    "has no fault injection (configure --enable-fault-injection)");
	return -1;
#endif
}

int
proxy_main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "socket", required_argument, NULL, OPT_SOCKET },
		{ "root", required_argument, NULL, OPT_ROOT },
		{ "name", required_argument, NULL, OPT_NAME },
		{ "scope", required_argument, NULL, OPT_SCOPE },
		{ "wrap", required_argument, NULL, OPT_WRAP },
		{ "pass", required_argument, NULL, OPT_PASS },
		{ "lease-ms", required_argument, NULL, OPT_LEASE },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	static char	 socket_buf[4096];
	static const char *empty[] = { NULL };
	const char	*root = NULL;
	size_t		 nwrap = 0, npass = 0;
	char		*end;
	long long	 n;
	int		 ch;

	proxy_cfg.lease_ms = PROXY_DEFAULT_LEASE_MS;
	if (proxy_line_limit(&proxy_cfg.max_line_bytes) != 0)
		return 2;
	proxy_cfg.wrap = proxy_cfg.pass = empty;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "+h", options, NULL)) != -1) {
		switch (ch) {
		case OPT_SOCKET:
			proxy_cfg.socket_path = optarg;
			break;
		case OPT_ROOT:
			root = optarg;
			break;
		case OPT_NAME:
		case OPT_SCOPE:
			if (!proxy_kind_part_ok(optarg) ||
			    strlen(optarg) > IDEM_MAX_EFFECT_KIND_BYTES / 2) {
				fprintf(stderr, "idem-mcp proxy: --%s: 1..%d "
				    "printable ASCII characters, no spaces\n",
				    ch == OPT_NAME ? "name" : "scope",
				    IDEM_MAX_EFFECT_KIND_BYTES / 2);
				return 2;
			}
			if (ch == OPT_NAME)
				proxy_cfg.name = optarg;
			else
				proxy_cfg.scope = optarg;
			break;
		case OPT_WRAP:
			proxy_cfg.wrap = proxy_list_add(nwrap == 0 ? NULL :
			    proxy_cfg.wrap, &nwrap, optarg);
			break;
		case OPT_PASS:
			proxy_cfg.pass = proxy_list_add(npass == 0 ? NULL :
			    proxy_cfg.pass, &npass, optarg);
			break;
		case OPT_LEASE:
			errno = 0;
			n = strtoll(optarg, &end, 10);
			if (errno != 0 || *end != '\0' ||
			    n < IDEM_MIN_LEASE_MS || n > IDEM_MAX_LEASE_MS) {
				fprintf(stderr, "idem-mcp proxy: --lease-ms: "
				    "%d..%d\n", IDEM_MIN_LEASE_MS,
				    IDEM_MAX_LEASE_MS);
				return 2;
			}
			proxy_cfg.lease_ms = n;
			break;
		case 'h':
			proxy_usage(stdout, 0);
		default:
			proxy_usage(stderr, 2);
		}
	}
	if (optind >= argc)
		proxy_usage(stderr, 2);
	if (proxy_cfg.socket_path == NULL && root != NULL) {
		if ((size_t)snprintf(socket_buf, sizeof socket_buf, "%s/%s",
		    root, IDEM_SOCKET_NAME) >= sizeof socket_buf) {
			fprintf(stderr, "idem-mcp proxy: --root: too long\n");
			return 2;
		}
		proxy_cfg.socket_path = socket_buf;
	}
	return proxy_run(argv + optind);
}
