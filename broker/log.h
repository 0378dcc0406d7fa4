/*
 * log.h: logging to stderr for idemd and its internal libraries.  One
 * line per event, prefixed with the program name and pid; log_warn
 * appends strerror(errno).  Debug lines only with IDEM_DEBUG set.
 */
#ifndef IDEM_LOG_H
#define IDEM_LOG_H

#include <stdarg.h>

void	log_init(const char *program);
void	log_warn(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_warnx(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_info(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_debug(const char *, ...) __attribute__((format(printf, 1, 2)));
void	fatal(const char *, ...)
	    __attribute__((format(printf, 1, 2), noreturn));
void	fatalx(const char *, ...)
	    __attribute__((format(printf, 1, 2), noreturn));

#endif
