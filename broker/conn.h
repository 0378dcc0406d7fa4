/* SPDX-License-Identifier: ISC */
/*
 * conn.h: a worker's connection, shared by worker.c (its loop: accept,
 * read, take lines, close) and conn.c (what the ops and pending.c do
 * with it: reply, the peer, the running request).  Only those two
 * include it; everyone else has idemd.h's opaque struct conn.
 */
#ifndef CONN_H
#define CONN_H

#include "idemd.h"

struct conn {
	struct worker		*worker;
	struct bufferevent	*bev;
	struct event		*read_ev;	/* input, and the idle timeout */
	/*
	 * Read, not yet taken as lines: in[in_start, in_end) of in_size
	 * bytes (worker.c, conn_readable).
	 */
	char			*in;
	size_t			 in_start, in_end, in_size;
	int			 read_paused;	/* a full line buffer waits */
	struct pending		*running;
	uint32_t		 uid;
	uint32_t		 pid;
	char			 op[40];	/* the request's, for the log */
	/* The line being dispatched (conn_line); NULL outside dispatch. */
	const char		*line;
	size_t			 line_length;
	/*
	 * Its result in compact form, which the worker's parse left out of
	 * the tree (request_parse_line); NULL: none.
	 */
	const char		*line_result;
	size_t			 line_result_length;
	int			 peer_counted;	/* in the peer table (peers.c) */
	int			 closing;	/* close once the output is sent */
	/*
	 * conn_process is dispatching a line: a reply made before dispatch
	 * returns (an op answered at once) leaves the next line to that
	 * loop instead of starting it again one call deeper.
	 */
	int			 dispatching;
	TAILQ_ENTRY(conn)	 entry;
};

/*
 * The output drained, or there never was any: conn_written (worker.c)
 * decides, from the loop.
 */
void	conn_after_output(struct conn *);
/* A reply, now if the socket takes it, else through the output buffer. */
void	conn_send(struct conn *, json_t *reply);

#endif
