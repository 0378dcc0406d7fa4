/* SPDX-License-Identifier: ISC */
/*
 * backend.c: the table of backends and the choice among them
 * (backend_select), once at start-up in the master and in each worker.
 * The only file of broker/ that names both backends; the table's
 * PostgreSQL row is the only HAVE_POSTGRESQL it needs.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idemd.h"
#include "backend.h"
#include "local/local.h"
#ifdef HAVE_POSTGRESQL
#include "pg/pg_backend.h"
#endif

static const struct backend *const backends[] = {
	&local_backend,
#ifdef HAVE_POSTGRESQL
	&pg_backend,
#endif
};

int
backend_vfail(struct backend_error *err, enum wire_error code, int retryable,
    const char *fmt, va_list ap)
{
	err->code = code;
	err->retryable = retryable;
	vsnprintf(err->message, sizeof err->message, fmt, ap);
	return -1;
}

int
backend_fail(struct backend_error *err, enum wire_error code, int retryable,
    const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	backend_vfail(err, code, retryable, fmt, ap);
	va_end(ap);
	return -1;
}

int
backend_select(struct idemd *d, const char *arg, char **cause)
{
	size_t	i;

	for (i = 0; i < sizeof backends / sizeof backends[0]; i++) {
		if (backends[i]->matches(arg)) {
			d->be = backends[i];
			return 0;
		}
	}
	/* main.c's store_options refused it first (until G4 moves it here). */
	if (asprintf(cause, "--store %s: no backend", arg != NULL ? arg :
	    "local") == -1)
		*cause = NULL;
	return -1;
}
