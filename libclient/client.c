/* SPDX-License-Identifier: ISC */
/*
 * client.c: the calls of idem.h (SPEC.md, "Wire protocol").  A struct
 * idem_conn is one blocking Unix-socket stream: each call writes one
 * request line and reads one response line, keeping any bytes read past
 * it for the next call.  Any failure once a request is on its way
 * closes the stream, and the connection refuses further calls: the
 * unread answer could otherwise be taken for the reply to a later
 * request.  No global state: everything lives in the connection or on
 * the caller's stack, which is what lets the retry helper run in many
 * threads at once.
 *
 * The calls live in these files: this one (the connection, the lines,
 * hello, and the helpers the others share, client_int.h),
 * client_write.c (write_task, write_report and the task's receipt),
 * client_effect.c and client_effect_run.c (the effect ledger's calls),
 * client_read.c (get_submission, diagnose, stats) and client_retry.c
 * (submission ids and the retry helper).
 */
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "idem.h"
#include "protocol.h"
#include "client_int.h"

#define CLIENT_READ_BYTES	4096	/* first size of the read buffer */

static const struct {
	enum idem_error_code	 code;
	const char		*name;
} client_codes[] = {
#define CLIENT_CODE(code, name)	{ IDEM_E_##code, name },
	IDEM_ERROR_CODES(CLIENT_CODE)
#undef CLIENT_CODE
};

static const char *const client_disposition_names[] = {
#define CLIENT_DISPOSITION_NAME(sym, name)	name,
	IDEM_DISPOSITIONS(CLIENT_DISPOSITION_NAME)
#undef CLIENT_DISPOSITION_NAME
};
_Static_assert(nitems(client_disposition_names) == CLIENT_DISPOSITION_COUNT,
    "a disposition without a name");



/* The disposition named name (NULL: none). */
enum client_disposition
client_disposition(const char *name)
{
	size_t	i;

	for (i = 0; name != NULL && i < nitems(client_disposition_names); i++)
		if (strcmp(name, client_disposition_names[i]) == 0)
			return (enum client_disposition)i;
	return CLIENT_DISPOSITION_NONE;
}

void
client_error(struct idem_error *err, enum idem_error_code code,
    const char *fmt, ...)
{
	va_list	ap;

	memset(err, 0, sizeof *err);
	err->code = code;
	err->retryable = code == IDEM_E_TRANSPORT;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof err->message, fmt, ap);
	va_end(ap);
}

/* The one way a connection is lost: the stream may be mid-line. */
static void
client_lost(struct idem_conn *conn)
{
	if (conn->fd != -1) {
		close(conn->fd);
		conn->fd = -1;
	}
	conn->length = 0;
	conn->taken = 0;
}

/*
 * What the caller sees of an error code: CLIENT_E_UNKNOWN_CODE (a
 * well-formed error whose code is newer than this library) is
 * IDEM_E_PROTOCOL to it.  1 if it was that.
 */
int
client_code_out(struct idem_error *err)
{
	if (err->code != CLIENT_E_UNKNOWN_CODE)
		return 0;
	err->code = IDEM_E_PROTOCOL;
	return 1;
}

/*
 * A call's end: after a protocol error nothing more the broker says on
 * this stream is trusted (a line that is not an answer, or an answer
 * without what its op promises, may be one of two answers to one
 * request), so the stream is closed and later calls are refused.  An
 * error answer whose code this library does not know is no such thing
 * (a newer broker's code): the stream goes on.  Returns rc.
 */
int
client_done(struct idem_conn *conn, int rc, struct idem_error *err)
{
	if (!client_code_out(err) && rc != 0 && err->code == IDEM_E_PROTOCOL)
		client_lost(conn);
	return rc;
}

/*
 * Bound how long one send or receive on fd may block (timeout_ms > 0),
 * so that the retry helper's deadline holds while a reply is awaited.
 * On a Unix socket the send timeout also bounds connect().
 */
int
client_timeout(int fd, int64_t timeout_ms, struct idem_error *err)
{
	struct timeval	tv;

	tv.tv_sec = timeout_ms / 1000;
	tv.tv_usec = (timeout_ms % 1000) * 1000;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == -1 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == -1) {
		client_error(err, IDEM_E_TRANSPORT, "setsockopt: %s",
		    strerror(errno));
		return -1;
	}
	return 0;
}

/* idem_connect, with a bound on every blocking step if timeout_ms > 0. */
struct idem_conn *
client_connect(const char *socket_path, int64_t timeout_ms,
    struct idem_error *err)
{
	struct sockaddr_un	 sa;
	struct idem_conn	*conn;
	const char		*root;
	int			 fd, n;

	memset(err, 0, sizeof *err);
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	if (socket_path == NULL)
		socket_path = getenv("IDEM_SOCKET");
	if (socket_path != NULL && *socket_path != '\0')
		n = snprintf(sa.sun_path, sizeof sa.sun_path, "%s",
		    socket_path);
	else {
		if ((root = getenv("IDEM_ROOT")) == NULL || *root == '\0')
			root = IDEM_DEFAULT_ROOT;
		n = snprintf(sa.sun_path, sizeof sa.sun_path, "%s/%s", root,
		    IDEM_SOCKET_NAME);
	}
	if (n < 0 || (size_t)n >= sizeof sa.sun_path) {
		client_error(err, IDEM_E_ARGUMENT,
		    "socket path longer than %zu bytes",
		    sizeof sa.sun_path - 1);
		return NULL;
	}

	if ((fd = socket(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC, 0)) == -1) {
		client_error(err, IDEM_E_TRANSPORT, "socket: %s",
		    strerror(errno));
		return NULL;
	}
	if (timeout_ms > 0 && client_timeout(fd, timeout_ms, err) != 0) {
		close(fd);
		return NULL;
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == -1) {
		client_error(err, IDEM_E_TRANSPORT, "connect %s: %s",
		    sa.sun_path, strerror(errno));
		close(fd);
		return NULL;
	}
	if ((conn = calloc(1, sizeof *conn)) == NULL) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		close(fd);
		return NULL;
	}
	conn->fd = fd;
	conn->timeout_ms = timeout_ms > 0 ? timeout_ms : 0;
	_Static_assert(sizeof conn->path == sizeof sa.sun_path,
	    "a connection keeps its socket's path");
	memcpy(conn->path, sa.sun_path, sizeof conn->path);
	return conn;
}

struct idem_conn *
idem_connect(const char *socket_path, struct idem_error *err)
{
	struct idem_error	scratch;

	if (err == NULL)
		err = &scratch;
	return client_connect(socket_path, 0, err);
}

int
idem_set_timeout(struct idem_conn *conn, int64_t timeout_ms,
    struct idem_error *err)
{
	struct idem_error	scratch;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	if (conn == NULL || timeout_ms < 0) {
		client_error(err, IDEM_E_ARGUMENT, "%s",
		    conn == NULL ? "conn is required" :
		    "timeout_ms must be 0 or more");
		return -1;
	}
	if (conn->fd == -1) {
		client_error(err, IDEM_E_TRANSPORT,
		    "connection closed after an earlier error");
		return -1;
	}
	if (client_timeout(conn->fd, timeout_ms, err) != 0)
		return -1;
	conn->timeout_ms = timeout_ms;
	return 0;
}

void
idem_close(struct idem_conn *conn)
{
	if (conn == NULL)
		return;
	client_lost(conn);
	free(conn->buf);
	free(conn->out);
	free(conn);
}

/*
 * Room in conn->out for a line of length bytes and its newline (length
 * + 1 is at most IDEM_MAX_LINE_BYTES): the buffer is kept, so a
 * connection's calls allocate only when a longer line comes.
 */
static int
client_out_room(struct idem_conn *conn, size_t length)
{
	size_t	 size = conn->out_size;
	char	*out;

	if (length + 1 <= conn->out_size)
		return 0;
	if (size == 0)
		size = CLIENT_READ_BYTES;
	while (size < length + 1)
		size *= 2;
	if (size > IDEM_MAX_LINE_BYTES)
		size = IDEM_MAX_LINE_BYTES;
	if ((out = realloc(conn->out, size)) == NULL)
		return -1;
	conn->out = out;
	conn->out_size = size;
	return 0;
}

/*
 * conn->out's line of length bytes and its newline in one send(2): one
 * segment for the broker to read, and no sendmsg(2) of two pieces,
 * whose message header and vector the kernel copies and walks for each
 * call (a sendmsg of a 700-byte line and a newline took 0.15-0.3 us
 * more than copying them and one send, on this project's test
 * machine).  MSG_NOSIGNAL: a broker that went away is an error, not a
 * SIGPIPE.  The caller made the room (client_out_room) and wrote the
 * line there.
 */
static int
client_send_out(struct idem_conn *conn, size_t length)
{
	size_t	 sent = 0;
	ssize_t	 n;

	conn->out[length++] = '\n';
	while (sent < length) {
		/* A short send (a signal, the send timeout): the rest. */
		if ((n = send(conn->fd, conn->out + sent, length - sent,
		    MSG_NOSIGNAL)) == -1) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		sent += (size_t)n;
	}
	return 0;
}

int64_t
client_now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Wait in poll(2) until the stream is readable, not in read(2): the
 * broker's read of our request frees its bytes, which tells every task
 * asleep on our socket that there is room to write, and a read(2)'s
 * sleeper wakes for it (the kernel's stream reader does not filter the
 * wake-ups it gets), finds nothing and sleeps again.  A poll for
 * POLLIN is not woken by that: one system call more, one wake-up and
 * two context switches a call fewer, for this process and for the
 * broker that woke it.  -1 with errno set (EAGAIN: the timeout).
 */
static int
client_wait_readable(struct idem_conn *conn, int64_t deadline_ms)
{
	struct pollfd	pfd;
	int64_t		left = -1;
	int		n;

	if (deadline_ms > 0) {
		left = deadline_ms - client_now_ms();
		if (left <= 0) {
			errno = EAGAIN;
			return -1;
		}
	}
	pfd.fd = conn->fd;
	pfd.events = POLLIN;
	pfd.revents = 0;
	n = poll(&pfd, 1, left > INT_MAX ? INT_MAX : (int)left);
	if (n == 0)
		errno = EAGAIN;
	return n == 1 ? 0 : -1;
}

/*
 * When a wait for an answer that starts now must end (CLOCK_MONOTONIC,
 * ms), or 0 for none: the timeout bounds the whole answer, so that one
 * trickling in a byte at a time cannot hold the caller for ever.
 */
static int64_t
client_deadline(const struct idem_conn *conn)
{
	return conn->timeout_ms > 0 ? client_now_ms() + conn->timeout_ms : 0;
}

/*
 * Read until a whole line is in conn->buf: its length (without its
 * newline, at buf + *n) in *n.  A line returned in place before
 * (conn->taken) is dropped first.
 */
static int
client_find_line(struct idem_conn *conn, size_t *n, struct idem_error *err)
{
	char	*nl = NULL, *buf;
	size_t	 scanned = 0, size;
	ssize_t	 r;
	int64_t	 deadline = client_deadline(conn);

	if (conn->taken > 0) {
		conn->length -= conn->taken;
		memmove(conn->buf, conn->buf + conn->taken, conn->length);
		conn->taken = 0;
	}
	for (;;) {
		if (conn->length > scanned &&
		    (nl = memchr(conn->buf + scanned, '\n',
		    conn->length - scanned)) != NULL)
			break;
		scanned = conn->length;
		if (conn->length == IDEM_MAX_LINE_BYTES) {
			client_error(err, IDEM_E_PROTOCOL,
			    "response line over %d bytes", IDEM_MAX_LINE_BYTES);
			return -1;
		}
		if (conn->length == conn->size) {
			size = conn->size == 0 ? CLIENT_READ_BYTES :
			    conn->size * 2;
			if (size > IDEM_MAX_LINE_BYTES)
				size = IDEM_MAX_LINE_BYTES;
			if ((buf = realloc(conn->buf, size)) == NULL) {
				client_error(err, IDEM_E_NOMEM,
				    "out of memory");
				return -1;
			}
			conn->buf = buf;
			conn->size = size;
		}
		if (client_wait_readable(conn, deadline) != 0)
			r = -1;
		else
			r = read(conn->fd, conn->buf + conn->length,
			    conn->size - conn->length);
		if (r == -1 && errno == EINTR)
			continue;
		if (r <= 0) {
			client_error(err, IDEM_E_TRANSPORT, "receive: %s",
			    r == 0 ? "broker closed the connection" :
			    errno == EAGAIN || errno == EWOULDBLOCK ?
			    "no reply before the deadline" : strerror(errno));
			return -1;
		}
		conn->length += r;
	}

	*n = (size_t)(nl - conn->buf);
	if (memchr(conn->buf, '\0', *n) != NULL) {
		client_error(err, IDEM_E_PROTOCOL, "NUL byte in response");
		return -1;
	}
	conn->answered = 1;
	return 0;
}

/*
 * Before a request: nothing may wait on a stream that has answered
 * before.  Bytes kept past the last line are an answer nobody asked
 * for (two answers to one request), which would be taken for this
 * request's.  A fresh stream may hold the broker's refusal (SPEC.md:
 * too_many_connections, sent before it reads): that is this request's
 * answer.  Only the bytes already read are looked at, never the socket:
 * a system call on every call is what the hot path cannot pay (issue
 * #33).  A stray line that arrives after the last answer was read is
 * taken for the next answer, and caught there only by what the answer
 * names (its receipt's or effect answer's key; libidem sends no id).
 */
static int
client_check_quiet(const struct idem_conn *conn, struct idem_error *err)
{
	if (conn->answered && conn->length > conn->taken) {
		client_error(err, IDEM_E_PROTOCOL,
		    "the broker sent a line nobody asked for");
		return -1;
	}
	return 0;
}

/*
 * After a send or receive failure on a stream that has not answered:
 * the broker may have refused the connection before reading (SPEC.md:
 * too_many_connections, one line, then it closes), and a send after its
 * close fails (EPIPE) with the refusal still waiting to be read.  What
 * is waiting is read without waiting; a whole line there is the answer
 * (its length in *n), as client_find_line gives it.  -1: none.
 */
static int
client_refusal(struct idem_conn *conn, size_t *n)
{
	char	*nl, *buf;
	ssize_t	 r;

	if (conn->answered || conn->fd == -1)
		return -1;
	if (conn->size == 0) {
		if ((buf = realloc(conn->buf, CLIENT_READ_BYTES)) == NULL)
			return -1;
		conn->buf = buf;
		conn->size = CLIENT_READ_BYTES;
	}
	while ((nl = memchr(conn->buf, '\n', conn->length)) == NULL &&
	    conn->length < conn->size) {
		r = recv(conn->fd, conn->buf + conn->length,
		    conn->size - conn->length, MSG_DONTWAIT);
		if (r == -1 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		conn->length += (size_t)r;
	}
	if (nl == NULL || memchr(conn->buf, '\0', (size_t)(nl - conn->buf)))
		return -1;
	*n = (size_t)(nl - conn->buf);
	conn->answered = 1;
	return 0;
}

/*
 * The line of count pieces (length[i] bytes each; none holds a newline,
 * the caller's checks say so) written straight into the send buffer,
 * sent, and the answer's line left where it was read: *answer
 * (NUL-terminated, *answer_length bytes) until the next call on conn.
 * libidem's effect calls, which decode the answer at once: no copy of
 * the request, of the answer, no allocation (issue #33).  Errors as
 * idem_call_raw's.
 */
int
client_call_pieces(struct idem_conn *conn, const char *const *piece,
    const size_t *length, size_t count, const char **answer,
    size_t *answer_length, struct idem_error *err)
{
	size_t	total = 0, i;

	for (i = 0; i < count; i++)
		total += length[i];
	if (total + 1 > IDEM_MAX_LINE_BYTES) {
		client_error(err, IDEM_E_ARGUMENT, "request over %d bytes",
		    IDEM_MAX_LINE_BYTES);
		return -1;
	}
	if (conn->fd == -1) {
		client_error(err, IDEM_E_TRANSPORT,
		    "connection closed after an earlier error");
		return -1;
	}
	if (client_check_quiet(conn, err) != 0) {
		client_lost(conn);
		return -1;
	}
	/* Nothing is sent yet: the stream stays usable. */
	if (client_out_room(conn, total) != 0) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		return -1;
	}
	for (total = 0, i = 0; i < count; i++) {
		memcpy(conn->out + total, piece[i], length[i]);
		total += length[i];
	}
	if (client_send_out(conn, total) != 0)
		client_error(err, IDEM_E_TRANSPORT, "send: %s",
		    strerror(errno));
	else if (client_find_line(conn, answer_length, err) == 0)
		goto answered;
	if (err->code == IDEM_E_TRANSPORT &&
	    client_refusal(conn, answer_length) == 0) {
		memset(err, 0, sizeof *err);
		goto answered;
	}
	client_lost(conn);
	return -1;
answered:
	conn->buf[*answer_length] = '\0';
	conn->taken = *answer_length + 1;
	*answer = conn->buf;
	return 0;
}

int
idem_call_raw(struct idem_conn *conn, const char *request, char **response,
    struct idem_error *err)
{
	struct idem_error	scratch;
	size_t			length = strlen(request), answer_length;
	const char		*answer;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	*response = NULL;
	if (memchr(request, '\n', length) != NULL) {
		client_error(err, IDEM_E_ARGUMENT, "request holds a newline");
		return -1;
	}
	if (client_call_pieces(conn, &request, &length, 1, &answer,
	    &answer_length, err) != 0)
		return -1;
	/* The caller's copy; without it the answer is lost: so is the stream. */
	if ((*response = strndup(answer, answer_length)) == NULL) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		client_lost(conn);
		return -1;
	}
	return 0;
}

/* request sent as one compact line; the answer's line (malloc'd). */
int
client_call_line(struct idem_conn *conn, json_t *request, char **answer,
    struct idem_error *err)
{
	char	*line;
	int	 rc;

	if ((line = json_dumps(request, JSON_COMPACT)) == NULL) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		return -1;
	}
	rc = idem_call_raw(conn, line, answer, err);
	free(line);
	return rc;
}

/*
 * Send a request object; the answer must be an object with a boolean ok.
 * (The effect calls check theirs without a tree: client_effect.c.)
 */
json_t *
client_call_json(struct idem_conn *conn, json_t *request,
    struct idem_error *err)
{
	json_t		*response;
	json_error_t	 jerr;
	char		*answer;

	if (client_call_line(conn, request, &answer, err) != 0)
		return NULL;
	response = json_loads(answer, JSON_REJECT_DUPLICATES, &jerr);
	free(answer);
	if (response == NULL) {
		client_error(err, IDEM_E_PROTOCOL, "response: %s", jerr.text);
		client_lost(conn);
		return NULL;
	}
	if (!json_is_object(response) ||
	    !json_is_boolean(json_object_get(response, "ok"))) {
		client_error(err, IDEM_E_PROTOCOL,
		    "response is not an object with a boolean ok");
		json_decref(response);
		client_lost(conn);
		return NULL;
	}
	return response;
}

/* The error object of an ok:false response into err. */
void
client_wire_error(json_t *response, struct idem_error *err)
{
	json_t		*error = json_object_get(response, "error");
	const char	*code;

	code = json_string_value(json_object_get(error, "code"));
	if (!json_is_object(error) || code == NULL) {
		client_error(err, IDEM_E_PROTOCOL,
		    "error response without an error code");
		return;
	}
	client_wire_error_of(code, json_string_value(json_object_get(error,
	    "message")), json_is_true(json_object_get(error, "retryable")),
	    json_string_value(json_object_get(error, "field")),
	    json_string_value(json_object_get(error, "reason")), err);
}

/*
 * An error object's members (message, field, reason NULL when absent
 * or not strings) into err: client_wire_error's, and client_effect.c's
 * from an answer's bytes.
 */
void
client_wire_error_of(const char *code, const char *message, int retryable,
    const char *field, const char *reason, struct idem_error *err)
{
	size_t	i;

	if (message == NULL)
		message = "";
	for (i = 0; i < nitems(client_codes); i++)
		if (strcmp(code, client_codes[i].name) == 0)
			break;
	/*
	 * A code newer than this library: keep its name in the message
	 * (IDEM_E_PROTOCOL to the caller, the stream kept: client_done).
	 */
	if (i == nitems(client_codes))
		client_error(err, CLIENT_E_UNKNOWN_CODE, "%s: %s", code,
		    message);
	else
		client_error(err, client_codes[i].code, "%s", message);
	err->retryable = retryable;
	if (field != NULL)
		snprintf(err->field, sizeof err->field, "%s", field);
	if (reason != NULL)
		snprintf(err->reason, sizeof err->reason, "%s", reason);
}

/* Copy a string member into a fixed buffer; absent or null gives "". */
int
client_copy(json_t *object, const char *key, char *out, size_t size,
    int required, struct idem_error *err)
{
	json_t	*v = json_object_get(object, key);
	size_t	 length;

	out[0] = '\0';
	if (v == NULL || json_is_null(v)) {
		if (!required)
			return 0;
		client_error(err, IDEM_E_PROTOCOL, "response lacks %s", key);
		return -1;
	}
	if (!json_is_string(v) || (length = json_string_length(v)) >= size) {
		client_error(err, IDEM_E_PROTOCOL,
		    "response %s is not a string of under %zu bytes", key,
		    size);
		return -1;
	}
	memcpy(out, json_string_value(v), length + 1);
	return 0;
}

/* An optional boolean member: absent is false. */
int
client_bool(json_t *object, const char *key, int *out,
    struct idem_error *err)
{
	json_t	*v = json_object_get(object, key);

	if (v != NULL && !json_is_boolean(v)) {
		client_error(err, IDEM_E_PROTOCOL,
		    "response %s is not a boolean", key);
		return -1;
	}
	*out = json_is_true(v);
	return 0;
}

/* A read-only op's answer: an ok:false one becomes err. */
json_t *
client_call_ok(struct idem_conn *conn, json_t *request,
    struct idem_error *err)
{
	json_t	*response;

	if (request == NULL) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		return NULL;
	}
	response = client_call_json(conn, request, err);
	json_decref(request);
	if (response == NULL)
		return NULL;
	if (!json_is_true(json_object_get(response, "ok"))) {
		client_wire_error(response, err);
		json_decref(response);
		(void)client_done(conn, -1, err);
		return NULL;
	}
	return response;
}

int
client_int(json_t *object, const char *key, int64_t *out, int required,
    struct idem_error *err)
{
	json_t	*v = json_object_get(object, key);

	if (v == NULL && !required)
		return 0;
	if (!json_is_integer(v)) {
		client_error(err, IDEM_E_PROTOCOL,
		    "response %s is not an integer", key);
		return -1;
	}
	*out = json_integer_value(v);
	return 0;
}

int
idem_hello(struct idem_conn *conn, struct idem_hello *hello,
    struct idem_error *err)
{
	struct idem_error	 scratch;
	json_t			*request, *response, *protocol;
	int			 rc = -1;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	memset(hello, 0, sizeof *hello);
	if ((request = json_pack("{ss}", "op",
	    idem_op_names[IDEM_OPC_HELLO])) == NULL) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		return -1;
	}
	response = client_call_json(conn, request, err);
	json_decref(request);
	if (response == NULL)
		return -1;
	protocol = json_object_get(response, "protocol");
	if (!json_is_true(json_object_get(response, "ok")))
		client_wire_error(response, err);
	else if (!json_is_integer(protocol))
		client_error(err, IDEM_E_PROTOCOL,
		    "response protocol is not an integer");
	else if (client_copy(response, "server", hello->server,
	    sizeof hello->server, 1, err) == 0 &&
	    client_copy(response, "version", hello->version,
	    sizeof hello->version, 1, err) == 0) {
		hello->protocol = json_integer_value(protocol);
		rc = 0;
	}
	json_decref(response);
	return client_done(conn, rc, err);
}

/*
 * A JSON string of s.  jansson answers NULL both for invalid UTF-8 and
 * for no memory; only the latter sets errno (malloc must, by POSIX).
 */
json_t *
client_string(const char *s, const char *field, struct idem_error *err)
{
	json_t	*v;

	errno = 0;
	if ((v = json_string(s)) != NULL)
		return v;
	if (errno == ENOMEM)
		client_error(err, IDEM_E_NOMEM, "out of memory");
	else {
		client_error(err, IDEM_E_ARGUMENT, "%s is not valid UTF-8",
		    field);
		snprintf(err->field, sizeof err->field, "%s", field);
	}
	return NULL;
}

/* Set key to a new value, or fail (json_object_set_new frees it). */
int
client_set(json_t *object, const char *key, json_t *value,
    struct idem_error *err)
{
	if (value == NULL)
		return -1;
	if (json_object_set_new(object, key, value) != 0) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		return -1;
	}
	return 0;
}

/*
 * A new request, its members in the order libidem has always sent them
 * (the broker's retry fast path matches a line by its members' bytes, in
 * order): the object under inner_key first (write_task's "task",
 * write_report's "report"; *inner is it, the request owns it), then op,
 * task_id and client_submission_id, each of the last two only when given.
 */
json_t *
client_request_new(enum idem_op_code op, const char *inner_key,
    json_t **inner, const char *task_id, const char *client_submission_id,
    struct idem_error *err)
{
	json_t	*request, *object = NULL;

	if ((request = json_object()) == NULL ||
	    (inner_key != NULL && (object = json_object()) == NULL)) {
		json_decref(request);
		client_error(err, IDEM_E_NOMEM, "out of memory");
		return NULL;
	}
	/* The request owns object from here, also when setting it fails. */
	if ((inner_key != NULL && client_set(request, inner_key, object,
	    err) != 0) ||
	    client_set(request, "op", client_string(idem_op_names[op], "op",
	    err), err) != 0 ||
	    (task_id != NULL && client_set(request, "task_id",
	    client_string(task_id, "task_id", err), err) != 0) ||
	    (client_submission_id != NULL && client_set(request,
	    "client_submission_id", client_string(client_submission_id,
	    "client_submission_id", err), err) != 0)) {
		json_decref(request);
		return NULL;
	}
	if (inner != NULL)
		*inner = object;
	return request;
}
