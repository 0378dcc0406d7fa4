/* SPDX-License-Identifier: ISC */
/*
 * fuzz_log.c: broker/log.h for fuzz_request, silent: the broker's
 * files it compiles log what they refuse, which under a fuzzer is most
 * runs; the invariants are checked on return values, not on what is
 * logged.
 * fatal() still stops the run: the fuzzer reports it as a crash.
 */
#include <stdio.h>
#include <stdlib.h>

#include "log.h"

void
log_init(const char *program)
{
}

void
log_warn(const char *fmt, ...)
{
}

void
log_warnx(const char *fmt, ...)
{
}

void
log_info(const char *fmt, ...)
{
}

void
log_debug(const char *fmt, ...)
{
}

void
fatal(const char *fmt, ...)
{
	fprintf(stderr, "fuzz: fatal() called: %s\n", fmt);
	abort();
}

void
fatalx(const char *fmt, ...)
{
	fprintf(stderr, "fuzz: fatalx() called: %s\n", fmt);
	abort();
}
