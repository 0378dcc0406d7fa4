/* SPDX-License-Identifier: ISC */
/*
 * log.h: logging for idemd (shm/ and the store log nothing: they return
 * causes, and main.c's hooks log what they say).  One line per
 * event, prefixed with its time (RFC 3339, UTC, milliseconds; not on the
 * journal or syslog, which stamp lines themselves), the program name and
 * pid; log_warn appends
 * strerror(errno).  Lines go to stderr (with a "<N>" syslog priority
 * prefix when stderr is the journal), to a file (--log-file, reopened on
 * SIGHUP) or to syslog (--syslog); those below the level (--log-level,
 * default info; IDEM_DEBUG in the environment: debug) are dropped.
 * A message is escaped (log_escape) before it is written, whatever its
 * destination: it may quote what a client sent.
 */
#ifndef IDEM_LOG_H
#define IDEM_LOG_H

#include <stdarg.h>
#include <stddef.h>

void	log_init(const char *program);
/* "error", "warning", "notice", "info" or "debug"; -1 if none of them. */
int	log_set_level(const char *name);
/* Log to the file at path from now on (stderr is pointed at it). */
int	log_open_file(const char *path, char **cause);
/* The log file again, by its path (after logrotate moved it); 0: none. */
int	log_reopen(char **cause);
/* Log to syslog (facility daemon) from now on. */
void	log_use_syslog(void);
/*
 * in (len bytes, NULs included) as one line of safe text in out (size
 * bytes, NUL-terminated): printable ASCII and valid UTF-8 as they are;
 * a backslash doubled; \n \r \t; other control bytes, DEL and bytes
 * that are not UTF-8 as \xHH; C1 controls, line separators and the
 * bidirectional controls as \uHHHH.  An escape is never cut: what does
 * not fit is dropped whole.  Returns the length written.
 */
size_t	log_escape(char *out, size_t size, const char *in, size_t len);
/* "s" unless n is 1, for counts: "%u worker%s", n, log_plural(n). */
static inline const char *
log_plural(unsigned long long n)
{
	return n == 1 ? "" : "s";
}
void	log_warn(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_warnx(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_notice(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_info(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_debug(const char *, ...) __attribute__((format(printf, 1, 2)));
void	fatal(const char *, ...)
	    __attribute__((format(printf, 1, 2), noreturn));
void	fatalx(const char *, ...)
	    __attribute__((format(printf, 1, 2), noreturn));

#endif
