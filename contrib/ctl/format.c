/* SPDX-License-Identifier: ISC */
/*
 * format.c: how idemctl prints what it read: durations parsed and
 * written short, yes/no, integer members, and tables with aligned
 * columns.  No I/O but stdout.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE		/* reallocarray */
#endif

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "idem.h"
#include "idemctl.h"

/* "500ms", "30s", "1.5s", "5m", "2h"; a bare number is seconds. */
int
ctl_parse_duration_ms(const char *s, int64_t *ms)
{
	static const struct {
		const char	*suffix;
		double		 ms;
	} units[] = {
		{ "ms", 1 }, { "s", 1000 }, { "", 1000 }, { "m", 60000 },
		{ "h", 3600000 }, { "d", 86400000 }
	};
	char	*end;
	double	 v;
	size_t	 i;

	if (!((*s >= '0' && *s <= '9') || *s == '.'))
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s)
		return -1;
	for (i = 0; i < sizeof units / sizeof units[0]; i++) {
		if (strcmp(end, units[i].suffix) == 0) {
			v *= units[i].ms;
			/* Also refuses NaN and infinity. */
			if (!(v >= 0 && v < (double)INT64_MAX / 2))
				return -1;
			*ms = (int64_t)(v + 0.5);
			return 0;
		}
	}
	return -1;
}

/* An age or uptime, short and readable: 850ms, 12.3s, 4m05s, 2h03m, 3d02h. */
void
ctl_format_duration(int64_t ms, char *out, size_t size)
{
	int64_t	s;

	if (ms < 0)
		ms = 0;
	s = ms / 1000;
	if (ms < 1000)
		snprintf(out, size, "%" PRId64 "ms", ms);
	else if (s < 60)
		snprintf(out, size, "%.1fs", (double)ms / 1000);
	else if (s < 3600)
		snprintf(out, size, "%" PRId64 "m%02" PRId64 "s", s / 60,
		    s % 60);
	else if (s < 86400)
		snprintf(out, size, "%" PRId64 "h%02" PRId64 "m", s / 3600,
		    s / 60 % 60);
	else
		snprintf(out, size, "%" PRId64 "d%02" PRId64 "h", s / 86400,
		    s / 3600 % 24);
}

const char *
ctl_yes_no(json_t *v)
{
	if (json_is_true(v))
		return "yes";
	if (json_is_false(v))
		return "no";
	return "-";
}

json_int_t
ctl_int_member(json_t *object, const char *key)
{
	return json_integer_value(json_object_get(object, key));
}


int
ctl_table_add(struct ctl_table *t, const char *const *row)
{
	char	**cells;
	size_t	  i, n;

	cells = reallocarray(t->cells, (t->rows + 1) * t->columns,
	    sizeof *cells);
	if (cells == NULL)
		return -1;
	t->cells = cells;
	for (i = 0; i < t->columns; i++) {
		if ((cells[t->rows * t->columns + i] = strdup(row[i])) == NULL)
			return -1;
		if ((n = strlen(row[i])) > t->width[i])
			t->width[i] = n;
	}
	t->rows++;
	return 0;
}

void
ctl_table_print(struct ctl_table *t, const char *indent)
{
	size_t	r, i;

	for (r = 0; r < t->rows; r++) {
		fputs(indent, stdout);
		for (i = 0; i < t->columns; i++) {
			if (i + 1 < t->columns)
				printf("%-*s  ", (int)t->width[i],
				    t->cells[r * t->columns + i]);
			else
				printf("%s\n", t->cells[r * t->columns + i]);
		}
	}
}

void
ctl_table_free(struct ctl_table *t)
{
	size_t	i;

	for (i = 0; i < t->rows * t->columns; i++)
		free(t->cells[i]);
	free(t->cells);
}
