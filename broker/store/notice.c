/* SPDX-License-Identifier: ISC */
/*
 * notice.c: the store's one way to say something that is not a failure
 * (a temporary file it could not remove, a symlink it leaves alone, what
 * fault injection is armed to do).  The store never logs: failures go
 * back to the caller as a cause, and these notes go to the hook idemd
 * installs at start-up (store_set_notice_hook), which logs them.  Without
 * a hook (idemctl, the tests) they are dropped.
 */
#include <stdarg.h>
#include <stdio.h>

#include "store.h"

static store_notice_fn notice_hook;

void
store_set_notice_hook(store_notice_fn hook)
{
	notice_hook = hook;
}

void
store_notice(enum store_notice_level level, const char *fmt, ...)
{
	char	msg[512];
	va_list	ap;

	if (notice_hook == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	notice_hook(level, msg);
}
