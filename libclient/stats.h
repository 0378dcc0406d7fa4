/* SPDX-License-Identifier: ISC */
/*
 * stats.h: every member of the stats reply, one row each: its wire name
 * (SPEC.md's where SPEC names it), whether it is a counter (only grows
 * while the broker runs) or a gauge (a figure now), its unit and one
 * line of help.  idemd answers stats from this table (broker/ops.c, a
 * value per row), idemctl prints its text and Prometheus output from it
 * (contrib/ctl/online.c), and doc/metrics.md's table is printed from
 * it and checked against it (tests/unit/test_metrics_doc.c).  A stat is
 * added here, and nowhere else is it named but where its value is read
 * (broker/ops.c's stat_value).
 *
 * Prometheus's name of a stat (idem_stat_metric_name): "idem_" and the
 * wire name; a stat in ms is shown in seconds ("_ms" becomes
 * "_seconds", the value divided by 1000), one in bytes ends "_bytes",
 * and a counter ends "_total".
 */
#ifndef IDEM_STATS_H
#define IDEM_STATS_H

#include <stdio.h>
#include <string.h>

/* X(symbol, name): a stat's unit, as idemctl labels it. */
#define IDEM_STAT_UNITS(X)						\
	X(REPLIES,	"replies")					\
	X(RECORDS,	"records")					\
	X(FSYNCS,	"fsyncs")					\
	X(ENTRIES,	"entries")					\
	X(PROCESSES,	"processes")					\
	X(BYTES,	"bytes")					\
	X(MS,		"ms")

/*
 * X(name, type, unit, help): the stats reply's integer members, in the
 * order idemd sends them.  type is COUNTER or GAUGE.
 */
#define IDEM_STATS(X)							\
	X(created, COUNTER, REPLIES,					\
	    "write_task replies created, with a client_submission_id.")	\
	X(reused, COUNTER, REPLIES,					\
	    "write_task replies reused: the first call's receipt.")	\
	X(reused_fast, COUNTER, REPLIES,				\
	    "Of the reused replies, those answered from the stored "	\
	    "reply without parsing the request.")			\
	X(index_warm_bytes, GAUGE, BYTES,				\
	    "Bytes of the index the workers have mapped ahead of their " \
	    "lookups, all workers together.")				\
	X(conflict, COUNTER, REPLIES,					\
	    "Conflict replies, of tasks, reports and effects.")	\
	X(legacy_created, COUNTER, REPLIES,				\
	    "Tasks created by legacy calls, without a "		\
	    "client_submission_id.")					\
	X(reports_created, COUNTER, REPLIES,				\
	    "REPORT files written.")					\
	X(reports_deduplicated, COUNTER, REPLIES,			\
	    "write_report replies deduplicated: an earlier report.")	\
	X(effects_proceed, COUNTER, REPLIES,				\
	    "effect_begin replies proceed.")				\
	X(effects_reused, COUNTER, REPLIES,				\
	    "effect_begin replies reused: the committed receipt.")	\
	X(effects_reused_fast, COUNTER, REPLIES,			\
	    "Of the effects_reused replies, those answered from the "	\
	    "stored reply without parsing the request.")		\
	X(effects_reused_cached, COUNTER, REPLIES,			\
	    "Of the effects_reused replies on the PostgreSQL store, "	\
	    "those answered from this broker's table without a round "	\
	    "trip to the store, after the parse.")			\
	X(effects_in_progress, COUNTER, REPLIES,			\
	    "effect_begin replies in_progress: another caller holds "	\
	    "the lease.")						\
	X(effects_outcome_unknown, COUNTER, REPLIES,			\
	    "effect_begin replies outcome_unknown: a lease lapsed.")	\
	X(effects_committed, COUNTER, REPLIES,				\
	    "Effects committed by effect_complete or effect_resolve.")	\
	X(effects_released, COUNTER, REPLIES,				\
	    "Effects released: not applied.")				\
	X(effects_resolved, COUNTER, REPLIES,				\
	    "effect_resolve calls that settled an effect.")		\
	X(effects_stale_fence, COUNTER, REPLIES,			\
	    "effect_complete and effect_extend calls refused: the "	\
	    "fence was not the latest attempt's.")			\
	X(effects_extended, COUNTER, REPLIES,				\
	    "effect_extend calls that moved a live lease's end.")	\
	X(result_arena_used, GAUGE, BYTES,				\
	    "Bytes of committed effects' results cached in memory now.") \
	X(result_arena_bytes, GAUGE, BYTES,				\
	    "The size of the result cache (--result-bytes).")		\
	X(fast_receipts_used, GAUGE, BYTES,				\
	    "Bytes of stored replies the retry fast path holds now.")	\
	X(fast_receipts_bytes, GAUGE, BYTES,				\
	    "The size of the retry fast path's reply cache.")		\
	X(errors, COUNTER, REPLIES,					\
	    "Error replies other than conflicts.")			\
	X(journal_records, COUNTER, RECORDS,				\
	    "Records appended to the journal.")				\
	X(journal_fsyncs, COUNTER, FSYNCS,				\
	    "Journal fdatasync calls (one serves many records).")	\
	X(table_used, GAUGE, ENTRIES,					\
	    "Submission ids in the table: tasks, reports with an id, "	\
	    "effects.")							\
	X(table_entries, GAUGE, ENTRIES,				\
	    "The same as table_used.")					\
	X(table_capacity, GAUGE, ENTRIES,				\
	    "The table's capacity (--capacity): a cache size, not a "	\
	    "limit on the history.")					\
	X(history_entries, GAUGE, ENTRIES,				\
	    "Committed receipts kept, tombstones included.")		\
	X(index_entries, GAUGE, ENTRIES,				\
	    "Entries of the on-disk index.")				\
	X(index_bytes, GAUGE, BYTES,					\
	    "Bytes of the on-disk index's pages in use.")		\
	X(table_evictions, COUNTER, ENTRIES,				\
	    "Committed entries evicted from the table to the index.")	\
	X(workers, GAUGE, PROCESSES,					\
	    "Worker processes running.")				\
	X(worker_restarts, COUNTER, PROCESSES,				\
	    "Worker processes replaced after they died.")		\
	X(uptime_ms, GAUGE, MS,						\
	    "Time since the broker started.")

/*
 * X(name, help): the members of the reply's "store" object (only with
 * --store postgresql://...; null when PostgreSQL cannot be read): gauges
 * of the workspace's rows, the same on every broker.
 */
#define IDEM_STORE_STATS(X)						\
	X(submissions,							\
	    "Rows of the workspace in PostgreSQL: tasks, reports, "	\
	    "effects.")							\
	X(committed,							\
	    "Rows with their receipt.")					\
	X(in_flight,							\
	    "Rows reserved or task_created; effects reserved or "	\
	    "outcome_unknown.")						\
	X(tombstones,							\
	    "Rows compacted to a tombstone.")				\
	X(effects,							\
	    "The effect rows among them.")
#define IDEM_STORE_STATS_MEMBER		"store"

enum idem_stat_type {
	IDEM_STAT_COUNTER,
	IDEM_STAT_GAUGE
};

enum idem_stat_unit {
#define IDEM_STAT_UNIT_ENUM(sym, name)	IDEM_STAT_UNIT_##sym,
	IDEM_STAT_UNITS(IDEM_STAT_UNIT_ENUM)
#undef IDEM_STAT_UNIT_ENUM
	IDEM_STAT_UNIT_COUNT
};

enum idem_stat {
#define IDEM_STAT_ENUM(name, type, unit, help)	IDEM_STAT_##name,
	IDEM_STATS(IDEM_STAT_ENUM)
#undef IDEM_STAT_ENUM
	IDEM_STAT_COUNT
};

struct idem_stat_row {
	const char		*name;
	enum idem_stat_type	 type;
	enum idem_stat_unit	 unit;
	const char		*help;
};

/* Header statics, as idem_op_names (protocol.h): a copy per program. */
static const char *const idem_stat_unit_names[IDEM_STAT_UNIT_COUNT] = {
#define IDEM_STAT_UNIT_NAME(sym, name)	[IDEM_STAT_UNIT_##sym] = name,
	IDEM_STAT_UNITS(IDEM_STAT_UNIT_NAME)
#undef IDEM_STAT_UNIT_NAME
};

static const struct idem_stat_row idem_stat_table[IDEM_STAT_COUNT] = {
#define IDEM_STAT_ROW(name, type, unit, help)				\
	[IDEM_STAT_##name] = { #name, IDEM_STAT_##type,			\
	    IDEM_STAT_UNIT_##unit, help },
	IDEM_STATS(IDEM_STAT_ROW)
#undef IDEM_STAT_ROW
};

/*
 * A stat's Prometheus name in buf (see the top of this file); the
 * length written, as snprintf.
 */
static inline int
idem_stat_metric_name(const struct idem_stat_row *s, char *buf, size_t size)
{
	size_t		 n = strlen(s->name);
	const char	*suffix = "";

	if (s->unit == IDEM_STAT_UNIT_MS && n > 3 &&
	    strcmp(s->name + n - 3, "_ms") == 0) {
		n -= 3;
		suffix = "_seconds";
	} else if (s->unit == IDEM_STAT_UNIT_BYTES && (n < 6 ||
	    strcmp(s->name + n - 6, "_bytes") != 0))
		suffix = "_bytes";
	return snprintf(buf, size, "idem_%.*s%s%s", (int)n, s->name, suffix,
	    s->type == IDEM_STAT_COUNTER ? "_total" : "");
}

#endif
