/* SPDX-License-Identifier: ISC */
/*
 * proxy_lines.c: the lines of idem-mcp proxy's two readers.  It owns
 * reading a side's stream into newline-delimited messages, at most
 * proxy_cfg.max_line_bytes each (a longer line dropped, the stream kept
 * in step, the buffer given back after a long line), and the scan of a
 * line that is not JSON for an answer to a request of the proxy's own
 * (its id, "id":"io.idem/proxy/N", at the message's top level), handed
 * to proxy.c's waiting request (proxy_deliver), or, in a client's line,
 * for its id (proxy_unreadable_id); and the reading of a line as JSON
 * (proxy_json_load), loosely where jansson refuses U+0000 in a key.
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
	int		 escaped;	/* the byte before was a string's \\ */
	int		 top;		/* the message's depth: 2 in a batch */
};

/* The scan moved over one byte. */
static void
proxy_scan_byte(struct proxy_scan *scan, char c)
{
	if (scan->escaped)
		scan->escaped = 0;
	else if (scan->in_string) {
		if (c == '\\')
			scan->escaped = 1;
		else if (c == '"')
			scan->in_string = 0;
	} else if (c == '"')
		scan->in_string = 1;
	else if (c == '{' || c == '[')
		scan->depth++;
	else if (c == '}' || c == ']')
		scan->depth--;
}

/*
 * Move the scan on to p; 1 if p opens a string at the message's top
 * level (depth 1, or 2 in a batch; not inside a string or escaped), so
 * that an object with such an id nested in the line (a notification's
 * data) is not taken for the answer of a request of ours.
 */
static int
proxy_scan_top_level(struct proxy_scan *scan, const char *p)
{
	for (; scan->at < p; scan->at++)
		proxy_scan_byte(scan, *scan->at);
	return !scan->in_string && scan->depth == scan->top;
}

static int	proxy_answer_scan(const char *, size_t, size_t, const char *,
		    struct proxy_scan *);

/* The depth of a line's messages: 2 in a batch (2025-03-26 has them). */
static int
proxy_scan_top(const char *line, size_t length)
{
	const char	*q, *end = line + length;

	for (q = line; q < end && (*q == ' ' || *q == '\t' || *q == '\r'); q++)
		;
	return q < end && *q == '[' ? 2 : 1;
}

int
proxy_unreadable_answer(const char *line, size_t length, const char *what)
{
	struct proxy_scan	 scan = { line, 0, 0, 0, 1 };

	scan.top = proxy_scan_top(line, length);
	return proxy_answer_scan(line, length, length, what, &scan);
}

/*
 * As proxy_unreadable_answer, from scan (at line, its state there: the
 * bytes before line were scanned already); total: the line's length,
 * for the log.
 */
static int
proxy_answer_scan(const char *line, size_t length, size_t total,
    const char *what, struct proxy_scan *scan)
{
	static const char	 id_member[] = "\"id\"";
	const size_t		 id_length = strlen(id_member);
	const char		*end = line + length, *p = line, *q, *b;
	const char		*digits;
	char			 key[64];

	while ((p = memmem(p, (size_t)(end - p), "\"" PROXY_ID_PREFIX,
	    strlen(PROXY_ID_PREFIX) + 1)) != NULL) {
		if (!proxy_scan_top_level(scan, p)) {
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
			    what, total, key, proxy_deliver(key,
			    json_object()) ? "taken for that request" :
			    "no request waits for it, dropped");
			return 1;
		}
		p++;
	}
	return 0;
}

/* ---- a line as JSON ---------------------------------------------------- */

json_t *
proxy_json_load(const char *line, size_t length, size_t flags, int *loose)
{
	json_error_t	 error;
	json_t		*value;
	char		*copy;
	size_t		 i;

	*loose = 0;
	value = json_loadb(line, length, flags | JSON_ALLOW_NUL, &error);
	if (value != NULL ||
	    json_error_code(&error) != json_error_null_byte_in_key)
		return value;
	/*
	 * JSON_ALLOW_NUL reads U+0000 in strings but not in keys, whatever
	 * the flags.  Read loosely, each \u0000 made \uFFFD, the line says
	 * what it is (a call, an answer, its id), never what it holds.  A
	 * \u0000 is an escape only where its backslash is not itself
	 * escaped (\\u0000 is a backslash and u0000); backslashes are
	 * found only in the strings of a line that is JSON.
	 */
	if ((copy = malloc(length)) == NULL)
		return NULL;
	memcpy(copy, line, length);
	for (i = 0; i + 1 < length; i++)
		if (copy[i] == '\\') {
			if (copy[i + 1] == 'u' && i + 5 < length &&
			    memcmp(copy + i + 2, "0000", 4) == 0)
				memcpy(copy + i + 2, "FFFD", 4);
			i++;	/* the escaped character */
		}
	value = json_loadb(copy, length, flags | JSON_ALLOW_NUL, NULL);
	free(copy);
	*loose = value != NULL;
	return value;
}

json_t *
proxy_unreadable_id(const char *line, size_t length)
{
	struct proxy_scan	 scan = { line, 0, 0, 0, 1 };
	const char		*end = line + length, *p = line, *v, *q;
	json_t			*id;

	if (proxy_scan_top(line, length) != 1)
		return NULL;	/* a batch: no one id */
	while ((p = memmem(p, (size_t)(end - p), "\"id\"", 4)) != NULL) {
		if (!proxy_scan_top_level(&scan, p)) {
			p++;
			continue;
		}
		/* A member's name: a colon after it, then its value. */
		for (v = p + 4; v < end && (*v == ' ' || *v == '\t'); v++)
			;
		if (v == end || *v != ':') {
			p++;
			continue;
		}
		for (v++; v < end && (*v == ' ' || *v == '\t'); v++)
			;
		q = v;
		if (q < end && *q == '"') {
			for (q++; q < end && *q != '"'; q++)
				if (*q == '\\' && q + 1 < end)
					q++;
			if (q == end)
				return NULL;
			q++;	/* the closing quote */
		} else
			while (q < end && ((*q >= '0' && *q <= '9') ||
			    *q == '-' || *q == '+' || *q == '.' || *q == 'e' ||
			    *q == 'E'))
				q++;
		if (q == v)
			return NULL;	/* null, or not a value */
		id = json_loadb(v, (size_t)(q - v), JSON_DECODE_ANY, NULL);
		if (json_is_string(id) || json_is_integer(id))
			return id;
		json_decref(id);
		return NULL;
	}
	return NULL;
}

/*
 * The end of a line being dropped, kept as it goes by: an answer whose
 * id comes last (the TypeScript SDK writes {result, jsonrpc, id}) has it
 * in its last bytes, long after the first ones shown to dropped.  The
 * scan's state (depth, in a string, escaped) runs on over all of it.
 */
#define PROXY_TAIL_BYTES	64
struct proxy_tail {
	struct proxy_scan	 scan;	/* its state at bytes[0] */
	char			 bytes[2 * PROXY_TAIL_BYTES];
	size_t			 n, total;
};

static void
proxy_tail_feed(struct proxy_tail *tail, const char *data, size_t n)
{
	size_t	 i, take;

	tail->total += n;
	while (n > 0) {
		if (tail->n == sizeof tail->bytes) {
			for (i = 0; i < PROXY_TAIL_BYTES; i++)
				proxy_scan_byte(&tail->scan, tail->bytes[i]);
			memmove(tail->bytes, tail->bytes + PROXY_TAIL_BYTES,
			    PROXY_TAIL_BYTES);
			tail->n = PROXY_TAIL_BYTES;
		}
		take = sizeof tail->bytes - tail->n;
		if (take > n)
			take = n;
		memcpy(tail->bytes + tail->n, data, take);
		tail->n += take;
		data += take;
		n -= take;
	}
}

/* The dropped line has ended: is its end an answer of ours? */
static void
proxy_tail_end(struct proxy_tail *tail)
{
	tail->scan.at = tail->bytes;
	(void)proxy_answer_scan(tail->bytes, tail->n, tail->total,
	    "over the line limit", &tail->scan);
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
 * after dropped (may be NULL) has seen what was read of it; with
 * dropped, its last bytes are scanned for an answer of ours too
 * (struct proxy_tail), once its newline, or the end, comes.
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
	struct proxy_tail tail;

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
				memset(&tail, 0, sizeof tail);
				tail.scan.top = proxy_scan_top(buf, length);
				proxy_tail_feed(&tail, buf, length);
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
			else if (skipping && dropped != NULL) {
				proxy_tail_feed(&tail, buf + start, n);
				proxy_tail_end(&tail);
			}
			skipping = 0;
			start += line + 1;
			p = nl + 1;
		}
		/* Still in a line being dropped: none of it is kept. */
		if (skipping)
			proxy_tail_feed(&tail, buf + start, length - start);
		length = skipping ? 0 : length - start;
		memmove(buf, buf + start, length);
		if (size > PROXY_BUFFER_BYTES &&
		    length <= PROXY_BUFFER_BYTES / 2 &&
		    (p = realloc(buf, PROXY_BUFFER_BYTES)) != NULL) {
			buf = p;
			size = PROXY_BUFFER_BYTES;
		}
	}
	if (skipping && dropped != NULL)
		proxy_tail_end(&tail);
	else if (length > max && !skipping)
		proxy_line_dropped(side, dropped, buf, length);
	else if (length > 0 && !skipping)
		handle(buf, length);
	free(buf);
}
