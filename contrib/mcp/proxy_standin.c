/* SPDX-License-Identifier: ISC */
/*
 * proxy_standin.c: the stand-ins of idem-mcp proxy, committed instead of
 * a wrapped call's result that the ledger cannot keep (SPEC.md, "The MCP
 * proxy"; doc/mcp-proxy.md): larger than IDEM_MAX_EFFECT_RESULT_BYTES
 * ({"result_too_large":true,...}) or holding U+0000, which no string in
 * a request to idem may hold ({"result_not_storable":"U+0000",...}: the
 * name is this proxy's).  It owns telling such a result, building its
 * stand-in (its size, sha256 and the start of its text), and telling a
 * stored stand-in from a result: only the exact shape it builds is one.
 * It never talks to the broker or to either side: proxy_call.c does.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <string.h>

#include <jansson.h>
#include <sodium.h>

#include "protocol.h"
#include "proxy.h"

#define STANDIN_MEMBERS	4	/* the marker, bytes, sha256, text_start */

/* U+FFFD, the replacement character, as UTF-8. */
static const char	 standin_fffd[] = "\xef\xbf\xbd";

/*
 * Does the result's JSON text hold U+0000 (the escape \u0000: jansson
 * writes it so, in strings and keys alike)?  A backslash is seen only
 * in a string, and each escapes the character after it, so that
 * \\u0000 (a backslash, then u0000) is not one.
 */
static int
standin_holds_nul(const char *text, size_t length)
{
	size_t	i;

	for (i = 0; i + 1 < length; i++)
		if (text[i] == '\\') {
			if (text[i + 1] == 'u' && i + 5 < length &&
			    memcmp(text + i + 2, "0000", 4) == 0)
				return 1;
			i++;
		}
	return 0;
}

enum proxy_not_kept
proxy_not_kept(const char *text, size_t length)
{
	if (length > IDEM_MAX_EFFECT_RESULT_BYTES)
		return PROXY_TOO_LARGE;
	if (standin_holds_nul(text, length))
		return PROXY_NOT_STORABLE;
	return PROXY_KEPT;
}

/*
 * The start of the result's text content, at most
 * PROXY_STANDIN_TEXT_BYTES, cut on a character boundary; U+0000 is
 * written U+FFFD, which the ledger keeps and which shows where one was.
 * Only the bytes copied are looked at: the cut once read the byte after
 * them, never copied, and a character across the cut made the text
 * invalid UTF-8, the stand-in impossible.  NULL: out of memory.
 */
static json_t *
standin_text_start(json_t *result)
{
	json_t			*item;
	char			 buf[PROXY_STANDIN_TEXT_BYTES];
	const unsigned char	*text;
	size_t			 i, j, n, length = 0;

	json_array_foreach(json_object_get(result, "content"), i, item) {
		if ((text = (const unsigned char *)json_string_value(
		    json_object_get(item, "text"))) == NULL)
			continue;
		n = json_string_length(json_object_get(item, "text"));
		for (j = 0; j < n; j++) {
			if (text[j] == '\0' && length + 3 <= sizeof buf) {
				memcpy(buf + length, standin_fffd, 3);
				length += 3;
				continue;
			}
			if (text[j] == '\0' || length == sizeof buf) {
				/*
				 * Full.  Cut in a character (text is
				 * UTF-8): drop its bytes kept so far.
				 */
				if ((text[j] & 0xc0) == 0x80) {
					while (length > 0 &&
					    ((unsigned char)buf[length - 1] &
					    0xc0) == 0x80)
						length--;
					if (length > 0)
						length--;
				}
				return json_stringn(buf, length);
			}
			buf[length++] = (char)text[j];
		}
	}
	return json_stringn(buf, length);
}

char *
proxy_standin(enum proxy_not_kept why, json_t *result, const char *text,
    size_t length, const char **failed)
{
	unsigned char	 hash[crypto_hash_sha256_BYTES];
	char		 hex[2 * crypto_hash_sha256_BYTES + 1];
	json_t		*start, *standin;
	char		*s;

	crypto_hash_sha256(hash, (const unsigned char *)text, length);
	sodium_bin2hex(hex, sizeof hex, hash, sizeof hash);
	if ((start = standin_text_start(result)) == NULL) {
		*failed = "the start of its text";
		return NULL;
	}
	standin = json_pack("{s:o, s:I, s:s, s:o}",
	    why == PROXY_TOO_LARGE ? "result_too_large" :
	    "result_not_storable",
	    why == PROXY_TOO_LARGE ? json_true() : json_string("U+0000"),
	    "bytes", (json_int_t)length, "sha256", hex, "text_start", start);
	if (standin == NULL) {
		*failed = "the stand-in";
		return NULL;
	}
	s = json_dumps(standin, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(standin);
	if (s == NULL)
		*failed = "the stand-in's JSON";
	return s;
}

/*
 * Is value exactly the stand-in proxy_standin builds: its marker, a
 * byte count, a sha256 in lowercase hex and a text, nothing else?  A
 * server's result that merely has such a member is a result.
 */
static enum proxy_not_kept
standin_shape(json_t *value)
{
	json_t		*bytes, *sha256, *marker;
	const char	*hex;
	size_t		 i;

	bytes = json_object_get(value, "bytes");
	sha256 = json_object_get(value, "sha256");
	if (!json_is_object(value) ||
	    json_object_size(value) != STANDIN_MEMBERS ||
	    !json_is_integer(bytes) || json_integer_value(bytes) < 0 ||
	    !json_is_string(json_object_get(value, "text_start")) ||
	    json_string_length(sha256) != 2 * crypto_hash_sha256_BYTES)
		return PROXY_KEPT;
	hex = json_string_value(sha256);
	for (i = 0; i < 2 * crypto_hash_sha256_BYTES; i++)
		if (!((hex[i] >= '0' && hex[i] <= '9') ||
		    (hex[i] >= 'a' && hex[i] <= 'f')))
			return PROXY_KEPT;
	if (json_is_true(json_object_get(value, "result_too_large")))
		return PROXY_TOO_LARGE;
	marker = json_object_get(value, "result_not_storable");
	if (json_is_string(marker) &&
	    strcmp(json_string_value(marker), "U+0000") == 0 &&
	    json_string_length(marker) == strlen("U+0000"))
		return PROXY_NOT_STORABLE;
	return PROXY_KEPT;
}

int
proxy_standin_told(const char *stored, const char *key, const char *kind,
    char *buf, size_t size)
{
	json_t			*value;
	enum proxy_not_kept	 why;
	const char		*start;

	value = json_loads(stored, JSON_DECODE_ANY, NULL);
	if ((why = standin_shape(value)) == PROXY_KEPT) {
		json_decref(value);
		return 0;
	}
	start = json_string_value(json_object_get(value, "text_start"));
	snprintf(buf, size, "This call was already applied (idempotency key "
	    "%s, effect %s); it was not performed again. Its result (%lld "
	    "bytes, sha256 %s) %s, so it cannot be shown again; the start of "
	    "its text was%s: %s", key, kind,
	    (long long)json_integer_value(json_object_get(value, "bytes")),
	    json_string_value(json_object_get(value, "sha256")),
	    why == PROXY_TOO_LARGE ? "was larger than idem's ledger keeps" :
	    "held the character U+0000 (NUL), which idem's ledger cannot "
	    "store",
	    /* Any U+FFFD there may be a U+0000 of the text: say so. */
	    strstr(start, standin_fffd) != NULL ?
	    " (U+0000 shown as U+FFFD)" : "", start);
	json_decref(value);
	return 1;
}
