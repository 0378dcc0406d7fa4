/* SPDX-License-Identifier: ISC */
/*
 * fastscan.h: the raw-byte JSON scanner (fastscan.c): the retry fast
 * path's fingerprint, and a top-level member's text as it stands in a
 * line, for the broker.  See doc/architecture.md,
 * "Retries without the parse", for exactly which bytes are
 * fingerprinted.
 */
#ifndef IDEM_FASTSCAN_H
#define IDEM_FASTSCAN_H

#include <stddef.h>
#include <stdint.h>

#include "protocol.h"

/*
 * Top-level members a scanned line may have, each at most once: those
 * of write_task and effect_begin except meta and workspace_id (9).
 */
#define FASTSCAN_MAX_MEMBERS	9

/* The ops whose retries the fast path answers. */
enum fastscan_op {
	FASTSCAN_WRITE_TASK = 1,
	FASTSCAN_EFFECT_BEGIN
};

/* One member as it stands in the line (for tests and fuzzing). */
struct fastscan_member {
	const char	*key;		/* without its quotes */
	size_t		 key_length;
	const char	*value;
	size_t		 value_length;
};

/* What a write_task or effect_begin line says, found without parsing it. */
struct fastscan {
	int		 valid;		/* 1: the fields below are set */
	enum fastscan_op op;
	uint8_t		 fingerprint[IDEM_FAST_FINGERPRINT_BYTES];
	const char	*key;		/* client_submission_id, in the line */
	size_t		 key_length;
	const char	*kind;		/* effect_begin's effect_kind */
	size_t		 kind_length;
	const char	*id;		/* the id member's value; NULL: none */
	size_t		 id_length;
	struct fastscan_member members[FASTSCAN_MAX_MEMBERS];	/* in order */
	size_t		 member_count;
};

/*
 * 1 if line is a write_task or effect_begin request the fast path may
 * answer (scan filled, pointing into line), 0 if only the full parse may
 * judge it: anything the scanner does not know for certain (fastscan.c).
 */
int	fastscan_line(const char *line, size_t length, struct fastscan *scan);
/*
 * In a line jansson accepted (one object, no duplicate keys): 1 if its
 * top-level member name (no escapes in it) has a value whose bytes are
 * exactly jansson's compact dump of it, *value pointing at them in the
 * line; else 0 (dump it).
 */
int	fastscan_compact_member(const char *line, size_t length,
	    const char *name, const char **value, size_t *value_length);
/*
 * In a line jansson accepted: 1 if its top-level member name (no escapes
 * in it) is there, *value pointing at its value's bytes as they stand in
 * the line (whatever their form); else 0.
 */
int	fastscan_member(const char *line, size_t length, const char *name,
	    const char **value, size_t *value_length);

#endif
