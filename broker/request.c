/* SPDX-License-Identifier: ISC */
/*
 * request.c: turning a request line into a checked JSON object.
 * Validation is strict and happens before any state changes: every
 * failure names its wire code, the dotted path of the field and whether
 * a retry can help (a struct request_error, which reply.c sends).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <utf8proc.h>

#include "idemd.h"

/*
 * Messages quote the request (a key, an op, jansson's view of bad JSON)
 * and are cut to a size: either can leave invalid UTF-8, which a JSON
 * reply cannot carry.  Replace each byte that does not start a valid
 * character with '?'.
 */
static void
utf8_clean(char *s)
{
	utf8proc_int32_t	 c;
	utf8proc_ssize_t	 n;
	size_t			 left = strlen(s);

	while (left > 0) {
		n = utf8proc_iterate((const utf8proc_uint8_t *)s,
		    (utf8proc_ssize_t)left, &c);
		if (n <= 0) {
			*s = '?';
			n = 1;
		}
		s += n;
		left -= (size_t)n;
	}
}

int
request_error_set(struct request_error *err, enum wire_error code,
    const char *field, const char *fmt, ...)
{
	va_list	ap;

	err->code = code;
	err->retryable = 0;
	snprintf(err->field, sizeof err->field, "%s", field != NULL ? field : "");
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof err->message, fmt, ap);
	va_end(ap);
	utf8_clean(err->message);
	utf8_clean(err->field);
	return -1;
}

/* A key that can stand in a dotted field path as it is. */
static int
plain_name(const char *key)
{
	size_t	n;

	for (n = 0; key[n] != '\0'; n++) {
		if (!((key[n] >= 'a' && key[n] <= 'z') ||
		    (key[n] >= 'A' && key[n] <= 'Z') ||
		    (key[n] >= '0' && key[n] <= '9') || key[n] == '_'))
			return 0;
	}
	return n > 0 && n <= 32;
}

void
request_storage_error(struct request_error *err, int error, const char *what)
{
	request_error_set(err, WIRE_STORAGE_UNAVAILABLE, NULL, "%s: %s", what,
	    strerror(error));
	err->retryable = 1;
}

json_t *
request_parse(const char *line, size_t length, struct request_error *err)
{
	json_error_t	 error;
	json_t		*request;

	/*
	 * NULs inside strings are let through the parser so that they can be
	 * refused as invalid_request naming the field, as the contract says.
	 */
	request = json_loadb(line, length, JSON_REJECT_DUPLICATES |
	    JSON_ALLOW_NUL | JSON_DECODE_ANY, &error);
	if (request == NULL) {
		/*
		 * jansson refuses a member name with a NUL whatever the
		 * flags; the contract makes it invalid_request like any
		 * other string with a NUL.  The parser keeps no path.
		 */
		if (json_error_code(&error) == json_error_null_byte_in_key)
			request_error_set(err, WIRE_INVALID_REQUEST, NULL,
			    "a member name contains a NUL character (byte %d)",
			    error.position);
		else if (json_error_code(&error) == json_error_invalid_utf8)
			request_error_set(err, WIRE_INVALID_UTF8, NULL,
			    "the request is not valid UTF-8 (byte %d)",
			    error.position);
		else
			request_error_set(err, WIRE_INVALID_JSON, NULL,
			    "the request is not JSON: %s at byte %d",
			    error.text, error.position);
		return NULL;
	}
	if (!json_is_object(request)) {
		request_error_set(err, WIRE_INVALID_REQUEST, NULL,
		    "a request is a JSON object");
		json_decref(request);
		return NULL;
	}
	return request;
}

int
request_one_of(const char *value, const char *const *allowed)
{
	for (; *allowed != NULL; allowed++) {
		if (strcmp(value, *allowed) == 0)
			return 1;
	}
	return 0;
}

int
request_known_keys(json_t *object, const char *path,
    const char *const *allowed, struct request_error *err)
{
	const char		*key;
	const char *const	*a;
	json_t			*value;

	json_object_foreach(object, key, value) {
		for (a = allowed; *a != NULL; a++) {
			if (strcmp(*a, key) == 0)
				break;
		}
		if (*a == NULL) {
			char	field[sizeof err->field];

			/* A key that is no name is named by its parent. */
			if (!plain_name(key))
				snprintf(field, sizeof field, "%s", path);
			else if (path[0] != '\0')
				snprintf(field, sizeof field, "%s.%s", path,
				    key);
			else
				snprintf(field, sizeof field, "%s", key);
			return request_error_set(err, WIRE_INVALID_REQUEST,
			    field, "%s%shas no field \"%.64s\"", path,
			    path[0] != '\0' ? " " : "the request ", key);
		}
	}
	return 0;
}

int
request_string(json_t *object, const char *key, const char *path,
    size_t min, size_t max, int nullable, const char **value, size_t *length,
    struct request_error *err)
{
	json_t	*v = json_object_get(object, key);
	size_t	 n;

	*value = NULL;
	*length = 0;
	if (v == NULL || (nullable && json_is_null(v)))
		return 0;
	if (!json_is_string(v))
		return request_error_set(err, WIRE_INVALID_REQUEST, path,
		    "%s must be a string%s", path, nullable ? " or null" : "");
	n = json_string_length(v);
	if (memchr(json_string_value(v), '\0', n) != NULL)
		return request_error_set(err, WIRE_INVALID_REQUEST, path,
		    "%s contains a NUL character", path);
	if (n < min || n > max)
		return request_error_set(err, WIRE_INVALID_REQUEST, path,
		    "%s must be %zu to %zu bytes long (it is %zu)", path, min,
		    max, n);
	*value = json_string_value(v);
	*length = n;
	return 1;
}

/*
 * Whether v holds a string with a NUL; if so, path (which holds v's own
 * path) is left naming the member it is in.  Array items are named by
 * their array, and a name that is no plain name by its parent, as
 * request_known_keys names them; so is a member whose path would not
 * fit.  jansson bounds the depth of what it parsed.
 */
static int
request_nul_in(json_t *v, char *path, size_t size)
{
	const char	*key;
	json_t		*member;
	size_t		 i, n;

	switch (json_typeof(v)) {
	case JSON_STRING:
		return memchr(json_string_value(v), '\0',
		    json_string_length(v)) != NULL;
	case JSON_ARRAY:
		json_array_foreach(v, i, member) {
			if (request_nul_in(member, path, size))
				return 1;
		}
		return 0;
	case JSON_OBJECT:
		n = strlen(path);
		json_object_foreach(v, key, member) {
			if (plain_name(key) && n + 1 + strlen(key) < size)
				snprintf(path + n, size - n, "%s%s",
				    n > 0 ? "." : "", key);
			if (request_nul_in(member, path, size))
				return 1;
			path[n] = '\0';
		}
		return 0;
	default:
		return 0;
	}
}

/*
 * Whether the six bytes \u0000 occur anywhere in line (what memmem
 * answers), found from its backslashes: memchr skips a word at a time
 * to the few a request line has, where memmem hashed every pair of
 * bytes of every line.
 */
static int
line_has_nul_escape(const char *line, size_t length)
{
	const char	*p = line, *end = line + length;

	while (end - p >= 6 && (p = memchr(p, '\\',
	    (size_t)(end - p) - 5)) != NULL) {
		if (memcmp(p + 1, "u0000", 5) == 0)
			return 1;
		p++;
	}
	return 0;
}

int
request_envelope(json_t *request, const char *line, size_t length,
    json_t **id, const char **op, struct request_error *err)
{
	json_t	*v;
	char	 path[sizeof err->field];

	*id = json_object_get(request, "id");
	if (*id != NULL && (json_is_object(*id) || json_is_array(*id))) {
		*id = NULL;
		return request_error_set(err, WIRE_INVALID_REQUEST, "id",
		    "id must be a JSON scalar");
	}
	/* Not echoed: a reply with a NUL is one no client can read. */
	if (json_is_string(*id) && memchr(json_string_value(*id), '\0',
	    json_string_length(*id)) != NULL) {
		*id = NULL;
		return request_error_set(err, WIRE_INVALID_REQUEST, "id",
		    "id contains a NUL character");
	}
	v = json_object_get(request, "op");
	if (!json_is_string(v))
		return request_error_set(err, WIRE_INVALID_REQUEST, "op",
		    "op is required and must be a string");
	*op = json_string_value(v);
	/*
	 * No string anywhere in a request may hold a NUL (SPEC.md, "Wire
	 * protocol"), whatever the op: a result or a meta with one would be
	 * stored, and every later answer for its key would carry a string
	 * that libidem, idemctl and idem-mcp refuse to read.  One check
	 * here, before any op's, serves both stores; "hello\u0000x" is not
	 * hello either.  A parsed string holds a NUL only where the line
	 * has the escape \u0000 (jansson refuses raw control bytes, and a
	 * NUL in a key): without one in the line, no tree to walk.
	 */
	path[0] = '\0';
	if (line_has_nul_escape(line, length) &&
	    request_nul_in(request, path, sizeof path))
		return request_error_set(err, WIRE_INVALID_REQUEST, path,
		    "%s contains a NUL character (U+0000)",
		    path[0] != '\0' ? path : "the request");
	return 0;
}

int
request_submission_id(json_t *request, const char **id,
    struct request_error *err)
{
	size_t	length, i;
	int	rc;

	rc = request_string(request, "client_submission_id",
	    "client_submission_id", 1, IDEM_MAX_SUBMISSION_ID_BYTES, 1, id,
	    &length, err);
	if (rc <= 0)
		return rc;
	for (i = 0; i < length; i++) {
		unsigned char c = (unsigned char)(*id)[i];

		if (c < 0x21 || c > 0x7e)
			return request_error_set(err, WIRE_INVALID_REQUEST,
			    "client_submission_id", "client_submission_id "
			    "must be printable ASCII without spaces (byte %zu "
			    "is 0x%02x)", i, c);
	}
	return 1;
}

/*
 * IDEM_OPS's checks, without the handlers (optable.c has both): the
 * check of op idem_op_names[i] is request_checks[i].
 */
static const op_check_fn request_checks[IDEM_OPC_COUNT] = {
#define REQUEST_CHECK(sym, handler, check, flags)			\
	[IDEM_OPC_##sym] = check,
	IDEM_OPS(REQUEST_CHECK)
#undef REQUEST_CHECK
};

/*
 * Everything a worker checks of one request line before it changes any
 * state, without a worker: for fuzzing and tests.  0 if the request would
 * be carried out, -1 with err as the reply would say.
 */
int
request_check_line(const char *line, size_t length, struct request_error *err)
{
	json_t		*request, *id;
	const char	*name;
	size_t		 i;
	int		 rc;

	if ((request = request_parse(line, length, err)) == NULL)
		return -1;
	if ((rc = request_envelope(request, line, length, &id, &name,
	    err)) == 0) {
		for (i = 0; i < IDEM_OPC_COUNT; i++) {
			if (strcmp(idem_op_names[i], name) == 0)
				break;
		}
		if (i == IDEM_OPC_COUNT)
			rc = request_error_set(err, WIRE_UNKNOWN_OP, "op",
			    "unknown op \"%.64s\"", name);
		else if (request_checks[i] != NULL)
			rc = request_checks[i](request, err);
	}
	json_decref(request);
	return rc;
}
