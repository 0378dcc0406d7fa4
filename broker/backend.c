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
#include "storeuri.h"
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

	*cause = NULL;
	for (i = 0; i < sizeof backends / sizeof backends[0]; i++) {
		if (backends[i]->matches(arg)) {
			d->be = backends[i];
			return d->be->configure(d, arg, cause);
		}
	}
	if (!storeuri_is_postgresql(arg)) {
		if (asprintf(cause,
		    "--store must be local or postgresql://...") == -1)
			*cause = NULL;
		return -1;
	}
	/* A PostgreSQL store, and no row for it. */
	if (asprintf(cause,
	    "--store %s: this idemd was built without PostgreSQL; "
	    "configure --with-postgresql (Debian: apt-get install libpq-dev) "
	    "and build again", "postgresql://...") == -1)
		*cause = NULL;
	return -1;
}
