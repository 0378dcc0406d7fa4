/* SPDX-License-Identifier: ISC */
/*
 * test_notify.c: idemd tells systemd how it is (Type=notify): READY=1
 * once serving, RELOADING=1 and READY=1 around a SIGHUP, STOPPING=1 when
 * it drains.  The test binds the datagram socket systemd would and
 * passes it as NOTIFY_SOCKET.  A build without libsystemd has no
 * sd_notify: the test skips (exit 77), saying so.
 */
#include <sys/socket.h>
#include <sys/un.h>

#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "integration/filter.h"
#include "integration/harness.h"

#define TEST_NOTIFY_WAIT_MS	20000

/* The next datagram (NUL-terminated in buf); fails after the wait. */
static void
next_state(int fd, char *buf, size_t size)
{
	struct pollfd	pfd = { fd, POLLIN, 0 };
	ssize_t		n;

	if (poll(&pfd, 1, TEST_NOTIFY_WAIT_MS) != 1)
		fail_msg("no notification within %d ms", TEST_NOTIFY_WAIT_MS);
	n = recv(fd, buf, size - 1, 0);
	assert_true(n > 0);
	buf[n] = '\0';
}

/* The next notification is exactly want (idemd sends one state each). */
static void
expect_state(int fd, const char *want)
{
	char	buf[1024];

	next_state(fd, buf, sizeof buf);
	assert_string_equal(buf, want);
}

static void
ready_reloading_stopping(void **state)
{
	struct broker		*b = *state;
	struct sockaddr_un	 sun;
	char			 env[sizeof sun.sun_path + 16];
	const char		*envp[] = { env, NULL };
	json_t			*reply;
	int			 fd;

	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	if (snprintf(sun.sun_path, sizeof sun.sun_path, "%s.notify",
	    b->root) >= (int)sizeof sun.sun_path)
		fail_msg("%s.notify is too long for a socket path", b->root);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(fd != -1);
	assert_int_equal(bind(fd, (struct sockaddr *)&sun, sizeof sun), 0);
	snprintf(env, sizeof env, "NOTIFY_SOCKET=%s", sun.sun_path);

	assert_int_equal(harness_start(b, NULL, envp), 0);
	expect_state(fd, "READY=1");
	reply = harness_call_once(b, json_pack("{s:s}", "op", "hello"));
	assert_non_null(reply);
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);

	assert_int_equal(kill(b->pid, SIGHUP), 0);
	expect_state(fd, "RELOADING=1");
	expect_state(fd, "READY=1");

	assert_int_equal(harness_stop(b), 0);
	expect_state(fd, "STOPPING=1");
	close(fd);
	unlink(sun.sun_path);
	harness_finish(b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(ready_reloading_stopping,
		    harness_setup, harness_teardown),
	};
	const char	*have = getenv("IDEM_HAVE_SYSTEMD");

	if (have == NULL || strcmp(have, "yes") != 0) {
		printf("SKIP: idemd was built without libsystemd (configure "
		    "found no libsystemd-dev): no sd_notify to test\n");
		return 77;
	}
	return FILTER_RUN(tests);
}
