/* SPDX-License-Identifier: ISC */
/*
 * create_task.c: create one FCoP task through idemd, idempotently.
 *
 *	cc create_task.c $(pkg-config --cflags --libs libidem)
 *	IDEM_SOCKET=./fcop/.idem/idemd.sock ./a.out [submission-id]
 *
 * Without an argument it makes a fresh submission id; give the same id
 * again and the broker answers "reused" with the first task instead of
 * creating a second one.
 */
#include <stdio.h>

#include <idem.h>

int
main(int argc, char *argv[])
{
	struct idem_task	 task = { .sender = "PM", .recipient = "DEV",
				    .subject = "Fix login",
				    .body = "Steps:\n1. reproduce\n2. fix\n" };
	struct idem_write_result r;
	struct idem_error	 err;
	char			 fresh[IDEM_SUBMISSION_ID_SIZE];
	const char		*id = argc > 1 ? argv[1] : fresh;

	if (argc <= 1 && idem_submission_id_new(fresh) != 0)
		return 1;
	/* NULL: $IDEM_SOCKET, else $IDEM_ROOT/.idem/idemd.sock; default policy. */
	if (idem_write_task_retry(NULL, id, &task, NULL, &r, &err) != 0 ||
	    r.disposition == IDEM_CONFLICT) {
		fprintf(stderr, "create_task: %s (after %u tries)\n",
		    err.message, r.attempts);
		return 1;
	}
	printf("%s %s %s\n", r.disposition == IDEM_CREATED ? "created" :
	    "reused", r.receipt.task_id, id);
	return 0;
}
