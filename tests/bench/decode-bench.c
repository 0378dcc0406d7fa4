/* SPDX-License-Identifier: ISC */
/*
 * decode-bench.c: the client's cost of decoding one effect answer, a
 * retry's reused one by default, by the ways doc/effects.md compares
 * ("A retry's decode"): a jansson tree of the whole answer (what libidem
 * and idem-bench did before replyscan.c), replyscan_line alone,
 * idem_effect_parse (libidem's whole decode: the check, the members,
 * the receipt and result copied out), that and the result parsed by
 * jansson (idem-bench's effect-reuse client), and the result's parse
 * alone (idem-bench's redis-get client parses GET's value so).
 *
 *	decode-bench --socket PATH [--rounds N] [--count N]
 *	    [--shape string|reals|wide]
 *
 * PATH is a running idemd's socket: one effect is begun and committed
 * there, then begun again, and that answer is what is decoded.  Its
 * result's shape: string (default), idem-bench's 512-byte
 * {"id":...,"data":"xxx..."}; reals, {"id":...,"reals":[...]} with 60
 * reals such as 3.25e-7 (every real a number replyscan cannot read as
 * a plain integer); wide, {"id":...,"m0":0,...,"m99":99}, an object of
 * 101 members (past REPLYSCAN_MAX_MEMBERS).  Each round times
 * every way over --count decodes, the ways interleaved; the medians
 * and ranges of the rounds are printed, in ns per decode.  Run it only
 * where nothing else is measured (it takes one core).
 */
#include <err.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "idem.h"
#include "replyscan.h"

#define DECODE_RESULT_BYTES	512
#define DECODE_LINE_BYTES	8192
#define DECODE_MAX_ROUNDS	64

enum way { TREE, SCAN, PARSE, PARSE_RESULT, RESULT, WAYS };
static const char *const way_names[WAYS] = {
	"jansson tree of the whole answer (before)",
	"replyscan_line alone",
	"idem_effect_parse (libidem's decode)",
	"idem_effect_parse + the result by jansson (effect-reuse)",
	"the result alone by jansson (redis-get)",
};

/* JSON of exactly size bytes: {"id":"<id>","data":"xxx..."}. */
static void
sized_json(char *out, size_t size, const char *id)
{
	int	n = snprintf(out, size + 1, "{\"id\":\"%s\",\"data\":\"", id);

	if (n < 0 || (size_t)n + 2 > size)
		errx(1, "sized_json: %zu bytes", size);
	memset(out + n, 'x', size - 2 - (size_t)n);
	memcpy(out + size - 2, "\"}", 3);
}

/* The result of the shape asked for, into out (DECODE_LINE_BYTES). */
static void
shaped_json(char *out, const char *shape, const char *id)
{
	size_t	n;
	int	i;

	if (strcmp(shape, "string") == 0) {
		sized_json(out, DECODE_RESULT_BYTES, id);
		return;
	}
	n = (size_t)snprintf(out, DECODE_LINE_BYTES, "{\"id\":\"%s\"", id);
	if (strcmp(shape, "reals") == 0) {
		n += (size_t)snprintf(out + n, DECODE_LINE_BYTES - n,
		    ",\"reals\":[");
		for (i = 0; i < 60; i++)
			n += (size_t)snprintf(out + n, DECODE_LINE_BYTES - n,
			    "%s%d.%02de-%d", i ? "," : "", i + 1, i, i % 9);
		n += (size_t)snprintf(out + n, DECODE_LINE_BYTES - n, "]");
	} else if (strcmp(shape, "wide") == 0) {
		for (i = 0; i < 100; i++)
			n += (size_t)snprintf(out + n, DECODE_LINE_BYTES - n,
			    ",\"m%d\":%d", i, i);
	} else
		errx(2, "--shape: string, reals or wide, not %s", shape);
	snprintf(out + n, DECODE_LINE_BYTES - n, "}");
}

static char *
call(struct idem_conn *conn, const char *line)
{
	struct idem_error	 e;
	char			*answer;

	if (idem_call_raw(conn, line, &answer, &e) != 0)
		errx(1, "%s", e.message);
	return answer;
}

/* A reused answer of effect_begin, with idem-bench's sizes. */
static char *
reused_answer(const char *socket, const char *shape)
{
	struct idem_conn	*conn;
	struct idem_effect	 out;
	struct idem_error	 e;
	char			 id[64], body[DECODE_RESULT_BYTES + 1];
	char			 result[DECODE_LINE_BYTES];
	char			 begin[DECODE_LINE_BYTES];
	char			 line[2 * DECODE_LINE_BYTES], *answer;

	if ((conn = idem_connect(socket, &e)) == NULL)
		errx(1, "%s: %s", socket, e.message);
	snprintf(id, sizeof id, "decode-bench-%ld-%ld", (long)getpid(),
	    (long)time(NULL));
	sized_json(body, DECODE_RESULT_BYTES, id);
	shaped_json(result, shape, id);
	snprintf(begin, sizeof begin, "{\"op\":\"effect_begin\","
	    "\"client_submission_id\":\"%s\",\"effect_kind\":\"bench\","
	    "\"request\":%s}", id, body);
	answer = call(conn, begin);
	if (idem_effect_parse(answer, &out, &e) != 0 ||
	    out.disposition != IDEM_EFFECT_PROCEED)
		errx(1, "begin: %s", answer);
	snprintf(line, sizeof line, "{\"op\":\"effect_complete\","
	    "\"client_submission_id\":\"%s\",\"effect_kind\":\"bench\","
	    "\"fence\":\"%s\",\"outcome\":\"applied\",\"result\":%s}", id,
	    out.fence, result);
	idem_effect_clear(&out);
	free(answer);
	free(call(conn, line));
	answer = call(conn, begin);
	idem_close(conn);
	return answer;
}

static double
now_ns(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* count decodes one way: ns per decode. */
static double
timed(enum way way, const char *answer, const char *result, long count)
{
	struct replyscan_object	 top;
	struct idem_effect	 out;
	struct idem_error	 e;
	size_t			 n = strlen(answer);
	double			 t0;
	json_t			*j;
	long			 i;

	t0 = now_ns();
	for (i = 0; i < count; i++) {
		switch (way) {
		case TREE:
			j = json_loads(answer, JSON_REJECT_DUPLICATES, NULL);
			if (j == NULL)
				errx(1, "jansson refused the answer");
			json_decref(j);
			break;
		case SCAN:
			if (replyscan_line(answer, n, &top) != REPLYSCAN_OBJECT)
				errx(1, "replyscan refused the answer");
			break;
		case PARSE:
		case PARSE_RESULT:
			if (idem_effect_parse(answer, &out, &e) != 0 ||
			    out.disposition != IDEM_EFFECT_REUSED)
				errx(1, "not reused: %s", e.message);
			if (way == PARSE_RESULT) {
				if ((j = json_loads(out.result, 0, NULL)) ==
				    NULL)
					errx(1, "the result does not parse");
				json_decref(j);
			}
			idem_effect_clear(&out);
			break;
		default:
			if ((j = json_loads(result, 0, NULL)) == NULL)
				errx(1, "the result does not parse");
			json_decref(j);
			break;
		}
	}
	return (now_ns() - t0) / (double)count;
}

static int
by_value(const void *a, const void *b)
{
	double	x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int
main(int argc, char **argv)
{
	struct idem_effect	 out;
	struct idem_error	 e;
	double			 ns[WAYS][DECODE_MAX_ROUNDS];
	const char		*socket = NULL, *shape = "string";
	char			*answer, *result;
	long			 rounds = 7, count = 100000;
	int			 i, r, w;

	for (i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--socket") == 0)
			socket = argv[i + 1];
		else if (strcmp(argv[i], "--rounds") == 0)
			rounds = strtol(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--count") == 0)
			count = strtol(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--shape") == 0)
			shape = argv[i + 1];
		else
			break;
	}
	if (socket == NULL || i != argc || rounds < 1 ||
	    rounds > DECODE_MAX_ROUNDS || count < 1)
		errx(2, "usage: decode-bench --socket PATH [--rounds N] "
		    "[--count N] [--shape string|reals|wide]");
	answer = reused_answer(socket, shape);
	if (idem_effect_parse(answer, &out, &e) != 0 || out.result == NULL)
		errx(1, "not a reused answer with a result: %s", answer);
	result = strdup(out.result);
	idem_effect_clear(&out);
	printf("a reused answer of %zu bytes, its result (%s) %zu; %ld "
	    "rounds of %ld decodes each way, interleaved\n", strlen(answer),
	    shape, strlen(result), rounds, count);
	for (r = 0; r < rounds; r++) {
		for (w = 0; w < WAYS; w++)
			ns[w][r] = timed((enum way)w, answer, result, count);
	}
	for (w = 0; w < WAYS; w++) {
		qsort(ns[w], (size_t)rounds, sizeof ns[w][0], by_value);
		printf("%-58s %7.0f ns (%.0f-%.0f)\n", way_names[w],
		    ns[w][rounds / 2], ns[w][0], ns[w][rounds - 1]);
	}
	free(answer);
	free(result);
	return 0;
}
