/* SPDX-License-Identifier: ISC */
/*
 * test_storeuri.c: broker/store/storeuri.c (issue #27, item 6).  The
 * password is overwritten wherever libpq would read one in a URI (the
 * user part, a password parameter, percent-encoded or not) and nothing
 * else is touched; a --store-file is refused unless a regular file of
 * ours or root's without group or other access, with a message naming
 * the path and the mode, and read as one line.  What a running broker
 * and idemctl show is tests/cluster/test_secrets.c's.
 */
#include <sys/stat.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/filter.h"
#include "storeuri.h"

static void
check_redact(const char *in, const char *want, size_t count)
{
	char	buf[512];

	snprintf(buf, sizeof buf, "%s", in);
	assert_int_equal(storeuri_redact(buf), count);
	assert_string_equal(buf, want);
	assert_int_equal(storeuri_has_password(in), count > 0);
}

static void
test_redact(void **state)
{
	check_redact("postgresql://idem:PW@/idem?host=/run/pg",
	    "postgresql://idem:xx@/idem?host=/run/pg", 2);
	check_redact("postgres://u:p:q?x@db.example:5432/idem",
	    "postgres://u:xxxxx@db.example:5432/idem", 5);
	check_redact("postgresql:///idem?host=/run/pg&password=s3cret&user=u",
	    "postgresql:///idem?host=/run/pg&password=xxxxxx&user=u", 6);
	check_redact("postgresql:///idem?pass%77ord=s3cret",
	    "postgresql:///idem?pass%77ord=xxxxxx", 6);
	check_redact("postgresql://u:a@/d?password=b",
	    "postgresql://u:x@/d?password=x", 2);
	/* No password: nothing changes (an '@' after '/' is no user part). */
	check_redact("postgresql://idem@/idem?host=/run/pg",
	    "postgresql://idem@/idem?host=/run/pg", 0);
	check_redact("postgresql:///idem?host=/a@b:c&passwords=x",
	    "postgresql:///idem?host=/a@b:c&passwords=x", 0);
	check_redact("postgresql://", "postgresql://", 0);
	check_redact("local", "local", 0);
}

/* A message quoting the password (libpq does, for a malformed one). */
static void
test_scrub(void **state)
{
	char	text[256];

	snprintf(text, sizeof text, "invalid percent-encoded token: "
	    "\"pa%%zz\"; pa%%zz again");
	storeuri_scrub(text, "postgresql://u:pa%zz@/d");
	assert_string_equal(text, "invalid percent-encoded token: "
	    "\"xxxxx\"; xxxxx again");
	snprintf(text, sizeof text, "bad value \"s3\" for s3cret");
	storeuri_scrub(text, "postgresql:///d?password=s3cret&user=s3");
	assert_string_equal(text, "bad value \"s3\" for xxxxxx");
	storeuri_scrub(text, "postgresql:///d?user=u");
	assert_string_equal(text, "bad value \"s3\" for xxxxxx");
}

static char	dir[] = "/tmp/idem-test-storeuri.XXXXXX";

static const char *
put(const char *name, const char *text, mode_t mode)
{
	static char	path[128];
	FILE		*fp;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	unlink(path);
	assert_non_null(fp = fopen(path, "w"));
	fputs(text, fp);
	assert_int_equal(fclose(fp), 0);
	assert_int_equal(chmod(path, mode), 0);
	return path;
}

static void
test_read_file(void **state)
{
	const char	*path;
	char		*uri, *cause = NULL;
	unsigned	 me = (unsigned)getuid();

	assert_non_null(mkdtemp(dir));
	path = put("good", "  postgresql://u:pw@/d?host=/x\n\n", 0600);
	assert_non_null(uri = storeuri_read_file(path, me, &cause));
	assert_string_equal(uri, "postgresql://u:pw@/d?host=/x");
	free(uri);
	path = put("readonly", "postgresql://u@/d", 0400);
	assert_non_null(uri = storeuri_read_file(path, me, &cause));
	free(uri);

	/* Group or others: refused, the path and the mode named. */
	path = put("group", "postgresql://u:pw@/d\n", 0640);
	assert_null(storeuri_read_file(path, me, &cause));
	assert_non_null(strstr(cause, path));
	assert_non_null(strstr(cause, "mode 0640"));
	assert_non_null(strstr(cause, "chmod 600"));
	free(cause);
	path = put("other", "postgresql://u:pw@/d\n", 0604);
	assert_null(storeuri_read_file(path, me, &cause));
	assert_non_null(strstr(cause, "mode 0604"));
	free(cause);
	/* Another owner (as if we were uid me + 1, not root). */
	path = put("owner", "postgresql://u:pw@/d\n", 0600);
	if (me != 0) {
		assert_null(storeuri_read_file(path, me + 1, &cause));
		assert_non_null(strstr(cause, "owned by uid"));
		free(cause);
	} else {
		/* root's file is accepted for anyone. */
		assert_non_null(uri = storeuri_read_file(path, 12345, &cause));
		free(uri);
		assert_int_equal(chown(path, 65534, 65534), 0);
		assert_null(storeuri_read_file(path, 0, &cause));
		assert_non_null(strstr(cause, "owned by uid 65534"));
		free(cause);
	}
	/* Not one line, empty, missing, a directory. */
	path = put("two", "postgresql://a\npostgresql://b\n", 0600);
	assert_null(storeuri_read_file(path, me, &cause));
	assert_non_null(strstr(cause, "one line"));
	free(cause);
	path = put("empty", "\n", 0600);
	assert_null(storeuri_read_file(path, me, &cause));
	free(cause);
	assert_null(storeuri_read_file("/nonexistent/store", me, &cause));
	assert_non_null(strstr(cause, "/nonexistent/store"));
	free(cause);
	assert_null(storeuri_read_file(dir, me, &cause));
	assert_non_null(strstr(cause, "not a regular file"));
	free(cause);
	{
		char	cmd[160];

		snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
		assert_int_equal(system(cmd), 0);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_redact),
		cmocka_unit_test(test_scrub),
		cmocka_unit_test(test_read_file),
	};

	return FILTER_RUN(tests);
}
