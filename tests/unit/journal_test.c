/* SPDX-License-Identifier: ISC */
/*
 * journal_test.c: the helpers test_journal and test_journal_rounds share
 * (journal_test.h): a fixture, records built and checked field by field,
 * replay into a collection, segment files and bytes from doc/journal.md.
 */
#include "config.h"

#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "store.h"
#include "tree.h"
#include "journal_test.h"

const unsigned char doc_key[16] = "idem-journal-v1";

int
setup(void **state)
{
	struct fixture	*f;

	f = calloc(1, sizeof *f);
	assert_non_null(f);
	strcpy(f->root, "/tmp/test_journal.XXXXXX");
	assert_non_null(mkdtemp(f->root));
	snprintf(f->dir, sizeof f->dir, "%s/journal", f->root);
	*state = f;
	return 0;
}

int
teardown(void **state)
{
	struct fixture	*f = *state;

	unit_remove_tree(f->root);
	free(f);
	return 0;
}

/* A record with every field set, distinct per n. */
void
make_record(struct journal_record *r, unsigned n)
{
	struct subtab_entry	*e = &r->entry;
	int			 len;
	size_t			 i;

	memset(r, 0, sizeof *r);
	r->type = JOURNAL_RECORD_ENTRY;
	e->kind = n % 2 ? SUBTAB_KIND_REPORT : SUBTAB_KIND_TASK;
	e->state = 1 + n % 3;
	e->schema = n % 4;	/* none, the three schemas */
	memcpy(e->sender, "PM", 2);
	e->sender_length = 2;
	memcpy(e->recipient, "DEVELOPER-ABCDEF", 16);	/* the maximum */
	e->recipient_length = 16;
	e->date = 20261202 + n;
	e->seq = 0x01020304u + n;
	for (i = 0; i < IDEM_SHA256_BYTES; i++) {
		e->request_digest[i] = (uint8_t)(i + n);
		e->file_digest[i] = (uint8_t)(0xff - i - n);
	}
	e->reserved_at_ms = 1764676800123LL + n;
	e->updated_at_ms = -1 - (int64_t)n;	/* the sign must survive */
	e->created_at_ms = INT64_MAX - n;
	e->peer_uid = 0xfedcba98u - n;
	e->peer_pid = 0x7fffffffu - n;
	len = snprintf(r->key, sizeof r->key, "run-%u/step-%u", n, n * 7);
	e->key_length = (uint16_t)len;
}

void
assert_record_equal(const struct journal_record *a,
    const struct journal_record *b)
{
	const struct subtab_entry	*x = &a->entry, *y = &b->entry;

	assert_int_equal(a->type, b->type);
	assert_int_equal(x->kind, y->kind);
	assert_int_equal(x->state, y->state);
	assert_int_equal(x->schema, y->schema);
	assert_int_equal(x->sender_length, y->sender_length);
	assert_int_equal(x->recipient_length, y->recipient_length);
	assert_int_equal(x->key_length, y->key_length);
	assert_int_equal(x->date, y->date);
	assert_int_equal(x->seq, y->seq);
	assert_memory_equal(x->request_digest, y->request_digest,
	    IDEM_SHA256_BYTES);
	assert_memory_equal(x->file_digest, y->file_digest, IDEM_SHA256_BYTES);
	assert_memory_equal(x->sender, y->sender, x->sender_length);
	assert_memory_equal(x->recipient, y->recipient, x->recipient_length);
	assert_true(x->reserved_at_ms == y->reserved_at_ms);
	assert_true(x->updated_at_ms == y->updated_at_ms);
	assert_true(x->created_at_ms == y->created_at_ms);
	assert_int_equal(x->peer_uid, y->peer_uid);
	assert_int_equal(x->peer_pid, y->peer_pid);
	assert_memory_equal(a->key, b->key, x->key_length);
}

size_t
encode(unsigned n, uint8_t *out, size_t out_size)
{
	struct journal_record	r;
	size_t			len;

	make_record(&r, n);
	len = journal_encode(&r, out, out_size);
	assert_true(len > 0);
	return len;
}

int
collect(const struct journal_record *r, void *arg)
{
	struct collected	*c = arg;

	if (c->fail_at != 0 && c->count + 1 == c->fail_at)
		return 7;
	if (c->count == c->cap) {
		c->cap = c->cap ? c->cap * 2 : 16;
		c->records = realloc(c->records, c->cap * sizeof *c->records);
		assert_non_null(c->records);
	}
	c->records[c->count++] = *r;
	return 0;
}

/* Replay dir; the records seen go to c (reset first). */
int
replay(const char *dir, struct collected *c,
    struct journal_replay_stats *stats, char **cause)
{
	free(c->records);
	c->records = NULL;
	c->count = c->cap = 0;
	*cause = NULL;
	return journal_replay(dir, 0, collect, c, stats, cause);
}

void
assert_replays(const char *dir, unsigned first, size_t count,
    uint64_t truncated)
{
	struct collected		c = { 0 };
	struct journal_replay_stats	stats;
	struct journal_record		want;
	char				*cause;
	size_t				i;

	if (replay(dir, &c, &stats, &cause) != 0)
		fail_msg("replay failed: %s", cause);
	assert_null(cause);
	assert_int_equal(c.count, count);
	assert_int_equal(stats.records, count);
	assert_int_equal(stats.truncated_bytes, truncated);
	for (i = 0; i < count; i++) {
		make_record(&want, first + (unsigned)i);
		assert_record_equal(&c.records[i], &want);
	}
	free(c.records);
}

/*
 * Append records first .. first + count - 1, one write each; ends[i] is
 * the segment size after record first + i.
 */
void
append_records(struct journal *j, unsigned first, size_t count,
    uint64_t *ends)
{
	uint8_t		buf[JOURNAL_MAX_RECORD_BYTES];
	struct iovec	iov;
	char		*cause = NULL;
	size_t		i;

	for (i = 0; i < count; i++) {
		iov.iov_base = buf;
		iov.iov_len = encode(first + (unsigned)i, buf, sizeof buf);
		if (journal_append(j, &iov, 1, &cause) != 0)
			fail_msg("append: %s", cause);
		if (ends != NULL)
			ends[i] = j->size;
	}
	if (journal_sync(j, &cause) != 0)
		fail_msg("sync: %s", cause);
}

uint64_t
zero_tailed_segment(const struct fixture *f, size_t count, char *path,
    size_t path_size)
{
	struct journal	 j;
	char		*cause = NULL;
	uint64_t	 end;

	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	append_records(&j, 0, count, NULL);
	assert_int_equal(journal_prezero(&j, ZT_SEGMENT_BYTES, &cause), 0);
	end = j.size;
	journal_close(&j);
	segment_path(f, 1, path, path_size);
	return end;
}

void
segment_path(const struct fixture *f, uint64_t n, char *out, size_t size)
{
	snprintf(out, size, "%s/%016" PRIx64 ".jnl", f->dir, n);
}

uint8_t *
read_file(const char *path, size_t *size)
{
	struct stat	 st;
	uint8_t		*p;
	int		 fd;

	assert_true((fd = open(path, O_RDONLY)) != -1);
	assert_int_equal(fstat(fd, &st), 0);
	p = malloc((size_t)st.st_size + 1);
	assert_non_null(p);
	assert_int_equal(read(fd, p, (size_t)st.st_size), st.st_size);
	close(fd);
	*size = (size_t)st.st_size;
	return p;
}

off_t
file_size(const char *path)
{
	struct stat	st;

	assert_int_equal(stat(path, &st), 0);
	return st.st_size;
}

void
flip_byte_at(const char *path, off_t offset)
{
	uint8_t	b;
	int	fd;

	assert_true((fd = open(path, O_RDWR)) != -1);
	assert_int_equal(pread(fd, &b, 1, offset), 1);
	b ^= 0x5a;
	assert_int_equal(pwrite(fd, &b, 1, offset), 1);
	close(fd);
}

void
append_bytes(const char *path, const void *p, size_t n)
{
	int	fd;

	assert_true((fd = open(path, O_WRONLY|O_APPEND|O_CREAT, 0600)) != -1);
	assert_int_equal(write(fd, p, n), (ssize_t)n);
	close(fd);
}

void
put_le(uint8_t *p, uint64_t v, int bytes)
{
	int	i;

	for (i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* A segment file header built from doc/journal.md alone, version v. */
void
doc_segment_header_v(uint64_t number, uint32_t v,
    uint8_t out[DOC_SEGMENT_HEADER_BYTES])
{
	memcpy(out, "IDEMJNL", 8);	/* and its NUL */
	put_le(out + 8, v, 4);
	put_le(out + 12, 0, 4);
	put_le(out + 16, number, 8);
	crypto_shorthash(out + 24, out, 24, doc_key);
}

/* Format 1's header (the records without round prefixes). */
void
doc_segment_header(uint64_t number, uint8_t out[DOC_SEGMENT_HEADER_BYTES])
{
	doc_segment_header_v(number, 1, out);
}

/* Segment number by hand, holding records first .. first + count - 1. */
void
make_segment(const struct fixture *f, uint64_t number, unsigned first,
    unsigned count)
{
	uint8_t		header[DOC_SEGMENT_HEADER_BYTES];
	uint8_t		rec[JOURNAL_MAX_RECORD_BYTES];
	char		path[256];
	size_t		len;
	unsigned	n;
	int		fd;

	segment_path(f, number, path, sizeof path);
	assert_true((fd = open(path, O_WRONLY|O_CREAT|O_EXCL, 0600)) != -1);
	doc_segment_header(number, header);
	assert_int_equal(write(fd, header, sizeof header), sizeof header);
	for (n = first; n < first + count; n++) {
		len = encode(n, rec, sizeof rec);
		assert_int_equal(write(fd, rec, len), (ssize_t)len);
	}
	close(fd);
}

/* Record n in form 2, of the round that began at round_start. */
size_t
encode_form2(unsigned n, uint64_t round_start, uint8_t *p, size_t size)
{
	uint8_t	check[20];
	size_t	len;

	assert_true(size > 24);
	len = encode(n, p + 24, size - 24);
	memcpy(p, "\xff" "JRD", 4);
	put_le(p + 4, 0, 4);
	put_le(p + 8, round_start, 8);
	/* The check: prefix bytes 4..15, then the inner record's checksum. */
	memcpy(check, p + 4, 12);
	memcpy(check + 12, p + 24 + 8, 8);
	crypto_shorthash(p + 16, check, sizeof check, doc_key);
	return 24 + len;
}
