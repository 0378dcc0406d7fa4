/* SPDX-License-Identifier: ISC */
/*
 * test_libidem_hostile.c: libidem against a broker that breaks the
 * protocol on purpose: a stand-in on a socket of the test's own (a
 * thread) answers the n-th request line as the test's script says: a
 * line that is not JSON, not an object, without a boolean ok; a success
 * without what its op promises (a proceed without fence, attempt or
 * external_key, a proceed refused, an applied complete without
 * receipt); a raw NUL, invalid UTF-8, \u0000; a line over 1 MiB or one
 * that never ends; a connection closed before, after or in the middle
 * of an answer; no answer; two answers to one request; an answer a byte
 * at a time; a retryable error for ever and a non-retryable one marked
 * retryable; an answer about another key.
 *
 * Each ends in a typed error (IDEM_E_PROTOCOL, IDEM_E_TRANSPORT or the
 * wire's code) within the connection's timeout, never a success, a hang
 * or an answer given to the wrong call; after a protocol error the
 * connection refuses further calls.  No idemd: harness_setup only gives
 * the root the socket lives in.  The stand-in's delays are the
 * slowness under test, not synchronisation.
 */
#include <sys/socket.h>
#include <sys/un.h>

#include <errno.h>
#include <poll.h>
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

#include <dirent.h>

#include <cmocka.h>
#include <jansson.h>
#include <sodium.h>

#include "integration/filter.h"
#include "integration/harness.h"
#include "integration/libidem_test.h"
#include "protocol.h"

enum act {
	ACT_SEND,	/* write the bytes */
	ACT_CUT,	/* write the bytes, then close */
	ACT_CLOSE,	/* close without answering */
	ACT_HANG,	/* answer nothing until the client hangs up */
	ACT_STREAM,	/* bytes without a newline until it hangs up */
	ACT_TRICKLE	/* the bytes one at a time, delay_ms apart */
};

struct action {
	enum act	 act;
	const char	*bytes;
	size_t		 length;	/* 0: strlen(bytes) */
	int		 delay_ms;
};

#define FAKE_ACTIONS	4
#define NITEMS(a)	(sizeof (a) / sizeof (a)[0])

/*
 * The stand-in: actions[n - 1] answers the n-th request of the run (the
 * last one every later request); on_connect, if set, is done when a
 * connection is accepted, before anything is read.
 */
struct fake {
	int		 listen_fd;
	char		 path[sizeof ((struct sockaddr_un *)0)->sun_path];
	pthread_t	 thread;
	struct action	 actions[FAKE_ACTIONS];
	size_t		 count;
	const struct action *on_connect;
	pthread_mutex_t	 lock;
	pthread_cond_t	 changed;	/* a connection was closed */
	int		 requests;
	int		 connections;
	int		 closed;
	int		 stop;
};

static size_t
action_length(const struct action *a)
{
	return a->length > 0 ? a->length : a->bytes != NULL ?
	    strlen(a->bytes) : 0;
}

static int
fake_write(int fd, const char *p, size_t n)
{
	ssize_t	w;

	while (n > 0) {
		if ((w = send(fd, p, n, MSG_NOSIGNAL)) <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Until the client hangs up (read gives 0 or fails). */
static void
fake_wait_hangup(int fd)
{
	char	buf[4096];

	while (read(fd, buf, sizeof buf) > 0)
		;
}

/* Do a on fd; 0 if the connection goes on. */
static int
fake_act(int fd, const struct action *a)
{
	static char		 xs[65536];
	struct timespec		 ts;
	size_t			 i, n = action_length(a);

	switch (a->act) {
	case ACT_SEND:
		return fake_write(fd, a->bytes, n);
	case ACT_CUT:
		(void)fake_write(fd, a->bytes, n);
		return -1;
	case ACT_CLOSE:
		return -1;
	case ACT_HANG:
		fake_wait_hangup(fd);
		return -1;
	case ACT_STREAM:
		memset(xs, 'x', sizeof xs);
		while (fake_write(fd, xs, sizeof xs) == 0)
			;
		return -1;
	case ACT_TRICKLE:
		ts.tv_sec = a->delay_ms / 1000;
		ts.tv_nsec = (long)(a->delay_ms % 1000) * 1000000L;
		for (i = 0; i < n; i++) {
			if (fake_write(fd, a->bytes + i, 1) != 0)
				return -1;
			nanosleep(&ts, NULL);
		}
		return 0;
	}
	return -1;
}

static void
fake_serve_one(struct fake *f, int fd)
{
	char	buf[8192];
	size_t	length = 0;
	ssize_t	n;
	char	*nl;
	int	k;

	if (f->on_connect != NULL && fake_act(fd, f->on_connect) != 0)
		return;
	while ((n = read(fd, buf + length, sizeof buf - length)) > 0) {
		length += (size_t)n;
		while ((nl = memchr(buf, '\n', length)) != NULL) {
			length -= (size_t)(nl - buf) + 1;
			memmove(buf, nl + 1, length);
			pthread_mutex_lock(&f->lock);
			k = f->requests++;
			pthread_mutex_unlock(&f->lock);
			if ((size_t)k >= f->count)
				k = (int)f->count - 1;
			if (fake_act(fd, &f->actions[k]) != 0)
				return;
		}
		if (length == sizeof buf)
			return;
	}
}

static void *
fake_serve(void *arg)
{
	struct fake	*f = arg;
	int		 fd;

	while ((fd = accept(f->listen_fd, NULL, NULL)) != -1) {
		pthread_mutex_lock(&f->lock);
		f->connections++;
		pthread_mutex_unlock(&f->lock);
		fake_serve_one(f, fd);
		close(fd);
		pthread_mutex_lock(&f->lock);
		f->closed++;
		pthread_cond_broadcast(&f->changed);
		pthread_mutex_unlock(&f->lock);
	}
	return NULL;
}

/* Until the stand-in has closed n connections. */
static void
fake_wait_closed(struct fake *f, int n)
{
	pthread_mutex_lock(&f->lock);
	while (f->closed < n)
		pthread_cond_wait(&f->changed, &f->lock);
	pthread_mutex_unlock(&f->lock);
}

/* The stand-in on b's root, answering with the count actions given. */
static void
fake_start(struct fake *f, const struct broker *b, size_t count, ...)
{
	struct sockaddr_un	 sa;
	va_list			 ap;
	size_t			 i;

	memset(f, 0, sizeof *f);
	assert_true(count >= 1 && count <= FAKE_ACTIONS);
	va_start(ap, count);
	for (i = 0; i < count; i++)
		f->actions[i] = *va_arg(ap, const struct action *);
	va_end(ap);
	f->count = count;
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->changed, NULL);
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	assert_true((size_t)snprintf(sa.sun_path, sizeof sa.sun_path,
	    "%s/hostile.sock", b->root) < sizeof sa.sun_path);
	memcpy(f->path, sa.sun_path, sizeof f->path);
	unlink(f->path);
	assert_true((f->listen_fd = socket(AF_UNIX, SOCK_STREAM, 0)) != -1);
	assert_int_equal(bind(f->listen_fd, (struct sockaddr *)&sa,
	    sizeof sa), 0);
	assert_int_equal(listen(f->listen_fd, 8), 0);
	assert_int_equal(pthread_create(&f->thread, NULL, fake_serve, f), 0);
}

static void
fake_stop(struct fake *f)
{
	shutdown(f->listen_fd, SHUT_RDWR);
	assert_int_equal(pthread_join(f->thread, NULL), 0);
	close(f->listen_fd);
	unlink(f->path);
	pthread_mutex_destroy(&f->lock);
	pthread_cond_destroy(&f->changed);
}

static int
fake_requests(struct fake *f)
{
	int	n;

	pthread_mutex_lock(&f->lock);
	n = f->requests;
	pthread_mutex_unlock(&f->lock);
	return n;
}

#define SEND(s)		{ ACT_SEND, (s), 0, 0 }
#define SENDN(s, n)	{ ACT_SEND, (s), (n), 0 }

#define HELLO_OK	"{\"ok\":true,\"server\":\"idemd\",\"version\":\"1\"," \
			    "\"protocol\":1}\n"
#define RECEIPT(sid, task_id)						\
	"{\"client_submission_id\":\"" sid "\",\"task_id\":\"" task_id	\
	"\",\"task_path\":\"_lifecycle/inbox/" task_id ".md\","		\
	"\"digest_schema\":\"write-task-v1\",\"request_digest\":\""	\
	"0000000000000000000000000000000000000000000000000000000000000000" \
	"\",\"file_digest\":\""						\
	"1111111111111111111111111111111111111111111111111111111111111111" \
	"\",\"state\":\"committed\",\"created_at\":\"2026-12-06T00:00:00Z\"}"
#define CREATED(sid)	"{\"ok\":true,\"disposition\":\"created\","	\
	"\"action_taken\":true,\"idempotent\":true,\"receipt\":"	\
	RECEIPT(sid, "TASK-20261206-001-PM-to-DEV") "}\n"
#define PROCEED_WITH(members)	"{\"ok\":true,\"disposition\":\"proceed\"," \
	"\"client_submission_id\":\"e-1\",\"effect_kind\":\"mail\"" members "}\n"
#define PROCEED_MEMBERS	",\"attempt\":1,\"fence\":\"1-00\","		\
	"\"external_key\":\"idem-00000000000000000000000000000000\""
#define ERROR_LINE(code, retryable)	"{\"ok\":false,\"action_taken\":false," \
	"\"error\":{\"code\":\"" code "\",\"message\":\"m\",\"retryable\":" \
	retryable "}}\n"

/* A connection of libidem's to f, with a timeout. */
static struct idem_conn *
fake_connect(struct fake *f, int64_t timeout_ms)
{
	struct idem_conn	*c;
	struct idem_error	 err;

	assert_non_null(c = idem_connect(f->path, &err));
	assert_int_equal(idem_set_timeout(c, timeout_ms, &err), 0);
	return c;
}

/* This process's open descriptors: a call must leave none behind. */
static int
open_fds(void)
{
	DIR		*d;
	struct dirent	*e;
	int		 n = 0;

	assert_non_null(d = opendir("/proc/self/fd"));
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* After a protocol error the connection refuses every call. */
static void
assert_unusable(struct idem_conn *c)
{
	struct idem_hello	hello;
	struct idem_error	err;

	assert_int_equal(idem_hello(c, &hello, &err), -1);
	assert_int_equal(err.code, IDEM_E_TRANSPORT);
}

/* hello answered a: refused with code, the connection then unusable. */
static void
hello_refused_within(struct broker *b, const struct action *a,
    enum idem_error_code code, int64_t timeout_ms)
{
	struct fake		 f;
	struct idem_conn	*c;
	struct idem_hello	 hello;
	struct idem_error	 err;
	int			 fds = open_fds();

	fake_start(&f, b, 1, a);
	c = fake_connect(&f, timeout_ms);
	assert_int_equal(idem_hello(c, &hello, &err), -1);
	assert_int_equal(err.code, code);
	assert_unusable(c);
	idem_close(c);
	fake_stop(&f);
	assert_int_equal(open_fds(), fds);
}

static void
hello_refused(struct broker *b, const struct action *a,
    enum idem_error_code code)
{
	hello_refused_within(b, a, code, 5000);
}

static struct idem_task	task_st = { .sender = "PM", .recipient = "DEV",
	.subject = "s" };

/* write_task sid answered a: refused with code, then unusable. */
static void
write_refused(struct broker *b, const char *sid, const struct action *a,
    enum idem_error_code code)
{
	struct fake		 f;
	struct idem_conn	*c;
	struct idem_write_result r;
	struct idem_error	 err;

	fake_start(&f, b, 1, a);
	c = fake_connect(&f, 5000);
	assert_int_equal(idem_write_task(c, sid, &task_st, &r, &err), -1);
	assert_int_equal(err.code, code);
	assert_unusable(c);
	idem_close(c);
	fake_stop(&f);
}

/* effect_begin e-1 mail answered a: refused as a protocol error. */
static void
begin_refused(struct broker *b, const struct action *a)
{
	struct fake		 f;
	struct idem_conn	*c;
	struct idem_effect	 e;
	struct idem_error	 err;

	fake_start(&f, b, 1, a);
	c = fake_connect(&f, 5000);
	assert_int_equal(idem_effect_begin(c, "e-1", "mail", "{}", 0, &e,
	    &err), -1);
	assert_int_equal(err.code, IDEM_E_PROTOCOL);
	assert_int_not_equal(e.disposition, IDEM_EFFECT_PROCEED);
	idem_effect_clear(&e);
	assert_unusable(c);
	idem_close(c);
	fake_stop(&f);
}

/* 1-3: not JSON, not an object, no boolean ok, NUL, bad UTF-8, \u0000 */
static const char nul_line[] = "{\"ok\":true,\"server\":\"id\0emd\","
    "\"version\":\"1\",\"protocol\":1}\n";

static void
lines_that_are_not_answers(void **state)
{
	static const struct action lines[] = {
		SEND("hello there\n"), SEND("{\"ok\":true,\n"),
		SEND("[1,2]\n"), SEND("null\n"), SEND("{}\n"),
		SEND("{\"ok\":\"true\"}\n"), SEND("{\"ok\":1}\n"),
		SENDN(nul_line, sizeof nul_line - 1),
		SEND("{\"ok\":true,\"server\":\"id\xff" "emd\",\"version\":"
		    "\"1\",\"protocol\":1}\n"),
		SEND("{\"ok\":true,\"server\":\"id\\u0000emd\",\"version\":"
		    "\"1\",\"protocol\":1}\n"),
	};
	struct broker	*b = *state;
	size_t		 i;

	for (i = 0; i < NITEMS(lines); i++)
		hello_refused(b, &lines[i], IDEM_E_PROTOCOL);
	harness_finish(b);
}

/* 2: a write_task success without what it promises, or another key's */
static void
write_task_success_checked(void **state)
{
	static const struct action lines[] = {
		SEND("{\"ok\":true,\"disposition\":\"created\"}\n"),
		SEND("{\"ok\":true,\"disposition\":\"conflict\",\"receipt\":"
		    RECEIPT("w-1", "TASK-1") "}\n"),
		SEND("{\"ok\":true,\"disposition\":\"created\",\"receipt\":"
		    "{\"task_id\":7}}\n"),
		SEND("{\"ok\":true,\"disposition\":\"created\",\"receipt\":"
		    RECEIPT("w-1", "TASK-1\\u0000-evil") "}\n"),
		/* 10: the receipt of another key. */
		SEND(CREATED("other")),
		/* Without its file digest, and not said compacted. */
		SEND("{\"ok\":true,\"disposition\":\"reused\",\"receipt\":"
		    "{\"client_submission_id\":\"w-1\",\"task_id\":\"T\","
		    "\"task_path\":\"p\",\"digest_schema\":\"write-task-v1\","
		    "\"request_digest\":\"00\",\"state\":\"committed\","
		    "\"created_at\":\"t\"}}\n"),
		/* Compacted, without the digest its tombstone keeps. */
		SEND("{\"ok\":true,\"disposition\":\"reused\","
		    "\"receipt_pruned\":true,\"receipt\":"
		    "{\"client_submission_id\":\"w-1\",\"task_id\":\"T\","
		    "\"task_path\":\"p\",\"digest_schema\":\"write-task-v1\","
		    "\"state\":\"committed\",\"created_at\":\"t\"}}\n"),
	};
	struct broker	*b = *state;
	size_t		 i;

	for (i = 0; i < NITEMS(lines); i++)
		write_refused(b, "w-1", &lines[i], IDEM_E_PROTOCOL);
	harness_finish(b);
}

/* 2, 10: effect answers without what they promise, or another key's */
static void
effect_answers_checked(void **state)
{
	static const struct action lines[] = {
		SEND(PROCEED_WITH(",\"attempt\":1,\"external_key\":\"k\"")),
		SEND(PROCEED_WITH(",\"fence\":\"1-00\",\"external_key\":\"k\"")),
		SEND(PROCEED_WITH(",\"attempt\":0,\"fence\":\"1-00\","
		    "\"external_key\":\"k\"")),
		SEND(PROCEED_WITH(",\"attempt\":1,\"fence\":\"1-00\"")),
		/* A refusal that says proceed. */
		SEND("{\"ok\":false,\"disposition\":\"proceed\",\"attempt\":1,"
		    "\"fence\":\"1-00\",\"external_key\":\"k\",\"error\":{"
		    "\"code\":\"internal\",\"message\":\"m\"}}\n"),
		/* \u0000 in a string (a C string would end there). */
		SEND(PROCEED_WITH(",\"attempt\":1,\"fence\":\"1-00\","
		    "\"external_key\":\"k\\u0000x\"")),
		/* Invalid UTF-8 in a string. */
		SEND(PROCEED_WITH(",\"attempt\":1,\"fence\":\"1-\xff\","
		    "\"external_key\":\"k\"")),
		/* A success that says conflict. */
		SEND("{\"ok\":true,\"disposition\":\"conflict\"}\n"),
		/* reused without a receipt. */
		SEND("{\"ok\":true,\"disposition\":\"reused\"}\n"),
		/* 10: another key, another kind. */
		SEND("{\"ok\":true,\"disposition\":\"proceed\","
		    "\"client_submission_id\":\"e-2\",\"effect_kind\":\"mail\""
		    PROCEED_MEMBERS "}\n"),
		SEND("{\"ok\":true,\"disposition\":\"proceed\","
		    "\"client_submission_id\":\"e-1\",\"effect_kind\":\"sms\""
		    PROCEED_MEMBERS "}\n"),
	};
	struct broker		*b = *state;
	struct fake		 f;
	struct idem_conn	*c;
	struct idem_effect	 e;
	struct idem_error	 err;
	size_t			 i;

	for (i = 0; i < NITEMS(lines); i++)
		begin_refused(b, &lines[i]);

	/* An applied complete answered without its receipt. */
	fake_start(&f, b, 1, &(const struct action)SEND("{\"ok\":true,"
	    "\"action_taken\":true,\"state\":\"committed\"}\n"));
	c = fake_connect(&f, 5000);
	assert_int_equal(idem_effect_complete(c, "e-1", "mail", "1-00", 1,
	    "{\"r\":1}", &e, &err), -1);
	assert_int_equal(err.code, IDEM_E_PROTOCOL);
	idem_effect_clear(&e);
	idem_close(c);
	fake_stop(&f);
	harness_finish(b);
}

/* 4: a line over 1 MiB, and one that never ends */
static void
lines_too_long(void **state)
{
	struct broker	*b = *state;
	struct action	 big = { ACT_SEND, NULL, 0, 0 };
	char		*line;
	size_t		 n = IDEM_MAX_LINE_BYTES + 64;

	assert_non_null(line = malloc(n + 1));
	memset(line, 'x', n);
	memcpy(line, "{\"ok\":true,\"pad\":\"", 18);
	memcpy(line + n - 3, "\"}\n", 3);
	line[n] = '\0';
	big.bytes = line;
	hello_refused(b, &big, IDEM_E_PROTOCOL);
	free(line);
	hello_refused(b, &(const struct action){ ACT_STREAM, NULL, 0, 0 },
	    IDEM_E_PROTOCOL);
	harness_finish(b);
}

/* 5: closed in the middle of an answer, after the request, before it */
static void
connection_closed(void **state)
{
	struct broker		*b = *state;
	struct fake		 f;
	struct idem_conn	*c;
	struct idem_hello	 hello;
	struct idem_error	 err;
	static const struct action close_at_once = { ACT_CLOSE, NULL, 0, 0 };

	hello_refused(b, &(const struct action){ ACT_CUT, "{\"ok\":tr", 0,
	    0 }, IDEM_E_TRANSPORT);
	hello_refused(b, &close_at_once, IDEM_E_TRANSPORT);
	fake_start(&f, b, 1, &(const struct action)SEND(HELLO_OK));
	f.on_connect = &close_at_once;
	c = fake_connect(&f, 5000);
	assert_int_equal(idem_hello(c, &hello, &err), -1);
	assert_int_equal(err.code, IDEM_E_TRANSPORT);
	idem_close(c);
	fake_stop(&f);
	harness_finish(b);
}

static int64_t
now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* 6, 8: no answer, or one a byte at a time: the timeout bounds it */
static void
timeout_bounds_the_answer(void **state)
{
	struct broker		*b = *state;
	struct fake		 f;
	struct idem_conn	*c;
	struct idem_hello	 hello;
	struct idem_error	 err;
	int64_t			 start;

	start = now_ms();
	hello_refused_within(b, &(const struct action){ ACT_HANG, NULL, 0,
	    0 }, IDEM_E_TRANSPORT, 300);
	assert_true(now_ms() - start < 2000);

	/* Every byte within the timeout, the whole answer not. */
	fake_start(&f, b, 1, &(const struct action){ ACT_TRICKLE, HELLO_OK,
	    0, 50 });
	c = fake_connect(&f, 300);
	start = now_ms();
	assert_int_equal(idem_hello(c, &hello, &err), -1);
	assert_int_equal(err.code, IDEM_E_TRANSPORT);
	assert_true(now_ms() - start < 2000);
	assert_unusable(c);
	idem_close(c);
	fake_stop(&f);

	/* Slow but within it: the answer. */
	fake_start(&f, b, 1, &(const struct action){ ACT_TRICKLE, HELLO_OK,
	    0, 1 });
	c = fake_connect(&f, 5000);
	assert_int_equal(idem_hello(c, &hello, &err), 0);
	assert_string_equal(hello.server, "idemd");
	idem_close(c);
	fake_stop(&f);
	harness_finish(b);
}

/* 7: two answers to one request answer no later call */
static void
two_answers_to_one_request(void **state)
{
	struct broker		*b = *state;
	struct fake		 f;
	struct idem_conn	*c;
	struct idem_write_result r;
	struct idem_hello	 hello;
	struct idem_stats	 st;
	struct idem_error	 err;

	fake_start(&f, b, 2, &(const struct action)SEND(CREATED("two-a")
	    CREATED("two-a")), &(const struct action)SEND(CREATED("two-b")));
	c = fake_connect(&f, 5000);
	assert_int_equal(idem_write_task(c, "two-a", &task_st, &r, &err), 0);
	assert_string_equal(r.receipt.client_submission_id, "two-a");
	/* Never the first call's receipt for the second. */
	assert_int_equal(idem_write_task(c, "two-b", &task_st, &r, &err), -1);
	assert_int_equal(err.code, IDEM_E_PROTOCOL);
	assert_unusable(c);
	idem_close(c);
	fake_stop(&f);

	/* Ops whose answers name no key: found before the request. */
	fake_start(&f, b, 1, &(const struct action)SEND(HELLO_OK HELLO_OK));
	c = fake_connect(&f, 5000);
	assert_int_equal(idem_hello(c, &hello, &err), 0);
	assert_int_equal(idem_stats(c, &st, &err), -1);
	assert_int_equal(err.code, IDEM_E_PROTOCOL);
	/* Found before sending: the stats request never went out. */
	assert_int_equal(fake_requests(&f), 1);
	idem_close(c);
	fake_stop(&f);
	harness_finish(b);
}

/*
 * 11: a well-formed error whose code is newer than libidem is
 * IDEM_E_PROTOCOL (its name in the message), but the stream is sound:
 * the next call on the connection is answered (hello, write_task and
 * effect_begin, each path that reads an error).
 */
static void
unknown_code_keeps_the_stream(void **state)
{
	static const struct action newer =
	    SEND(ERROR_LINE("brand_new_code", "false"));
	static const struct action hello_ok = SEND(HELLO_OK);
	struct broker		*b = *state;
	struct fake		 f;
	struct idem_conn	*c;
	struct idem_hello	 hello;
	struct idem_write_result r;
	struct idem_effect	 e;
	struct idem_error	 err;

	fake_start(&f, b, 4, &newer, &newer, &newer, &hello_ok);
	c = fake_connect(&f, 5000);
	assert_int_equal(idem_hello(c, &hello, &err), -1);
	assert_int_equal(err.code, IDEM_E_PROTOCOL);
	assert_non_null(strstr(err.message, "brand_new_code"));
	assert_int_equal(idem_write_task(c, "u-1", &task_st, &r, &err), -1);
	assert_int_equal(err.code, IDEM_E_PROTOCOL);
	assert_non_null(strstr(err.message, "brand_new_code"));
	assert_int_equal(idem_effect_begin(c, "e-1", "mail", "{}", 0, &e,
	    &err), -1);
	assert_int_equal(err.code, IDEM_E_PROTOCOL);
	assert_non_null(strstr(err.message, "brand_new_code"));
	idem_effect_clear(&e);
	/* The same stream answers the next call. */
	assert_int_equal(idem_hello(c, &hello, &err), 0);
	assert_string_equal(hello.server, "idemd");
	assert_int_equal(f.connections, 1);
	idem_close(c);
	fake_stop(&f);
	harness_finish(b);
}

/*
 * 12: the broker's refusal before it reads (too_many_connections: one
 * line, then it closes, as idemd's conn_refuse does), the request sent
 * only once the stand-in has closed: the send fails (EPIPE) with the
 * refusal waiting, which is the answer, not a transport error.
 */
static void
refusal_before_reading(void **state)
{
	static const struct action refuse = { ACT_CUT, "{\"ok\":false,"
	    "\"action_taken\":false,\"error\":{\"code\":"
	    "\"too_many_connections\",\"reason\":\"max_connections\","
	    "\"message\":\"too many\",\"retryable\":true}}\n", 0, 0 };
	struct broker		*b = *state;
	struct fake		 f;
	struct idem_conn	*c;
	struct idem_hello	 hello;
	struct idem_error	 err;

	fake_start(&f, b, 1, &(const struct action)SEND(HELLO_OK));
	f.on_connect = &refuse;
	c = fake_connect(&f, 5000);
	fake_wait_closed(&f, 1);
	assert_int_equal(idem_hello(c, &hello, &err), -1);
	assert_int_equal(err.code, IDEM_E_TOO_MANY_CONNECTIONS);
	assert_true(err.retryable);
	assert_string_equal(err.reason, "max_connections");
	assert_int_equal(fake_requests(&f), 0);
	idem_close(c);
	fake_stop(&f);
	harness_finish(b);
}

/* write_task_retry against answer: its error, and the requests sent. */
static int
retried(struct broker *b, const char *answer, unsigned attempts,
    struct idem_error *err)
{
	struct idem_retry_policy policy = { attempts, 1, 2, 10000 };
	struct fake		 f;
	struct idem_write_result r;
	int			 n;

	fake_start(&f, b, 1, &(const struct action)SEND(answer));
	assert_int_equal(idem_write_task_retry(f.path, "r-1", &task_st,
	    &policy, &r, err), -1);
	n = fake_requests(&f);
	fake_stop(&f);
	return n;
}

/* 9: retryable for ever stops at the bound; the rest never retried */
static void
retries_bounded_and_typed(void **state)
{
	static const struct {
		const char		*line;
		enum idem_error_code	 code;
		int			 tries;
	} cases[] = {
		{ ERROR_LINE("in_progress", "true"), IDEM_E_IN_PROGRESS, 4 },
		{ ERROR_LINE("table_full", "true"), IDEM_E_TABLE_FULL, 4 },
		{ ERROR_LINE("storage_unavailable", "true"),
		    IDEM_E_STORAGE_UNAVAILABLE, 4 },
		{ ERROR_LINE("shutting_down", "true"), IDEM_E_SHUTTING_DOWN,
		    4 },
		{ ERROR_LINE("too_many_connections", "true"),
		    IDEM_E_TOO_MANY_CONNECTIONS, 4 },
		{ ERROR_LINE("outcome_unknown", "true"),
		    IDEM_E_OUTCOME_UNKNOWN, 1 },
		{ ERROR_LINE("invalid_request", "true"),
		    IDEM_E_INVALID_REQUEST, 1 },
		{ ERROR_LINE("sequence_exhausted", "true"),
		    IDEM_E_SEQUENCE_EXHAUSTED, 1 },
		{ "nonsense\n", IDEM_E_PROTOCOL, 1 },
	};
	struct broker		*b = *state;
	struct idem_retry_policy policy = { 2, 1, 2, 300 };
	struct fake		 f;
	struct idem_write_result r;
	struct idem_error	 err;
	size_t			 i;

	for (i = 0; i < NITEMS(cases); i++) {
		assert_int_equal(retried(b, cases[i].line, 4, &err),
		    cases[i].tries);
		assert_int_equal(err.code, cases[i].code);
	}
	/* No answer at all: each attempt's timeout, then the deadline. */
	fake_start(&f, b, 1, &(const struct action){ ACT_HANG, NULL, 0, 0 });
	assert_int_equal(idem_write_task_retry(f.path, "r-2", &task_st,
	    &policy, &r, &err), -1);
	assert_int_equal(err.code, IDEM_E_TRANSPORT);
	fake_stop(&f);
	harness_finish(b);
}

#define T(name)	cmocka_unit_test_setup_teardown(name, harness_setup, \
	    harness_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(lines_that_are_not_answers),
		T(write_task_success_checked),
		T(effect_answers_checked),
		T(lines_too_long),
		T(connection_closed),
		T(timeout_bounds_the_answer),
		T(two_answers_to_one_request),
		T(retries_bounded_and_typed),
		T(unknown_code_keeps_the_stream),
		T(refusal_before_reading),
	};

	if (sodium_init() < 0)
		return 1;
	return FILTER_RUN(tests);
}
