/* SPDX-License-Identifier: ISC */
/*
 * filter.h: IDEM_TEST_FILTER for a cmocka test program (doc/testing.md,
 * its introduction).  The filter is cmocka's glob over the test names
 * ('*' any run, '?' one character); a plain word, without either, is
 * taken as *word*, a substring.  A filter that matches none of the
 * program's tests fails it (1, with a message naming the filter): cmocka
 * alone prints "Running 0 test(s)" and exits 0, a run that tested
 * nothing passing.
 *
 * Header only (static inline), so that every test program, unit,
 * integration, mcp or cluster, has it without another object to link.
 * Include it after <cmocka.h>.  In main, the tests the filter selects
 * (all without one) run, their status returned:
 *
 *	return FILTER_RUN(tests);
 */

#ifndef IDEM_TESTS_FILTER_H
#define IDEM_TESTS_FILTER_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FILTER_ENV	"IDEM_TEST_FILTER"

/* cmocka's matching (c_strmatch): '*' and '?', nothing else special. */
static inline int
filter_match(const char *s, const char *p)
{
	for (; *p != '\0'; p++, s++) {
		if (*p == '*') {
			while (p[1] == '*')
				p++;
			if (p[1] == '\0')
				return 1;
			for (; *s != '\0'; s++)
				if (filter_match(s, p + 1))
					return 1;
			return 0;
		}
		if (*s == '\0' || (*p != '?' && *p != *s))
			return 0;
	}
	return *s == '\0';
}

/*
 * Set cmocka's filter from IDEM_TEST_FILTER, if set: 0, or -1 (logged)
 * when it matches none of the count tests of program (a source path:
 * its last component names it).
 */
static inline int
filter_apply(const char *program, const struct CMUnitTest *tests,
    size_t count)
{
	/* cmocka keeps the pointer: the pattern must outlive main. */
	static char	 pattern[512];
	const char	*env = getenv(FILTER_ENV);
	size_t		 i, matched = 0;
	int		 n;

	if (env == NULL)
		return 0;
	if (strrchr(program, '/') != NULL)
		program = strrchr(program, '/') + 1;
	if (strpbrk(env, "*?") != NULL)
		n = snprintf(pattern, sizeof pattern, "%s", env);
	else
		n = snprintf(pattern, sizeof pattern, "*%s*", env);
	if (n < 0 || (size_t)n >= sizeof pattern) {
		fprintf(stderr, "%s: %s is too long (%zu bytes at most)\n",
		    program, FILTER_ENV, sizeof pattern - 3);
		return -1;
	}
	for (i = 0; i < count; i++)
		if (tests[i].name != NULL && filter_match(tests[i].name,
		    pattern))
			matched++;
	if (matched == 0) {
		fprintf(stderr, "%s: %s=%s matches none of its %zu test(s) "
		    "(a glob, or a word matched as a substring)\n", program,
		    FILTER_ENV, env, count);
		return -1;
	}
	cmocka_set_test_filter(pattern);
	return 0;
}

#define FILTER_APPLY(tests)	filter_apply(__FILE__, (tests), \
	sizeof(tests) / sizeof((tests)[0]))

/* cmocka's status running the tests selected; 1 if the filter is bad. */
#define FILTER_RUN(tests)						\
	(FILTER_APPLY(tests) == -1 ? 1 :				\
	    cmocka_run_group_tests(tests, NULL, NULL))

#endif
