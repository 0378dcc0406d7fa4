/* SPDX-License-Identifier: ISC */
/*
 * proxy_lines.c: the lines of idem-mcp proxy's two readers.  It owns
 * reading a side's stream into newline-delimited messages, at most
 * proxy_cfg.max_line_bytes each (a longer line dropped, the stream kept
 * in step, the buffer given back after a long line), and the scan of a
 * line that is not JSON for an answer to a request of the proxy's own
 * (its id, "id":"io.idem/proxy/N", at the message's top level), handed
 * to proxy.c's waiting request (proxy_deliver), or, in a client's line,
 * for a tools/call and a request's id (proxy_unreadable_request); and
 * the reading of a line as JSON (proxy_json_load), loosely where
 * jansson refuses JSON (U+0000 in a key, a lone surrogate's escape) or
 * invalid UTF-8.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <utf8proc.h>

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

/*
 * The length of the valid UTF-8 character at p (n bytes on), or 0:
 * utf8proc refuses what jansson refuses (overlong forms, surrogates,
 * past U+10FFFF).
 */
static size_t
proxy_utf8_length(const unsigned char *p, size_t n)
{
	utf8proc_int32_t	 cp;
	utf8proc_ssize_t	 length;

	length = utf8proc_iterate(p, (utf8proc_ssize_t)n, &cp);
	return length > 0 ? (size_t)length : 0;
}

/* The code unit of the escape \uXXXX at p (n bytes on), or -1. */
static long
proxy_u_escape(const char *p, size_t n)
{
	long	 v = 0;
	int	 i, d;

	if (n < 6 || p[0] != '\\' || p[1] != 'u')
		return -1;
	for (i = 2; i < 6; i++) {
		if (p[i] >= '0' && p[i] <= '9')
			d = p[i] - '0';
		else if (p[i] >= 'a' && p[i] <= 'f')
			d = p[i] - 'a' + 10;
		else if (p[i] >= 'A' && p[i] <= 'F')
			d = p[i] - 'A' + 10;
		else
			return -1;
		v = v << 4 | d;
	}
	return v;
}

/*
 * The loose copy of a line (see proxy_json_load) into out (NULL: only
 * measured); its length.  Each \u0000 escape, each escape of a UTF-16
 * surrogate that is not one of a pair and each byte that is not part
 * of valid UTF-8 becomes U+FFFD (\uFFFD, or its 3 bytes); *changed set
 * if any did.  A backslash escapes the character after it, so that
 * \\u0000 (a backslash, then u0000) is left as it is: exact, though it
 * cannot change anything seen, as a loose read only classifies a line
 * (a method, a tool's name, an id) and none of those spells a
 * backslash and u0000; no test can tell.
 */
static size_t
proxy_loose_copy(const char *line, size_t length, char *out, int *changed)
{
	static const char	 fffd[] = "\xef\xbf\xbd";
	size_t			 i = 0, n = 0, k;
	long			 u, low;

#define PROXY_PUT(src, len) do {					\
	if (out != NULL)						\
		memcpy(out + n, (src), (len));				\
	n += (len);							\
} while (0)
	while (i < length) {
		if (line[i] == '\\' && (u = proxy_u_escape(line + i,
		    length - i)) >= 0) {
			low = u >= 0xd800 && u <= 0xdbff ? proxy_u_escape(
			    line + i + 6, length - i - 6) : -1;
			if (low >= 0xdc00 && low <= 0xdfff) {
				PROXY_PUT(line + i, 12);	/* a pair */
				i += 12;
			} else if (u == 0 || (u >= 0xd800 && u <= 0xdfff)) {
				PROXY_PUT("\\uFFFD", 6);
				*changed = 1;
				i += 6;
			} else {
				PROXY_PUT(line + i, 6);
				i += 6;
			}
		} else if (line[i] == '\\' && i + 1 < length &&
		    (unsigned char)line[i + 1] < 0x80) {
			PROXY_PUT(line + i, 2);		/* the escaped character */
			i += 2;
		} else if ((k = proxy_utf8_length((const unsigned char *)line +
		    i, length - i)) == 0) {
			PROXY_PUT(fffd, 3);
			*changed = 1;
			i++;
		} else {
			PROXY_PUT(line + i, k);
			i += k;
		}
	}
#undef PROXY_PUT
	return n;
}

json_t *
proxy_json_load(const char *line, size_t length, size_t flags, int *loose)
{
	json_error_t	 error;
	json_t		*value;
	char		*copy;
	size_t		 n;
	int		 changed = 0;

	*loose = 0;
	value = json_loadb(line, length, flags | JSON_ALLOW_NUL, &error);
	if (value != NULL ||
	    json_error_code(&error) == json_error_out_of_memory)
		return value;
	/*
	 * jansson refuses some JSON: U+0000 in an object key (whatever the
	 * flags), an escaped UTF-16 surrogate that is not one of a pair
	 * (JavaScript writes one for text cut in a character), and it
	 * reads no line with invalid UTF-8 (which a lenient reader takes
	 * as U+FFFD).  Read loosely, each made U+FFFD, the line says what
	 * it is (a call, an answer, its id), never what it holds: it is
	 * passed, if at all, as the bytes it came in, never as read.
	 * What no copy mends (a number past a double, nesting deeper than
	 * jansson's limit, not JSON at all) stays unread.
	 */
	n = proxy_loose_copy(line, length, NULL, &changed);
	if (!changed || (copy = malloc(n)) == NULL)
		return NULL;
	(void)proxy_loose_copy(line, length, copy, &changed);
	value = json_loadb(copy, n, flags | JSON_ALLOW_NUL, NULL);
	free(copy);
	*loose = value != NULL;
	return value;
}

/*
 * The top-level members of a line that may not be JSON (of its
 * messages: depth 1, or 2 in a batch): each name and value that read
 * as JSON on their own (a value only if a string, number, true, false
 * or null), handed to member (value may be NULL), until it returns
 * nonzero.
 */
static void
proxy_scan_members(const char *line, size_t length,
    int (*member)(const char *, json_t *, void *), void *arg)
{
	struct proxy_scan	 scan = { line, 0, 0, 0, 1 };
	const char		*end = line + length, *p, *q, *v, *w;
	json_t			*name, *value;
	int			 done;

	scan.top = proxy_scan_top(line, length);
	for (p = line; p < end; p++) {
		if (*p != '"' || !proxy_scan_top_level(&scan, p))
			continue;
		/* q: the string's closing quote. */
		for (q = p + 1; q < end && *q != '"'; q++)
			if (*q == '\\' && q + 1 < end)
				q++;
		if (q == end)
			return;
		/* A member's name: a colon after it, then its value. */
		for (v = q + 1; v < end && (*v == ' ' || *v == '\t'); v++)
			;
		if (v == end || *v != ':')
			continue;
		for (v++; v < end && (*v == ' ' || *v == '\t'); v++)
			;
		w = v;
		if (w < end && *w == '"') {
			for (w++; w < end && *w != '"'; w++)
				if (*w == '\\' && w + 1 < end)
					w++;
			if (w < end)
				w++;	/* the closing quote */
		} else
			while (w < end && strchr("0123456789+-.eEtruefalsn",
			    *w) != NULL)
				w++;
		name = json_loadb(p, (size_t)(q + 1 - p), JSON_DECODE_ANY, NULL);
		value = w == v ? NULL : json_loadb(v, (size_t)(w - v),
		    JSON_DECODE_ANY, NULL);
		done = json_is_string(name) && member(json_string_value(name),
		    value, arg);
		json_decref(name);
		json_decref(value);
		if (done)
			return;
	}
}

struct proxy_request_scan {
	int	 method;	/* a "method" member */
	int	 tools_call;	/* "method":"tools/call" */
	json_t	*id;		/* the last "id" that is a string or integer */
};

static int
proxy_request_member(const char *name, json_t *value, void *arg)
{
	struct proxy_request_scan	*r = arg;

	if (strcmp(name, "method") == 0) {
		r->method = 1;
		r->tools_call |= json_is_string(value) && strcmp(
		    json_string_value(value), "tools/call") == 0 &&
		    json_string_length(value) == strlen("tools/call");
	} else if (strcmp(name, "id") == 0 && (json_is_string(value) ||
	    json_is_integer(value))) {
		json_decref(r->id);
		r->id = json_incref(value);
	}
	return 0;
}

int
proxy_unreadable_request(const char *line, size_t length, json_t **id)
{
	struct proxy_request_scan	 r = { 0, 0, NULL };

	proxy_scan_members(line, length, proxy_request_member, &r);
	/* A batch has no one id; a message with no method is no request. */
	if (!r.method || proxy_scan_top(line, length) != 1) {
		json_decref(r.id);
		r.id = NULL;
	}
	*id = r.id;
	return r.tools_call;
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
