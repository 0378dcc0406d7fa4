/* SPDX-License-Identifier: ISC */
/*
 * test_libidem_standin.c: libidem against stand-ins for the broker on
 * a socket of the test's own: the exact bytes of every request it sends
 * (each op, optional members present and absent; the effect lines
 * written from the caller's bytes equal to the jansson path's; the
 * longest line sent whole), and idem_effect_run's lease keeper against
 * a stand-in that answers each extension late.
 * Nothing here sleeps to synchronise; the stand-in's delay is the
 * lateness under test, and the tests wait on its events.
 */
#include <sys/socket.h>
#include <sys/un.h>

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sodium.h>

#include "integration/filter.h"
#include "integration/harness.h"
#include "integration/libidem_test.h"
#include "protocol.h"

/*
 * What libidem sends, byte for byte, for every op with every optional
 * member present and absent: a stand-in for the broker on a socket of
 * the test's own records each request line and answers internal.  The
 * broker's retry fast path matches a line by its members' bytes in
 * order (libclient/fastscan.c), so a retry from another release of libidem
 * is fast only while these lines stay as they are.
 */
struct capture {
	int		 listen_fd;
	json_t		*lines;		/* every request line, as strings */
	pthread_t	 thread;	/* capture_serve's */
};

static void *
capture_serve(void *arg)
{
	static const char answer[] = "{\"ok\":false,\"error\":{\"code\":"
	    "\"internal\",\"message\":\"captured\",\"retryable\":false}}\n";
	struct capture	*cap = arg;
	char		 buf[4096];
	size_t		 length = 0;
	ssize_t		 n;
	char		*nl;
	int		 fd;

	if ((fd = accept(cap->listen_fd, NULL, NULL)) == -1)
		return NULL;
	while ((n = read(fd, buf + length, sizeof buf - length)) > 0) {
		length += (size_t)n;
		while ((nl = memchr(buf, '\n', length)) != NULL) {
			json_array_append_new(cap->lines, json_stringn(buf,
			    (size_t)(nl - buf)));
			length -= (size_t)(nl - buf) + 1;
			memmove(buf, nl + 1, length);
			if (write(fd, answer, sizeof answer - 1) !=
			    (ssize_t)sizeof answer - 1)
				break;
		}
		if (length == sizeof buf)
			break;
	}
	close(fd);
	return NULL;
}

/*
 * A capture listening on b's root/name, served by its own thread, and a
 * connection of libidem's to it.
 */
static struct idem_conn *
capture_start(struct capture *cap, const struct broker *b, const char *name)
{
	struct sockaddr_un	 sa;
	struct idem_conn	*c;
	struct idem_error	 err;

	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	assert_true((size_t)snprintf(sa.sun_path, sizeof sa.sun_path,
	    "%s/%s", b->root, name) < sizeof sa.sun_path);
	cap->lines = json_array();
	cap->listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(cap->listen_fd != -1);
	assert_int_equal(bind(cap->listen_fd, (struct sockaddr *)&sa,
	    sizeof sa), 0);
	assert_int_equal(listen(cap->listen_fd, 1), 0);
	assert_int_equal(pthread_create(&cap->thread, NULL, capture_serve,
	    cap), 0);
	assert_non_null(c = idem_connect(sa.sun_path, &err));
	return c;
}

/* The connection closed: the capture's thread ends with it. */
static void
capture_stop(struct capture *cap, struct idem_conn *c)
{
	idem_close(c);
	assert_int_equal(pthread_join(cap->thread, NULL), 0);
	close(cap->listen_fd);
}

static void
requests_keep_their_bytes(void **state)
{
	static const char *const expected[] = {
		"{\"op\":\"hello\"}",
		"{\"task\":{\"sender\":\"PM\",\"recipient\":\"DEV\","
		    "\"subject\":\"s\\\"q\",\"body\":\"b\\nb\",\"priority\":"
		    "\"P1\",\"risk_level\":\"low\",\"thread_key\":\"tk\","
		    "\"parent\":\"TASK-1\",\"references\":[\"r1\",\"r2\"],"
		    "\"depends_on\":[\"d1\"]},\"op\":\"write_task\","
		    "\"client_submission_id\":\"id-1\"}",
		"{\"task\":{\"sender\":\"PM\",\"subject\":\"x\"},"
		    "\"op\":\"write_task\"}",
		"{\"report\":{\"sender\":\"DEV\",\"recipient\":\"PM\","
		    "\"status\":\"done\",\"body\":\"rb\"},\"op\":"
		    "\"write_report\",\"task_id\":\"TASK-1\","
		    "\"client_submission_id\":\"rid\"}",
		"{\"report\":{\"body\":\"only\"},\"op\":\"write_report\","
		    "\"task_id\":\"TASK-1\"}",
		"{\"op\":\"effect_begin\",\"client_submission_id\":\"eid\","
		    "\"effect_kind\":\"mail\",\"request\":{\"b\":1,\"a\":[2]},"
		    "\"lease_ms\":5000}",
		"{\"op\":\"effect_begin\",\"client_submission_id\":\"eid\","
		    "\"effect_kind\":\"mail\",\"request\":{}}",
		"{\"op\":\"effect_complete\",\"client_submission_id\":\"eid\","
		    "\"effect_kind\":\"mail\",\"fence\":\"1-abc\",\"outcome\":"
		    "\"applied\",\"result\":{\"r\":true}}",
		"{\"op\":\"effect_complete\",\"client_submission_id\":\"eid\","
		    "\"effect_kind\":\"mail\",\"fence\":\"1-abc\",\"outcome\":"
		    "\"not_applied\"}",
		"{\"op\":\"effect_resolve\",\"client_submission_id\":\"eid\","
		    "\"effect_kind\":\"mail\",\"evidence\":{\"observed\":"
		    "\"applied\",\"result\":7,\"source\":\"src\"}}",
		"{\"op\":\"effect_resolve\",\"client_submission_id\":\"eid\","
		    "\"effect_kind\":\"mail\",\"evidence\":{\"observed\":"
		    "\"not_applied\"}}",
		"{\"op\":\"get_submission\",\"client_submission_id\":\"gid\"}",
		"{\"op\":\"diagnose\"}",
		"{\"op\":\"diagnose\",\"stale_after_ms\":1234}",
		"{\"op\":\"stats\"}",
	};
	static const char *const refs[] = { "r1", "r2" }, *const deps[] = {
		"d1"
	};
	struct broker		*b = *state;
	struct capture		 cap;
	struct idem_conn	*c;
	struct idem_error	 err;
	struct idem_hello	 hello;
	struct idem_write_result wr;
	struct idem_report_result rr;
	struct idem_effect	 e;
	struct idem_submission	 sub;
	struct idem_diagnosis	 dg;
	struct idem_stats	 st;
	struct idem_task	 task, few;
	struct idem_report	 report, body_only;
	size_t			 i;
	int			 found;

	c = capture_start(&cap, b, "capture.sock");

	memset(&task, 0, sizeof task);
	task.sender = "PM";
	task.recipient = "DEV";
	task.subject = "s\"q";
	task.body = "b\nb";
	task.priority = "P1";
	task.risk_level = "low";
	task.thread_key = "tk";
	task.parent = "TASK-1";
	task.references = refs;
	task.references_count = 2;
	task.depends_on = deps;
	task.depends_on_count = 1;
	memset(&few, 0, sizeof few);
	few.sender = "PM";
	few.subject = "x";
	memset(&report, 0, sizeof report);
	report.sender = "DEV";
	report.recipient = "PM";
	report.status = "done";
	report.body = "rb";
	memset(&body_only, 0, sizeof body_only);
	body_only.body = "only";

	/* Each call fails with the stand-in's answer, after sending. */
	assert_int_equal(idem_hello(c, &hello, &err), -1);
	assert_int_equal(idem_write_task(c, "id-1", &task, &wr, &err), -1);
	assert_int_equal(idem_write_task(c, NULL, &few, &wr, &err), -1);
	assert_int_equal(idem_write_report(c, "TASK-1", "rid", &report, &rr,
	    &err), -1);
	assert_int_equal(idem_write_report(c, "TASK-1", NULL, &body_only, &rr,
	    &err), -1);
	assert_int_equal(idem_effect_begin(c, "eid", "mail",
	    "{\"b\":1,\"a\":[2]}", 5000, &e, &err), -1);
	assert_int_equal(idem_effect_begin(c, "eid", "mail", "{}", 0, &e,
	    &err), -1);
	assert_int_equal(idem_effect_complete(c, "eid", "mail", "1-abc", 1,
	    "{\"r\":true}", &e, &err), -1);
	assert_int_equal(idem_effect_complete(c, "eid", "mail", "1-abc", 0,
	    NULL, &e, &err), -1);
	assert_int_equal(idem_effect_resolve(c, "eid", "mail",
	    IDEM_OBSERVED_APPLIED, "7", "src", &e, &err), -1);
	assert_int_equal(idem_effect_resolve(c, "eid", "mail",
	    IDEM_OBSERVED_NOT_APPLIED, NULL, NULL, &e, &err), -1);
	assert_int_equal(idem_get_submission(c, "gid", &found, &sub, &err),
	    -1);
	assert_int_equal(idem_diagnose(c, -1, &dg, &err), -1);
	assert_int_equal(idem_diagnose(c, 1234, &dg, &err), -1);
	assert_int_equal(idem_stats(c, &st, &err), -1);
	/* The last answer came back: the stream is still whole. */
	assert_int_equal(err.code, IDEM_E_INTERNAL);
	assert_string_equal(err.message, "captured");
	capture_stop(&cap, c);

	for (i = 0; i < json_array_size(cap.lines) &&
	    i < sizeof expected / sizeof expected[0]; i++)
		assert_string_equal(json_string_value(json_array_get(
		    cap.lines, i)), expected[i]);
	assert_int_equal(json_array_size(cap.lines),
	    sizeof expected / sizeof expected[0]);
	json_decref(cap.lines);
	harness_finish(b);
}

/*
 * effect_begin's and effect_complete's line as the jansson path would
 * dump it (the tree client_request_new builds: op, client_submission_id,
 * effect_kind, then the op's members), expected[] gets it; for inputs
 * the path refuses, nothing.
 */
static void
expect_effect_line(json_t *expected, const char *op, const char *id,
    const char *kind, const char *fence, int applied, const char *text,
    int64_t lease_ms)
{
	json_t	*line, *value;
	char	*dump;

	/* A not_applied complete sends no result: its text is not read. */
	if (fence != NULL && !applied)
		text = NULL;
	value = text == NULL ? json_null() : json_loads(text,
	    JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
	if (value == NULL)
		return;
	line = json_pack("{ssssss}", "op", op, "client_submission_id", id,
	    "effect_kind", kind);
	assert_non_null(line);
	if (fence != NULL) {
		json_object_set_new(line, "fence", json_string(fence));
		json_object_set_new(line, "outcome", json_string(applied ?
		    "applied" : "not_applied"));
		if (applied)
			json_object_set_new(line, "result", value);
		else
			json_decref(value);
	} else {
		json_object_set_new(line, "request", value);
		if (lease_ms > 0)
			json_object_set_new(line, "lease_ms",
			    json_integer(lease_ms));
	}
	assert_non_null(dump = json_dumps(line, JSON_COMPACT));
	json_array_append_new(expected, json_string(dump));
	free(dump);
	json_decref(line);
}

/*
 * jansson's allocations made by one thread, counted through
 * json_set_alloc_funcs: jansson's allocator hooks take no context, so
 * the count and the thread counted are file statics.  The stand-in's
 * thread allocates through jansson at the same time and is not counted.
 */
static pthread_t	jansson_counted_thread;
static size_t		jansson_counted_allocs;

static void *
jansson_counting_malloc(size_t size)
{
	if (pthread_equal(pthread_self(), jansson_counted_thread))
		jansson_counted_allocs++;
	return malloc(size);
}

/*
 * The effect calls write a plain call's line from the caller's bytes
 * (client_effect.c, client_begin_plain): byte for byte the line the
 * jansson path dumps, for compact texts of every kind of value, and
 * for what takes that path (escapes to rewrite, whitespace, reals, a
 * lone scalar, strings beyond printable ASCII).  The plain calls make
 * no jansson allocation: they did take the plain path.
 */
static void
plain_lines_are_janssons(void **state)
{
	static const char *const texts[] = {
		"{}", "[]", "{\"b\":1,\"a\":[2]}", "[1,-2,0,\"x\"]",
		"{\"s\":\"x y/z\",\"n\":-5,\"t\":true,\"f\":false,"
		    "\"z\":null,\"o\":{\"p\":[1,{\"q\":[]}]}}",
		"{\"u\":\"\xc3\xa9\xe2\x82\xac\"}",
		"{\"big\":123456789012345678}",
		"{\"big\":1234567890123456789}",
		"{ \"a\" : 1 }", "{\"r\":1.5}", "{\"r\":1e2}", "{\"z\":-0}",
		"{\"e\":\"\\u00e9\"}", "{\"e\":\"a\\/b\"}",
		"{\"e\":\"a\\\"b\"}", "5", "\"s\"", "null",
		"{\"d\":1,\"d\":2}", "{\"bad\":tru}",
	};
	static const char *const ids[] = { "id-1", "run/42:step 3", "q\"x",
	    "\xc3\xa9", "t\tb", "b\\s", "\x7f" };
	struct broker		*b = *state;
	struct capture		 cap;
	struct idem_conn	*c;
	struct idem_error	 err;
	struct idem_effect	 e;
	json_t			*expected;
	size_t			 i, k;

	assert_non_null(expected = json_array());
	c = capture_start(&cap, b, "plain.sock");
	for (i = 0; i < sizeof texts / sizeof texts[0]; i++) {
		k = i % (sizeof ids / sizeof ids[0]);
		assert_int_equal(idem_effect_begin(c, "id-1", "mail", texts[i],
		    i % 2 ? 5000 : 0, &e, &err), -1);
		expect_effect_line(expected, "effect_begin", "id-1", "mail",
		    NULL, 0, texts[i], i % 2 ? 5000 : 0);
		assert_int_equal(idem_effect_begin(c, ids[k], "k/1", texts[i],
		    1234567, &e, &err), -1);
		expect_effect_line(expected, "effect_begin", ids[k], "k/1",
		    NULL, 0, texts[i], 1234567);
		assert_int_equal(idem_effect_complete(c, ids[k], "mail",
		    "1-abc", 1, texts[i], &e, &err), -1);
		expect_effect_line(expected, "effect_complete", ids[k], "mail",
		    "1-abc", 1, texts[i], 0);
		assert_int_equal(idem_effect_complete(c, "id-1", ids[k],
		    ids[k], 0, texts[i], &e, &err), -1);
		expect_effect_line(expected, "effect_complete", "id-1", ids[k],
		    ids[k], 0, texts[i], 0);
	}
	/*
	 * Plain inputs take the plain path: no jansson allocation in this
	 * thread while the calls build, send and read back their lines.
	 */
	jansson_counted_thread = pthread_self();
	jansson_counted_allocs = 0;
	json_set_alloc_funcs(jansson_counting_malloc, free);
	for (i = 0; i < 4; i++) {
		assert_int_equal(idem_effect_begin(c, ids[i % 2], "mail",
		    texts[i], i % 2 ? 5000 : 0, &e, &err), -1);
		assert_int_equal(idem_effect_complete(c, ids[i % 2], "mail",
		    "1-abc", !(i % 2), texts[i], &e, &err), -1);
	}
	json_set_alloc_funcs(malloc, free);
	assert_int_equal(jansson_counted_allocs, 0);
	for (i = 0; i < 4; i++) {
		expect_effect_line(expected, "effect_begin", ids[i % 2],
		    "mail", NULL, 0, texts[i], i % 2 ? 5000 : 0);
		expect_effect_line(expected, "effect_complete", ids[i % 2],
		    "mail", "1-abc", !(i % 2), texts[i], 0);
	}
	/* Applied without a result: null, on both paths. */
	assert_int_equal(idem_effect_complete(c, "id-1", "mail", "1-abc", 1,
	    NULL, &e, &err), -1);
	expect_effect_line(expected, "effect_complete", "id-1", "mail",
	    "1-abc", 1, NULL, 0);
	capture_stop(&cap, c);

	for (i = 0; i < json_array_size(cap.lines) &&
	    i < json_array_size(expected); i++)
		assert_string_equal(json_string_value(json_array_get(
		    cap.lines, i)), json_string_value(json_array_get(expected,
		    i)));
	assert_int_equal(json_array_size(cap.lines),
	    json_array_size(expected));
	json_decref(expected);
	json_decref(cap.lines);
	harness_finish(b);
}

/*
 * The longest request a line may hold reaches the stand-in whole, its
 * newline after it, and a short one after it on the same connection:
 * libidem copies each line and its newline into a buffer the connection
 * keeps and grows (client.c, client_out_room), and sends them at once.
 */
struct whole_lines {
	int	 listen_fd;
	char	*got;		/* every byte read */
	size_t	 length;
};

static void *
whole_lines_serve(void *arg)
{
	static const char	 answer[] = "{\"ok\":true}\n";
	struct whole_lines	*w = arg;
	size_t			 size = 2 * IDEM_MAX_LINE_BYTES, seen = 0;
	ssize_t			 n;
	int			 fd, lines = 0;

	if ((fd = accept(w->listen_fd, NULL, NULL)) == -1 ||
	    (w->got = malloc(size)) == NULL)
		return NULL;
	while (lines < 3 && (n = read(fd, w->got + w->length, size -
	    w->length)) > 0) {
		w->length += (size_t)n;
		for (; seen < w->length; seen++) {
			if (w->got[seen] == '\n' && write(fd, answer,
			    sizeof answer - 1) == (ssize_t)sizeof answer - 1)
				lines++;
		}
	}
	close(fd);
	return NULL;
}

static void
longest_request_sent_whole(void **state)
{
	static const char	 small[] = "{\"op\":\"hello\"}";
	struct broker		*b = *state;
	struct whole_lines	 w;
	struct sockaddr_un	 sa;
	struct idem_conn	*c;
	struct idem_error	 err;
	pthread_t		 thread;
	char			*line, *answer;
	size_t			 n = IDEM_MAX_LINE_BYTES - 1, i;

	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	assert_true((size_t)snprintf(sa.sun_path, sizeof sa.sun_path,
	    "%s/whole.sock", b->root) < sizeof sa.sun_path);
	memset(&w, 0, sizeof w);
	w.listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(w.listen_fd != -1);
	assert_int_equal(bind(w.listen_fd, (struct sockaddr *)&sa,
	    sizeof sa), 0);
	assert_int_equal(listen(w.listen_fd, 1), 0);
	assert_int_equal(pthread_create(&thread, NULL, whole_lines_serve, &w),
	    0);
	assert_non_null(line = malloc(n + 1));
	for (i = 0; i < n; i++)
		line[i] = (char)('a' + i % 26);
	line[n] = '\0';
	assert_non_null(c = idem_connect(sa.sun_path, &err));
	assert_int_equal(idem_call_raw(c, small, &answer, &err), 0);
	free(answer);
	assert_int_equal(idem_call_raw(c, line, &answer, &err), 0);
	assert_string_equal(answer, "{\"ok\":true}");
	free(answer);
	assert_int_equal(idem_call_raw(c, small, &answer, &err), 0);
	free(answer);
	idem_close(c);
	assert_int_equal(pthread_join(thread, NULL), 0);
	close(w.listen_fd);

	/* small, then the longest, then small again: nothing else. */
	assert_int_equal(w.length, 2 * (sizeof small - 1 + 1) + n + 1);
	assert_memory_equal(w.got, small, sizeof small - 1);
	assert_int_equal(w.got[sizeof small - 1], '\n');
	assert_memory_equal(w.got + sizeof small, line, n);
	assert_int_equal(w.got[sizeof small + n], '\n');
	assert_memory_equal(w.got + sizeof small + n + 1, small,
	    sizeof small - 1);
	assert_int_equal(w.got[w.length - 1], '\n');
	free(w.got);
	free(line);
	harness_finish(b);
}

/*
 * idem_effect_run's keeper waits for a slow answer to its extension on
 * its one connection, and keeps its schedule (client_effect.c): a
 * stand-in broker answers each effect_extend half a lease late (a worker
 * slow to be scheduled, on a loaded host).  The keeper used one
 * connection throughout: the caller's and the keeper's, two in all.
 * With a reply bounded by a third of the lease, each slow answer timed
 * out, the connection was dropped and a new one made a third later:
 * more connections, and the extensions a third apart plus the wait.
 * Perform ends on an event: the stand-in's third extension.
 */
#define KEEPER_LEASE_MS		600
#define KEEPER_EXTENSIONS	3

struct slow_standin {
	int		 listen_fd;
	int64_t		 delay_ms;
	pthread_mutex_t	 lock;
	pthread_cond_t	 changed;
	int		 connections;
	int		 extensions;
};

struct slow_conn {
	struct slow_standin	*s;
	int			 fd;
};

static void
slow_sleep_ms(int64_t ms)
{
	struct timespec	ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

/* One connection's lines, each answered as its op asks. */
static void *
slow_conn_serve(void *arg)
{
	struct slow_conn	*sc = arg;
	struct slow_standin	*s = sc->s;
	char			 buf[4096];
	const char		*answer;
	size_t			 length = 0;
	ssize_t			 n;
	char			*nl;

	while ((n = read(sc->fd, buf + length, sizeof buf - length)) > 0) {
		length += (size_t)n;
		while ((nl = memchr(buf, '\n', length)) != NULL) {
			*nl = '\0';
			if (strstr(buf, "\"effect_extend\"") != NULL) {
				/* The slow broker: the answer half a lease late. */
				slow_sleep_ms(s->delay_ms);
				answer = "{\"ok\":true,\"lease_expires_at\":"
				    "\"2026-01-01T00:00:00.000Z\"}\n";
				pthread_mutex_lock(&s->lock);
				s->extensions++;
				pthread_cond_broadcast(&s->changed);
				pthread_mutex_unlock(&s->lock);
			} else if (strstr(buf, "\"effect_begin\"") != NULL)
				answer = "{\"ok\":true,\"disposition\":"
				    "\"proceed\",\"attempt\":1,\"fence\":"
				    "\"1-keeper\",\"external_key\":\"k\"}\n";
			else
				answer = "{\"ok\":false,\"error\":{\"code\":"
				    "\"internal\",\"message\":\"stand-in\","
				    "\"retryable\":false}}\n";
			/* A keeper that gave up on the answer has gone. */
			if (send(sc->fd, answer, strlen(answer),
			    MSG_NOSIGNAL) != (ssize_t)strlen(answer))
				break;
			length -= (size_t)(nl - buf) + 1;
			memmove(buf, nl + 1, length);
		}
		if (length == sizeof buf)
			break;
	}
	close(sc->fd);
	free(sc);
	return NULL;
}

/* Accepts (and counts) until the listening socket is shut down. */
static void *
slow_accept(void *arg)
{
	struct slow_standin	*s = arg;
	struct slow_conn	*sc;
	pthread_t		 thread;
	int			 fd;

	while ((fd = accept(s->listen_fd, NULL, NULL)) != -1) {
		pthread_mutex_lock(&s->lock);
		s->connections++;
		pthread_mutex_unlock(&s->lock);
		if ((sc = malloc(sizeof *sc)) == NULL) {
			close(fd);
			continue;
		}
		sc->s = s;
		sc->fd = fd;
		if (pthread_create(&thread, NULL, slow_conn_serve, sc) != 0) {
			close(fd);
			free(sc);
			continue;
		}
		pthread_detach(thread);
	}
	return NULL;
}

/* Until the stand-in has answered KEEPER_EXTENSIONS (20 s at most). */
static enum idem_effect_observed
slow_keeper_perform(const struct idem_effect *begun, char **result,
    void *arg)
{
	struct slow_standin	*s = arg;
	struct timespec		 until;

	(void)begun;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 20;
	pthread_mutex_lock(&s->lock);
	while (s->extensions < KEEPER_EXTENSIONS &&
	    pthread_cond_timedwait(&s->changed, &s->lock, &until) == 0)
		;
	pthread_mutex_unlock(&s->lock);
	*result = strdup("true");
	return IDEM_OBSERVED_APPLIED;
}

static void
keeper_waits_for_a_slow_answer(void **state)
{
	struct broker		*b = *state;
	struct slow_standin	 s;
	struct sockaddr_un	 sa;
	struct idem_conn	*c;
	struct idem_effect	 out;
	struct idem_error	 err;
	pthread_t		 acceptor;
	int64_t			 lease;

	lease = KEEPER_LEASE_MS * (int64_t)harness_slowdown();
	memset(&s, 0, sizeof s);
	s.delay_ms = lease / 2;
	pthread_mutex_init(&s.lock, NULL);
	pthread_cond_init(&s.changed, NULL);
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	assert_true((size_t)snprintf(sa.sun_path, sizeof sa.sun_path,
	    "%s/slow.sock", b->root) < sizeof sa.sun_path);
	s.listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(s.listen_fd != -1);
	assert_int_equal(bind(s.listen_fd, (struct sockaddr *)&sa,
	    sizeof sa), 0);
	assert_int_equal(listen(s.listen_fd, 8), 0);
	assert_int_equal(pthread_create(&acceptor, NULL, slow_accept, &s), 0);
	c = idem_connect(sa.sun_path, &err);
	assert_non_null(c);
	memset(&out, 0, sizeof out);
	/* The stand-in refuses the complete: -1, after the keeper's turns. */
	assert_int_equal(idem_effect_run(c, "keep", "mail", "{}", lease,
	    slow_keeper_perform, NULL, &s, &out, &err), -1);
	idem_effect_clear(&out);
	idem_close(c);
	shutdown(s.listen_fd, SHUT_RDWR);
	assert_int_equal(pthread_join(acceptor, NULL), 0);
	close(s.listen_fd);
	pthread_mutex_lock(&s.lock);
	assert_true(s.extensions >= KEEPER_EXTENSIONS);
	/* The caller's connection and the keeper's one. */
	assert_int_equal(s.connections, 2);
	pthread_mutex_unlock(&s.lock);
	harness_finish(b);
}

#define T(name)	cmocka_unit_test_setup_teardown(name, harness_setup, \
	    harness_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(requests_keep_their_bytes),
		T(longest_request_sent_whole),
		T(plain_lines_are_janssons),
		T(keeper_waits_for_a_slow_answer),
	};

	if (sodium_init() < 0)
		return 1;
	return FILTER_RUN(tests);
}
