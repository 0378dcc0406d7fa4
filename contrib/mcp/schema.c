/* SPDX-License-Identifier: ISC */
/*
 * schema.c: the subset of JSON Schema (2020-12) that idem-mcp's tool
 * schemas use, and the check of tool arguments against it.
 *
 * The schema a tool advertises is the one its arguments are checked
 * against, so the two cannot drift.  A keyword this file does not
 * implement would be advertised and silently not enforced: so
 * mcp_schema_check refuses any schema that holds one, and idem-mcp
 * refuses to start.  Checks of what only the broker knows (role codes,
 * byte limits) are left to the broker, which answers invalid_request
 * with the field; this file makes sure the shape is right, that every
 * required member is there (client_submission_id above all) and that no
 * member outside the schema reaches the broker.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "mcp.h"

#define SCHEMA_PATH_BYTES	256

/* Annotations: advertised, never enforced (nothing to enforce). */
static const char *const schema_annotations[] = {
	"title", "description", "default", "examples", NULL
};
static const char *const schema_keywords[] = {
	"type", "properties", "required", "additionalProperties", "items",
	"enum", "minLength", "maxLength", "minItems", "maxItems", "minimum",
	"maximum", "anyOf", NULL
};
static const char *const schema_types[] = {
	"object", "array", "string", "integer", "number", "boolean", "null",
	NULL
};

static int
schema_in(const char *s, const char *const *list)
{
	for (; *list != NULL; list++)
		if (strcmp(s, *list) == 0)
			return 1;
	return 0;
}

static int
schema_fail(char *why, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
schema_fail(char *why, size_t size, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(why, size, fmt, ap);
	va_end(ap);
	return -1;
}

static int
schema_check_at(json_t *schema, const char *path, char *why, size_t size)
{
	const char	*key;
	json_t		*v, *sub;
	char		 next[SCHEMA_PATH_BYTES];
	size_t		 i;

	if (!json_is_object(schema))
		return schema_fail(why, size, "%s: a schema must be an object",
		    path);
	json_object_foreach(schema, key, v) {
		if (schema_in(key, schema_annotations))
			continue;
		if (!schema_in(key, schema_keywords))
			return schema_fail(why, size,
			    "%s: keyword \"%s\" is not implemented", path, key);
	}
	if ((v = json_object_get(schema, "type")) != NULL) {
		if (json_is_string(v)) {
			if (!schema_in(json_string_value(v), schema_types))
				return schema_fail(why, size,
				    "%s: unknown type", path);
		} else if (json_is_array(v)) {
			json_array_foreach(v, i, sub)
				if (!json_is_string(sub) ||
				    !schema_in(json_string_value(sub),
				    schema_types))
					return schema_fail(why, size,
					    "%s: unknown type", path);
		} else
			return schema_fail(why, size, "%s: bad type", path);
	}
	if ((v = json_object_get(schema, "properties")) != NULL) {
		if (!json_is_object(v))
			return schema_fail(why, size,
			    "%s: properties is not an object", path);
		json_object_foreach(v, key, sub) {
			snprintf(next, sizeof next, "%s.%s", path, key);
			if (schema_check_at(sub, next, why, size) != 0)
				return -1;
		}
	}
	if ((v = json_object_get(schema, "required")) != NULL) {
		if (!json_is_array(v))
			return schema_fail(why, size,
			    "%s: required is not an array", path);
		json_array_foreach(v, i, sub)
			if (!json_is_string(sub))
				return schema_fail(why, size,
				    "%s: required holds a non-string", path);
	}
	if ((v = json_object_get(schema, "additionalProperties")) != NULL &&
	    !json_is_boolean(v) &&
	    schema_check_at(v, path, why, size) != 0)
		return -1;
	if ((v = json_object_get(schema, "items")) != NULL) {
		snprintf(next, sizeof next, "%s[]", path);
		if (schema_check_at(v, next, why, size) != 0)
			return -1;
	}
	if ((v = json_object_get(schema, "enum")) != NULL && !json_is_array(v))
		return schema_fail(why, size, "%s: enum is not an array", path);
	if ((v = json_object_get(schema, "anyOf")) != NULL) {
		if (!json_is_array(v) || json_array_size(v) == 0)
			return schema_fail(why, size,
			    "%s: anyOf is not a non-empty array", path);
		json_array_foreach(v, i, sub)
			if (schema_check_at(sub, path, why, size) != 0)
				return -1;
	}
	for (i = 0; i < 4; i++) {
		static const char *const counts[] = {
			"minLength", "maxLength", "minItems", "maxItems"
		};

		if ((v = json_object_get(schema, counts[i])) != NULL &&
		    (!json_is_integer(v) || json_integer_value(v) < 0))
			return schema_fail(why, size,
			    "%s: %s is not a count", path, counts[i]);
	}
	if (((v = json_object_get(schema, "minimum")) != NULL &&
	    !json_is_number(v)) ||
	    ((v = json_object_get(schema, "maximum")) != NULL &&
	    !json_is_number(v)))
		return schema_fail(why, size, "%s: bound is not a number",
		    path);
	return 0;
}

int
mcp_schema_check(json_t *schema, char *why, size_t size)
{
	return schema_check_at(schema, "schema", why, size);
}

static int
schema_type_is(const char *type, json_t *instance)
{
	if (strcmp(type, "object") == 0)
		return json_is_object(instance);
	if (strcmp(type, "array") == 0)
		return json_is_array(instance);
	if (strcmp(type, "string") == 0)
		return json_is_string(instance);
	if (strcmp(type, "integer") == 0)
		return json_is_integer(instance);
	if (strcmp(type, "number") == 0)
		return json_is_number(instance);
	if (strcmp(type, "boolean") == 0)
		return json_is_boolean(instance);
	return json_is_null(instance);
}

/* JSON Schema counts a string's length in code points. */
static size_t
schema_code_points(const char *s, size_t bytes)
{
	size_t	i, n = 0;

	for (i = 0; i < bytes; i++)
		if (((unsigned char)s[i] & 0xc0) != 0x80)
			n++;
	return n;
}

static int
schema_validate_at(json_t *schema, json_t *instance, const char *path,
    char *why, size_t size)
{
	const char	*key;
	json_t		*v, *sub, *item;
	char		 next[SCHEMA_PATH_BYTES];
	size_t		 i, n;
	int		 ok;

	if ((v = json_object_get(schema, "type")) != NULL) {
		if (json_is_string(v))
			ok = schema_type_is(json_string_value(v), instance);
		else {
			ok = 0;
			json_array_foreach(v, i, sub)
				ok |= schema_type_is(json_string_value(sub),
				    instance);
		}
		if (!ok) {
			if (json_is_string(v))
				return schema_fail(why, size,
				    "%s must be of type %s", path,
				    json_string_value(v));
			return schema_fail(why, size, "%s has the wrong type",
			    path);
		}
	}
	if ((v = json_object_get(schema, "anyOf")) != NULL) {
		ok = 0;
		json_array_foreach(v, i, sub)
			if (!ok && schema_validate_at(sub, instance, path, why,
			    size) == 0)
				ok = 1;
		if (!ok)
			return schema_fail(why, size,
			    "%s matches none of its allowed forms", path);
	}
	if ((v = json_object_get(schema, "enum")) != NULL) {
		ok = 0;
		json_array_foreach(v, i, sub)
			ok |= json_equal(sub, instance);
		if (!ok)
			return schema_fail(why, size,
			    "%s is not one of the allowed values", path);
	}
	if (json_is_string(instance)) {
		n = schema_code_points(json_string_value(instance),
		    json_string_length(instance));
		if ((v = json_object_get(schema, "minLength")) != NULL &&
		    n < (size_t)json_integer_value(v))
			return schema_fail(why, size,
			    "%s is shorter than %" JSON_INTEGER_FORMAT
			    " characters", path, json_integer_value(v));
		if ((v = json_object_get(schema, "maxLength")) != NULL &&
		    n > (size_t)json_integer_value(v))
			return schema_fail(why, size,
			    "%s is longer than %" JSON_INTEGER_FORMAT
			    " characters", path, json_integer_value(v));
	}
	if (json_is_number(instance)) {
		if ((v = json_object_get(schema, "minimum")) != NULL &&
		    json_number_value(instance) < json_number_value(v))
			return schema_fail(why, size, "%s is below %g", path,
			    json_number_value(v));
		if ((v = json_object_get(schema, "maximum")) != NULL &&
		    json_number_value(instance) > json_number_value(v))
			return schema_fail(why, size, "%s is above %g", path,
			    json_number_value(v));
	}
	if (json_is_array(instance)) {
		n = json_array_size(instance);
		if ((v = json_object_get(schema, "minItems")) != NULL &&
		    n < (size_t)json_integer_value(v))
			return schema_fail(why, size,
			    "%s has fewer than %" JSON_INTEGER_FORMAT " items",
			    path, json_integer_value(v));
		if ((v = json_object_get(schema, "maxItems")) != NULL &&
		    n > (size_t)json_integer_value(v))
			return schema_fail(why, size,
			    "%s has more than %" JSON_INTEGER_FORMAT " items",
			    path, json_integer_value(v));
		if ((v = json_object_get(schema, "items")) != NULL)
			json_array_foreach(instance, i, item) {
				snprintf(next, sizeof next, "%s[%zu]", path, i);
				if (schema_validate_at(v, item, next, why,
				    size) != 0)
					return -1;
			}
	}
	if (json_is_object(instance)) {
		if ((v = json_object_get(schema, "required")) != NULL)
			json_array_foreach(v, i, sub)
				if (json_object_get(instance,
				    json_string_value(sub)) == NULL)
					return schema_fail(why, size,
					    "%s.%s is required", path,
					    json_string_value(sub));
		json_object_foreach(instance, key, item) {
			snprintf(next, sizeof next, "%s.%s", path, key);
			sub = json_object_get(json_object_get(schema,
			    "properties"), key);
			if (sub == NULL)
				sub = json_object_get(schema,
				    "additionalProperties");
			if (json_is_false(sub))
				return schema_fail(why, size,
				    "%s is not a known field", next);
			if (json_is_object(sub) && schema_validate_at(sub,
			    item, next, why, size) != 0)
				return -1;
		}
	}
	return 0;
}

int
mcp_schema_validate(json_t *schema, json_t *instance, char *why, size_t size)
{
	return schema_validate_at(schema, instance, "arguments", why, size);
}
