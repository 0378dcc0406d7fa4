/* SPDX-License-Identifier: ISC */
/*
 * journal_test.h: what test_journal and test_journal_rounds share: the
 * journal's layout constants and key from doc/journal.md (the tests build
 * bytes from the document, not from journal_format.c), a fixture with its
 * directory, records distinct per number, and replay, file and byte
 * helpers.  Included after cmocka.h and store.h.
 */
#ifndef JOURNAL_TEST_H
#define JOURNAL_TEST_H

/* From doc/journal.md. */
#define DOC_SEGMENT_HEADER_BYTES	32
#define DOC_RECORD_HEADER_BYTES		16
#define DOC_PAYLOAD_FIXED_BYTES		144
extern const unsigned char doc_key[16];	/* "idem-journal-v1" */
/* A segment size whose zero chunk is small: the tests stay small too. */
#define ZT_SEGMENT_BYTES	(64 * 1024)

struct fixture {
	char	root[64];
	char	dir[96];	/* root/journal: does not exist at first */
};

struct collected {
	struct journal_record	*records;
	size_t			 count;
	size_t			 cap;
	size_t			 fail_at;	/* apply fails on this one (1-based) */
};

/* cmocka setup and teardown: a fixture in a fresh temporary root. */
int	setup(void **);
int	teardown(void **);
/* A record with every field set, distinct per n. */
void	make_record(struct journal_record *, unsigned n);
void	assert_record_equal(const struct journal_record *,
	    const struct journal_record *);
/* make_record(n) encoded into out (form 1); its length. */
size_t	encode(unsigned n, uint8_t *out, size_t out_size);
/* An apply that collects into a struct collected. */
int	collect(const struct journal_record *, void *arg);
/* Replay dir; the records seen go to c (reset first). */
int	replay(const char *dir, struct collected *c,
	    struct journal_replay_stats *, char **cause);
/* Replay dir: records first .. first + count - 1, truncated bytes cut. */
void	assert_replays(const char *dir, unsigned first, size_t count,
	    uint64_t truncated);
/*
 * Append records first .. first + count - 1, one write each; ends[i] is
 * the segment size after record first + i.
 */
void	append_records(struct journal *, unsigned first, size_t count,
	    uint64_t *ends);
void	segment_path(const struct fixture *, uint64_t n, char *out,
	    size_t size);
/*
 * The first segment: records 0 .. count - 1 and the writer's zeros ahead
 * (ZT_SEGMENT_BYTES), closed as a crash would leave it.  Returns its
 * logical end; its path in path.
 */
uint64_t zero_tailed_segment(const struct fixture *, size_t count,
	    char *path, size_t path_size);
uint8_t	*read_file(const char *path, size_t *size);
off_t	file_size(const char *path);
void	flip_byte_at(const char *path, off_t offset);
void	append_bytes(const char *path, const void *p, size_t n);
void	put_le(uint8_t *p, uint64_t v, int bytes);
/* A segment file header built from doc/journal.md alone, version v. */
void	doc_segment_header_v(uint64_t number, uint32_t v,
	    uint8_t out[DOC_SEGMENT_HEADER_BYTES]);
/* Format 1's header (the records without round prefixes). */
void	doc_segment_header(uint64_t number,
	    uint8_t out[DOC_SEGMENT_HEADER_BYTES]);
/* Segment number by hand, holding records first .. first + count - 1. */
void	make_segment(const struct fixture *, uint64_t number, unsigned first,
	    unsigned count);
/* Record n in form 2 (a round prefix naming round_start), at p. */
size_t	encode_form2(unsigned n, uint64_t round_start, uint8_t *p,
	    size_t size);

#endif /* JOURNAL_TEST_H */
