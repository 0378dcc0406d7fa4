/* SPDX-License-Identifier: ISC */
/*
 * replyscan.h: a reply line checked as JSON without a tree (replyscan.c):
 * accepted exactly when jansson (JSON_REJECT_DUPLICATES) would accept
 * it, its top-level members listed as they stand, and a checked value's
 * members, strings and integers read from its bytes.  libidem decodes
 * the effect ops' answers with it (client_effect.c).
 */
#ifndef IDEM_REPLYSCAN_H
#define IDEM_REPLYSCAN_H

#include <stddef.h>
#include <stdint.h>

/* Members listed per object; an object with more is walked on a find. */
#define REPLYSCAN_MAX_MEMBERS	32

/* What a line is, in jansson's judgement (json_loadb, the flags above). */
enum replyscan_verdict {
	REPLYSCAN_INVALID = -1,		/* jansson would refuse it */
	REPLYSCAN_NOT_OBJECT = 0,	/* valid, but an array */
	REPLYSCAN_OBJECT = 1		/* valid, one object */
};

/* One member as it stands: its key's bytes between the quotes. */
struct replyscan_member {
	const char	*key;
	size_t		 key_length;
	int		 key_escaped;	/* a backslash in the key */
	const char	*value;
	size_t		 value_length;
};

/* A checked object's members, in order. */
struct replyscan_object {
	const char		*text;		/* '{' ... '}' */
	size_t			 length;
	struct replyscan_member	 members[REPLYSCAN_MAX_MEMBERS];
	size_t			 count;
	int			 overflow;	/* members past the list */
	/* 1: jansson judged a piece (past 16 levels, a 65-byte number). */
	int			 by_jansson;
	/*
	 * replyscan_line's: 1 if the line is exactly jansson's compact dump
	 * of itself (no whitespace, no escape, integers of at most 18
	 * digits and no -0, no real); 0 says only that it may not be.
	 */
	int			 compact;
};

/*
 * line's verdict; for REPLYSCAN_OBJECT, top lists its members (pointing
 * into line).  Nothing outside [line, line + length) is read.
 */
enum replyscan_verdict replyscan_line(const char *line, size_t length,
	    struct replyscan_object *top);
/*
 * replyscan_line, and inner lists top's member name when that is an
 * object (else inner->text is NULL), in the same pass: an answer's
 * receipt without the second walk replyscan_members would make.
 */
enum replyscan_verdict replyscan_line_inner(const char *line, size_t length,
	    struct replyscan_object *top, const char *name,
	    struct replyscan_object *inner);
/* In a checked line: 1 if value is an object (obj lists it), else 0. */
int	replyscan_members(const char *value, size_t length,
	    struct replyscan_object *obj);
/* 1 and *found if obj has a member named name (compared unescaped). */
int	replyscan_find(const struct replyscan_object *obj, const char *name,
	    struct replyscan_member *found);
/*
 * A checked string value unescaped into out (at most size - 1 bytes and
 * a NUL): its whole unescaped length, or -1 if value is not a string.
 */
long	replyscan_string(const char *value, size_t length, char *out,
	    size_t size);
/* A checked integer value: 0 and *out, or -1 if it is not an integer. */
int	replyscan_integer(const char *value, size_t length, int64_t *out);

#endif
