/* SPDX-License-Identifier: ISC */
/*
 * proxy_raw.c: what idem-mcp proxy does with a client's line it cannot
 * handle as the messages it holds: JSON that jansson reads only loosely
 * (proxy_json_load: U+0000 in an object key, a UTF-16 surrogate not in
 * a pair, invalid UTF-8) or only with its integers as doubles (one past
 * 64 bits), and a line nothing reads.  Such a line passes as the bytes
 * it came in, or is refused, each request in it answered here: a call
 * that must be keyed (proxy_call_must_key, which proxy.c asks too of a
 * call with a null id) cannot be keyed as sent, and a request whose id
 * is in the proxy's own form cannot be sent under one of ours.  It owns
 * no state, and never rewrites a line it passes.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include <jansson.h>

#include "proxy.h"

/*
 * Must this call be keyed whatever else, so that one the proxy cannot
 * serve on a thread of its own (no id to answer it under, a line jansson
 * cannot read exactly) is refused rather than passed?  Its tool is
 * wrapped, or not listed yet, or the listing passes it but the call
 * carries a key (PROXY_LOOKUP): the ledger may hold that key, and only a
 * call's own thread can ask it (here it would hold up the client's
 * reader), so passed unasked it could run a second time.
 */
int
proxy_call_must_key(const char *name, json_t *params)
{
	return proxy_call_wrap(name, params, 0, NULL) != PROXY_PASSED;
}

/* Is msg a tools/call that must be keyed (proxy_call_must_key)? */
static int
proxy_must_key_call(json_t *msg)
{
	json_t		*params = json_object_get(msg, "params");
	const char	*name;

	return strcmp(json_string_value(json_object_get(msg, "method")) ?:
	    "", "tools/call") == 0 && (name = json_string_value(
	    json_object_get(params, "name"))) != NULL &&
	    proxy_call_must_key(name, params);
}

/* What becomes of a client's message that can pass only as its bytes. */
enum proxy_raw {
	RAW_PASSED,
	RAW_MUST_KEY,	/* a call that must be keyed (proxy_must_key_call) */
	RAW_OWN_ID	/* a request with an id in the proxy's own form */
};

/*
 * What becomes of msg.  Read with its integers as doubles, an integer id
 * came back a double: made one again, so that an answer gives it back.
 */
static enum proxy_raw
proxy_raw_kind(json_t *msg)
{
	json_t	*id = json_object_get(msg, "id");

	if (json_is_real(id) && json_real_value(id) ==
	    (double)(json_int_t)json_real_value(id))
		json_object_set_new(msg, "id",
		    json_integer((json_int_t)json_real_value(id)));
	if (proxy_must_key_call(msg))
		return RAW_MUST_KEY;
	if (json_object_get(msg, "method") != NULL &&
	    proxy_own_id(json_object_get(msg, "id")))
		return RAW_OWN_ID;
	return RAW_PASSED;
}

/* The refusal of one message of a line not sent on (proxy_client_raw). */
static void
proxy_raw_refuse(json_t *msg, enum proxy_raw kind, int loose)
{
	static const char	 unread[] = "idem-mcp proxy: the call was not "
	    "made: idem cannot read it exactly (U+0000 in an object key, a "
	    "UTF-16 surrogate not in a pair, or invalid UTF-8), so it "
	    "cannot key or record it";
	static const char	 own[] = "idem-mcp proxy: not sent: ids that "
	    "start with " PROXY_ID_PREFIX " are the proxy's own";
	static const char	 held[] = "idem-mcp proxy: not sent: its batch "
	    "holds a message the proxy refused; send this message on its "
	    "own";
	json_t			*id = json_object_get(msg, "id"), *answer;

	/* Only a request is answered (nothing waits for the others). */
	if (json_object_get(msg, "method") == NULL || id == NULL)
		return;
	if (kind == RAW_OWN_ID)
		proxy_client_error(id, -32600, own);
	else if (kind == RAW_PASSED)
		proxy_client_error(id, -32602, held);
	else if (loose)
		proxy_client_error(id, -32602, unread);
	else {
		answer = json_pack("{s:s, s:O, s:{s:[{s:s, s:s}], s:b, "
		    "s:{s:{s:s, s:b}}}}", "jsonrpc", "2.0", "id", id, "result",
		    "content", "type", "text", "text", "The call was not made: "
		    "its arguments hold a number beyond 64 bits, which idem "
		    "cannot key exactly; send it as a string.", "isError", 1,
		    "_meta", PROXY_META_ERROR, "disposition",
		    "refused_by_broker", "retryable", 0);
		if (answer != NULL)
			proxy_to_client_json(answer);
		json_decref(answer);
	}
}

/*
 * A client's line that can pass only as the bytes it came in: JSON that
 * jansson reads only loosely (loose: proxy_json_load) or only with its
 * integers as doubles (one past 64 bits); msg, so read, is stolen.
 * Neither reading is what was sent, so the proxy cannot handle a
 * message in it as it would the same message read exactly:
 *  - a call that must be keyed cannot be keyed as sent (and the broker
 *    refuses U+0000 anyway); passed on, it would reach the server
 *    unkeyed, run on every retry: refused, Invalid params (loose) or a
 *    tool error that says to send the number as a string;
 *  - a request whose id is in the proxy's own form cannot be sent under
 *    an id of ours (its bytes are not ours to rewrite); passed, its
 *    answer would be taken for that of a request of the proxy's own (a
 *    wrapped call's result, recorded): refused, Invalid Request.
 * Any other message passes as its bytes (it is JSON).  A batch holding
 * a refused message is not sent either (its other messages cannot pass
 * without its bytes): each request in it is refused.
 */
void
proxy_client_raw(const char *line, size_t length, json_t *msg, int loose)
{
	json_t	*item;
	size_t	 i;
	int	 refused = 0;

	if (json_is_array(msg)) {
		json_array_foreach(msg, i, item)
			refused += proxy_raw_kind(item) != RAW_PASSED;
	} else
		refused = proxy_raw_kind(msg) != RAW_PASSED;
	if (refused == 0) {
		json_decref(msg);
		proxy_to_server(line, length);
		return;
	}
	proxy_log("client: a line read %s%s holds a tools/call that must be "
	    "keyed or an id of the proxy's form: refused, not sent on",
	    loose ? "loosely" : "with its integers as doubles",
	    json_is_array(msg) ? " (a batch)" : "");
	if (!json_is_array(msg))
		proxy_raw_refuse(msg, proxy_raw_kind(msg), loose);
	else
		json_array_foreach(msg, i, item)
			proxy_raw_refuse(item, proxy_raw_kind(item), loose);
	json_decref(msg);
}

/*
 * A client's line jansson cannot read as it stands (or is not an object
 * or a batch).  Read again, integers as doubles and loosely if need
 * be, it goes to proxy_client_raw.  A line nothing reads (a number past
 * a double, nesting deeper than jansson's limit, not JSON at all) is
 * answered Parse error and not sent on if its bytes show a tools/call
 * at a message's top level: it may be the call of a wrapped tool, and
 * a lenient server may read it (Node reads 1e400 as Infinity) and run
 * that tool unkeyed.  Any other passes as it came, as it always did:
 * the server answers its own parse error, and a message the proxy
 * cannot read but the server can (an answer to its request) reaches it.
 * 1 if handled here, 0 if the line is to pass as it came.
 */
int
proxy_unreadable_call(const char *line, size_t length)
{
	json_t		*msg, *id;
	int		 loose;

	msg = proxy_json_load(line, length, JSON_DECODE_INT_AS_REAL, &loose);
	if (msg != NULL) {
		proxy_client_raw(line, length, msg, loose);
		return 1;
	}
	if (!proxy_unreadable_request(line, length, &id))
		return 0;
	proxy_log("client: a tools/call that cannot be read (%zu bytes): "
	    "answered Parse error, not sent on", length);
	/*
	 * Under the id its bytes show, if a request's: JSON-RPC answers a
	 * Parse error under a null id, but a client (the TypeScript SDK)
	 * drops an error with a null id, and its request would wait for
	 * ever.
	 */
	proxy_client_error(id, -32700, "idem-mcp proxy: a tools/call that "
	    "the proxy cannot read (not JSON, a number past a double, or "
	    "nested too deep): not sent on");
	json_decref(id);
	return 1;
}
