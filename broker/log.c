/*
 * log.c: stderr logging.  The program name is the only state, set once
 * at start-up; everything else is per call, so workers and the
 * journaling thread can log without locks (stdio locks each line).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

static struct {
	const char	*program;
	int		 debug;
} log_state = { "idem", 0 };

void
log_init(const char *program)
{
	log_state.program = program;
	log_state.debug = getenv("IDEM_DEBUG") != NULL;
}

static void __attribute__((format(printf, 4, 0)))
log_vline(const char *level, int with_errno, int saved_errno,
    const char *fmt, va_list ap)
{
	char	message[1024];

	vsnprintf(message, sizeof message, fmt, ap);
	if (with_errno)
		fprintf(stderr, "%s[%ld]: %s%s: %s\n", log_state.program,
		    (long)getpid(), level, message, strerror(saved_errno));
	else
		fprintf(stderr, "%s[%ld]: %s%s\n", log_state.program,
		    (long)getpid(), level, message);
}

void
log_warn(const char *fmt, ...)
{
	int	saved_errno = errno;
	va_list	ap;

	va_start(ap, fmt);
	log_vline("warning: ", 1, saved_errno, fmt, ap);
	va_end(ap);
	errno = saved_errno;
}

void
log_warnx(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	log_vline("warning: ", 0, 0, fmt, ap);
	va_end(ap);
}

void
log_info(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	log_vline("", 0, 0, fmt, ap);
	va_end(ap);
}

void
log_debug(const char *fmt, ...)
{
	va_list	ap;

	if (!log_state.debug)
		return;
	va_start(ap, fmt);
	log_vline("debug: ", 0, 0, fmt, ap);
	va_end(ap);
}

void
fatal(const char *fmt, ...)
{
	int	saved_errno = errno;
	va_list	ap;

	va_start(ap, fmt);
	log_vline("fatal: ", 1, saved_errno, fmt, ap);
	va_end(ap);
	exit(1);
}

void
fatalx(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	log_vline("fatal: ", 0, 0, fmt, ap);
	va_end(ap);
	exit(1);
}
