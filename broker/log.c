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
 *
 * On a terminal or in a file (--log-file, or a stderr the caller
 * redirected) each line starts with its time, RFC 3339 in UTC with
 * milliseconds (2026-12-05T01:02:03.456Z): the journal and syslog stamp
 * lines themselves, and get none.
 *
 * Every message is escaped (log_escape) in the one function that
 * formats a line, whatever its destination: a message carries what
 * clients sent (ids, kinds, an effect's evidence source), and a newline,
 * a carriage return or an escape sequence in it would let a client write
 * a line of its own, or rewrite one on a terminal, into what may be the
 * only record of an effect's evidence.  No call site has to remember.
 */
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
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

/*
 * One code point of valid UTF-8 at in (len bytes left): its length, or 0
 * if the bytes there are not one (overlong, a surrogate, past U+10FFFF,
 * cut short).  *cp is the code point.
 */
static size_t
log_utf8(const unsigned char *in, size_t len, unsigned *cp)
{
	size_t		n, i;
	unsigned	c = in[0], min;

	if (c >= 0xc2 && c <= 0xdf) {
		n = 2;
		c &= 0x1f;
		min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		c &= 0x0f;
		min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		c &= 0x07;
		min = 0x10000;
	} else
		return 0;
	if (len < n)
		return 0;
	for (i = 1; i < n; i++) {
		if ((in[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (in[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return n;
}

/*
 * Code points shown escaped although valid: the C1 controls (a terminal
 * may take U+009B as CSI), the line and paragraph separators some
 * viewers break lines at, and the bidirectional controls that make a
 * line read otherwise than its bytes (CVE-2021-42574).
 */
static int
log_unsafe_code_point(unsigned cp)
{
	return (cp >= 0x80 && cp <= 0x9f) || cp == 0x61c ||
	    cp == 0x200e || cp == 0x200f || (cp >= 0x2028 && cp <= 0x202e) ||
	    (cp >= 0x2066 && cp <= 0x2069) || cp == 0xfeff;
}

size_t
log_escape(char *out, size_t size, const char *in, size_t len)
{
	const unsigned char	*p = (const unsigned char *)in;
	char			 piece[16];
	size_t			 used = 0, i = 0, n, k;
	unsigned		 cp;

	if (size == 0)
		return 0;
	while (i < len) {
		n = 1;
		if (p[i] == '\\')
			k = (size_t)snprintf(piece, sizeof piece, "\\\\");
		else if (p[i] == '\n')
			k = (size_t)snprintf(piece, sizeof piece, "\\n");
		else if (p[i] == '\r')
			k = (size_t)snprintf(piece, sizeof piece, "\\r");
		else if (p[i] == '\t')
			k = (size_t)snprintf(piece, sizeof piece, "\\t");
		else if (p[i] < 0x20 || p[i] == 0x7f)
			k = (size_t)snprintf(piece, sizeof piece, "\\x%02x",
			    p[i]);
		else if (p[i] < 0x80) {
			piece[0] = (char)p[i];
			k = 1;
		} else if ((n = log_utf8(p + i, len - i, &cp)) == 0) {
			n = 1;
			k = (size_t)snprintf(piece, sizeof piece, "\\x%02x",
			    p[i]);
		} else if (log_unsafe_code_point(cp))
			k = (size_t)snprintf(piece, sizeof piece, "\\u%04x",
			    cp);
		else {
			memcpy(piece, p + i, n);
			k = n;
		}
		/* Whole pieces only: never half an escape or a character. */
		if (used + k >= size)
			break;
		memcpy(out + used, piece, k);
		used += k;
		i += n;
	}
	out[used] = '\0';
	return used;
}

/* "2026-12-05T01:02:03.456Z " in buf: now, in UTC ("" if unknown). */
static void
log_stamp(char *buf, size_t size)
{
	struct timespec	ts;
	struct tm	tm;
	size_t		n;

	buf[0] = '\0';
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0 ||
	    gmtime_r(&ts.tv_sec, &tm) == NULL)
		return;
	n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
	if (n == 0)
		return;
	snprintf(buf + n, size - n, ".%03ldZ ", ts.tv_nsec / 1000000L);
}

static void __attribute__((format(printf, 5, 0)))
log_vline(int priority, const char *level, int with_errno, int saved_errno,
    const char *fmt, va_list ap)
{
	char	raw[1024], message[4 * sizeof raw], prefix[40] = "";
	int	n;

	if (priority > log_state.level)
		return;
	n = vsnprintf(raw, sizeof raw, fmt, ap);
	if (n < 0)
		n = 0;
	log_escape(message, sizeof message, raw,
	    (size_t)n < sizeof raw ? (size_t)n : sizeof raw - 1);
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
	else
		log_stamp(prefix, sizeof prefix);
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
