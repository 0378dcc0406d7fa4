/* SPDX-License-Identifier: ISC */
/*
 * log.c: logging.  The destination and level are set once at start-up
 * (and the file reopened on SIGHUP, from the event loop); everything else
 * is per call, so workers and the journaling and file threads can log
 * without locks (stdio locks each line; a reopen swaps fd 2 in one dup2).
 *
 * Each line has a syslog priority.  On stderr it is shown as a "<N>"
 * prefix only when stderr is the journal: systemd sets JOURNAL_STREAM
 * to the device and inode of the stream it gives a service, and a
 * stderr with those is the journal, which takes the prefix as the
 * line's priority (sd-daemon(3)).  A terminal or a file gets none.
 */
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "log.h"

#define LOG_FILE_MODE	0640

static struct {
	const char	*program;
	int		 level;		/* lines above it are dropped */
	int		 journal;	/* stderr is the journal: "<N>" */
	int		 syslog;
	const char	*path;		/* --log-file; NULL: stderr as given */
} log_state = { "idem", LOG_INFO, 0, 0, NULL };

/* Is stderr the stream systemd's JOURNAL_STREAM names? */
static int
log_stderr_is_journal(void)
{
	const char		*env = getenv("JOURNAL_STREAM");
	unsigned long long	 dev, ino;
	struct stat		 st;
	char			 end;

	if (env == NULL || sscanf(env, "%llu:%llu%c", &dev, &ino, &end) != 2)
		return 0;
	if (fstat(STDERR_FILENO, &st) == -1)
		return 0;
	return (unsigned long long)st.st_dev == dev &&
	    (unsigned long long)st.st_ino == ino;
}

void
log_init(const char *program)
{
	log_state.program = program;
	if (getenv("IDEM_DEBUG") != NULL)
		log_state.level = LOG_DEBUG;
	log_state.journal = log_stderr_is_journal();
}

int
log_set_level(const char *name)
{
	static const struct {
		const char	*name;
		int		 level;
	} levels[] = {
		{ "error", LOG_ERR }, { "warning", LOG_WARNING },
		{ "notice", LOG_NOTICE }, { "info", LOG_INFO },
		{ "debug", LOG_DEBUG }
	};
	size_t	i;

	for (i = 0; i < sizeof levels / sizeof levels[0]; i++) {
		if (strcmp(name, levels[i].name) == 0) {
			log_state.level = levels[i].level;
			return 0;
		}
	}
	return -1;
}

/* Open path for appending and make it stderr (fd 2). */
static int
log_point_stderr(const char *path, char **cause)
{
	int	fd;

	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY,
	    LOG_FILE_MODE);
	if (fd == -1) {
		if (asprintf(cause, "log file %s: %s", path,
		    strerror(errno)) == -1)
			*cause = NULL;
		return -1;
	}
	fflush(stderr);
	if (dup2(fd, STDERR_FILENO) == -1) {
		if (asprintf(cause, "log file %s: dup2: %s", path,
		    strerror(errno)) == -1)
			*cause = NULL;
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

int
log_open_file(const char *path, char **cause)
{
	if (log_point_stderr(path, cause) != 0)
		return -1;
	log_state.path = path;
	log_state.journal = 0;
	return 0;
}

int
log_reopen(char **cause)
{
	if (log_state.path == NULL)
		return 0;
	return log_point_stderr(log_state.path, cause);
}

void
log_use_syslog(void)
{
	openlog(log_state.program, LOG_PID | LOG_NDELAY, LOG_DAEMON);
	log_state.syslog = 1;
}

static void __attribute__((format(printf, 5, 0)))
log_vline(int priority, const char *level, int with_errno, int saved_errno,
    const char *fmt, va_list ap)
{
	char	message[1024], prefix[8] = "";

	if (priority > log_state.level)
		return;
	vsnprintf(message, sizeof message, fmt, ap);
	if (log_state.syslog) {
		if (with_errno)
			syslog(priority, "%s%s: %s", level, message,
			    strerror(saved_errno));
		else
			syslog(priority, "%s%s", level, message);
		return;
	}
	if (log_state.journal)
		snprintf(prefix, sizeof prefix, "<%d>", priority);
	if (with_errno)
		fprintf(stderr, "%s%s[%ld]: %s%s: %s\n", prefix,
		    log_state.program, (long)getpid(), level, message,
		    strerror(saved_errno));
	else
		fprintf(stderr, "%s%s[%ld]: %s%s\n", prefix, log_state.program,
		    (long)getpid(), level, message);
}

void
log_warn(const char *fmt, ...)
{
	int	saved_errno = errno;
	va_list	ap;

	va_start(ap, fmt);
	log_vline(LOG_WARNING, "warning: ", 1, saved_errno, fmt, ap);
	va_end(ap);
	errno = saved_errno;
}

void
log_warnx(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	log_vline(LOG_WARNING, "warning: ", 0, 0, fmt, ap);
	va_end(ap);
}

void
log_notice(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	log_vline(LOG_NOTICE, "", 0, 0, fmt, ap);
	va_end(ap);
}

void
log_info(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	log_vline(LOG_INFO, "", 0, 0, fmt, ap);
	va_end(ap);
}

void
log_debug(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	log_vline(LOG_DEBUG, "debug: ", 0, 0, fmt, ap);
	va_end(ap);
}

void
fatal(const char *fmt, ...)
{
	int	saved_errno = errno;
	va_list	ap;

	va_start(ap, fmt);
	log_vline(LOG_ERR, "fatal: ", 1, saved_errno, fmt, ap);
	va_end(ap);
	exit(1);
}

void
fatalx(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	log_vline(LOG_ERR, "fatal: ", 0, 0, fmt, ap);
	va_end(ap);
	exit(1);
}
