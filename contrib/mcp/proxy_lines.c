/* SPDX-License-Identifier: ISC */
/*
 * proxy_lines.c: the lines of idem-mcp proxy's two readers.  It owns
 * reading a side's stream into newline-delimited messages, at most
 * proxy_cfg.max_line_bytes each (a longer line dropped, the stream kept
 * in step, the buffer given back after a long line), and the scan of a
 * line that is not JSON for an answer to a request of the proxy's own
 * (its id, "id":"io.idem/proxy/N", at the message's top level), handed
 * to proxy.c's waiting request (proxy_deliver).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "proxy.h"

#define PROXY_READ_BYTES	65536
#define PROXY_BUFFER_BYTES	(4 * PROXY_READ_BYTES)	/* a reader's usual room */

/*
 * A line that is not JSON (a raw NUL or control byte, invalid UTF-8, half
 * a line before the server died, a line over the limit: what is) but
 * that answers a request of ours, found by its id,
 * "id":"io.idem/proxy/N", in the bytes.  Passed on, it would give the
 * client an answer to a request it never sent, and leave our request
 * waiting for ever (a wrapped call's lease kept alive, its client
 * unanswered): its request is handed an empty message instead, which a
 * wrapped call answers as a server's answer it cannot read.  One that
 * no request waits for any more (a late answer) is dropped, as a JSON
 * one is.  1 if the id was one of ours (the line is not the client's).
 */
/* Where a scan of a line that may not be JSON stands. */
struct proxy_scan {
	const char	*at;
	int		 depth;		/* objects and arrays open */
	int		 in_string;
	int		 top;		/* the message's depth: 2 in a batch */
};

/*
 * Move the scan on to p; 1 if p opens a string at the message's top
 * level (depth 1, or 2 in a batch; not inside a string or escaped), so
 * that an object with such an id nested in the line (a notification's
 * data) is not taken for the answer of a request of ours.
 */
static int
proxy_scan_top_level(struct proxy_scan *scan, const char *p)
{
	for (; scan->at < p; scan->at++) {
		if (scan->in_string) {
			if (*scan->at == '\\')
				scan->at++;	/* and the byte it escapes */
			else if (*scan->at == '"')
				scan->in_string = 0;
		} else if (*scan->at == '"')
			scan->in_string = 1;
		else if (*scan->at == '{' || *scan->at == '[')
			scan->depth++;
		else if (*scan->at == '}' || *scan->at == ']')
			scan->depth--;
	}
	return scan->at == p && !scan->in_string && scan->depth == scan->top;
}

int
proxy_unreadable_answer(const char *line, size_t length, const char *what)
{
	static const char	 id_member[] = "\"id\"";
	const size_t		 id_length = strlen(id_member);
	const char		*end = line + length, *p = line, *q, *b;
	const char		*digits;
	struct proxy_scan	 scan = { line, 0, 0, 1 };
	char			 key[64];

	/* A batch's messages are one deeper (2025-03-26 has batches). */
	for (q = line; q < end && (*q == ' ' || *q == '\t' || *q == '\r'); q++)
		;
	if (q < end && *q == '[')
		scan.top = 2;

	while ((p = memmem(p, (size_t)(end - p), "\"" PROXY_ID_PREFIX,
	    strlen(PROXY_ID_PREFIX) + 1)) != NULL) {
		if (!proxy_scan_top_level(&scan, p)) {
			p++;
			continue;
		}
		/* p: the string's opening quote; q: its closing one. */
		digits = p + 1 + strlen(PROXY_ID_PREFIX);
		for (q = digits; q < end && *q >= '0' && *q <= '9'; q++)
			;
		/* Before it, the member's name: "id" : (blanks allowed). */
		for (b = p; b > line && (b[-1] == ' ' || b[-1] == '\t'); b--)
			;
		if (b > line && b[-1] == ':')
			for (b--; b > line && (b[-1] == ' ' || b[-1] == '\t');
			    b--)
				;
		else
			b = NULL;
		if (q > digits && q < end && *q == '"' &&
		    (size_t)(q - p) + 2 <= sizeof key && b != NULL &&
		    (size_t)(b - line) >= id_length &&
		    memcmp(b - id_length, id_member, id_length) == 0) {
			memcpy(key, p, (size_t)(q - p) + 1);
			key[q - p + 1] = '\0';
			proxy_log("server: an answer %s (%zu bytes) to %s: %s",
			    what, length, key, proxy_deliver(key,
			    json_object()) ? "taken for that request" :
			    "no request waits for it, dropped");
			return 1;
		}
		p++;
	}
	return 0;
}

/* A line over the limit: said, and shown to dropped (may be NULL). */
static void
proxy_line_dropped(const char *side, void (*dropped)(const char *, size_t),
    const char *line, size_t length)
{
	proxy_log("%s: a line over %zu bytes dropped", side,
	    proxy_cfg.max_line_bytes);
	if (dropped != NULL)
		dropped(line, length);
}

/*
 * Read fd to its end, one message per line; a line longer than the
 * limit is dropped (with a word on stderr) so the stream stays in step,
 * after dropped (may be NULL) has seen what was read of it.
 * The buffer grows for a long line, to the limit and no further, and is
 * given back once that line is handled: one large answer (a file read)
 * must not hold its size for the rest of the process's life, and a
 * line being dropped is not kept at all.
 */
void
proxy_read_lines(int fd, const char *side, void (*handle)(char *, size_t),
    void (*dropped)(const char *, size_t))
{
	const size_t	 max = proxy_cfg.max_line_bytes;
	char		*buf = NULL, *nl, *p;
	size_t		 length = 0, size = 0, start, line, n;
	ssize_t		 r;
	int		 skipping = 0;

	for (;;) {
		/*
		 * A line of exactly the limit and its CR may wait for its
		 * LF in the next read: one byte more is let in for it.
		 */
		if (size - length < PROXY_READ_BYTES && !(length == max + 1 &&
		    buf[length - 1] == '\r')) {
			if (size >= max + PROXY_READ_BYTES) {
				/* Over the limit before its newline came. */
				proxy_line_dropped(side, dropped, buf, length);
				skipping = 1;
				length = 0;
			} else {
				size = size == 0 ? PROXY_BUFFER_BYTES :
				    size * 2;
				if (size > max + PROXY_READ_BYTES)
					size = max + PROXY_READ_BYTES;
				if ((p = realloc(buf, size)) == NULL) {
					proxy_log("%s: out of memory", side);
					break;
				}
				buf = p;
			}
		}
		r = read(fd, buf + length, size - length);
		if (r == -1 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == -1)
				proxy_log("%s: %s", side, strerror(errno));
			break;
		}
		start = 0;
		/* Look for newlines only in what just came in. */
		p = buf + length;
		length += (size_t)r;
		while ((nl = memchr(p, '\n', length - (size_t)(p - buf))) !=
		    NULL) {
			line = (size_t)(nl - (buf + start));
			n = line > 0 && buf[start + line - 1] == '\r' ?
			    line - 1 : line;
			/*
			 * Up to a read past the limit comes in before the
			 * check above: a line is measured here too, so that
			 * the limit is exact.
			 */
			if (!skipping && n > max)
				proxy_line_dropped(side, dropped, buf + start,
				    n);
			else if (!skipping && n > 0)
				handle(buf + start, n);
			skipping = 0;
			start += line + 1;
			p = nl + 1;
		}
		/* Still in a line being dropped: none of it is kept. */
		length = skipping ? 0 : length - start;
		memmove(buf, buf + start, length);
		if (size > PROXY_BUFFER_BYTES &&
		    length <= PROXY_BUFFER_BYTES / 2 &&
		    (p = realloc(buf, PROXY_BUFFER_BYTES)) != NULL) {
			buf = p;
			size = PROXY_BUFFER_BYTES;
		}
	}
	if (length > max && !skipping)
		proxy_line_dropped(side, dropped, buf, length);
	else if (length > 0 && !skipping)
		handle(buf, length);
	free(buf);
}
