/* SPDX-License-Identifier: ISC */
/*
 * mcp.h: idem-mcp's internal interfaces, grouped by the file that owns
 * them.  idem-mcp is an MCP server (Model Context Protocol) over stdio:
 * JSON-RPC 2.0 messages, one per line, on stdin and stdout; it answers
 * tool calls by sending one request to idemd through libidem.
 */
#ifndef IDEM_MCP_H
#define IDEM_MCP_H

#include <stddef.h>

#include <jansson.h>

/* JSON-RPC 2.0 error codes (and MCP's use of them). */
#define MCP_PARSE_ERROR		(-32700)
#define MCP_INVALID_REQUEST	(-32600)
#define MCP_METHOD_NOT_FOUND	(-32601)
#define MCP_INVALID_PARAMS	(-32602)
#define MCP_INTERNAL_ERROR	(-32603)

/* Protocol revisions, oldest first; the last is the one we prefer. */
#define MCP_REVISION_2025_03_26	"2025-03-26"
#define MCP_REVISION_2025_06_18	"2025-06-18"
#define MCP_REVISION_2025_11_25	"2025-11-25"

/* How to reach the broker: resolved once from the options. */
struct mcp_config {
	const char	*socket_path;	/* NULL: libidem's default lookup */
	size_t		 tools_page_size;
};

/* A protocol error a method handler returns instead of a result. */
struct mcp_error {
	int	code;		/* 0: none */
	char	message[256];
};

void	mcp_error_set(struct mcp_error *, int, const char *, ...)
	    __attribute__((format(printf, 3, 4)));

/* ---- session.c: JSON-RPC framing, lifecycle, dispatch ---------------- */

struct mcp_session;

struct mcp_session	*mcp_session_new(const struct mcp_config *);
void			 mcp_session_free(struct mcp_session *);
/*
 * One line of input (no newline; NUL-free not assumed) -> the line to
 * write back (malloc'd, no newline), or NULL when nothing is to be sent
 * (a notification, a response, a batch of notifications).
 */
char	*mcp_session_line(struct mcp_session *, const char *, size_t);
/* The answer to a line over IDEM_MCP_MAX_LINE_BYTES (malloc'd). */
char	*mcp_session_oversized(struct mcp_session *);

/* ---- tools.c: the tool table and the calls to idemd ------------------ */

/* Load and check every tool's schemas; -1 with a message on stderr. */
int	 mcp_tools_init(void);
void	 mcp_tools_free(void);
size_t	 mcp_tools_count(void);
/* Tool i as tools/list shows it (a new reference). */
json_t	*mcp_tools_describe(size_t);
/*
 * tools/call.  Returns the CallToolResult (a new reference), or NULL
 * with err set for a protocol error: unknown tool, and (when
 * args_protocol_error) arguments that do not satisfy the inputSchema.
 */
json_t	*mcp_tools_call(const struct mcp_config *, const char *name,
	    json_t *arguments, int args_protocol_error, struct mcp_error *);

/* ---- schema.c: the JSON Schema subset used to check tool arguments --- */

/* Every keyword of schema is one schema_validate understands; else -1. */
int	 mcp_schema_check(json_t *schema, char *why, size_t);
/* instance satisfies schema; else -1 and where/why in the message. */
int	 mcp_schema_validate(json_t *schema, json_t *instance, char *why,
	    size_t);

#endif
