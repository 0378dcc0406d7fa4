/* SPDX-License-Identifier: ISC */
/*
 * journal_format.c: the journal's record and segment formats, fixed by
 * doc/journal.md: a record's bytes and checksum, encoding and decoding
 * one (with its fields checked to be in range), finding the next record
 * that decodes, a segment's name and its file header.  Bytes only: no
 * file is opened here (journal.c and journal_replay.c do the I/O).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#ifndef _GNU_SOURCE
#define _GNU_SOURCE		/* asprintf, memmem */
#endif

#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "store.h"
#include "journal_int.h"

#include "store.h"

/*
 * The format below is fixed by doc/journal.md.  The sizes of the digest
 * and role fields come from protocol.h; if one of those ever changes, the
 * record format changes with it and needs a new format version.
 */
_Static_assert(IDEM_SHA256_BYTES == 32, "journal format: digest is 32 bytes");
_Static_assert(IDEM_MAX_ROLE_BYTES == 16, "journal format: role is 16 bytes");
_Static_assert(crypto_shorthash_BYTES == 8, "journal format: 8-byte checksum");
_Static_assert(crypto_shorthash_KEYBYTES == 16, "journal format: 16-byte key");

/*
 * The checksum key.  It is not a secret: SipHash is used as a fast,
 * well-distributed checksum, not as a MAC.  Changing it makes every
 * existing journal unreadable.
 */
static const unsigned char journal_checksum_key[crypto_shorthash_KEYBYTES] =
    "idem-journal-v1";		/* 15 characters and the NUL: 16 bytes */

/*
 * Record magic.  0xff never occurs in UTF-8, and keys are printable
 * ASCII, so a key never contains the magic: the forward scan of replay
 * seldom stops anywhere but at a real record.
 */
static const uint8_t journal_record_magic[4] = { 0xff, 'J', 'R', 'C' };
/* Form 2's round prefix (doc/journal.md, "Rounds over the zero tail"). */
static const uint8_t journal_round_magic[4] = { 0xff, 'J', 'R', 'D' };
#define ROUND_RESERVED_OFFSET	4
#define ROUND_START_OFFSET	8
#define ROUND_CHECK_OFFSET	16

#define RECORD_HEADER_BYTES	16	/* magic, length, checksum */
#define RECORD_LENGTH_OFFSET	4
#define RECORD_CHECKSUM_OFFSET	8

/* Payload offsets, doc/journal.md. */
#define P_TYPE			0
#define P_KIND			1
#define P_STATE			2
#define P_SCHEMA		3
#define P_SENDER_LENGTH		4
#define P_RECIPIENT_LENGTH	5
#define P_KEY_LENGTH		6
#define P_DATE			8
#define P_SEQ			12
#define P_REQUEST_DIGEST	16
#define P_FILE_DIGEST		48
#define P_SENDER		80
#define P_RECIPIENT		96
#define P_RESERVED_AT		112
#define P_UPDATED_AT		120
#define P_CREATED_AT		128
#define P_PEER_UID		136
#define P_PEER_PID		140
#define P_KEY			144
#define PAYLOAD_FIXED_BYTES	144
/* EFFECT records: the same offsets, and these in place of others. */
#define P_EFFECT_FLAGS		4	/* sender_length's byte */
#define P_EFFECT_ZERO		5	/* recipient_length's byte: 0 */
#define P_ATTEMPT		8	/* date's */
#define P_RESULT_LENGTH		12	/* seq's */
#define P_RESULT_DIGEST		48	/* file_digest's */
#define P_FENCE			80	/* the roles' 32 bytes */
#define P_LEASE_EXPIRES		88
#define P_EFFECT_PAD		96	/* 16 zero bytes */
#define P_COMMITTED_AT		128	/* created_at's */

/* A recipient's FCoP slot (DEV.D1: "D1") follows the key. */
#define PAYLOAD_ENTRY_MAX_BYTES	(PAYLOAD_FIXED_BYTES + SUBTAB_MAX_KEY_BYTES + \
				    IDEM_MAX_ROLE_BYTES)
/* An EFFECT record carries its result after the key (and no slot). */
#define PAYLOAD_EFFECT_MAX_BYTES (PAYLOAD_FIXED_BYTES + SUBTAB_MAX_KEY_BYTES + \
				    IDEM_MAX_EFFECT_RESULT_BYTES)
#define PAYLOAD_MAX_BYTES	PAYLOAD_EFFECT_MAX_BYTES
_Static_assert(RECORD_HEADER_BYTES + PAYLOAD_ENTRY_MAX_BYTES <=
    JOURNAL_MAX_RECORD_BYTES, "the largest entry record fits the limit");
_Static_assert(RECORD_HEADER_BYTES + PAYLOAD_EFFECT_MAX_BYTES ==
    JOURNAL_MAX_EFFECT_RECORD_BYTES, "the largest record is an effect's");
_Static_assert(PAYLOAD_EFFECT_MAX_BYTES >= PAYLOAD_ENTRY_MAX_BYTES,
    "the largest payload is an effect's");

/* Segment file header. */
static const uint8_t journal_segment_magic[8] = {
	'I', 'D', 'E', 'M', 'J', 'N', 'L', '\0'
};
/*
 * The version new segments get: 2 (JOURNAL_FORMAT_ROUNDS), records with
 * round prefixes (doc/journal.md, "Rounds over the zero tail").  Version
 * 1 segments an older idemd wrote are still read and appended to.
 */
#define SEGMENT_VERSION		JOURNAL_FORMAT_ROUNDS
#define S_MAGIC			0
#define S_VERSION		8
#define S_RESERVED		12
#define S_NUMBER		16
#define S_CHECKSUM		24

/* ---- little-endian fields ----------------------------------------------- */

static void
put_u16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void
put_u32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static void
put_u64(uint8_t *p, uint64_t v)
{
	put_u32(p, (uint32_t)v);
	put_u32(p + 4, (uint32_t)(v >> 32));
}

static uint16_t
get_u16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t
get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24;
}

static uint64_t
get_u64(const uint8_t *p)
{
	return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

/* ---- records ------------------------------------------------------------ */

/*
 * The checksum covers the length field and the payload.  They are not
 * adjacent (the checksum sits between them) and crypto_shorthash has no
 * incremental API, so they are copied together first.
 */
static void
record_checksum(const uint8_t *length_field, const uint8_t *payload,
    size_t payload_length, uint8_t out[crypto_shorthash_BYTES])
{
	/*
	 * An effect's result makes a record up to 66 KiB: too much for
	 * every stack, so those go through one buffer per thread (touched
	 * only by threads that meet such a record).
	 */
	static _Thread_local uint8_t	big[4 + PAYLOAD_MAX_BYTES];
	uint8_t				small[4 + PAYLOAD_ENTRY_MAX_BYTES];
	uint8_t				*buf;

	buf = payload_length <= PAYLOAD_ENTRY_MAX_BYTES ? small : big;
	memcpy(buf, length_field, 4);
	memcpy(buf + 4, payload, payload_length);
	crypto_shorthash(out, buf, 4 + payload_length, journal_checksum_key);
}

/*
 * Is the entry one that decode accepts?  The encoder checks too: a record
 * written that replay then rejects would stop the next start-up.
 */
static const char *
entry_invalid(uint8_t type, const struct subtab_entry *e)
{
	const char	*dot;
	size_t		 role;

	if (type == JOURNAL_RECORD_EFFECT) {
		if (e->kind != SUBTAB_KIND_EFFECT)
			return "kind out of range";
		if (e->state != SUBTAB_RESERVED &&
		    e->state != SUBTAB_COMMITTED &&
		    e->state != SUBTAB_RELEASED &&
		    e->state != SUBTAB_OUTCOME_UNKNOWN)
			return "state out of range";
		if (e->schema != SUBTAB_SCHEMA_GENERIC_JSON_V1)
			return "schema out of range";
		if (e->key_length == 0 || e->key_length > SUBTAB_MAX_KEY_BYTES)
			return "key length out of range";
		if (e->result_length > IDEM_MAX_EFFECT_RESULT_BYTES)
			return "result too long";
		return NULL;
	}
	if (type != JOURNAL_RECORD_ENTRY)
		return "unknown record type";
	if (e->kind < SUBTAB_KIND_TASK || e->kind > SUBTAB_KIND_REPORT)
		return "kind out of range";
	if (e->state < SUBTAB_RESERVED || e->state > SUBTAB_COMMITTED)
		return "state out of range";
	if (e->schema > SUBTAB_SCHEMA_FCOP_CREATE_TASK_V1)
		return "schema out of range";
	if (e->sender_length > IDEM_MAX_ROLE_BYTES)
		return "sender too long";
	if (e->recipient_length > IDEM_MAX_RECIPIENT_BYTES)
		return "recipient too long";
	/* The role in its field, the slot after the key: each fits 16. */
	dot = memchr(e->recipient, '.', e->recipient_length);
	role = dot != NULL ? (size_t)(dot - e->recipient) : e->recipient_length;
	if (role > IDEM_MAX_ROLE_BYTES ||
	    e->recipient_length - role > IDEM_MAX_ROLE_BYTES + 1 ||
	    (dot != NULL && e->recipient_length - role < 2))
		return "recipient slot out of range";
	if (e->key_length > SUBTAB_MAX_KEY_BYTES)
		return "key too long";
	return NULL;
}

/*
 * A recorded slot: what a role code is made of, starting with a letter
 * (the writer checked the full grammar; this only keeps a damaged length
 * from passing key bytes off as a slot).  Here, not digest.c, so that the
 * journal's code needs nothing but libsodium.
 */
static int
slot_valid(const uint8_t *s, size_t length)
{
	size_t	i;

	if (length == 0 || s[0] < 'A' || s[0] > 'Z')
		return 0;
	for (i = 1; i < length; i++)
		if (!((s[i] >= 'A' && s[i] <= 'Z') ||
		    (s[i] >= '0' && s[i] <= '9') || s[i] == '_' ||
		    s[i] == '-'))
			return 0;
	return 1;
}

/* The length of the recipient's role, before an FCoP slot's dot. */
static size_t
entry_role_length(const struct subtab_entry *e)
{
	const char	*dot = memchr(e->recipient, '.', e->recipient_length);

	return dot != NULL ? (size_t)(dot - e->recipient) :
	    e->recipient_length;
}

size_t
journal_encoded_size(const struct journal_record *r)
{
	const struct subtab_entry	*e = &r->entry;
	size_t				 role;

	if (r->type == JOURNAL_RECORD_EFFECT)
		return RECORD_HEADER_BYTES + PAYLOAD_FIXED_BYTES +
		    e->key_length + e->result_length;
	/* An ENTRY record: the recipient's slot follows the key. */
	role = entry_role_length(e);
	return RECORD_HEADER_BYTES + PAYLOAD_FIXED_BYTES + e->key_length +
	    (role < e->recipient_length ? e->recipient_length - role - 1 : 0);
}

/* An EFFECT record: the entry layout with the effect's fields. */
static size_t
effect_encode(const struct journal_record *r, uint8_t *out, size_t total)
{
	const struct subtab_entry	*e = &r->entry;
	uint8_t				*p = out + RECORD_HEADER_BYTES;
	size_t				 payload_length;

	payload_length = total - RECORD_HEADER_BYTES;
	memcpy(out, journal_record_magic, sizeof journal_record_magic);
	put_u32(out + RECORD_LENGTH_OFFSET, (uint32_t)payload_length);
	memset(p, 0, PAYLOAD_FIXED_BYTES);
	p[P_TYPE] = r->type;
	p[P_KIND] = e->kind;
	p[P_STATE] = e->state;
	p[P_SCHEMA] = e->schema;
	p[P_EFFECT_FLAGS] = e->effect_flags;
	put_u16(p + P_KEY_LENGTH, e->key_length);
	put_u32(p + P_ATTEMPT, e->attempt);
	put_u32(p + P_RESULT_LENGTH, e->result_length);
	memcpy(p + P_REQUEST_DIGEST, e->request_digest, IDEM_SHA256_BYTES);
	memcpy(p + P_RESULT_DIGEST, e->file_digest, IDEM_SHA256_BYTES);
	put_u64(p + P_FENCE, e->fence);
	put_u64(p + P_LEASE_EXPIRES, (uint64_t)e->lease_expires_ms);
	put_u64(p + P_RESERVED_AT, (uint64_t)e->reserved_at_ms);
	put_u64(p + P_UPDATED_AT, (uint64_t)e->updated_at_ms);
	put_u64(p + P_COMMITTED_AT, (uint64_t)e->created_at_ms);
	put_u32(p + P_PEER_UID, e->peer_uid);
	put_u32(p + P_PEER_PID, e->peer_pid);
	memcpy(p + P_KEY, r->key, e->key_length);
	if (e->result_length > 0)
		memcpy(p + P_KEY + e->key_length, r->result, e->result_length);
	record_checksum(out + RECORD_LENGTH_OFFSET, p, payload_length,
	    out + RECORD_CHECKSUM_OFFSET);
	return total;
}

size_t
journal_encode(const struct journal_record *r, uint8_t *out, size_t out_size)
{
	const struct subtab_entry	*e = &r->entry;
	uint8_t				*p;
	size_t				 payload_length, total, role, slot;

	if (entry_invalid(r->type, e) != NULL ||
	    (r->type == JOURNAL_RECORD_EFFECT && e->result_length > 0 &&
	    r->result == NULL)) {
		errno = EINVAL;
		return 0;
	}
	if (r->type == JOURNAL_RECORD_EFFECT) {
		total = journal_encoded_size(r);
		if (out_size < total) {
			errno = ENOBUFS;
			return 0;
		}
		return effect_encode(r, out, total);
	}
	role = entry_role_length(e);
	slot = role < e->recipient_length ? e->recipient_length - role - 1 : 0;
	payload_length = PAYLOAD_FIXED_BYTES + e->key_length + slot;
	total = RECORD_HEADER_BYTES + payload_length;
	if (out_size < total) {
		errno = ENOBUFS;
		return 0;
	}

	memcpy(out, journal_record_magic, sizeof journal_record_magic);
	put_u32(out + RECORD_LENGTH_OFFSET, (uint32_t)payload_length);

	/*
	 * Role bytes past their length are written as zeros whatever the
	 * struct holds, so the same facts always encode to the same bytes.
	 */
	p = out + RECORD_HEADER_BYTES;
	memset(p, 0, PAYLOAD_FIXED_BYTES);
	p[P_TYPE] = r->type;
	p[P_KIND] = e->kind;
	p[P_STATE] = e->state;
	p[P_SCHEMA] = e->schema;
	p[P_SENDER_LENGTH] = e->sender_length;
	p[P_RECIPIENT_LENGTH] = (uint8_t)role;
	put_u16(p + P_KEY_LENGTH, e->key_length);
	put_u32(p + P_DATE, e->date);
	put_u32(p + P_SEQ, e->seq);
	memcpy(p + P_REQUEST_DIGEST, e->request_digest, IDEM_SHA256_BYTES);
	memcpy(p + P_FILE_DIGEST, e->file_digest, IDEM_SHA256_BYTES);
	memcpy(p + P_SENDER, e->sender, e->sender_length);
	memcpy(p + P_RECIPIENT, e->recipient, role);
	put_u64(p + P_RESERVED_AT, (uint64_t)e->reserved_at_ms);
	put_u64(p + P_UPDATED_AT, (uint64_t)e->updated_at_ms);
	put_u64(p + P_CREATED_AT, (uint64_t)e->created_at_ms);
	put_u32(p + P_PEER_UID, e->peer_uid);
	put_u32(p + P_PEER_PID, e->peer_pid);
	memcpy(p + P_KEY, r->key, e->key_length);
	memcpy(p + P_KEY + e->key_length, e->recipient + role + 1, slot);

	record_checksum(out + RECORD_LENGTH_OFFSET, p, payload_length,
	    out + RECORD_CHECKSUM_OFFSET);
	return total;
}

static int
all_zero(const uint8_t *p, size_t n)
{
	size_t	i;

	for (i = 0; i < n; i++) {
		if (p[i] != 0)
			return 0;
	}
	return 1;
}

/*
 * The end of a good decode, shared by both layouts: only now touch the
 * caller's record (BAD leaves it as it was).  result points into the
 * payload, or is NULL.
 */
static void
decode_fill(const uint8_t *p, uint32_t payload_length,
    const struct subtab_entry *e, const uint8_t *result,
    struct journal_record *r, size_t *consumed)
{
	r->type = p[P_TYPE];
	r->entry = *e;
	r->hint = 0;
	r->result = result;
	memcpy(r->key, p + P_KEY, e->key_length);
	if (e->key_length < sizeof r->key)
		memset(r->key + e->key_length, 0,
		    sizeof r->key - e->key_length);
	*consumed = RECORD_HEADER_BYTES + payload_length;
}

/* The EFFECT half of journal_record_decode, its checksum already checked. */
static enum journal_decode_result
effect_decode(const uint8_t *in, const uint8_t *p, uint32_t payload_length,
    struct journal_record *r, size_t *consumed, const char **why)
{
	struct subtab_entry	 e;
	const char		*invalid;

	memset(&e, 0, sizeof e);
	e.kind = p[P_KIND];
	e.state = p[P_STATE];
	e.schema = p[P_SCHEMA];
	e.effect_flags = p[P_EFFECT_FLAGS];
	e.key_length = get_u16(p + P_KEY_LENGTH);
	e.attempt = get_u32(p + P_ATTEMPT);
	e.result_length = get_u32(p + P_RESULT_LENGTH);
	if ((invalid = entry_invalid(p[P_TYPE], &e)) != NULL) {
		*why = invalid;
		return JOURNAL_DECODE_BAD;
	}
	if ((uint64_t)e.key_length + e.result_length !=
	    payload_length - PAYLOAD_FIXED_BYTES) {
		*why = "key and result lengths disagree with record length";
		return JOURNAL_DECODE_BAD;
	}
	if (p[P_EFFECT_ZERO] != 0 || (e.effect_flags &
	    ~SUBTAB_EFFECT_RECOVERED) != 0 || !all_zero(p + P_EFFECT_PAD, 16)) {
		*why = "effect padding or flags are not zero";
		return JOURNAL_DECODE_BAD;
	}
	memcpy(e.request_digest, p + P_REQUEST_DIGEST, IDEM_SHA256_BYTES);
	memcpy(e.file_digest, p + P_RESULT_DIGEST, IDEM_SHA256_BYTES);
	e.fence = get_u64(p + P_FENCE);
	e.lease_expires_ms = (int64_t)get_u64(p + P_LEASE_EXPIRES);
	e.reserved_at_ms = (int64_t)get_u64(p + P_RESERVED_AT);
	e.updated_at_ms = (int64_t)get_u64(p + P_UPDATED_AT);
	e.created_at_ms = (int64_t)get_u64(p + P_COMMITTED_AT);
	e.peer_uid = get_u32(p + P_PEER_UID);
	e.peer_pid = get_u32(p + P_PEER_PID);

	decode_fill(p, payload_length, &e, e.result_length > 0 ?
	    p + P_KEY + e.key_length : NULL, r, consumed);
	(void)in;
	return JOURNAL_DECODE_OK;
}

/* A form 1 record, with the reason for BAD for replay's messages. */
static enum journal_decode_result record_decode_plain(const uint8_t *,
	    size_t, struct journal_record *, size_t *, const char **);

/* The check of a round prefix: its bytes 4..15, the inner checksum. */
static void
round_check(const uint8_t *prefix, const uint8_t *record,
    uint8_t sum[crypto_shorthash_BYTES])
{
	uint8_t	buf[ROUND_CHECK_OFFSET - ROUND_RESERVED_OFFSET +
		    crypto_shorthash_BYTES];

	memcpy(buf, prefix + ROUND_RESERVED_OFFSET,
	    ROUND_CHECK_OFFSET - ROUND_RESERVED_OFFSET);
	memcpy(buf + ROUND_CHECK_OFFSET - ROUND_RESERVED_OFFSET,
	    record + RECORD_CHECKSUM_OFFSET, crypto_shorthash_BYTES);
	crypto_shorthash(sum, buf, sizeof buf, journal_checksum_key);
}

void
journal_round_prefix(uint8_t out[JOURNAL_ROUND_PREFIX_BYTES],
    uint64_t round_start, const uint8_t *record)
{
	memcpy(out, journal_round_magic, sizeof journal_round_magic);
	put_u32(out + ROUND_RESERVED_OFFSET, 0);
	put_u64(out + ROUND_START_OFFSET, round_start);
	round_check(out, record, out + ROUND_CHECK_OFFSET);
}

/*
 * A record of either form: form 2 is a round prefix, then a form 1
 * record; the prefix's check covers it and the inner checksum.
 */
enum journal_decode_result
journal_record_decode(const uint8_t *in, size_t length,
    struct journal_record *r, size_t *consumed, const char **why)
{
	enum journal_decode_result	 res;
	uint8_t				 sum[crypto_shorthash_BYTES];

	*why = "record runs past the end of the file";
	if (length < sizeof journal_round_magic ||
	    memcmp(in, journal_round_magic, sizeof journal_round_magic) != 0) {
		if ((res = record_decode_plain(in, length, r, consumed,
		    why)) == JOURNAL_DECODE_OK) {
			r->form = JOURNAL_FORMAT_PLAIN;
			r->round_start = 0;
		}
		return res;
	}
	if (length < JOURNAL_ROUND_PREFIX_BYTES + RECORD_HEADER_BYTES)
		return JOURNAL_DECODE_SHORT;
	if (get_u32(in + ROUND_RESERVED_OFFSET) != 0) {
		*why = "round prefix reserved field is not zero";
		return JOURNAL_DECODE_BAD;
	}
	if (memcmp(in + JOURNAL_ROUND_PREFIX_BYTES, journal_record_magic,
	    sizeof journal_record_magic) != 0) {
		*why = "bad record magic after a round prefix";
		return JOURNAL_DECODE_BAD;
	}
	round_check(in, in + JOURNAL_ROUND_PREFIX_BYTES, sum);
	if (memcmp(sum, in + ROUND_CHECK_OFFSET, sizeof sum) != 0) {
		*why = "bad round prefix check";
		return JOURNAL_DECODE_BAD;
	}
	res = record_decode_plain(in + JOURNAL_ROUND_PREFIX_BYTES,
	    length - JOURNAL_ROUND_PREFIX_BYTES, r, consumed, why);
	if (res != JOURNAL_DECODE_OK)
		return res;
	*consumed += JOURNAL_ROUND_PREFIX_BYTES;
	r->form = JOURNAL_FORMAT_ROUNDS;
	r->round_start = get_u64(in + ROUND_START_OFFSET);
	return JOURNAL_DECODE_OK;
}

static enum journal_decode_result
record_decode_plain(const uint8_t *in, size_t length,
    struct journal_record *r, size_t *consumed, const char **why)
{
	struct subtab_entry	 e;
	const uint8_t		*p;
	uint8_t			 sum[crypto_shorthash_BYTES];
	uint32_t		 payload_length;
	size_t			 slot;
	const char		*invalid;

	*why = "record runs past the end of the file";
	if (length < RECORD_HEADER_BYTES)
		return JOURNAL_DECODE_SHORT;
	if (memcmp(in, journal_record_magic, sizeof journal_record_magic) != 0) {
		*why = "bad record magic";
		return JOURNAL_DECODE_BAD;
	}
	payload_length = get_u32(in + RECORD_LENGTH_OFFSET);
	if (payload_length < PAYLOAD_FIXED_BYTES ||
	    payload_length > PAYLOAD_MAX_BYTES) {
		*why = "record length out of range";
		return JOURNAL_DECODE_BAD;
	}
	if (length - RECORD_HEADER_BYTES < payload_length)
		return JOURNAL_DECODE_SHORT;

	p = in + RECORD_HEADER_BYTES;
	record_checksum(in + RECORD_LENGTH_OFFSET, p, payload_length, sum);
	if (memcmp(sum, in + RECORD_CHECKSUM_OFFSET, sizeof sum) != 0) {
		*why = "bad record checksum";
		return JOURNAL_DECODE_BAD;
	}

	memset(&e, 0, sizeof e);
	e.kind = p[P_KIND];
	e.state = p[P_STATE];
	e.schema = p[P_SCHEMA];
	if (p[P_TYPE] == JOURNAL_RECORD_EFFECT)
		return effect_decode(in, p, payload_length, r, consumed, why);
	e.sender_length = p[P_SENDER_LENGTH];
	e.recipient_length = p[P_RECIPIENT_LENGTH];
	e.key_length = get_u16(p + P_KEY_LENGTH);
	if ((invalid = entry_invalid(p[P_TYPE], &e)) != NULL) {
		*why = invalid;
		return JOURNAL_DECODE_BAD;
	}
	if (e.recipient_length > IDEM_MAX_ROLE_BYTES) {
		*why = "recipient too long";
		return JOURNAL_DECODE_BAD;
	}
	/*
	 * The field holds the role alone (a slot follows the key): a dot in
	 * it would be taken for the slot's on the next encode.
	 */
	if (memchr(p + P_RECIPIENT, '.', e.recipient_length) != NULL) {
		*why = "a dot in the recipient's role";
		return JOURNAL_DECODE_BAD;
	}
	/* What follows the key is the recipient's slot, if any. */
	if (e.key_length > payload_length - PAYLOAD_FIXED_BYTES ||
	    (slot = payload_length - PAYLOAD_FIXED_BYTES - e.key_length) >
	    IDEM_MAX_ROLE_BYTES || (slot != 0 && (e.kind != SUBTAB_KIND_TASK ||
	    !slot_valid(p + P_KEY + e.key_length, slot)))) {
		*why = "key length disagrees with record length";
		return JOURNAL_DECODE_BAD;
	}
	if (!all_zero(p + P_SENDER + e.sender_length,
	    IDEM_MAX_ROLE_BYTES - e.sender_length) ||
	    !all_zero(p + P_RECIPIENT + e.recipient_length,
	    IDEM_MAX_ROLE_BYTES - e.recipient_length)) {
		*why = "role padding is not zero";
		return JOURNAL_DECODE_BAD;
	}
	e.date = get_u32(p + P_DATE);
	e.seq = get_u32(p + P_SEQ);
	memcpy(e.request_digest, p + P_REQUEST_DIGEST, IDEM_SHA256_BYTES);
	memcpy(e.file_digest, p + P_FILE_DIGEST, IDEM_SHA256_BYTES);
	memcpy(e.sender, p + P_SENDER, IDEM_MAX_ROLE_BYTES);
	memcpy(e.recipient, p + P_RECIPIENT, IDEM_MAX_ROLE_BYTES);
	if (slot != 0) {
		e.recipient[e.recipient_length] = '.';
		memcpy(e.recipient + e.recipient_length + 1,
		    p + P_KEY + e.key_length, slot);
		e.recipient_length += (uint8_t)(slot + 1);
	}
	e.reserved_at_ms = (int64_t)get_u64(p + P_RESERVED_AT);
	e.updated_at_ms = (int64_t)get_u64(p + P_UPDATED_AT);
	e.created_at_ms = (int64_t)get_u64(p + P_CREATED_AT);
	e.peer_uid = get_u32(p + P_PEER_UID);
	e.peer_pid = get_u32(p + P_PEER_PID);

	decode_fill(p, payload_length, &e, NULL, r, consumed);
	return JOURNAL_DECODE_OK;
}

/*
 * Form 1 only: checkpoints and the index hold form 1 records (they are
 * not written in rounds), so a round prefix there is BAD.  Replay reads
 * both forms with journal_record_decode.
 */
enum journal_decode_result
journal_decode(const uint8_t *in, size_t length, struct journal_record *r,
    size_t *consumed)
{
	enum journal_decode_result	 res;
	const char			*why;

	res = record_decode_plain(in, length, r, consumed, &why);
	if (res == JOURNAL_DECODE_OK) {
		r->form = JOURNAL_FORMAT_PLAIN;
		r->round_start = 0;
	}
	return res;
}

/*
 * Is there any offset at or after from where a whole record decodes?
 * Looks for the magic first; a full decode only where it is found.
 */
int
journal_record_follows(const uint8_t *base, size_t size, size_t from,
    size_t *at)
{
	struct journal_record	 r;
	const uint8_t		*p;
	size_t			 consumed;
	const char		*why;

	while (from < size) {
		p = memmem(base + from, size - from, journal_record_magic,
		    sizeof journal_record_magic);
		if (p == NULL)
			return 0;
		from = (size_t)(p - base);
		if (journal_record_decode(p, size - from, &r, &consumed,
		    &why) == JOURNAL_DECODE_OK) {
			*at = from;
			return 1;
		}
		from++;
	}
	return 0;
}

/*
 * The round start of the prefix before the form 1 record at rec when the
 * prefix's first 8 bytes (magic, reserved: both constant) were lost but
 * its round start and check are whole: the check, recomputed with the
 * reserved field 0 over them and the inner checksum, verifies it.  1 and
 * *round_start, or 0.
 */
static int
round_recover(const uint8_t *rec, uint64_t *round_start)
{
	uint8_t	prefix[JOURNAL_ROUND_PREFIX_BYTES], sum[crypto_shorthash_BYTES];

	memcpy(prefix, rec - JOURNAL_ROUND_PREFIX_BYTES, sizeof prefix);
	put_u32(prefix + ROUND_RESERVED_OFFSET, 0);
	round_check(prefix, rec, sum);
	if (memcmp(sum, prefix + ROUND_CHECK_OFFSET, sizeof sum) != 0)
		return 0;
	*round_start = get_u64(prefix + ROUND_START_OFFSET);
	return 1;
}

/*
 * The valid records after a bad one at x, for replay's rule (doc/
 * journal.md, "Rounds over the zero tail").  Every record, of either
 * form, holds a form 1 record: search for the record magic only (never
 * the prefix's), decode there, and take its round start from the 24
 * bytes right before it (at or after x): a prefix that decodes, or one
 * whose round start and check are whole (round_recover).  A record with a
 * round start > x makes it corruption.  A record with none (bare) counts
 * as the round of the next record that has one <= x: it lies inside
 * that round's bytes [R, its end), which that round wrote; a bare record
 * with no such record after it could be a later round's, so it makes it
 * corruption.  1: a torn round, 0: no valid record, -1: *at is the one
 * that makes it corruption.
 */
int
journal_round_after(const uint8_t *base, size_t size, size_t x,
    size_t *first, size_t *at)
{
	struct journal_record	 r;
	const uint8_t		*p;
	const char		*why;
	size_t			 from = x + 1, used, start, bare = SIZE_MAX;
	uint64_t		 round_start = 0;
	int			 found = 0, named;

	while (from < size) {
		p = memmem(base + from, size - from, journal_record_magic,
		    sizeof journal_record_magic);
		if (p == NULL)
			break;
		from = (size_t)(p - base);
		if (record_decode_plain(p, size - from, &r, &used, &why) !=
		    JOURNAL_DECODE_OK) {
			from++;
			continue;
		}
		start = from;
		named = 0;
		if (from >= x + JOURNAL_ROUND_PREFIX_BYTES) {
			if (journal_record_decode(p - JOURNAL_ROUND_PREFIX_BYTES,
			    size - from + JOURNAL_ROUND_PREFIX_BYTES, &r, &used,
			    &why) == JOURNAL_DECODE_OK &&
			    r.form == JOURNAL_FORMAT_ROUNDS) {
				round_start = r.round_start;
				named = 1;
			} else
				named = round_recover(p, &round_start);
			if (named)
				start = from - JOURNAL_ROUND_PREFIX_BYTES;
		}
		if (!found) {
			*first = start;
			found = 1;
		}
		if (named && round_start > x) {
			*at = start;
			return -1;
		}
		if (named)
			bare = SIZE_MAX;	/* the bare ones before: its */
		else if (bare == SIZE_MAX)
			bare = start;
		from++;
	}
	if (bare != SIZE_MAX) {
		*at = bare;
		return -1;
	}
	return found;
}

/* ---- segment names and headers ------------------------------------------ */

void
journal_segment_name(uint64_t number, char name[SEGMENT_NAME_BYTES])
{
	snprintf(name, SEGMENT_NAME_BYTES, "%016" PRIx64 SEGMENT_SUFFIX,
	    number);
}

/* Is name a segment ("%016llx.jnl", lower case, number >= 1)? */
int
journal_segment_parse_name(const char *name, uint64_t *number)
{
	uint64_t	n = 0;
	int		i, c;

	if (strlen(name) != SEGMENT_NAME_BYTES - 1 ||
	    strcmp(name + 16, SEGMENT_SUFFIX) != 0)
		return 0;
	for (i = 0; i < 16; i++) {
		c = (unsigned char)name[i];
		if (c >= '0' && c <= '9')
			n = n << 4 | (uint64_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			n = n << 4 | (uint64_t)(c - 'a' + 10);
		else
			return 0;
	}
	if (n == 0)
		return 0;
	*number = n;
	return 1;
}

void
journal_segment_header_encode(uint64_t number,
    uint8_t out[SEGMENT_HEADER_BYTES])
{
	journal_segment_header_encode_version(number, SEGMENT_VERSION, out);
}

uint32_t
journal_new_format(void)
{
	return SEGMENT_VERSION;
}

uint32_t
journal_segment_version(const uint8_t *in)
{
	return get_u32(in + S_VERSION);
}

void
journal_segment_header_encode_version(uint64_t number, uint32_t version,
    uint8_t out[SEGMENT_HEADER_BYTES])
{
	memcpy(out + S_MAGIC, journal_segment_magic,
	    sizeof journal_segment_magic);
	put_u32(out + S_VERSION, version);
	put_u32(out + S_RESERVED, 0);
	put_u64(out + S_NUMBER, number);
	crypto_shorthash(out + S_CHECKSUM, out, S_CHECKSUM,
	    journal_checksum_key);
}

/* NULL if the header is good for segment number, else what is wrong. */
const char *
journal_segment_header_invalid(const uint8_t *in, uint64_t number)
{
	uint8_t	sum[crypto_shorthash_BYTES];

	if (memcmp(in + S_MAGIC, journal_segment_magic,
	    sizeof journal_segment_magic) != 0)
		return "bad segment magic";
	crypto_shorthash(sum, in, S_CHECKSUM, journal_checksum_key);
	if (memcmp(sum, in + S_CHECKSUM, sizeof sum) != 0)
		return "bad segment header checksum";
	if (get_u32(in + S_VERSION) != JOURNAL_FORMAT_PLAIN &&
	    get_u32(in + S_VERSION) != JOURNAL_FORMAT_ROUNDS)
		return "unsupported segment format version";
	if (get_u32(in + S_RESERVED) != 0)
		return "segment header reserved field is not zero";
	if (get_u64(in + S_NUMBER) != number)
		return "segment number in header disagrees with file name";
	return NULL;
}
