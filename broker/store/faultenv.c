/* SPDX-License-Identifier: ISC */
/*
 * faultenv.c: the environment variables of fault injection (crash.c),
 * known in every build.  A build without fault injection has no crash
 * points; one of these variables set by accident there must not be
 * silently ignored either (it was meant for a test build, or it is in a
 * unit file by mistake), so idemd refuses to start, naming it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"

static int
faultenv_is_ours(const char *entry, size_t name_length)
{
	static const char	crash[] = "IDEM_CRASH_";
	static const char	spawn[] = "IDEM_SPAWN_DELAY_MS";

	if (name_length > sizeof crash - 1 &&
	    strncmp(entry, crash, sizeof crash - 1) == 0)
		return 1;
	return name_length == sizeof spawn - 1 &&
	    strncmp(entry, spawn, sizeof spawn - 1) == 0;
}

const char *
faultenv_find(char *const *env, char *name, size_t name_size)
{
	size_t	n;

	for (; env != NULL && *env != NULL; env++) {
		n = strcspn(*env, "=");
		if ((*env)[n] != '=' || !faultenv_is_ours(*env, n))
			continue;
		snprintf(name, name_size, "%.*s", (int)n, *env);
		return *env;
	}
	return NULL;
}

int
faultenv_refuse(char *const *env, char **cause)
{
	char	name[64];

	if (faultenv_find(env, name, sizeof name) == NULL)
		return 0;
	if (asprintf(cause, "%s is set, but this idemd has no fault "
	    "injection (it is for tests: configure "
	    "--enable-fault-injection); unset %s", name, name) == -1)
		*cause = NULL;
	return -1;
}
