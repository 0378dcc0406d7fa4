/*
 * idemctl: operator commands for idemd.  Talks to the broker over its
 * socket through libidem.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem.h"

static void
usage(FILE *out, int status)
{
	fprintf(out,
"usage: idemctl [--socket PATH] COMMAND\n"
"\n"
"commands:\n"
"  status    is the broker up, and which version\n"
"\n"
"The socket is --socket, else $IDEM_SOCKET, else $IDEM_ROOT/.idem/idemd.sock,\n"
"else ./fcop/.idem/idemd.sock.\n");
	exit(status);
}

static int
cmd_status(const char *socket_path)
{
	struct idem_error	 err;
	struct idem_hello	 hello;
	struct idem_conn	*conn;

	if ((conn = idem_connect(socket_path, &err)) == NULL) {
		fprintf(stderr, "idemctl: broker not reachable: %s\n",
		    err.message);
		return 1;
	}
	if (idem_hello(conn, &hello, &err) != 0) {
		fprintf(stderr, "idemctl: hello failed: %s\n", err.message);
		idem_close(conn);
		return 1;
	}
	printf("%s %s up (protocol %d)\n", hello.server, hello.version,
	    hello.protocol);
	idem_close(conn);
	return 0;
}

int
main(int argc, char **argv)
{
	const char	*socket_path = NULL;
	int		 i = 1;

	if (i + 1 < argc && strcmp(argv[i], "--socket") == 0) {
		socket_path = argv[i + 1];
		i += 2;
	}
	if (i >= argc)
		usage(stderr, 2);
	if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "help") == 0)
		usage(stdout, 0);
	if (strcmp(argv[i], "status") == 0)
		return cmd_status(socket_path);
	fprintf(stderr, "idemctl: unknown command \"%s\"\n", argv[i]);
	usage(stderr, 2);
}
