/* SPDX-License-Identifier: ISC */
/*
 * journal_int.h: what journal.c, journal_format.c and journal_replay.c
 * share and nothing else includes: a segment's name and header size,
 * the format's calls the I/O needs, the segment listing and the cause
 * helper.
 */
#ifndef JOURNAL_INT_H
#define JOURNAL_INT_H

#define SEGMENT_HEADER_BYTES	32
#define SEGMENT_NAME_BYTES	21	/* 16 hex digits, ".jnl", NUL */
#define SEGMENT_SUFFIX		".jnl"

/* journal.c */
/*
 * Set *cause (malloc'd; NULL if even that fails) without disturbing
 * errno.
 */
void	journal_cause(char **, const char *, ...)
	    __attribute__((format(printf, 2, 3)));
/* The segment numbers in the directory, ascending; *list malloc'd. */
int	journal_segment_list(int dir_fd, const char *dir, uint64_t **list,
	    size_t *count, char **cause);

/* journal_format.c */
enum journal_decode_result journal_record_decode(const uint8_t *in,
	    size_t length, struct journal_record *r, size_t *consumed,
	    const char **why);
int	journal_record_follows(const uint8_t *base, size_t size, size_t from,
	    size_t *at);
/*
 * The valid records after a bad one at x (searched from x + 1): 0 none;
 * 1 each names a round begun at or before x (its prefix whole, or its
 * round start and check whole), or has no round but such a record after
 * it (a torn round); -1 a record of a later round, or one with no round
 * and no such record after it (corruption).  *first: the first valid
 * record (1, -1); *at: the one that makes it corruption (-1).
 */
int	journal_round_after(const uint8_t *base, size_t size, size_t x,
	    size_t *first, size_t *at);
/* The format version new segments get (JOURNAL_FORMAT_*). */
uint32_t journal_new_format(void);
/* The segment header's format version (the header checked valid). */
uint32_t journal_segment_version(const uint8_t *in);
/* A header of the given version (tests; the writer uses the default). */
void	journal_segment_header_encode_version(uint64_t number,
	    uint32_t version, uint8_t out[SEGMENT_HEADER_BYTES]);
void	journal_segment_name(uint64_t number,
	    char name[SEGMENT_NAME_BYTES]);
int	journal_segment_parse_name(const char *name, uint64_t *number);
void	journal_segment_header_encode(uint64_t number,
	    uint8_t out[SEGMENT_HEADER_BYTES]);
const char *journal_segment_header_invalid(const uint8_t *in,
	    uint64_t number);

#endif /* JOURNAL_INT_H */
