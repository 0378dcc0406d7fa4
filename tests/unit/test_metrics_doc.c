/* SPDX-License-Identifier: ISC */
/*
 * test_metrics_doc.c: libclient/stats.h's table against its readers'
 * rules and against doc/metrics.md.  Every row's Prometheus name follows
 * Prometheus's conventions (a counter ends "_total", a stat in bytes
 * "_bytes", one in ms is shown in "_seconds"; no two alike), a wire name
 * that says a unit has that unit, and every help is one sentence.  The
 * metrics reference in doc/metrics.md, between its "metrics table"
 * markers, is exactly the table this prints: with --print it prints it,
 * which is how the page is regenerated after a row is added:
 *
 *	build/tests/unit/test_metrics_doc --print
 *
 * (the page's text around the table is written by hand).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "integration/filter.h"
#include "stats.h"

#define METRICS_DOC		"doc/metrics.md"
#define METRICS_BEGIN		"<!-- metrics table: begin (generated) -->"
#define METRICS_END		"<!-- metrics table: end -->"

static int
ends_with(const char *s, const char *suffix)
{
	size_t	n = strlen(s), k = strlen(suffix);

	return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The table as doc/metrics.md shows it (malloc'd). */
static char *
metrics_table(void)
{
	const struct idem_stat_row	*s;
	char				*buf;
	size_t				 size = 65536, used = 0, i;
	char				 name[128];

	buf = malloc(size);
	assert_non_null(buf);
#define OUT(...)	do {						\
	used += (size_t)snprintf(buf + used, size - used, __VA_ARGS__);	\
	assert_true(used < size);					\
} while (0)
	OUT("| stat | type | unit | Prometheus | what it is |\n");
	OUT("|---|---|---|---|---|\n");
	for (i = 0; i < IDEM_STAT_COUNT; i++) {
		s = &idem_stat_table[i];
		idem_stat_metric_name(s, name, sizeof name);
		OUT("| `%s` | %s | %s | `%s`%s | %s |\n", s->name,
		    s->type == IDEM_STAT_COUNTER ? "counter" : "gauge",
		    idem_stat_unit_names[s->unit], name,
		    s->unit == IDEM_STAT_UNIT_MS ? " (in seconds)" : "",
		    s->help);
	}
#define STORE_ROW(member, help)						\
	OUT("| `%s.%s` | gauge | rows | `idem_store_%s` | %s |\n",	\
	    IDEM_STORE_STATS_MEMBER, #member, #member, help);
	IDEM_STORE_STATS(STORE_ROW)
#undef STORE_ROW
#undef OUT
	return buf;
}

static void
names_follow_conventions(void **state)
{
	const struct idem_stat_row	*s;
	char				 name[128], seen[IDEM_STAT_COUNT][128];
	size_t				 i, j, n;

	(void)state;
	for (i = 0; i < IDEM_STAT_COUNT; i++) {
		s = &idem_stat_table[i];
		idem_stat_metric_name(s, name, sizeof name);
		if (strncmp(name, "idem_", 5) != 0)
			fail_msg("%s: %s lacks the idem_ prefix", s->name,
			    name);
		for (j = 5; name[j] != '\0'; j++) {
			if (!((name[j] >= 'a' && name[j] <= 'z') ||
			    (name[j] >= '0' && name[j] <= '9') ||
			    name[j] == '_'))
				fail_msg("%s: %s is not snake case", s->name,
				    name);
		}
		if ((s->type == IDEM_STAT_COUNTER) != ends_with(name, "_total"))
			fail_msg("%s: %s: a counter ends _total, and only a "
			    "counter", s->name, name);
		n = strlen(name);
		if (s->type == IDEM_STAT_COUNTER)
			n -= strlen("_total");
		name[n] = '\0';
		if (s->unit == IDEM_STAT_UNIT_BYTES && !ends_with(name,
		    "_bytes"))
			fail_msg("%s: %s: in bytes, not _bytes", s->name, name);
		if (s->unit == IDEM_STAT_UNIT_MS && !ends_with(name,
		    "_seconds"))
			fail_msg("%s: %s: in ms, not _seconds", s->name, name);
		/* The wire's name says its unit right. */
		if (ends_with(s->name, "_ms") != (s->unit == IDEM_STAT_UNIT_MS))
			fail_msg("%s: named _ms, or in ms, not both", s->name);
		if (ends_with(s->name, "_bytes") &&
		    s->unit != IDEM_STAT_UNIT_BYTES)
			fail_msg("%s: named _bytes, not in bytes", s->name);
		if (s->help[0] == '\0' || !ends_with(s->help, ".") ||
		    strchr(s->help, '|') != NULL || strchr(s->help, '\n'))
			fail_msg("%s: help must be one sentence: \"%s\"",
			    s->name, s->help);
		idem_stat_metric_name(s, seen[i], sizeof seen[i]);
		for (j = 0; j < i; j++) {
			if (strcmp(seen[j], seen[i]) == 0)
				fail_msg("%s and %s are both %s",
				    idem_stat_table[j].name, s->name, seen[i]);
		}
	}
}

static void
doc_has_the_table(void **state)
{
	const char	*srcdir = getenv("IDEM_SRCDIR");
	char		 path[4096], *want, *doc, *begin, *end;
	FILE		*f;
	long		 size;

	(void)state;
	snprintf(path, sizeof path, "%s/%s", srcdir != NULL ? srcdir : ".",
	    METRICS_DOC);
	f = fopen(path, "r");
	if (f == NULL)
		fail_msg("%s: cannot open it (IDEM_SRCDIR?)", path);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	size = ftell(f);
	rewind(f);
	doc = calloc(1, (size_t)size + 1);
	assert_non_null(doc);
	assert_int_equal(fread(doc, 1, (size_t)size, f), (size_t)size);
	fclose(f);
	want = metrics_table();
	if ((begin = strstr(doc, METRICS_BEGIN "\n")) == NULL ||
	    (end = strstr(begin, METRICS_END)) == NULL)
		fail_msg("%s: no \"%s\" ... \"%s\" markers", path,
		    METRICS_BEGIN, METRICS_END);
	begin += strlen(METRICS_BEGIN "\n");
	*end = '\0';
	if (strcmp(begin, want) != 0) {
		fprintf(stderr, "%s's table is not libclient/stats.h's; "
		    "it should read (test_metrics_doc --print):\n%s", path,
		    want);
		fail_msg("%s is stale", path);
	}
	free(want);
	free(doc);
}

int
main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(names_follow_conventions),
		cmocka_unit_test(doc_has_the_table),
	};
	char	*table;

	if (argc == 2 && strcmp(argv[1], "--print") == 0) {
		table = metrics_table();
		printf("%s\n%s%s\n", METRICS_BEGIN, table, METRICS_END);
		free(table);
		return 0;
	}
	return FILTER_RUN(tests);
}
