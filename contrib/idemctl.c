/*
 * idemctl: operator commands for idemd, over its socket through libidem.
 * Human text by default; --json prints the broker's own JSON.  Exit codes:
 * 0 success, 1 the broker answered an error or conflict, 2 usage, 3 the
 * broker is unreachable.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem.h"

#define IDEMCTL_EXIT_ANSWER	1
#define IDEMCTL_EXIT_USAGE	2
#define IDEMCTL_EXIT_UNREACHABLE 3

struct idemctl {
	const char	*socket_path;
	int		 json;
};

static void
usage(FILE *out, int status)
{
	fprintf(out,
"usage: idemctl [--socket PATH] [--json] COMMAND [ARGS]\n"
"\n"
"commands:\n"
"  status                    is the broker up, and which version\n"
"  submit --sender R --recipient R --subject S [--id ID] [--body B]\n"
"         [--priority P] [--risk-level L] [--thread-key K] [--parent T]\n"
"                            create a task (no --id: a legacy call)\n"
"\n"
"The socket is --socket, else $IDEM_SOCKET, else $IDEM_ROOT/.idem/idemd.sock,\n"
"else ./fcop/.idem/idemd.sock.  Exit status: 0 ok, 1 error or conflict,\n"
"2 usage, 3 broker unreachable.\n");
	exit(status);
}

static struct idem_conn *
connect_or_exit(struct idemctl *ctl)
{
	struct idem_error	 err;
	struct idem_conn	*conn;

	if ((conn = idem_connect(ctl->socket_path, &err)) == NULL) {
		fprintf(stderr, "idemctl: broker not reachable: %s\n",
		    err.message);
		exit(IDEMCTL_EXIT_UNREACHABLE);
	}
	return conn;
}

static int
cmd_status(struct idemctl *ctl, int argc, char **argv)
{
	struct idem_error	 err;
	struct idem_hello	 hello;
	struct idem_conn	*conn = connect_or_exit(ctl);

	if (idem_hello(conn, &hello, &err) != 0) {
		fprintf(stderr, "idemctl: hello failed: %s\n", err.message);
		idem_close(conn);
		return err.code == IDEM_E_TRANSPORT ? IDEMCTL_EXIT_UNREACHABLE :
		    IDEMCTL_EXIT_ANSWER;
	}
	if (ctl->json)
		printf("{\"server\":\"%s\",\"version\":\"%s\",\"protocol\":%d}\n",
		    hello.server, hello.version, hello.protocol);
	else
		printf("%s %s up (protocol %d)\n", hello.server, hello.version,
		    hello.protocol);
	idem_close(conn);
	return 0;
}

static const char *
disposition_name(enum idem_disposition d)
{
	switch (d) {
	case IDEM_CREATED:
		return "created";
	case IDEM_REUSED:
		return "reused";
	case IDEM_CONFLICT:
		return "conflict";
	default:
		return "failed";
	}
}

static int
cmd_submit(struct idemctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		{ "id", required_argument, NULL, 'i' },
		{ "sender", required_argument, NULL, 's' },
		{ "recipient", required_argument, NULL, 'r' },
		{ "subject", required_argument, NULL, 'S' },
		{ "body", required_argument, NULL, 'b' },
		{ "priority", required_argument, NULL, 'p' },
		{ "risk-level", required_argument, NULL, 'l' },
		{ "thread-key", required_argument, NULL, 't' },
		{ "parent", required_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct idem_task	 task;
	struct idem_write_result result;
	struct idem_error	 err;
	struct idem_conn	*conn;
	const char		*id = NULL;
	int			 ch, rc;

	memset(&task, 0, sizeof task);
	optind = 1;
	while ((ch = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (ch) {
		case 'i': id = optarg; break;
		case 's': task.sender = optarg; break;
		case 'r': task.recipient = optarg; break;
		case 'S': task.subject = optarg; break;
		case 'b': task.body = optarg; break;
		case 'p': task.priority = optarg; break;
		case 'l': task.risk_level = optarg; break;
		case 't': task.thread_key = optarg; break;
		case 'P': task.parent = optarg; break;
		case 'h': usage(stdout, 0); break;
		default: usage(stderr, IDEMCTL_EXIT_USAGE);
		}
	}
	if (optind != argc || task.sender == NULL || task.recipient == NULL ||
	    task.subject == NULL) {
		fprintf(stderr, "idemctl submit: --sender, --recipient and "
		    "--subject are required\n");
		return IDEMCTL_EXIT_USAGE;
	}
	conn = connect_or_exit(ctl);
	rc = idem_write_task(conn, id, &task, &result, &err);
	idem_close(conn);
	if (rc != 0) {
		fprintf(stderr, "idemctl submit: %s%s%s\n", err.message,
		    err.field[0] != '\0' ? " field " : "", err.field);
		return err.code == IDEM_E_TRANSPORT ? IDEMCTL_EXIT_UNREACHABLE :
		    IDEMCTL_EXIT_ANSWER;
	}
	if (ctl->json) {
		printf("{\"disposition\":\"%s\",\"receipt\":%s}\n",
		    disposition_name(result.disposition),
		    result.disposition == IDEM_CONFLICT ? "null" :
		    result.receipt.raw);
	} else if (result.disposition == IDEM_CONFLICT)
		printf("conflict (%s): %s is bound to %s\n", err.reason,
		    id, result.existing_task_id);
	else
		printf("%s%s: %s (action_taken %s)\n",
		    disposition_name(result.disposition),
		    result.recovered ? ", recovered" : "",
		    result.receipt.task_path,
		    result.action_taken ? "true" : "false");
	return result.disposition == IDEM_CONFLICT ? IDEMCTL_EXIT_ANSWER : 0;
}

int
main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct idemctl	ctl = { NULL, 0 };
	int		ch;

	/* Options before the command only; the command parses the rest. */
	while ((ch = getopt_long(argc, argv, "+", options, NULL)) != -1) {
		switch (ch) {
		case 's': ctl.socket_path = optarg; break;
		case 'j': ctl.json = 1; break;
		case 'h': usage(stdout, 0); break;
		default: usage(stderr, IDEMCTL_EXIT_USAGE);
		}
	}
	if (optind >= argc)
		usage(stderr, IDEMCTL_EXIT_USAGE);
	argc -= optind;
	argv += optind;
	if (strcmp(argv[0], "status") == 0)
		return cmd_status(&ctl, argc, argv);
	if (strcmp(argv[0], "submit") == 0)
		return cmd_submit(&ctl, argc, argv);
	fprintf(stderr, "idemctl: unknown command \"%s\"\n", argv[0]);
	usage(stderr, IDEMCTL_EXIT_USAGE);
}
