/*
 * client.c: the calls of idem.h (SPEC.md, "Wire protocol").  A struct
 * idem_conn is one blocking Unix-socket stream: each call writes one
 * request line and reads one response line, keeping any bytes read past
 * it for the next call.  Any failure once a request is on its way
 * closes the stream, and the connection refuses further calls: the
 * unread answer could otherwise be taken for the reply to a later
 * request.  No global state: everything lives in the connection or on
 * the caller's stack.
 */
#include <sys/socket.h>
#include <sys/un.h>

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "idem.h"
#include "protocol.h"

#ifndef nitems
#define nitems(a)	(sizeof (a) / sizeof (a)[0])
#endif

#define CLIENT_READ_BYTES	4096	/* first size of the read buffer */

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

struct idem_conn *
idem_connect(const char *socket_path, struct idem_error *err)
{
	struct idem_error	 scratch;
	struct sockaddr_un	 sa;
	struct idem_conn	*conn;
	const char		*root;
	int			 fd, n;

	if (err == NULL)
		err = &scratch;
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
		return (NULL);
	}

	if ((fd = socket(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC, 0)) == -1) {
		client_error(err, IDEM_E_TRANSPORT, "socket: %s",
		    strerror(errno));
		return (NULL);
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == -1) {
		client_error(err, IDEM_E_TRANSPORT, "connect %s: %s",
		    sa.sun_path, strerror(errno));
		close(fd);
		return (NULL);
	}
	if ((conn = calloc(1, sizeof *conn)) == NULL) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		close(fd);
		return (NULL);
	}
	conn->fd = fd;
	return (conn);
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
client_send(int fd, const char *p, size_t length)
{
	ssize_t	n;

	while (length > 0) {
		if ((n = send(fd, p, length, MSG_NOSIGNAL)) == -1) {
			if (errno == EINTR)
				continue;
			return (-1);
		}
		p += n;
		length -= n;
	}
	return (0);
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
			return (-1);
		}
		if (conn->length == conn->size) {
			size = conn->size == 0 ? CLIENT_READ_BYTES :
			    conn->size * 2;
			if (size > IDEM_MAX_LINE_BYTES)
				size = IDEM_MAX_LINE_BYTES;
			if ((buf = realloc(conn->buf, size)) == NULL) {
				client_error(err, IDEM_E_NOMEM,
				    "out of memory");
				return (-1);
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
			    strerror(errno));
			return (-1);
		}
		conn->length += r;
	}

	n = nl - conn->buf;
	if (memchr(conn->buf, '\0', n) != NULL) {
		client_error(err, IDEM_E_PROTOCOL, "NUL byte in response");
		return (-1);
	}
	if ((*line = malloc(n + 1)) == NULL) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		return (-1);
	}
	memcpy(*line, conn->buf, n);
	(*line)[n] = '\0';
	conn->length -= n + 1;
	memmove(conn->buf, nl + 1, conn->length);
	return (0);
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
		return (-1);
	}
	if (length + 1 > IDEM_MAX_LINE_BYTES) {
		client_error(err, IDEM_E_ARGUMENT, "request over %d bytes",
		    IDEM_MAX_LINE_BYTES);
		return (-1);
	}
	if (conn->fd == -1) {
		client_error(err, IDEM_E_TRANSPORT,
		    "connection closed after an earlier error");
		return (-1);
	}
	if (client_send(conn->fd, request, length) != 0 ||
	    client_send(conn->fd, "\n", 1) != 0)
		client_error(err, IDEM_E_TRANSPORT, "send: %s",
		    strerror(errno));
	else if (client_read_line(conn, response, err) == 0)
		return (0);
	client_lost(conn);
	return (-1);
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
		return (NULL);
	}
	rc = idem_call_raw(conn, line, &answer, err);
	free(line);
	if (rc != 0)
		return (NULL);
	response = json_loads(answer, JSON_REJECT_DUPLICATES, &jerr);
	free(answer);
	if (response == NULL) {
		client_error(err, IDEM_E_PROTOCOL, "response: %s", jerr.text);
		return (NULL);
	}
	if (!json_is_object(response) ||
	    !json_is_boolean(json_object_get(response, "ok"))) {
		client_error(err, IDEM_E_PROTOCOL,
		    "response is not an object with a boolean ok");
		json_decref(response);
		return (NULL);
	}
	return (response);
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
			return (0);
		client_error(err, IDEM_E_PROTOCOL, "response lacks %s", key);
		return (-1);
	}
	if (!json_is_string(v) || (length = json_string_length(v)) >= size) {
		client_error(err, IDEM_E_PROTOCOL,
		    "response %s is not a string of under %zu bytes", key,
		    size);
		return (-1);
	}
	memcpy(out, json_string_value(v), length + 1);
	return (0);
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
		return (-1);
	}
	*out = json_is_true(v);
	return (0);
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
	if ((request = json_pack("{ss}", "op", "hello")) == NULL) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		return (-1);
	}
	response = client_call_json(conn, request, err);
	json_decref(request);
	if (response == NULL)
		return (-1);
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
	return (rc);
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
		return (v);
	if (errno == ENOMEM)
		client_error(err, IDEM_E_NOMEM, "out of memory");
	else {
		client_error(err, IDEM_E_ARGUMENT, "%s is not valid UTF-8",
		    field);
		snprintf(err->field, sizeof err->field, "%s", field);
	}
	return (NULL);
}

/* Set key to a new value, or fail (json_object_set_new frees it). */
static int
client_set(json_t *object, const char *key, json_t *value,
    struct idem_error *err)
{
	if (value == NULL)
		return (-1);
	if (json_object_set_new(object, key, value) != 0) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		return (-1);
	}
	return (0);
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
		return (NULL);
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
		return (NULL);
	}
	return (array);
}

/* The write_task request: only the fields the caller gave. */
static json_t *
client_task_request(const char *client_submission_id,
    const struct idem_task *task, struct idem_error *err)
{
	const struct {
		const char	*key;
		const char	*value;
	} strings[] = {
		{ "sender", task->sender },
		{ "recipient", task->recipient },
		{ "subject", task->subject },
		{ "body", task->body },
		{ "priority", task->priority },
		{ "risk_level", task->risk_level },
		{ "thread_key", task->thread_key },
		{ "parent", task->parent },
	};
	json_t	*request, *t;
	char	 field[64];
	size_t	 i;

	if ((task->references == NULL && task->references_count != 0) ||
	    (task->depends_on == NULL && task->depends_on_count != 0)) {
		client_error(err, IDEM_E_ARGUMENT,
		    "a list with a count has no items");
		return (NULL);
	}
	if ((request = json_object()) == NULL ||
	    (t = json_object()) == NULL) {
		json_decref(request);
		client_error(err, IDEM_E_NOMEM, "out of memory");
		return (NULL);
	}
	/* The request owns t from here, also when setting it fails. */
	if (client_set(request, "task", t, err) != 0 ||
	    client_set(request, "op", client_string("write_task", "op", err),
	    err) != 0 ||
	    (client_submission_id != NULL && client_set(request,
	    "client_submission_id", client_string(client_submission_id,
	    "client_submission_id", err), err) != 0))
		goto fail;
	for (i = 0; i < nitems(strings); i++) {
		if (strings[i].value == NULL)
			continue;
		snprintf(field, sizeof field, "task.%s", strings[i].key);
		if (client_set(t, strings[i].key, client_string(
		    strings[i].value, field, err), err) != 0)
			goto fail;
	}
	if ((task->references != NULL && client_set(t, "references",
	    client_list("references", task->references,
	    task->references_count, err), err) != 0) ||
	    (task->depends_on != NULL && client_set(t, "depends_on",
	    client_list("depends_on", task->depends_on,
	    task->depends_on_count, err), err) != 0))
		goto fail;
	return (request);

fail:
	json_decref(request);
	return (NULL);
}

static int
client_receipt(json_t *receipt, struct idem_receipt *r,
    struct idem_error *err)
{
	char	*raw;
	size_t	 i, length;

	if (!json_is_object(receipt)) {
		client_error(err, IDEM_E_PROTOCOL, "response lacks a receipt");
		return (-1);
	}
	for (i = 0; i < nitems(client_receipt_fields); i++)
		if (client_copy(receipt, client_receipt_fields[i].key,
		    (char *)r + client_receipt_fields[i].offset,
		    client_receipt_fields[i].size,
		    client_receipt_fields[i].required, err) != 0)
			return (-1);

	/* jansson keeps members in the order read: the broker's bytes. */
	raw = json_dumps(receipt, JSON_COMPACT|JSON_PRESERVE_ORDER);
	if (raw == NULL) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		return (-1);
	}
	if ((length = strlen(raw)) >= sizeof r->raw) {
		client_error(err, IDEM_E_PROTOCOL,
		    "receipt over %zu bytes", sizeof r->raw - 1);
		free(raw);
		return (-1);
	}
	memcpy(r->raw, raw, length + 1);
	free(raw);
	return (0);
}

static int
client_write_result(json_t *response, struct idem_write_result *result,
    struct idem_error *err)
{
	json_t		*existing;
	const char	*disposition;

	disposition = json_string_value(json_object_get(response,
	    "disposition"));
	if (client_bool(response, "action_taken", &result->action_taken,
	    err) != 0 ||
	    client_bool(response, "idempotent", &result->idempotent,
	    err) != 0 ||
	    client_bool(response, "recovered", &result->recovered, err) != 0)
		return (-1);

	if (!json_is_true(json_object_get(response, "ok"))) {
		if (disposition == NULL ||
		    strcmp(disposition, "conflict") != 0) {
			client_wire_error(response, err);
			return (-1);
		}
		existing = json_object_get(response, "existing");
		if (!json_is_object(existing)) {
			client_error(err, IDEM_E_PROTOCOL,
			    "conflict without an existing binding");
			return (-1);
		}
		if (client_copy(existing, "request_digest",
		    result->existing_request_digest,
		    sizeof result->existing_request_digest, 1, err) != 0 ||
		    client_copy(existing, "task_id", result->existing_task_id,
		    sizeof result->existing_task_id, 1, err) != 0)
			return (-1);
		/* Any other code is the broker's own error: pass it on. */
		client_wire_error(response, err);
		if (err->code != IDEM_E_CONFLICT)
			return (-1);
		result->disposition = IDEM_CONFLICT;
		return (0);
	}

	if (disposition == NULL || (strcmp(disposition, "created") != 0 &&
	    strcmp(disposition, "reused") != 0)) {
		client_error(err, IDEM_E_PROTOCOL,
		    "ok response without created or reused disposition");
		return (-1);
	}
	if (client_receipt(json_object_get(response, "receipt"),
	    &result->receipt, err) != 0)
		return (-1);
	result->disposition = strcmp(disposition, "created") == 0 ?
	    IDEM_CREATED : IDEM_REUSED;
	return (0);
}

int
idem_write_task(struct idem_conn *conn, const char *client_submission_id,
    const struct idem_task *task, struct idem_write_result *result,
    struct idem_error *err)
{
	struct idem_error	 scratch;
	json_t			*request, *response;
	int			 rc;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	memset(result, 0, sizeof *result);
	if ((request = client_task_request(client_submission_id, task,
	    err)) == NULL)
		return (-1);
	response = client_call_json(conn, request, err);
	json_decref(request);
	if (response == NULL)
		return (-1);
	rc = client_write_result(response, result, err);
	json_decref(response);
	if (rc != 0)
		memset(result, 0, sizeof *result);
	return (rc);
}
