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
 */
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>

#include <errno.h>
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

#ifndef nitems
#define nitems(a)	(sizeof (a) / sizeof (a)[0])
#endif

#define CLIENT_READ_BYTES	4096	/* first size of the read buffer */
#define CLIENT_SUBMISSION_ID_RANDOM_BYTES	16

_Static_assert(sodium_base64_ENCODED_LEN(CLIENT_SUBMISSION_ID_RANDOM_BYTES,
    sodium_base64_VARIANT_URLSAFE_NO_PADDING) == IDEM_SUBMISSION_ID_SIZE,
    "IDEM_SUBMISSION_ID_SIZE does not fit the random bytes");
_Static_assert(IDEM_SUBMISSION_ID_SIZE - 1 <= IDEM_MAX_SUBMISSION_ID_BYTES,
    "generated submission ids are too long for the wire");

struct idem_conn {
	int	 fd;		/* -1 once the stream is unusable */
	char	*buf;		/* bytes read but not yet returned */
	size_t	 length;
	size_t	 size;
};

static const struct {
	enum idem_error_code	 code;
	const char		*name;
} client_codes[] = {
#define CLIENT_CODE(code, name)	{ IDEM_E_##code, name },
	IDEM_ERROR_CODES(CLIENT_CODE)
#undef CLIENT_CODE
};

/* A reply's "disposition": IDEM_DISPOSITIONS, protocol.h. */
enum client_disposition {
	CLIENT_DISPOSITION_NONE = -1,	/* absent, or none of them */
#define CLIENT_DISPOSITION_ENUM(sym, name)	CLIENT_DISPOSITION_##sym,
	IDEM_DISPOSITIONS(CLIENT_DISPOSITION_ENUM)
#undef CLIENT_DISPOSITION_ENUM
	CLIENT_DISPOSITION_COUNT
};
static const char *const client_disposition_names[] = {
#define CLIENT_DISPOSITION_NAME(sym, name)	name,
	IDEM_DISPOSITIONS(CLIENT_DISPOSITION_NAME)
#undef CLIENT_DISPOSITION_NAME
};
_Static_assert(nitems(client_disposition_names) == CLIENT_DISPOSITION_COUNT,
    "a disposition without a name");
/* What an effect op's disposition is to this library; NONE: not one. */
static const enum idem_effect_disposition
    client_effect_dispositions[CLIENT_DISPOSITION_COUNT] = {
	[CLIENT_DISPOSITION_PROCEED] = IDEM_EFFECT_PROCEED,
	[CLIENT_DISPOSITION_REUSED] = IDEM_EFFECT_REUSED,
	[CLIENT_DISPOSITION_CONFLICT] = IDEM_EFFECT_CONFLICT,
	[CLIENT_DISPOSITION_IN_PROGRESS] = IDEM_EFFECT_IN_PROGRESS,
	[CLIENT_DISPOSITION_OUTCOME_UNKNOWN] = IDEM_EFFECT_OUTCOME_UNKNOWN,
};

/* A receipt's string members; raw is filled separately. */
#define CLIENT_RECEIPT(member, required) { #member,			\
	offsetof(struct idem_receipt, member),				\
	sizeof ((struct idem_receipt *)NULL)->member, required }
static const struct {
	const char	*key;
	size_t		 offset;
	size_t		 size;
	int		 required;
} client_receipt_fields[] = {
	/* A legacy task has no submission id, schema or request digest. */
	CLIENT_RECEIPT(client_submission_id, 0),
	CLIENT_RECEIPT(task_id, 1),
	CLIENT_RECEIPT(task_path, 1),
	CLIENT_RECEIPT(digest_schema, 0),
	CLIENT_RECEIPT(request_digest, 0),
	CLIENT_RECEIPT(file_digest, 1),
	CLIENT_RECEIPT(state, 1),
	CLIENT_RECEIPT(created_at, 1),
};
#undef CLIENT_RECEIPT

static void	client_error(struct idem_error *, enum idem_error_code,
		    const char *, ...) __attribute__((format(printf, 3, 4)));

/* The disposition named name (NULL: none). */
static enum client_disposition
client_disposition(const char *name)
{
	size_t	i;

	for (i = 0; name != NULL && i < nitems(client_disposition_names); i++)
		if (strcmp(name, client_disposition_names[i]) == 0)
			return (enum client_disposition)i;
	return CLIENT_DISPOSITION_NONE;
}

static void
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
}

/*
 * Bound how long one send or receive on fd may block (timeout_ms > 0),
 * so that the retry helper's deadline holds while a reply is awaited.
 * On a Unix socket the send timeout also bounds connect().
 */
static int
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
static struct idem_conn *
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

void
idem_close(struct idem_conn *conn)
{
	if (conn == NULL)
		return;
	client_lost(conn);
	free(conn->buf);
	free(conn);
}

/* MSG_NOSIGNAL: a broker that went away is an error, not a SIGPIPE. */
static int
client_send_line(int fd, const char *p, size_t length)
{
	struct iovec	 iov[2], *v = iov;
	struct msghdr	 msg;
	ssize_t		 n;

	/*
	 * The line and its newline in one call: one segment for the
	 * broker to read, and half the system calls of two sends.
	 */
	iov[0].iov_base = (void *)p;
	iov[0].iov_len = length;
	iov[1].iov_base = "\n";
	iov[1].iov_len = 1;
	memset(&msg, 0, sizeof msg);
	msg.msg_iov = iov;
	msg.msg_iovlen = 2;
	while (msg.msg_iovlen > 0) {
		if ((n = sendmsg(fd, &msg, MSG_NOSIGNAL)) == -1) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		/* A short send: step past what went. */
		while (msg.msg_iovlen > 0 && (size_t)n >= v->iov_len) {
			n -= (ssize_t)v->iov_len;
			v++;
			msg.msg_iov = v;
			msg.msg_iovlen--;
		}
		if (msg.msg_iovlen > 0) {
			v->iov_base = (char *)v->iov_base + n;
			v->iov_len -= (size_t)n;
		}
	}
	return 0;
}

/* Read one line (without its newline) into a malloc'd string. */
static int
client_read_line(struct idem_conn *conn, char **line, struct idem_error *err)
{
	char	*nl = NULL, *buf;
	size_t	 scanned = 0, size, n;
	ssize_t	 r;

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

	n = nl - conn->buf;
	if (memchr(conn->buf, '\0', n) != NULL) {
		client_error(err, IDEM_E_PROTOCOL, "NUL byte in response");
		return -1;
	}
	if ((*line = malloc(n + 1)) == NULL) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		return -1;
	}
	memcpy(*line, conn->buf, n);
	(*line)[n] = '\0';
	conn->length -= n + 1;
	memmove(conn->buf, nl + 1, conn->length);
	return 0;
}

int
idem_call_raw(struct idem_conn *conn, const char *request, char **response,
    struct idem_error *err)
{
	struct idem_error	scratch;
	size_t			length = strlen(request);

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	*response = NULL;
	if (memchr(request, '\n', length) != NULL) {
		client_error(err, IDEM_E_ARGUMENT, "request holds a newline");
		return -1;
	}
	if (length + 1 > IDEM_MAX_LINE_BYTES) {
		client_error(err, IDEM_E_ARGUMENT, "request over %d bytes",
		    IDEM_MAX_LINE_BYTES);
		return -1;
	}
	if (conn->fd == -1) {
		client_error(err, IDEM_E_TRANSPORT,
		    "connection closed after an earlier error");
		return -1;
	}
	if (client_send_line(conn->fd, request, length) != 0)
		client_error(err, IDEM_E_TRANSPORT, "send: %s",
		    strerror(errno));
	else if (client_read_line(conn, response, err) == 0)
		return 0;
	client_lost(conn);
	return -1;
}

/* Send a request object; the answer must be an object with a boolean ok. */
static json_t *
client_call_json(struct idem_conn *conn, json_t *request,
    struct idem_error *err)
{
	json_t		*response;
	json_error_t	 jerr;
	char		*line, *answer;
	int		 rc;

	if ((line = json_dumps(request, JSON_COMPACT)) == NULL) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		return NULL;
	}
	rc = idem_call_raw(conn, line, &answer, err);
	free(line);
	if (rc != 0)
		return NULL;
	response = json_loads(answer, JSON_REJECT_DUPLICATES, &jerr);
	free(answer);
	if (response == NULL) {
		client_error(err, IDEM_E_PROTOCOL, "response: %s", jerr.text);
		return NULL;
	}
	if (!json_is_object(response) ||
	    !json_is_boolean(json_object_get(response, "ok"))) {
		client_error(err, IDEM_E_PROTOCOL,
		    "response is not an object with a boolean ok");
		json_decref(response);
		return NULL;
	}
	return response;
}

/* The error object of an ok:false response into err. */
static void
client_wire_error(json_t *response, struct idem_error *err)
{
	json_t		*error = json_object_get(response, "error");
	const char	*code, *message, *field, *reason;
	size_t		 i;

	code = json_string_value(json_object_get(error, "code"));
	if (!json_is_object(error) || code == NULL) {
		client_error(err, IDEM_E_PROTOCOL,
		    "error response without an error code");
		return;
	}
	if ((message = json_string_value(json_object_get(error,
	    "message"))) == NULL)
		message = "";
	for (i = 0; i < nitems(client_codes); i++)
		if (strcmp(code, client_codes[i].name) == 0)
			break;
	/* A code newer than this library: keep its name in the message. */
	if (i == nitems(client_codes))
		client_error(err, IDEM_E_PROTOCOL, "%s: %s", code, message);
	else
		client_error(err, client_codes[i].code, "%s", message);
	err->retryable = json_is_true(json_object_get(error, "retryable"));
	if ((field = json_string_value(json_object_get(error,
	    "field"))) != NULL)
		snprintf(err->field, sizeof err->field, "%s", field);
	if ((reason = json_string_value(json_object_get(error,
	    "reason"))) != NULL)
		snprintf(err->reason, sizeof err->reason, "%s", reason);
}

/* Copy a string member into a fixed buffer; absent or null gives "". */
static int
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
static int
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
	return rc;
}

/*
 * A JSON string of s.  jansson answers NULL both for invalid UTF-8 and
 * for no memory; only the latter sets errno (malloc must, by POSIX).
 */
static json_t *
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
static int
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

static json_t *
client_list(const char *key, const char *const *items, size_t count,
    struct idem_error *err)
{
	json_t	*array, *v;
	char	 field[64];
	size_t	 i;

	if ((array = json_array()) == NULL) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		return NULL;
	}
	for (i = 0; i < count; i++) {
		snprintf(field, sizeof field, "task.%s[%zu]", key, i);
		if (items[i] == NULL) {
			client_error(err, IDEM_E_ARGUMENT, "%s is NULL", field);
			snprintf(err->field, sizeof err->field, "%s", field);
			break;
		}
		if ((v = client_string(items[i], field, err)) == NULL)
			break;
		if (json_array_append_new(array, v) != 0) {
			client_error(err, IDEM_E_NOMEM, "out of memory");
			break;
		}
	}
	if (i < count) {
		json_decref(array);
		return NULL;
	}
	return array;
}

/*
 * A new request, its members in the order libidem has always sent them
 * (the broker's retry fast path matches a line by its members' bytes, in
 * order): the object under inner_key first (write_task's "task",
 * write_report's "report"; *inner is it, the request owns it), then op,
 * task_id and client_submission_id, each of the last two only when given.
 */
static json_t *
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

/* A string member of a task or a report: where the caller's struct has it. */
struct client_field {
	const char	*key;
	size_t		 offset;	/* of a const char * */
};
#define CLIENT_FIELD(type, member)					\
	{ #member, offsetof(type, member) }
static const struct client_field client_task_fields[] = {
	CLIENT_FIELD(struct idem_task, sender),
	CLIENT_FIELD(struct idem_task, recipient),
	CLIENT_FIELD(struct idem_task, subject),
	CLIENT_FIELD(struct idem_task, body),
	CLIENT_FIELD(struct idem_task, priority),
	CLIENT_FIELD(struct idem_task, risk_level),
	CLIENT_FIELD(struct idem_task, thread_key),
	CLIENT_FIELD(struct idem_task, parent),
};
static const struct client_field client_report_fields[] = {
	CLIENT_FIELD(struct idem_report, sender),
	CLIENT_FIELD(struct idem_report, recipient),
	CLIENT_FIELD(struct idem_report, status),
	CLIENT_FIELD(struct idem_report, body),
};
#undef CLIENT_FIELD

/*
 * The fields of from (a task or a report, named what in err->field) into
 * object, in the table's order: only those the caller gave.
 */
static int
client_put_fields(json_t *object, const char *what, const void *from,
    const struct client_field *fields, size_t count, struct idem_error *err)
{
	const char	*value;
	char		 field[64];
	size_t		 i;

	for (i = 0; i < count; i++) {
		value = *(const char *const *)(const void *)
		    ((const char *)from + fields[i].offset);
		if (value == NULL)
			continue;
		snprintf(field, sizeof field, "%s.%s", what, fields[i].key);
		if (client_set(object, fields[i].key, client_string(value,
		    field, err), err) != 0)
			return -1;
	}
	return 0;
}

/* The write_task request: only the fields the caller gave. */
static json_t *
client_task_request(const char *client_submission_id,
    const struct idem_task *task, struct idem_error *err)
{
	json_t	*request, *t;

	if ((task->references == NULL && task->references_count != 0) ||
	    (task->depends_on == NULL && task->depends_on_count != 0)) {
		client_error(err, IDEM_E_ARGUMENT,
		    "a list with a count has no items");
		return NULL;
	}
	if ((request = client_request_new(IDEM_OPC_WRITE_TASK, "task", &t,
	    NULL, client_submission_id, err)) == NULL)
		return NULL;
	if (client_put_fields(t, "task", task, client_task_fields,
	    nitems(client_task_fields), err) != 0 ||
	    (task->references != NULL && client_set(t, "references",
	    client_list("references", task->references,
	    task->references_count, err), err) != 0) ||
	    (task->depends_on != NULL && client_set(t, "depends_on",
	    client_list("depends_on", task->depends_on,
	    task->depends_on_count, err), err) != 0)) {
		json_decref(request);
		return NULL;
	}
	return request;
}

static int
client_receipt(json_t *receipt, struct idem_receipt *r,
    struct idem_error *err)
{
	char	*raw;
	size_t	 i, length;

	if (!json_is_object(receipt)) {
		client_error(err, IDEM_E_PROTOCOL, "response lacks a receipt");
		return -1;
	}
	for (i = 0; i < nitems(client_receipt_fields); i++)
		if (client_copy(receipt, client_receipt_fields[i].key,
		    (char *)r + client_receipt_fields[i].offset,
		    client_receipt_fields[i].size,
		    client_receipt_fields[i].required, err) != 0)
			return -1;

	/* jansson keeps members in the order read: the broker's bytes. */
	raw = json_dumps(receipt, JSON_COMPACT|JSON_PRESERVE_ORDER);
	if (raw == NULL) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		return -1;
	}
	if ((length = strlen(raw)) >= sizeof r->raw) {
		client_error(err, IDEM_E_PROTOCOL,
		    "receipt over %zu bytes", sizeof r->raw - 1);
		free(raw);
		return -1;
	}
	memcpy(r->raw, raw, length + 1);
	free(raw);
	return 0;
}

static int
client_write_result(json_t *response, struct idem_write_result *result,
    struct idem_error *err)
{
	json_t			*existing;
	enum client_disposition	 disposition;

	disposition = client_disposition(json_string_value(json_object_get(
	    response, "disposition")));
	if (client_bool(response, "action_taken", &result->action_taken,
	    err) != 0 ||
	    client_bool(response, "idempotent", &result->idempotent,
	    err) != 0 ||
	    client_bool(response, "recovered", &result->recovered, err) != 0)
		return -1;

	if (!json_is_true(json_object_get(response, "ok"))) {
		if (disposition != CLIENT_DISPOSITION_CONFLICT) {
			client_wire_error(response, err);
			return -1;
		}
		existing = json_object_get(response, "existing");
		if (!json_is_object(existing)) {
			client_error(err, IDEM_E_PROTOCOL,
			    "conflict without an existing binding");
			return -1;
		}
		if (client_copy(existing, "request_digest",
		    result->existing_request_digest,
		    sizeof result->existing_request_digest, 1, err) != 0 ||
		    client_copy(existing, "task_id", result->existing_task_id,
		    sizeof result->existing_task_id, 1, err) != 0)
			return -1;
		/* Any other code is the broker's own error: pass it on. */
		client_wire_error(response, err);
		if (err->code != IDEM_E_CONFLICT)
			return -1;
		result->disposition = IDEM_CONFLICT;
		return 0;
	}

	if (disposition != CLIENT_DISPOSITION_CREATED &&
	    disposition != CLIENT_DISPOSITION_REUSED) {
		client_error(err, IDEM_E_PROTOCOL,
		    "ok response without created or reused disposition");
		return -1;
	}
	if (client_receipt(json_object_get(response, "receipt"),
	    &result->receipt, err) != 0 ||
	    client_copy(response, "current_path", result->current_path,
	    sizeof result->current_path, 0, err) != 0)
		return -1;
	result->disposition = disposition == CLIENT_DISPOSITION_CREATED ?
	    IDEM_CREATED : IDEM_REUSED;
	return 0;
}

/* One write_task request; attempts is the caller's to count. */
static int
client_write_task(struct idem_conn *conn, const char *client_submission_id,
    const struct idem_task *task, struct idem_write_result *result,
    struct idem_error *err)
{
	json_t	*request, *response;
	int	 rc;

	memset(err, 0, sizeof *err);
	memset(result, 0, sizeof *result);
	if ((request = client_task_request(client_submission_id, task,
	    err)) == NULL)
		return -1;
	response = client_call_json(conn, request, err);
	json_decref(request);
	if (response == NULL)
		return -1;
	rc = client_write_result(response, result, err);
	json_decref(response);
	if (rc != 0)
		memset(result, 0, sizeof *result);
	return rc;
}

int
idem_write_task(struct idem_conn *conn, const char *client_submission_id,
    const struct idem_task *task, struct idem_write_result *result,
    struct idem_error *err)
{
	struct idem_error	scratch;
	int			rc;

	if (err == NULL)
		err = &scratch;
	rc = client_write_task(conn, client_submission_id, task, result, err);
	result->attempts = 1;
	return rc;
}

/* ---- write_report ------------------------------------------------------ */

/* The write_report request: only the fields the caller gave. */
static json_t *
client_report_request(const char *task_id, const char *client_submission_id,
    const struct idem_report *report, struct idem_error *err)
{
	json_t	*request, *r;

	if (task_id == NULL) {
		client_error(err, IDEM_E_ARGUMENT, "task_id is required");
		snprintf(err->field, sizeof err->field, "task_id");
		return NULL;
	}
	if ((request = client_request_new(IDEM_OPC_WRITE_REPORT, "report", &r,
	    task_id, client_submission_id, err)) == NULL)
		return NULL;
	if (client_put_fields(r, "report", report, client_report_fields,
	    nitems(client_report_fields), err) != 0) {
		json_decref(request);
		return NULL;
	}
	return request;
}

static int
client_report_result(json_t *response, struct idem_report_result *result,
    struct idem_error *err)
{
	json_t	*existing;

	if (client_bool(response, "recovered", &result->recovered, err) != 0)
		return -1;
	if (!json_is_true(json_object_get(response, "ok"))) {
		client_wire_error(response, err);
		if (err->code != IDEM_E_CONFLICT)
			return -1;
		/*
		 * SPEC.md fixes no shape for a report conflict beyond its
		 * code: take the binding when the broker names it.
		 * client_copy writes err only when it fails.
		 */
		existing = json_object_get(response, "existing");
		if (json_is_object(existing) && (client_copy(existing,
		    "request_digest", result->existing_request_digest,
		    sizeof result->existing_request_digest, 0, err) != 0 ||
		    client_copy(existing, "report_id",
		    result->existing_report_id,
		    sizeof result->existing_report_id, 0, err) != 0))
			return -1;
		result->disposition = IDEM_CONFLICT;
		return 0;
	}
	if (!json_is_boolean(json_object_get(response, "deduplicated"))) {
		client_error(err, IDEM_E_PROTOCOL,
		    "response deduplicated is not a boolean");
		return -1;
	}
	result->deduplicated = json_is_true(json_object_get(response,
	    "deduplicated"));
	if (client_copy(response, "report_id", result->report_id,
	    sizeof result->report_id, 1, err) != 0 ||
	    client_copy(response, "report_path", result->report_path,
	    sizeof result->report_path, 1, err) != 0)
		return -1;
	result->disposition = result->deduplicated ? IDEM_REUSED :
	    IDEM_CREATED;
	return 0;
}

int
idem_write_report(struct idem_conn *conn, const char *task_id,
    const char *client_submission_id, const struct idem_report *report,
    struct idem_report_result *result, struct idem_error *err)
{
	struct idem_error	 scratch;
	json_t			*request, *response;
	int			 rc;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	memset(result, 0, sizeof *result);
	if ((request = client_report_request(task_id, client_submission_id,
	    report, err)) == NULL)
		return -1;
	response = client_call_json(conn, request, err);
	json_decref(request);
	if (response == NULL)
		return -1;
	rc = client_report_result(response, result, err);
	json_decref(response);
	if (rc != 0)
		memset(result, 0, sizeof *result);
	return rc;
}

/* ---- Effects ------------------------------------------------------------- */

static int	client_int(json_t *, const char *, int64_t *, int,
		    struct idem_error *);

void
idem_effect_clear(struct idem_effect *e)
{
	free(e->receipt);
	free(e->result);
	memset(e, 0, sizeof *e);
}

/* A JSON value from the caller's text (NULL: null). */
static json_t *
client_json_text(const char *text, const char *field, struct idem_error *err)
{
	json_error_t	 jerr;
	json_t		*v;

	if (text == NULL)
		return json_null();
	if ((v = json_loads(text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
	    &jerr)) == NULL) {
		client_error(err, IDEM_E_ARGUMENT, "%s is not JSON: %s", field,
		    jerr.text);
		snprintf(err->field, sizeof err->field, "%s", field);
	}
	return v;
}

/* A request {op, client_submission_id, effect_kind}. */
static json_t *
client_effect_request(enum idem_op_code op, const char *id, const char *kind,
    struct idem_error *err)
{
	json_t	*request;

	if (id == NULL || kind == NULL) {
		client_error(err, IDEM_E_ARGUMENT,
		    "client_submission_id and effect_kind are required");
		return NULL;
	}
	if ((request = client_request_new(op, NULL, NULL, NULL, id,
	    err)) == NULL)
		return NULL;
	if (client_set(request, "effect_kind", client_string(kind,
	    "effect_kind", err), err) != 0) {
		json_decref(request);
		return NULL;
	}
	return request;
}

/* The facts of an answer (its top level, existing, or receipt) into out. */
static int
client_effect_facts(json_t *j, struct idem_effect *out, struct idem_error *err)
{
	int64_t	attempt = 0;

	if (!json_is_object(j))
		return 0;
	if (client_copy(j, "fence", out->fence, sizeof out->fence, 0,
	    err) != 0 ||
	    client_copy(j, "external_key", out->external_key,
	    sizeof out->external_key, 0, err) != 0 ||
	    client_copy(j, "state", out->state, sizeof out->state, 0,
	    err) != 0 ||
	    client_copy(j, "request_digest", out->request_digest,
	    sizeof out->request_digest, 0, err) != 0 ||
	    client_copy(j, "lease_expires_at", out->lease_expires_at,
	    sizeof out->lease_expires_at, 0, err) != 0 ||
	    client_copy(j, "committed_at", out->committed_at,
	    sizeof out->committed_at, 0, err) != 0 ||
	    client_int(j, "attempt", &attempt, 0, err) != 0)
		return -1;
	if (attempt > 0)
		out->attempt = (unsigned)attempt;
	return 0;
}

/* Any effect op's answer into out; 0 if it is one the op may give. */
static int
client_effect_answer(json_t *response, struct idem_effect *out,
    struct idem_error *err)
{
	json_t			*receipt = json_object_get(response, "receipt");
	const char		*disposition;
	enum client_disposition	 code;

	disposition = json_string_value(json_object_get(response,
	    "disposition"));
	if (client_bool(response, "action_taken", &out->action_taken,
	    err) != 0 || client_bool(response, "recovered", &out->recovered,
	    err) != 0 || client_effect_facts(response, out, err) != 0 ||
	    client_effect_facts(json_object_get(response, "existing"), out,
	    err) != 0 || client_effect_facts(receipt, out, err) != 0)
		return -1;
	if (disposition != NULL) {
		if ((code = client_disposition(disposition)) !=
		    CLIENT_DISPOSITION_NONE)
			out->disposition = client_effect_dispositions[code];
	} else if (json_is_true(json_object_get(response, "ok"))) {
		if (strcmp(out->state, "committed") == 0)
			out->disposition = IDEM_EFFECT_COMMITTED;
		else if (strcmp(out->state, "released") == 0)
			out->disposition = IDEM_EFFECT_RELEASED;
		else if (strcmp(out->state, "outcome_unknown") == 0)
			out->disposition = IDEM_EFFECT_OUTCOME_UNKNOWN;
	}
	if (json_is_object(receipt)) {
		out->receipt = json_dumps(receipt, JSON_COMPACT |
		    JSON_PRESERVE_ORDER);
		out->result = json_dumps(json_object_get(receipt, "result"),
		    JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
		if (out->receipt == NULL || out->result == NULL) {
			client_error(err, IDEM_E_NOMEM, "out of memory");
			return -1;
		}
	}
	if (!json_is_true(json_object_get(response, "ok"))) {
		client_wire_error(response, err);
		/* Only a disposition makes a refusal an answer. */
		if (disposition == NULL)
			out->disposition = IDEM_EFFECT_NONE;
	}
	return out->disposition == IDEM_EFFECT_NONE ? -1 : 0;
}

/* Send request (consumed) and take the answer into out. */
static int
client_effect_call(struct idem_conn *conn, json_t *request,
    struct idem_effect *out, struct idem_error *err)
{
	json_t	*response;
	int	 rc;

	if (request == NULL)
		return -1;
	response = client_call_json(conn, request, err);
	json_decref(request);
	if (response == NULL)
		return -1;
	rc = client_effect_answer(response, out, err);
	json_decref(response);
	return rc;
}

int
idem_effect_begin(struct idem_conn *conn, const char *client_submission_id,
    const char *effect_kind, const char *request_json, int64_t lease_ms,
    struct idem_effect *out, struct idem_error *err)
{
	struct idem_error	 scratch;
	json_t			*request, *value;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	memset(out, 0, sizeof *out);
	if (request_json == NULL) {
		client_error(err, IDEM_E_ARGUMENT, "request is required");
		return -1;
	}
	request = client_effect_request(IDEM_OPC_EFFECT_BEGIN,
	    client_submission_id, effect_kind, err);
	if (request == NULL)
		return -1;
	if ((value = client_json_text(request_json, "request", err)) == NULL ||
	    client_set(request, "request", value, err) != 0 ||
	    (lease_ms > 0 && client_set(request, "lease_ms",
	    json_integer(lease_ms), err) != 0)) {
		json_decref(request);
		return -1;
	}
	return client_effect_call(conn, request, out, err);
}

int
idem_effect_complete(struct idem_conn *conn, const char *client_submission_id,
    const char *effect_kind, const char *fence, int applied,
    const char *result_json, struct idem_effect *out, struct idem_error *err)
{
	struct idem_error	 scratch;
	json_t			*request, *value = NULL;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	memset(out, 0, sizeof *out);
	if (fence == NULL) {
		client_error(err, IDEM_E_ARGUMENT, "fence is required");
		return -1;
	}
	request = client_effect_request(IDEM_OPC_EFFECT_COMPLETE,
	    client_submission_id, effect_kind, err);
	if (request == NULL)
		return -1;
	if (client_set(request, "fence", client_string(fence, "fence", err),
	    err) != 0 || client_set(request, "outcome", json_string(applied ?
	    "applied" : "not_applied"), err) != 0 ||
	    (applied && ((value = client_json_text(result_json, "result",
	    err)) == NULL || client_set(request, "result", value,
	    err) != 0))) {
		json_decref(request);
		return -1;
	}
	return client_effect_call(conn, request, out, err);
}

int
idem_effect_resolve(struct idem_conn *conn, const char *client_submission_id,
    const char *effect_kind, enum idem_effect_observed observed,
    const char *result_json, const char *source, struct idem_effect *out,
    struct idem_error *err)
{
	static const char *const names[] = {
		"applied", "not_applied", "unknown"
	};
	struct idem_error	 scratch;
	json_t			*request, *evidence, *value;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	memset(out, 0, sizeof *out);
	if ((unsigned)observed >= nitems(names)) {
		client_error(err, IDEM_E_ARGUMENT, "observed is out of range");
		return -1;
	}
	request = client_effect_request(IDEM_OPC_EFFECT_RESOLVE,
	    client_submission_id, effect_kind, err);
	if (request == NULL)
		return -1;
	if ((evidence = json_object()) == NULL ||
	    client_set(evidence, "observed", json_string(names[observed]),
	    err) != 0 ||
	    (observed == IDEM_OBSERVED_APPLIED && ((value = client_json_text(
	    result_json, "result", err)) == NULL || client_set(evidence,
	    "result", value, err) != 0)) ||
	    (source != NULL && client_set(evidence, "source",
	    client_string(source, "source", err), err) != 0) ||
	    client_set(request, "evidence", evidence, err) != 0) {
		if (evidence == NULL)
			client_error(err, IDEM_E_NOMEM, "out of memory");
		json_decref(request);
		return -1;
	}
	return client_effect_call(conn, request, out, err);
}

int
idem_effect_run(struct idem_conn *conn, const char *client_submission_id,
    const char *effect_kind, const char *request_json, int64_t lease_ms,
    idem_effect_perform_fn perform, idem_effect_probe_fn probe, void *arg,
    struct idem_effect *out, struct idem_error *err)
{
	struct idem_error		 scratch;
	struct idem_effect		 begun;
	enum idem_effect_observed	 seen;
	char				*result, *source, fence[sizeof begun.fence];
	int				 rounds, rc;

	if (err == NULL)
		err = &scratch;
	memset(out, 0, sizeof *out);
	if (perform == NULL) {
		memset(err, 0, sizeof *err);
		client_error(err, IDEM_E_ARGUMENT, "perform is required");
		return -1;
	}
	/* A second round only after evidence said "not applied". */
	for (rounds = 0; rounds < 2; rounds++) {
		idem_effect_clear(out);
		if (idem_effect_begin(conn, client_submission_id, effect_kind,
		    request_json, lease_ms, out, err) != 0)
			return -1;
		switch (out->disposition) {
		case IDEM_EFFECT_REUSED:
			return 0;
		case IDEM_EFFECT_PROCEED:
			result = NULL;
			seen = perform(out, &result, arg);
			if (seen == IDEM_OBSERVED_UNKNOWN) {
				free(result);
				client_error(err, IDEM_E_OUTCOME_UNKNOWN,
				    "perform could not tell whether the effect "
				    "happened; it is settled by evidence "
				    "(effect_resolve) once its lease lapses");
				return -1;
			}
			begun = *out;
			begun.receipt = begun.result = NULL;
			snprintf(fence, sizeof fence, "%s", begun.fence);
			idem_effect_clear(out);
			rc = idem_effect_complete(conn, client_submission_id,
			    effect_kind, fence, seen == IDEM_OBSERVED_APPLIED,
			    result, out, err);
			free(result);
			if (rc != 0) {
				/* Where it stopped: performed, not reported. */
				idem_effect_clear(out);
				*out = begun;
				return -1;
			}
			return out->disposition == IDEM_EFFECT_COMMITTED ||
			    out->disposition == IDEM_EFFECT_RELEASED ? 0 : -1;
		case IDEM_EFFECT_OUTCOME_UNKNOWN:
			if (probe == NULL)
				return -1;
			result = source = NULL;
			seen = probe(out, &result, &source, arg);
			if (seen == IDEM_OBSERVED_UNKNOWN) {
				free(result);
				free(source);
				return -1;	/* err: outcome_unknown */
			}
			idem_effect_clear(out);
			rc = idem_effect_resolve(conn, client_submission_id,
			    effect_kind, seen, result, source, out, err);
			free(result);
			free(source);
			if (rc != 0)
				return -1;
			if (out->disposition == IDEM_EFFECT_COMMITTED)
				return 0;
			if (out->disposition != IDEM_EFFECT_RELEASED)
				return -1;
			continue;	/* not applied: perform it now */
		default:		/* conflict, in_progress */
			return -1;
		}
	}
	return -1;
}

/* ---- get_submission, diagnose, stats ------------------------------------ */

/* A read-only op's answer: an ok:false one becomes err. */
static json_t *
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
		return NULL;
	}
	return response;
}

static int
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

/* A boolean that may be null; absent is an error unless optional. */
static int
client_tribool(json_t *object, const char *key, enum idem_tribool *out,
    int required, struct idem_error *err)
{
	json_t	*v = json_object_get(object, key);

	if ((v == NULL && !required) || json_is_null(v))
		*out = IDEM_TRIBOOL_NULL;
	else if (json_is_boolean(v))
		*out = json_is_true(v) ? IDEM_TRIBOOL_TRUE : IDEM_TRIBOOL_FALSE;
	else {
		client_error(err, IDEM_E_PROTOCOL,
		    "response %s is not a boolean or null", key);
		return -1;
	}
	return 0;
}

/* The state's name as sent, and what this library makes of it. */
static int
client_state(json_t *object, char *name, size_t size, enum idem_state *state,
    struct idem_error *err)
{
	static const struct {
		const char	*name;
		enum idem_state	 state;
	} states[] = {
		{ "reserved", IDEM_STATE_RESERVED },
		{ "task_created", IDEM_STATE_TASK_CREATED },
		{ "committed", IDEM_STATE_COMMITTED },
	};
	size_t	i;

	if (client_copy(object, "state", name, size, 1, err) != 0)
		return -1;
	*state = IDEM_STATE_UNKNOWN;
	for (i = 0; i < nitems(states); i++)
		if (strcmp(name, states[i].name) == 0)
			*state = states[i].state;
	return 0;
}

static int
client_submission(json_t *s, struct idem_submission *sub,
    struct idem_error *err)
{
	json_t	*receipt;

	if (!json_is_object(s)) {
		client_error(err, IDEM_E_PROTOCOL,
		    "found without a submission object");
		return -1;
	}
	if (client_copy(s, "client_submission_id", sub->client_submission_id,
	    sizeof sub->client_submission_id, 1, err) != 0 ||
	    client_state(s, sub->state_name, sizeof sub->state_name,
	    &sub->state, err) != 0 ||
	    client_copy(s, "digest_schema", sub->digest_schema,
	    sizeof sub->digest_schema, 1, err) != 0 ||
	    client_copy(s, "request_digest", sub->request_digest,
	    sizeof sub->request_digest, 1, err) != 0 ||
	    client_copy(s, "task_id", sub->task_id, sizeof sub->task_id, 1,
	    err) != 0 ||
	    client_copy(s, "task_path", sub->task_path, sizeof sub->task_path,
	    1, err) != 0 ||
	    client_copy(s, "reserved_at", sub->reserved_at,
	    sizeof sub->reserved_at, 1, err) != 0 ||
	    client_copy(s, "updated_at", sub->updated_at,
	    sizeof sub->updated_at, 1, err) != 0 ||
	    client_copy(s, "current_path", sub->current_path,
	    sizeof sub->current_path, 0, err) != 0)
		return -1;
	if ((receipt = json_object_get(s, "receipt")) != NULL) {
		if (client_receipt(receipt, &sub->receipt, err) != 0)
			return -1;
		sub->has_receipt = 1;
	}
	return 0;
}

int
idem_get_submission(struct idem_conn *conn, const char *client_submission_id,
    int *found, struct idem_submission *sub, struct idem_error *err)
{
	struct idem_error	 scratch;
	json_t			*request, *response, *f;
	int			 rc = -1;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	memset(sub, 0, sizeof *sub);
	*found = 0;
	if (client_submission_id == NULL) {
		client_error(err, IDEM_E_ARGUMENT,
		    "client_submission_id is required");
		return -1;
	}
	if ((request = client_request_new(IDEM_OPC_GET_SUBMISSION, NULL, NULL,
	    NULL, client_submission_id, err)) == NULL)
		return -1;
	if ((response = client_call_ok(conn, request, err)) == NULL)
		return -1;
	f = json_object_get(response, "found");
	if (!json_is_boolean(f))
		client_error(err, IDEM_E_PROTOCOL,
		    "response found is not a boolean");
	else if (json_is_false(f))
		rc = 0;
	else if (client_submission(json_object_get(response, "submission"),
	    sub, err) == 0) {
		*found = 1;
		rc = 0;
	}
	json_decref(response);
	if (rc != 0)
		memset(sub, 0, sizeof *sub);
	return rc;
}

static int
client_diagnose_entry(json_t *j, struct idem_diagnose_entry *e,
    struct idem_error *err)
{
	json_t	*stalled;

	if (!json_is_object(j)) {
		client_error(err, IDEM_E_PROTOCOL,
		    "a diagnose entry is not an object");
		return -1;
	}
	stalled = json_object_get(j, "stalled");
	if (!json_is_boolean(stalled)) {
		client_error(err, IDEM_E_PROTOCOL,
		    "response stalled is not a boolean");
		return -1;
	}
	e->stalled = json_is_true(stalled);
	if (client_copy(j, "client_submission_id", e->client_submission_id,
	    sizeof e->client_submission_id, 1, err) != 0 ||
	    client_state(j, e->state_name, sizeof e->state_name, &e->state,
	    err) != 0 ||
	    client_int(j, "age_ms", &e->age_ms, 1, err) != 0 ||
	    client_copy(j, "task_id", e->task_id, sizeof e->task_id, 1,
	    err) != 0 ||
	    client_copy(j, "task_path", e->task_path, sizeof e->task_path, 1,
	    err) != 0 ||
	    client_tribool(j, "task_exists", &e->task_exists, 1, err) != 0 ||
	    client_tribool(j, "request_digest_matches",
	    &e->request_digest_matches, 1, err) != 0 ||
	    client_tribool(j, "file_digest_matches", &e->file_digest_matches,
	    1, err) != 0 ||
	    client_tribool(j, "in_flight", &e->in_flight, 0, err) != 0)
		return -1;
	return 0;
}

int
idem_diagnose(struct idem_conn *conn, int64_t stale_after_ms,
    struct idem_diagnosis *diagnosis, struct idem_error *err)
{
	struct idem_error	 scratch;
	json_t			*request, *response, *entries, *counts;
	size_t			 i;
	int			 rc = -1;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	memset(diagnosis, 0, sizeof *diagnosis);
	if (stale_after_ms < -1) {
		client_error(err, IDEM_E_ARGUMENT,
		    "stale_after_ms must be -1 or at least 0");
		return -1;
	}
	request = stale_after_ms == -1 ? json_pack("{ss}", "op",
	    idem_op_names[IDEM_OPC_DIAGNOSE]) : json_pack("{sssI}", "op",
	    idem_op_names[IDEM_OPC_DIAGNOSE], "stale_after_ms",
	    (json_int_t)stale_after_ms);
	if ((response = client_call_ok(conn, request, err)) == NULL)
		return -1;
	entries = json_object_get(response, "entries");
	counts = json_object_get(response, "counts");
	if (!json_is_array(entries) || !json_is_object(counts)) {
		client_error(err, IDEM_E_PROTOCOL,
		    "response lacks the entries array or the counts object");
		goto done;
	}
	if (client_int(counts, "reserved", &diagnosis->reserved, 1,
	    err) != 0 ||
	    client_int(counts, "task_created", &diagnosis->task_created, 1,
	    err) != 0 ||
	    client_int(counts, "committed", &diagnosis->committed, 1,
	    err) != 0)
		goto done;
	if (json_array_size(entries) > 0 &&
	    (diagnosis->entries = calloc(json_array_size(entries),
	    sizeof *diagnosis->entries)) == NULL) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		goto done;
	}
	for (i = 0; i < json_array_size(entries); i++)
		if (client_diagnose_entry(json_array_get(entries, i),
		    &diagnosis->entries[i], err) != 0)
			goto done;
	diagnosis->count = i;
	rc = 0;

done:
	json_decref(response);
	if (rc != 0)
		idem_diagnosis_free(diagnosis);
	return rc;
}

void
idem_diagnosis_free(struct idem_diagnosis *diagnosis)
{
	if (diagnosis == NULL)
		return;
	free(diagnosis->entries);
	memset(diagnosis, 0, sizeof *diagnosis);
}

#define CLIENT_STAT(member, required) { #member,			\
	offsetof(struct idem_stats, member), required }
static const struct {
	const char	*key;
	size_t		 offset;
	int		 required;	/* SPEC.md lists it */
} client_stats_fields[] = {
	CLIENT_STAT(created, 1),
	CLIENT_STAT(reused, 1),
	CLIENT_STAT(conflict, 1),
	CLIENT_STAT(legacy_created, 1),
	CLIENT_STAT(errors, 1),
	CLIENT_STAT(journal_records, 1),
	CLIENT_STAT(journal_fsyncs, 1),
	CLIENT_STAT(table_used, 1),
	CLIENT_STAT(table_capacity, 1),
	CLIENT_STAT(workers, 1),
	CLIENT_STAT(worker_restarts, 1),
	CLIENT_STAT(uptime_ms, 1),
	CLIENT_STAT(reports_created, 0),
	CLIENT_STAT(reports_deduplicated, 0),
};
#undef CLIENT_STAT

int
idem_stats(struct idem_conn *conn, struct idem_stats *stats,
    struct idem_error *err)
{
	struct idem_error	 scratch;
	json_t			*response;
	int64_t			*counter;
	size_t			 i;
	int			 rc = 0;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	memset(stats, 0, sizeof *stats);
	if ((response = client_call_ok(conn, json_pack("{ss}", "op",
	    idem_op_names[IDEM_OPC_STATS]), err)) == NULL)
		return -1;
	for (i = 0; i < nitems(client_stats_fields) && rc == 0; i++) {
		counter = (int64_t *)((char *)stats +
		    client_stats_fields[i].offset);
		*counter = -1;
		rc = client_int(response, client_stats_fields[i].key, counter,
		    client_stats_fields[i].required, err);
	}
	json_decref(response);
	if (rc != 0)
		memset(stats, 0, sizeof *stats);
	return rc;
}

/* ---- Submission ids and the retry helper -------------------------------- */

int
idem_submission_id_new(char out[IDEM_SUBMISSION_ID_SIZE])
{
	unsigned char	bytes[CLIENT_SUBMISSION_ID_RANDOM_BYTES];

	/* Thread-safe, and a no-op after the first success. */
	if (sodium_init() < 0) {
		errno = EAGAIN;
		return -1;
	}
	randombytes_buf(bytes, sizeof bytes);
	sodium_bin2base64(out, IDEM_SUBMISSION_ID_SIZE, bytes, sizeof bytes,
	    sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	return 0;
}

static int64_t
client_now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Only what can change on its own is worth another try: the broker
 * coming back, a submission in flight finishing, storage recovering.
 * The three codes are retryable by SPEC.md whatever the flag says;
 * internal is retryable only when the broker says so, and so is
 * table_full (in-flight work past --capacity: it drains, and a
 * checkpoint makes committed entries evictable, and the result
 * arena's space reusable; a result larger than the arena is not
 * retryable).
 */
static int
client_retry_worth(const struct idem_error *err)
{
	switch (err->code) {
	case IDEM_E_TRANSPORT:
	case IDEM_E_IN_PROGRESS:
	case IDEM_E_STORAGE_UNAVAILABLE:
	case IDEM_E_SHUTTING_DOWN:
	case IDEM_E_TOO_MANY_CONNECTIONS:
		return 1;
	case IDEM_E_INTERNAL:
	case IDEM_E_TABLE_FULL:
		return err->retryable;
	default:
		return 0;
	}
}

/* Full jitter: uniform in [0, min(max, base * 2^(attempt - 1))]. */
static int64_t
client_backoff_ms(const struct idem_retry_policy *p, unsigned attempt)
{
	uint64_t	cap = p->base_delay_ms;
	unsigned	i;

	for (i = 1; i < attempt && cap < p->max_delay_ms; i++)
		cap *= 2;
	if (cap > p->max_delay_ms)
		cap = p->max_delay_ms;
	if (cap >= UINT32_MAX)
		cap = UINT32_MAX - 1;
	return randombytes_uniform((uint32_t)cap + 1);
}

static void
client_sleep_ms(int64_t ms)
{
	struct timespec	ts, rest;

	ts.tv_sec = ms / 1000;
	ts.tv_nsec = (ms % 1000) * 1000000;
	while (nanosleep(&ts, &rest) == -1 && errno == EINTR)
		ts = rest;
}

int
idem_write_task_retry(const char *socket_path,
    const char *client_submission_id, const struct idem_task *task,
    const struct idem_retry_policy *policy, struct idem_write_result *result,
    struct idem_error *err)
{
	struct idem_retry_policy	 p;
	struct idem_error		 scratch;
	struct idem_conn		*conn = NULL;
	int64_t				 deadline, left, delay;
	unsigned			 attempts = 0;
	int				 rc = -1;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	memset(result, 0, sizeof *result);
	if (client_submission_id == NULL) {
		client_error(err, IDEM_E_ARGUMENT, "a retried write needs a "
		    "client_submission_id: a legacy call is not idempotent");
		snprintf(err->field, sizeof err->field, "client_submission_id");
		return -1;
	}
	memset(&p, 0, sizeof p);
	if (policy != NULL)
		p = *policy;
	if (p.max_attempts == 0)
		p.max_attempts = IDEM_RETRY_MAX_ATTEMPTS;
	if (p.base_delay_ms == 0)
		p.base_delay_ms = IDEM_RETRY_BASE_DELAY_MS;
	if (p.max_delay_ms == 0)
		p.max_delay_ms = IDEM_RETRY_MAX_DELAY_MS;
	if (p.deadline_ms == 0)
		p.deadline_ms = IDEM_RETRY_DEADLINE_MS;
	if (sodium_init() < 0) {
		client_error(err, IDEM_E_NOMEM, "libsodium did not initialise");
		return -1;
	}
	deadline = client_now_ms() + p.deadline_ms;

	for (;;) {
		attempts++;
		left = deadline - client_now_ms();
		if (left < 1)
			left = 1;
		if (conn == NULL)
			conn = client_connect(socket_path, left, err);
		else if (client_timeout(conn->fd, left, err) != 0) {
			idem_close(conn);
			conn = NULL;
		}
		if (conn != NULL && (rc = client_write_task(conn,
		    client_submission_id, task, result, err)) == 0)
			break;
		if (!client_retry_worth(err))
			break;
		/*
		 * A lost stream is closed already; a broker that is shutting
		 * down will not serve this stream again, its successor will
		 * listen on a new one; a refused connection was closed by
		 * the broker after its one line.
		 */
		if (conn != NULL && (conn->fd == -1 ||
		    err->code == IDEM_E_SHUTTING_DOWN ||
		    err->code == IDEM_E_TOO_MANY_CONNECTIONS)) {
			idem_close(conn);
			conn = NULL;
		}
		if (attempts >= p.max_attempts)
			break;
		delay = client_backoff_ms(&p, attempts);
		/* A try needs time to run: none is left after this sleep. */
		if (delay >= deadline - client_now_ms())
			break;
		client_sleep_ms(delay);
	}
	idem_close(conn);
	result->attempts = attempts;
	return rc;
}
