/* SPDX-License-Identifier: ISC */
/*
 * journal.c: the on-disk journal of idemd.  It owns the record and segment
 * formats (doc/journal.md), appending and syncing the current segment,
 * and replay at start-up, including cutting off a torn tail.  It never
 * interprets a record beyond checking that its fields are in range: what a
 * record means is subtab.c's business.
 *
 * DESIGN
 *
 * The journal is a directory of segment files "%016llx.jnl", numbered
 * from 1; each starts with a checksummed file header and holds records
 * back to back.  A record is a checksummed snapshot of one subtab_entry
 * and its key, encoded field by field in little-endian, so the format
 * does not depend on the compiler's struct layout or the host's byte
 * order.
 *
 * Only the last segment is ever appended to.  A segment is sealed (fully
 * written and fsync'd) before the next one is created, so only the last
 * segment can end in a torn append; journal_rotate(), when it comes, must
 * keep that promise: sync the old segment, then create_segment() the next
 * number (O_EXCL, header, fsync file, fsync directory), then switch.
 *
 * Replay maps each segment and decodes record by record.  At the first
 * record that does not decode it looks further on for any record that
 * does: if one exists, bytes that were once durable are damaged and
 * replay stops with a cause naming the file and offset, changing nothing
 * (the operator decides, not us); if none exists and this is the last
 * segment, it is the remains of an append that never completed, so was
 * never acknowledged (acknowledgement waits for the fsync), and it is
 * cut off with a warning.  Records before the bad one have already been
 * applied when replay fails: the caller throws away what it built.
 *
 * JOURNAL_REPLAY_READONLY is for readers other than the broker (idemctl
 * verify and journal dump), which may run beside a live broker: there an
 * append in flight looks exactly like a torn tail, so the tail is only
 * reported in the stats, never cut, and a stub segment is never removed.
 *
 * Every function here works on what it is given: no global mutable state.
 * Callers must have called sodium_init() (idemd's main does); the
 * entry points that do I/O call it again, which is cheap and harmless.
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
#define SEGMENT_VERSION		1
#define SEGMENT_HEADER_BYTES	32
#define S_MAGIC			0
#define S_VERSION		8
#define S_RESERVED		12
#define S_NUMBER		16
#define S_CHECKSUM		24

#define SEGMENT_NAME_BYTES	21	/* 16 hex digits, ".jnl", NUL */
#define SEGMENT_SUFFIX		".jnl"

/* writev at most this many pieces per call (well under IOV_MAX). */
#define APPEND_IOV_BATCH	64

static void	journal_cause(char **, const char *, ...)
		    __attribute__((format(printf, 2, 3)));

/*
 * Set *cause (malloc'd; NULL if even that fails) without disturbing
 * errno, so every error path can say why and still return the errno of
 * the call that failed.
 */
static void
journal_cause(char **cause, const char *fmt, ...)
{
	va_list	ap;
	int	saved_errno = errno;

	va_start(ap, fmt);
	if (vasprintf(cause, fmt, ap) == -1)
		*cause = NULL;
	va_end(ap);
	errno = saved_errno;
}

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

/* The EFFECT half of record_decode, its checksum already checked. */
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

/* journal_decode, with the reason for BAD for replay's messages. */
static enum journal_decode_result
record_decode(const uint8_t *in, size_t length, struct journal_record *r,
    size_t *consumed, const char **why)
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

enum journal_decode_result
journal_decode(const uint8_t *in, size_t length, struct journal_record *r,
    size_t *consumed)
{
	const char	*why;

	return record_decode(in, length, r, consumed, &why);
}

/*
 * Is there any offset at or after from where a whole record decodes?
 * Looks for the magic first; a full decode only where it is found.
 */
static int
record_follows(const uint8_t *base, size_t size, size_t from, size_t *at)
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
		if (record_decode(p, size - from, &r, &consumed, &why) ==
		    JOURNAL_DECODE_OK) {
			*at = from;
			return 1;
		}
		from++;
	}
	return 0;
}

/* ---- segment files ------------------------------------------------------ */

static void
segment_name(uint64_t number, char name[SEGMENT_NAME_BYTES])
{
	snprintf(name, SEGMENT_NAME_BYTES, "%016" PRIx64 SEGMENT_SUFFIX,
	    number);
}

/* Is name a segment ("%016llx.jnl", lower case, number >= 1)? */
static int
segment_parse_name(const char *name, uint64_t *number)
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

static void
segment_header_encode(uint64_t number, uint8_t out[SEGMENT_HEADER_BYTES])
{
	memcpy(out + S_MAGIC, journal_segment_magic,
	    sizeof journal_segment_magic);
	put_u32(out + S_VERSION, SEGMENT_VERSION);
	put_u32(out + S_RESERVED, 0);
	put_u64(out + S_NUMBER, number);
	crypto_shorthash(out + S_CHECKSUM, out, S_CHECKSUM,
	    journal_checksum_key);
}

/* NULL if the header is good for segment number, else what is wrong. */
static const char *
segment_header_invalid(const uint8_t *in, uint64_t number)
{
	uint8_t	sum[crypto_shorthash_BYTES];

	if (memcmp(in + S_MAGIC, journal_segment_magic,
	    sizeof journal_segment_magic) != 0)
		return "bad segment magic";
	crypto_shorthash(sum, in, S_CHECKSUM, journal_checksum_key);
	if (memcmp(sum, in + S_CHECKSUM, sizeof sum) != 0)
		return "bad segment header checksum";
	if (get_u32(in + S_VERSION) != SEGMENT_VERSION)
		return "unsupported segment format version";
	if (get_u32(in + S_RESERVED) != 0)
		return "segment header reserved field is not zero";
	if (get_u64(in + S_NUMBER) != number)
		return "segment number in header disagrees with file name";
	return NULL;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t	x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * The segment numbers in the directory, ascending.  Other files are
 * ignored.  *list is malloc'd (NULL when there are none).
 */
static int
segment_list(int dir_fd, const char *dir, uint64_t **list, size_t *count,
    char **cause)
{
	DIR		*d;
	struct dirent	*de;
	uint64_t	*v = NULL, *nv, number;
	size_t		 n = 0, cap = 0;
	int		 fd;

	*list = NULL;
	*count = 0;
	/* closedir closes the fd it was given: hand it a duplicate. */
	if ((fd = dup(dir_fd)) == -1) {
		journal_cause(cause, "journal %s: %s", dir, strerror(errno));
		return -1;
	}
	if ((d = fdopendir(fd)) == NULL) {
		journal_cause(cause, "journal %s: %s", dir, strerror(errno));
		close(fd);
		return -1;
	}
	rewinddir(d);
	for (;;) {
		errno = 0;
		if ((de = readdir(d)) == NULL) {
			if (errno == 0)
				break;
			goto fail;
		}
		if (!segment_parse_name(de->d_name, &number))
			continue;
		if (n == cap) {
			cap = cap == 0 ? 16 : cap * 2;
			if ((nv = reallocarray(v, cap, sizeof *v)) == NULL)
				goto fail;
			v = nv;
		}
		v[n++] = number;
	}
	closedir(d);
	if (n > 1)
		qsort(v, n, sizeof *v, cmp_u64);
	*list = v;
	*count = n;
	return 0;

fail:
	journal_cause(cause, "journal %s: listing segments: %s", dir,
	    strerror(errno));
	closedir(d);
	free(v);
	return -1;
}

/*
 * Create segment number, durably: O_EXCL (never reuse a name), header,
 * fsync the file, fsync the directory.  On failure nothing is left
 * behind (best effort: on a failing disk the unlink may fail too, and
 * replay then finds a short or bad last segment).  Returns the fd, open
 * for appending.  journal_open uses it for segment 1; journal_rotate
 * will use it for the next one.
 */
static int
create_segment(int dir_fd, const char *dir, uint64_t number, char **cause)
{
	char		name[SEGMENT_NAME_BYTES];
	uint8_t		header[SEGMENT_HEADER_BYTES];
	const char	*what;
	int		fd, saved_errno;

	segment_name(number, name);
	fd = openat(dir_fd, name,
	    O_RDWR|O_APPEND|O_CREAT|O_EXCL|O_CLOEXEC|O_NOFOLLOW, 0600);
	if (fd == -1) {
		journal_cause(cause, "journal %s/%s: create: %s", dir, name,
		    strerror(errno));
		return -1;
	}
	segment_header_encode(number, header);
	what = "write header";
	if (durable_write_all(fd, header, sizeof header) == -1)
		goto fail;
	what = "fsync";
	if (fsync(fd) == -1)
		goto fail;
	what = "fsync directory";
	if (fsync(dir_fd) == -1)
		goto fail;
	return fd;

fail:
	saved_errno = errno;
	close(fd);
	unlinkat(dir_fd, name, 0);
	errno = saved_errno;
	journal_cause(cause, "journal %s/%s: %s: %s", dir, name, what,
	    strerror(errno));
	return -1;
}

/* ---- appending ---------------------------------------------------------- */

/* fsync the directory holding path, so a new entry in it is durable. */
static int
sync_parent(const char *path)
{
	char	*copy;
	int	 fd, rv, saved_errno;

	if ((copy = strdup(path)) == NULL)
		return -1;
	fd = open(dirname(copy), O_RDONLY|O_DIRECTORY|O_CLOEXEC);
	saved_errno = errno;
	free(copy);
	if (fd == -1) {
		errno = saved_errno;
		return -1;
	}
	rv = fsync(fd);
	saved_errno = errno;
	close(fd);
	errno = saved_errno;
	return rv;
}

/* Start j in dir with no directory yet: what both opens share. */
static int
journal_init(struct journal *j, const char *dir, char **cause)
{
	memset(j, 0, sizeof *j);
	j->fd = j->dir_fd = -1;
	if (sodium_init() < 0) {
		errno = EIO;
		journal_cause(cause, "journal %s: libsodium failed to "
		    "initialise", dir);
		return -1;
	}
	if ((j->dir = strdup(dir)) == NULL) {
		journal_cause(cause, "journal %s: %s", dir, strerror(errno));
		return -1;
	}
	return 0;
}

/* j->dir_fd is open: append to its last segment, or create the first. */
static int
journal_open_dir(struct journal *j, char **cause)
{
	const char	*dir = j->dir;
	uint64_t	*list = NULL;
	size_t		 count;
	uint8_t		 header[SEGMENT_HEADER_BYTES];
	char		 name[SEGMENT_NAME_BYTES];
	const char	*invalid;
	struct stat	 st;
	ssize_t		 n;
	int		 saved_errno;

	if (segment_list(j->dir_fd, dir, &list, &count, cause) == -1)
		goto fail;
	if (count == 0) {
		j->segment = 1;
		if ((j->fd = create_segment(j->dir_fd, dir, 1, cause)) == -1)
			goto fail;
		j->size = SEGMENT_HEADER_BYTES;
		return 0;
	}

	/*
	 * Append to the highest segment.  Replay has already run and cut
	 * any torn tail, so its size is the end of its last good record.
	 */
	j->segment = list[count - 1];
	free(list);
	list = NULL;
	segment_name(j->segment, name);
	j->fd = openat(j->dir_fd, name, O_RDWR|O_APPEND|O_CLOEXEC|O_NOFOLLOW);
	if (j->fd == -1 || fstat(j->fd, &st) == -1) {
		journal_cause(cause, "journal %s/%s: %s", dir, name,
		    strerror(errno));
		goto fail;
	}
	if ((n = pread(j->fd, header, sizeof header, 0)) == -1) {
		journal_cause(cause, "journal %s/%s: read header: %s", dir,
		    name, strerror(errno));
		goto fail;
	}
	if ((size_t)n < sizeof header)
		invalid = "shorter than a segment header (replay removes it)";
	else
		invalid = segment_header_invalid(header, j->segment);
	if (invalid != NULL) {
		errno = EINVAL;
		journal_cause(cause, "journal %s/%s: %s", dir, name, invalid);
		goto fail;
	}
	/*
	 * What replay accepted is what start-up built on: make it durable,
	 * in case a previous broker died between its write and its fsync.
	 */
	if (fdatasync(j->fd) == -1) {
		journal_cause(cause, "journal %s/%s: fdatasync: %s", dir, name,
		    strerror(errno));
		goto fail;
	}
	j->size = (uint64_t)st.st_size;
	return 0;

fail:
	saved_errno = errno;
	free(list);
	journal_close(j);
	errno = saved_errno;
	return -1;
}

int
journal_open(struct journal *j, const char *dir, char **cause)
{
	int	saved_errno;

	if (journal_init(j, dir, cause) != 0)
		return -1;
	/* Only the last component: the state directory is the caller's. */
	if (mkdir(dir, 0700) == 0) {
		/* A new directory's own entry must be durable too. */
		if (sync_parent(dir) == -1) {
			journal_cause(cause, "journal %s: fsync parent "
			    "directory: %s", dir, strerror(errno));
			goto fail;
		}
	} else if (errno != EEXIST) {
		journal_cause(cause, "journal %s: mkdir: %s", dir,
		    strerror(errno));
		goto fail;
	}
	if ((j->dir_fd = open(dir, O_RDONLY|O_DIRECTORY|O_CLOEXEC|O_NOFOLLOW)) ==
	    -1) {
		journal_cause(cause, "journal %s: %s", dir, strerror(errno));
		goto fail;
	}
	return journal_open_dir(j, cause);
fail:
	saved_errno = errno;
	journal_close(j);
	errno = saved_errno;
	return -1;
}

int
journal_open_at(struct journal *j, int dir_fd, const char *dir,
    char **cause)
{
	int	saved_errno;

	if (journal_init(j, dir, cause) != 0)
		return -1;
	if ((j->dir_fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0)) == -1) {
		saved_errno = errno;
		journal_cause(cause, "journal %s: %s", dir,
		    strerror(saved_errno));
		journal_close(j);
		errno = saved_errno;
		return -1;
	}
	return journal_open_dir(j, cause);
}


/*
 * After a failure that leaves the end of the file unknown (a truncate
 * that failed) or its durability unknown (a failed fsync), the handle
 * refuses everything until the journal is reopened: the next append must
 * not land after bytes of unknown state, and a later fsync that succeeds
 * would say nothing about the writes the failed one lost.
 */
static void
journal_poison(struct journal *j)
{
	if (j->fd != -1)
		close(j->fd);
	j->fd = -1;
}

static int
journal_unusable(struct journal *j, char **cause)
{
	errno = EIO;
	journal_cause(cause, "journal %s: unusable after an earlier write or "
	    "fsync failure; reopen it from the journal", j->dir);
	return -1;
}

int
journal_append(struct journal *j, const struct iovec *iov, int iovcnt,
    char **cause)
{
	struct iovec	 batch[APPEND_IOV_BATCH];
	const uint8_t	*base;
	size_t		 total = 0, done = 0, offset, skip;
	ssize_t		 w;
	int		 i, k, n, saved_errno;

	if (j->fd == -1)
		return journal_unusable(j, cause);
	for (i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len > SIZE_MAX - total) {
			errno = EINVAL;
			journal_cause(cause, "journal %s: append too large",
			    j->dir);
			return -1;
		}
		total += iov[i].iov_len;
	}

	/* Piece i is written up to offset; a short write resumes there. */
	i = 0;
	offset = 0;
	while (done < total) {
		while (offset == iov[i].iov_len) {
			i++;
			offset = 0;
		}
		for (k = i, n = 0; k < iovcnt && n < APPEND_IOV_BATCH; k++) {
			base = iov[k].iov_base;
			skip = k == i ? offset : 0;
			if (iov[k].iov_len == skip)
				continue;
			batch[n].iov_base = (void *)(base + skip);
			batch[n].iov_len = iov[k].iov_len - skip;
			n++;
		}
		w = writev(j->fd, batch, n);
		if (w == -1 && errno == EINTR)
			continue;
		if (w <= 0) {
			if (w == 0)
				errno = EIO;
			goto fail;
		}
		done += (size_t)w;
		while (w > 0) {
			if ((size_t)w < iov[i].iov_len - offset) {
				offset += (size_t)w;
				w = 0;
			} else {
				w -= (ssize_t)(iov[i].iov_len - offset);
				i++;
				offset = 0;
			}
		}
	}
	j->size += total;
	return 0;

fail:
	saved_errno = errno;
	if (ftruncate(j->fd, (off_t)j->size) == -1) {
		journal_cause(cause, "journal %s/%016" PRIx64 SEGMENT_SUFFIX
		    ": write: %s; truncating back to %" PRIu64 " bytes also "
		    "failed: %s", j->dir, j->segment, strerror(saved_errno),
		    j->size, strerror(errno));
		journal_poison(j);
	} else {
		journal_cause(cause, "journal %s/%016" PRIx64 SEGMENT_SUFFIX
		    ": write at offset %" PRIu64 ": %s", j->dir, j->segment,
		    j->size, strerror(saved_errno));
	}
	errno = saved_errno;
	return -1;
}

int
journal_sync(struct journal *j, char **cause)
{
	if (j->fd == -1)
		return journal_unusable(j, cause);
	if (fdatasync(j->fd) == 0)
		return 0;
	journal_cause(cause, "journal %s/%016" PRIx64 SEGMENT_SUFFIX
	    ": fdatasync: %s", j->dir, j->segment, strerror(errno));
	journal_poison(j);
	return -1;
}

void
journal_close(struct journal *j)
{
	if (j->fd != -1)
		close(j->fd);
	if (j->dir_fd != -1)
		close(j->dir_fd);
	free(j->dir);
	j->fd = j->dir_fd = -1;
	j->dir = NULL;
}

/* ---- replay ------------------------------------------------------------- */

struct replay {
	const char			*dir;
	int				 dir_fd;
	int				 flags;
	journal_apply_fn		 apply;
	journal_hint_fn			 hint;	/* NULL: none */
	void				*arg;
	struct journal_replay_stats	*stats;
	char				**cause;
	uint64_t			 from;	/* a checkpoint's segment, or 0 */
};

/*
 * Cut the last segment at offset: an append that was never acknowledged.
 * The fsync makes the cut durable before anything is appended after it.
 */
static int
replay_cut(struct replay *rp, const char *name, uint64_t offset,
    uint64_t size, const char *why)
{
	int	fd, saved_errno;

	rp->stats->torn_offset = offset;
	rp->stats->torn_why = why;
	if (rp->flags & JOURNAL_REPLAY_READONLY) {
		/* The caller reports it: a running broker may be appending. */
		rp->stats->truncated_bytes += size - offset;
		return 0;
	}
	fd = openat(rp->dir_fd, name, O_WRONLY|O_CLOEXEC|O_NOFOLLOW);
	if (fd == -1 || ftruncate(fd, (off_t)offset) == -1 || fsync(fd) == -1) {
		saved_errno = errno;
		if (fd != -1)
			close(fd);
		errno = saved_errno;
		journal_cause(rp->cause, "journal %s/%s: cutting the torn "
		    "tail at offset %" PRIu64 ": %s", rp->dir, name, offset,
		    strerror(errno));
		return -1;
	}
	close(fd);
	rp->stats->truncated_bytes += size - offset;
	return 0;
}

/*
 * The last segment is shorter than a header: its creation was cut short
 * before the header was synced, so it never held a record.  Remove it:
 * the segment before it (sealed) is the last again, or, if there is
 * none, journal_open creates segment 1 afresh.
 */
static int
replay_remove_stub(struct replay *rp, const char *name, uint64_t size)
{
	rp->stats->torn_offset = 0;
	rp->stats->torn_why = "segment shorter than its header";
	rp->stats->torn_stub = 1;
	if (rp->flags & JOURNAL_REPLAY_READONLY) {
		rp->stats->truncated_bytes += size;
		return 0;
	}
	if (unlinkat(rp->dir_fd, name, 0) == -1 || fsync(rp->dir_fd) == -1) {
		journal_cause(rp->cause, "journal %s/%s: removing the "
		    "incomplete segment: %s", rp->dir, name, strerror(errno));
		return -1;
	}
	rp->stats->truncated_bytes += size;
	return 0;
}

static int
replay_corrupt(struct replay *rp, const char *name, uint64_t offset,
    const char *why, const char *after)
{
	rp->stats->has_corrupt_offset = 1;
	rp->stats->corrupt_offset = offset;
	errno = EINVAL;
	journal_cause(rp->cause, "journal corrupt at %s/%s offset %" PRIu64
	    ": %s (%s; run `idemctl verify` and see doc/journal.md before "
	    "starting again; do not delete or edit the journal)", rp->dir,
	    name, offset, why, after);
	return -1;
}

/*
 * Records decoded ahead of the one applied, when the caller gives a
 * hint: the hint can start loading what apply will touch (a table
 * bucket, in idemd) while the records before it are applied.
 */
#define REPLAY_AHEAD	8

/* Replay the records of one mapped segment; see the DESIGN comment. */
static int
replay_records(struct replay *rp, const char *name, const uint8_t *map,
    size_t size, int last, size_t *cut_at, const char **cut_why)
{
	struct journal_record	 ring[REPLAY_AHEAD];
	size_t			 at[REPLAY_AHEAD], length[REPLAY_AHEAD];
	const char		*why = NULL;
	char			 after[128];
	size_t			 offset, decoded, next, head = 0, count = 0;
	size_t			 ahead = rp->hint != NULL ? REPLAY_AHEAD : 1;
	size_t			 i;
	int			 applied, more = 1;

	*cut_at = size;
	offset = decoded = SEGMENT_HEADER_BYTES;
	for (;;) {
		/* Decode up to ahead records past the next to apply. */
		while (more && count < ahead && decoded < size) {
			i = (head + count) % ahead;
			if (record_decode(map + decoded, size - decoded,
			    &ring[i], &length[i], &why) != JOURNAL_DECODE_OK) {
				more = 0;
				break;
			}
			at[i] = decoded;
			if (rp->hint != NULL)
				rp->hint(&ring[i], rp->arg);
			decoded += length[i];
			count++;
		}
		if (count == 0)
			break;
		rp->stats->at_offset = at[head];
		if ((applied = rp->apply(&ring[head], rp->arg)) != 0) {
			errno = ECANCELED;
			journal_cause(rp->cause, "journal replay stopped at "
			    "%s/%s offset %zu: applying the record failed "
			    "(%d)", rp->dir, name, at[head], applied);
			return -1;
		}
		rp->stats->records++;
		rp->stats->bytes += length[head];
		offset = at[head] + length[head];
		head = (head + 1) % ahead;
		count--;
	}
	if (offset == size)
		return 0;

	/* A record at offset does not decode: torn tail or corruption? */
	if (record_follows(map, size, offset + 1, &next)) {
		snprintf(after, sizeof after, "valid records follow, the "
		    "first at offset %zu", next);
		return replay_corrupt(rp, name, offset, why, after);
	}
	if (!last) {
		return replay_corrupt(rp, name, offset, why, "later segments "
		    "follow, so this one was sealed complete");
	}
	*cut_at = offset;
	*cut_why = why;
	return 0;
}

static int
replay_segment(struct replay *rp, uint64_t number, int last)
{
	char		 name[SEGMENT_NAME_BYTES];
	struct stat	 st;
	void		*map;
	const char	*why = NULL;
	size_t		 size, cut_at = 0;
	int		 fd, rv, saved_errno;

	segment_name(number, name);
	rp->stats->at_segment = number;
	fd = openat(rp->dir_fd, name, O_RDONLY|O_CLOEXEC|O_NOFOLLOW);
	if (fd == -1 || fstat(fd, &st) == -1) {
		journal_cause(rp->cause, "journal %s/%s: %s", rp->dir, name,
		    strerror(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		errno = EINVAL;
		journal_cause(rp->cause, "journal %s/%s: not a regular file",
		    rp->dir, name);
		goto fail;
	}
	if ((uint64_t)st.st_size > SIZE_MAX) {
		errno = EFBIG;
		journal_cause(rp->cause, "journal %s/%s: too large to map",
		    rp->dir, name);
		goto fail;
	}
	size = (size_t)st.st_size;

	if (size < SEGMENT_HEADER_BYTES) {
		close(fd);
		/* A checkpoint continues here: its header was made durable. */
		if (number == rp->from)
			return replay_corrupt(rp, name, 0, "segment shorter than "
			    "its header", "a checkpoint continues in it, so its "
			    "header was durable");
		if (last) {
			rp->stats->torn_segment = number;
			return replay_remove_stub(rp, name, size);
		}
		return replay_corrupt(rp, name, 0, "segment shorter than its "
		    "header", "later segments follow, so it was sealed "
		    "complete");
	}

	/* One mapping per segment: no system call per record. */
	map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED) {
		journal_cause(rp->cause, "journal %s/%s: mmap: %s", rp->dir,
		    name, strerror(errno));
		goto fail;
	}
	close(fd);
	madvise(map, size, MADV_SEQUENTIAL);

	if ((why = segment_header_invalid(map, number)) != NULL &&
	    last && size == SEGMENT_HEADER_BYTES && number != rp->from) {
		/*
		 * Nothing but a header that never reached the disk whole (a
		 * file system may keep the size and lose the data): no
		 * record can follow an unsynced header, so this is a
		 * creation cut short, like a shorter stub.
		 */
		munmap(map, size);
		rp->stats->torn_segment = number;
		return replay_remove_stub(rp, name, size);
	} else if (why != NULL) {
		rv = replay_corrupt(rp, name, 0, why, "a segment header is "
		    "synced before any record is written after it");
	} else {
		rp->stats->segments++;
		rv = replay_records(rp, name, map, size, last, &cut_at, &why);
	}
	saved_errno = errno;
	munmap(map, size);
	errno = saved_errno;
	if (rv == -1)
		return -1;
	if (cut_at < size) {
		rp->stats->torn_segment = number;
		return replay_cut(rp, name, cut_at, size, why);
	}
	return 0;

fail:
	saved_errno = errno;
	if (fd != -1)
		close(fd);
	errno = saved_errno;
	return -1;
}

int
journal_replay(const char *dir, int flags, journal_apply_fn apply,
    void *arg, struct journal_replay_stats *stats, char **cause)
{
	return journal_replay_from(dir, 0, flags, apply, arg, stats, cause);
}

int
journal_replay_from(const char *dir, uint64_t from, int flags,
    journal_apply_fn apply, void *arg, struct journal_replay_stats *stats,
    char **cause)
{
	return journal_replay_hinted(dir, from, flags, apply, NULL, arg,
	    stats, cause);
}

int
journal_replay_hinted(const char *dir, uint64_t from, int flags,
    journal_apply_fn apply, journal_hint_fn hint, void *arg,
    struct journal_replay_stats *stats, char **cause)
{
	size_t				 first;
	struct journal_replay_stats	 scratch;
	struct replay			 rp;
	uint64_t			*list = NULL;
	size_t				 count, i;
	int				 dir_fd, rv = -1, saved_errno;

	if (stats == NULL)
		stats = &scratch;
	memset(stats, 0, sizeof *stats);
	*cause = NULL;
	if (sodium_init() < 0) {
		errno = EIO;
		journal_cause(cause, "journal %s: libsodium failed to "
		    "initialise", dir);
		return -1;
	}

	if ((dir_fd = open(dir, O_RDONLY|O_DIRECTORY|O_CLOEXEC|O_NOFOLLOW)) ==
	    -1) {
		if (errno == ENOENT)
			return 0;	/* never written: an empty journal */
		journal_cause(cause, "journal %s: %s", dir, strerror(errno));
		return -1;
	}
	if (segment_list(dir_fd, dir, &list, &count, cause) == -1)
		goto out;

	/*
	 * Segments before a checkpoint's are what an interrupted prune left:
	 * the checkpoint holds their records.  The checkpoint's own segment
	 * was made durable before the checkpoint was written, so it must be
	 * there.
	 */
	for (first = 0; first < count && list[first] < from; first++)
		;
	if (from > 0 && (first == count || list[first] != from)) {
		errno = EINVAL;
		journal_cause(cause, "journal corrupt in %s: segment %016"
		    PRIx64 SEGMENT_SUFFIX ", where the checkpoint continues, "
		    "is missing (see doc/journal.md)", dir, from);
		goto out;
	}
	if (first > 0) {
		memmove(list, list + first, (count - first) * sizeof *list);
		count -= first;
	}

	/* Segments go away oldest first, so a gap means records were lost. */
	for (i = 1; i < count; i++) {
		if (list[i] != list[i - 1] + 1) {
			errno = EINVAL;
			journal_cause(cause, "journal corrupt in %s: segment "
			    "%016" PRIx64 SEGMENT_SUFFIX " is missing between "
			    "%016" PRIx64 " and %016" PRIx64 " (run `idemctl "
			    "verify` and see doc/journal.md)", dir,
			    list[i - 1] + 1, list[i - 1], list[i]);
			goto out;
		}
	}

	rp.dir = dir;
	rp.dir_fd = dir_fd;
	rp.flags = flags;
	rp.apply = apply;
	rp.hint = hint;
	rp.arg = arg;
	rp.stats = stats;
	rp.cause = cause;
	rp.from = from;
	for (i = 0; i < count; i++) {
		if (replay_segment(&rp, list[i], i == count - 1) == -1)
			goto out;
	}
	rv = 0;

out:
	saved_errno = errno;
	free(list);
	close(dir_fd);
	errno = saved_errno;
	return rv;
}

int
journal_cut(int dir_fd, const char *dir, uint64_t segment, uint64_t size,
    char **cause)
{
	char	name[SEGMENT_NAME_BYTES];
	int	fd, saved_errno;

	segment_name(segment, name);
	if ((fd = openat(dir_fd, name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW)) ==
	    -1) {
		journal_cause(cause, "journal %s/%s: %s", dir, name,
		    strerror(errno));
		return -1;
	}
	if (ftruncate(fd, (off_t)size) == -1 || fsync(fd) == -1) {
		saved_errno = errno;
		close(fd);
		errno = saved_errno;
		journal_cause(cause, "journal %s/%s: cutting back to %llu "
		    "bytes: %s", dir, name, (unsigned long long)size,
		    strerror(errno));
		return -1;
	}
	close(fd);
	return 0;
}

int
journal_rotate(struct journal *j, char **cause)
{
	int	fd;

	if (j->fd == -1)
		return journal_unusable(j, cause);
	/* The caller synced the current segment: it is complete. */
	if ((fd = create_segment(j->dir_fd, j->dir, j->segment + 1,
	    cause)) == -1)
		return -1;
	close(j->fd);
	j->fd = fd;
	j->segment++;
	j->size = SEGMENT_HEADER_BYTES;
	return 0;
}
