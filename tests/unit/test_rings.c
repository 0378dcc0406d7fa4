/* SPDX-License-Identifier: ISC */
/*
 * test_rings.c: the segment's two rings (shm/ring.c, arena.c,
 * receipts.c).  The receipt store of the fast path wraps for ever, a
 * slot naming an overwritten reply gets none (never another's or a torn
 * one, even while a writer in another process overwrites it under the
 * reader), its 32-bit names survive their own wrap, and a reply is
 * stored only against the entry it was built from.  The result
 * arena reuses the space of indexed results only: the bytes of a
 * committed result not yet in the index, or of a commit in flight, are
 * never overwritten (ENOSPC, and a checkpoint is asked for, half an
 * arena ahead, but not while one runs); arena_holds says what a read
 * would find, refusing a record the tail has passed though its bytes are
 * intact (one left before a lap's pad).  And the segment at --capacity
 * 1000000 is under 300 MB.
 */
#include <sys/wait.h>

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/filter.h"
#include "segment.h"
#include "subtab_int.h"

#define RINGS_CAPACITY		64
/* The smallest arena: one record of the largest result. */
#define RINGS_ARENA_BYTES	SHM_ARENA_LEAST_BYTES
#define RINGS_RESULT_BYTES	4080	/* a record of 4096 bytes */
#define RINGS_STRESS_PUTS	40000

static int
setup(void **state)
{
	return unit_segment_setup(state, "rings", RINGS_CAPACITY, 0);
}

static int
setup_one_slot(void **state)
{
	return unit_segment_setup(state, "rings", 1, 0);
}

static int
setup_small_arena(void **state)
{
	return unit_segment_setup(state, "rings", RINGS_CAPACITY,
	    RINGS_ARENA_BYTES);
}

/* Set key's slot to a committed task (a replay would); its slot. */
static uint32_t
commit_task(struct segment_fixture *f, const char *key)
{
	struct subtab_entry	e;
	uint32_t		slot;

	memset(&e, 0, sizeof e);
	e.kind = SUBTAB_KIND_TASK;
	e.state = SUBTAB_COMMITTED;
	e.schema = SUBTAB_SCHEMA_WRITE_TASK_V1;
	assert_int_equal(subtab_apply_slot(&f->seg, key, strlen(key),
	    subtab_prefetch(&f->seg, key, strlen(key)), &e, &slot), 0);
	return slot;
}

/*
 * A reply that says whose it is: slot, sequence number, a length and a
 * filler byte both derived from them.  A copy torn between two replies
 * fails reply_check.
 */
static size_t
reply_make(uint8_t *buf, uint32_t slot, uint32_t seq)
{
	size_t	length = 64 + (seq * 97u) % 3000;

	memcpy(buf, &slot, 4);
	memcpy(buf + 4, &seq, 4);
	memset(buf + 8, (int)((seq * 31u + slot) & 0xff), length - 8);
	return length;
}

static void
reply_check(const uint8_t *buf, size_t length, uint32_t slot, uint32_t *seq)
{
	uint32_t	s;
	size_t		i;

	assert_true(length >= 64);
	memcpy(&s, buf, 4);
	memcpy(seq, buf + 4, 4);
	if (s != slot)
		fail_msg("slot %u got a reply of slot %u", slot, s);
	assert_int_equal(length, 64 + (*seq * 97u) % 3000);
	for (i = 8; i < length; i++)
		if (buf[i] != (uint8_t)((*seq * 31u + slot) & 0xff))
			fail_msg("slot %u: byte %zu of reply %u torn", slot, i,
			    *seq);
}

/* Store a new reply for slot (the slot recorded again first). */
static void
put_reply(struct segment_fixture *f, const char *key, uint32_t slot, uint32_t seq)
{
	uint8_t	buf[SHM_RECEIPT_MAX_BYTES];
	size_t	length = reply_make(buf, slot, seq);

	assert_int_equal(commit_task(f, key), slot);
	if (receipts_put(&f->seg, slot, key, strlen(key),
	    &f->seg.slots[slot].entry, buf, length) != 0)
		fail_msg("receipts_put slot %u: %s", slot, strerror(errno));
}

/*
 * Twice round the store: the oldest reply is overwritten and its slot
 * gets none (and may store one again); the latest replies are intact.
 */
static void
test_receipts_wrap_and_forget_overwritten(void **state)
{
	struct segment_fixture	*f = *state;
	struct shm_header *h = f->seg.header;
	uint8_t		 got[SHM_RECEIPT_MAX_BYTES];
	uint32_t	 slots[RINGS_CAPACITY], last[RINGS_CAPACITY];
	uint32_t	 seq, i, seen;
	char		 key[32];
	size_t		 length;

	assert_int_equal(h->receipts_bytes, SHM_RECEIPT_STORE_MIN_BYTES);
	for (i = 0; i < RINGS_CAPACITY; i++) {
		snprintf(key, sizeof key, "r-%u", i);
		slots[i] = commit_task(f, key);
	}
	put_reply(f, "r-0", slots[0], 0);
	assert_int_equal(receipts_get(&f->seg, slots[0], got, &length), 1);
	reply_check(got, length, slots[0], &seen);
	assert_int_equal(seen, 0);
	for (seq = 1; atomic_load(&h->receipts_head) < 2 * h->receipts_bytes;
	    seq++) {
		i = 1 + seq % (RINGS_CAPACITY - 1);
		snprintf(key, sizeof key, "r-%u", i);
		put_reply(f, key, slots[i], seq);
		last[i] = seq;
		assert_true(receipts_used(&f->seg) <= h->receipts_bytes);
	}
	/* Overwritten: none, and room for a new one. */
	assert_int_equal(receipts_get(&f->seg, slots[0], got, &length), 0);
	assert_int_equal(receipts_put(&f->seg, slots[0], "r-0", 3,
	    &f->seg.slots[slots[0]].entry, "again", 5), 0);
	assert_int_equal(receipts_get(&f->seg, slots[0], got, &length), 1);
	assert_int_equal(length, 5);
	assert_memory_equal(got, "again", 5);
	/* The latest replies are there, each its slot's latest. */
	for (i = 1; i < RINGS_CAPACITY; i++) {
		if (receipts_get(&f->seg, slots[i], got, &length) == 0)
			continue;
		reply_check(got, length, slots[i], &seen);
		assert_int_equal(seen, last[i]);
	}
	for (seq -= 1, i = 0; i < 8; i++, seq--) {
		uint32_t j = 1 + seq % (RINGS_CAPACITY - 1);

		assert_int_equal(receipts_get(&f->seg, slots[j], got, &length),
		    1);
		reply_check(got, length, slots[j], &seen);
		assert_int_equal(seen, seq);
	}
}

/*
 * A slot names its reply by position / 8 modulo 2^32: across the wrap
 * of the names (and a lap's end), every reply is still found, and no
 * reply is named 0 (none).
 */
static void
test_receipts_names_wrap(void **state)
{
	struct segment_fixture	*f = *state;
	struct shm_header *h = f->seg.header;
	uint8_t		 got[SHM_RECEIPT_MAX_BYTES];
	uint32_t	 slots[3], i;
	char		 key[32], want[8];
	size_t		 length;

	atomic_store(&h->receipts_head, (1ULL << 35) - 64);
	atomic_store(&h->receipts_tail, (1ULL << 35) - 64);
	for (i = 0; i < 3; i++) {
		snprintf(key, sizeof key, "w-%u", i);
		slots[i] = commit_task(f, key);
		snprintf(want, sizeof want, "reply%u", i);
		assert_int_equal(receipts_put(&f->seg, slots[i], key,
		    strlen(key), &f->seg.slots[slots[i]].entry, want, 6), 0);
	}
	assert_int_equal(atomic_load(&f->seg.slots[slots[0]].fast_receipt),
	    UINT32_MAX - 7);
	/* The third crossed the lap's end, at a position named 0: moved. */
	assert_int_equal(atomic_load(&f->seg.slots[slots[2]].fast_receipt), 1);
	for (i = 0; i < 3; i++) {
		snprintf(want, sizeof want, "reply%u", i);
		assert_int_equal(receipts_get(&f->seg, slots[i], got, &length),
		    1);
		assert_int_equal(length, 6);
		assert_memory_equal(got, want, 6);
	}
}

/*
 * A writer process overwrites the store round and round while this one
 * reads every slot: each reply read is whole and its slot's, never torn.
 */
static void
test_receipts_never_torn_under_writer(void **state)
{
	struct segment_fixture	*f = *state;
	uint8_t		 got[SHM_RECEIPT_MAX_BYTES];
	uint32_t	 slots[RINGS_CAPACITY], seq, i;
	uint64_t	 found = 0, missed = 0;
	char		 key[32];
	size_t		 length;
	pid_t		 pid;
	int		 status;

	for (i = 0; i < RINGS_CAPACITY; i++) {
		snprintf(key, sizeof key, "t-%u", i);
		slots[i] = commit_task(f, key);
	}
	if ((pid = fork()) == 0) {
		for (seq = 0; seq < RINGS_STRESS_PUTS; seq++) {
			i = seq % RINGS_CAPACITY;
			snprintf(key, sizeof key, "t-%u", i);
			put_reply(f, key, slots[i], seq);
		}
		_exit(0);
	}
	assert_true(pid > 0);
	for (i = 0; waitpid(pid, &status, WNOHANG) == 0; i++) {
		uint32_t s = slots[i % RINGS_CAPACITY];

		if (receipts_get(&f->seg, s, got, &length) == 1) {
			reply_check(got, length, s, &seq);
			found++;
		} else
			missed++;
	}
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	print_message("%llu replies read whole, %llu gone or none\n",
	    (unsigned long long)found, (unsigned long long)missed);
	assert_true(found > 0);
	/* The store went round many times under the reader. */
	assert_true(atomic_load(&f->seg.header->receipts_head) >
	    4 * f->seg.header->receipts_bytes);
}

/* Commit key in its slot (a replay would) as e says; the slot. */
static uint32_t
apply_entry(struct segment_fixture *f, const char *key,
    const struct subtab_entry *e)
{
	uint32_t	slot;

	assert_int_equal(subtab_apply_slot(&f->seg, key, strlen(key),
	    subtab_prefetch(&f->seg, key, strlen(key)), e, &slot), 0);
	return slot;
}

/*
 * A reply is stored only against the entry it was built from.  Between
 * the fast path's look at the slot (unlocked) and receipts_put, the
 * entry may be evicted, and the same key committed anew in the same slot
 * (an effect purged and begun again, another attempt, its result
 * elsewhere in the arena; a task number reserved again): the old reply
 * is refused, the new entry's is stored.  A table of one slot makes the
 * new key take the evicted slot.
 */
static void
test_receipts_only_for_the_entry_built_from(void **state)
{
	struct segment_fixture	*f = *state;
	struct subtab_entry	 fx, task, other, built;
	uint8_t			 got[SHM_RECEIPT_MAX_BYTES];
	uint32_t		 slot;
	size_t			 length;
	const char		 key[] = "kind\x1fid";

	memset(&fx, 0, sizeof fx);
	fx.kind = SUBTAB_KIND_EFFECT;
	fx.state = SUBTAB_COMMITTED;
	fx.schema = SUBTAB_SCHEMA_GENERIC_JSON_V1;
	fx.attempt = 1;
	fx.result_offset = 64;
	fx.result_length = 5;
	fx.created_at_ms = 1000;
	memset(fx.request_digest, 1, sizeof fx.request_digest);
	slot = apply_entry(f, key, &fx);
	built = f->seg.slots[slot].entry;	/* the fast path's look */

	/* The gap: evicted for another key, then begun again and committed. */
	memset(&other, 0, sizeof other);
	other.kind = SUBTAB_KIND_TASK;
	other.state = SUBTAB_COMMITTED;
	other.schema = SUBTAB_SCHEMA_WRITE_TASK_V1;
	other.date = 20261205;
	other.seq = 1;
	subtab_mark_all_indexed(&f->seg);
	assert_int_equal(apply_entry(f, "other", &other), slot);
	subtab_mark_all_indexed(&f->seg);
	fx.attempt = 2;
	fx.result_offset = 4160;
	assert_int_equal(apply_entry(f, key, &fx), slot);
	assert_int_equal(atomic_load(&f->seg.header->evictions), 2);

	/* The old entry's reply: refused, nothing named. */
	assert_int_equal(receipts_put(&f->seg, slot, key, strlen(key), &built,
	    "old", 3), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(receipts_get(&f->seg, slot, got, &length), 0);
	/* Either alone tells them apart: the offset, then the attempt. */
	built.attempt = 2;
	assert_int_equal(receipts_put(&f->seg, slot, key, strlen(key), &built,
	    "old", 3), -1);
	assert_int_equal(errno, EINVAL);
	built.attempt = 1;
	built.result_offset = 4160;
	assert_int_equal(receipts_put(&f->seg, slot, key, strlen(key), &built,
	    "old", 3), -1);
	assert_int_equal(errno, EINVAL);
	/* The new entry's reply is stored. */
	assert_int_equal(receipts_put(&f->seg, slot, key, strlen(key), &fx,
	    "new", 3), 0);
	assert_int_equal(receipts_get(&f->seg, slot, got, &length), 1);
	assert_int_equal(length, 3);
	assert_memory_equal(got, "new", 3);

	/* A task: the same key reserved again under another number. */
	memset(&task, 0, sizeof task);
	task.kind = SUBTAB_KIND_TASK;
	task.state = SUBTAB_COMMITTED;
	task.schema = SUBTAB_SCHEMA_WRITE_TASK_V1;
	task.date = 20261205;
	task.seq = 2;
	subtab_mark_all_indexed(&f->seg);
	assert_int_equal(apply_entry(f, "sub-1", &task), slot);
	built = f->seg.slots[slot].entry;
	task.seq = 3;
	assert_int_equal(apply_entry(f, "sub-1", &task), slot);
	assert_int_equal(receipts_put(&f->seg, slot, "sub-1", 5, &built,
	    "old", 3), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(receipts_put(&f->seg, slot, "sub-1", 5, &task,
	    "new", 3), 0);
}

/* ---- The result arena ---------------------------------------------------- */

static uint32_t
effect_entry(struct segment_fixture *f, const char *key, enum subtab_state state,
    uint64_t offset, uint32_t length)
{
	struct subtab_entry	e;
	uint32_t		slot;

	memset(&e, 0, sizeof e);
	e.kind = SUBTAB_KIND_EFFECT;
	e.state = state;
	e.schema = SUBTAB_SCHEMA_GENERIC_JSON_V1;
	e.attempt = 1;
	e.result_offset = offset;
	e.result_length = length;
	assert_int_equal(subtab_apply_slot(&f->seg, key, strlen(key),
	    subtab_prefetch(&f->seg, key, strlen(key)), &e, &slot), 0);
	return slot;
}

static void
result_make(uint8_t *buf, int i)
{
	memset(buf, 'a' + i % 26, RINGS_RESULT_BYTES);
	memcpy(buf, &i, sizeof i);
}

/*
 * Commit effect i: reserved (its slot), its result put, committed naming
 * it.  0, or -1 with errno from arena_put.
 */
static int
commit_effect(struct segment_fixture *f, int i, uint32_t *slot, uint64_t *offset)
{
	uint8_t	result[RINGS_RESULT_BYTES];
	char	key[32];

	snprintf(key, sizeof key, "fx%c%d", SUBTAB_EFFECT_SEPARATOR, i);
	*slot = effect_entry(f, key, SUBTAB_RESERVED, 0, 0);
	result_make(result, i);
	if (arena_put(&f->seg, *slot, result, sizeof result, offset) != 0)
		return -1;
	assert_int_equal(effect_entry(f, key, SUBTAB_COMMITTED, *offset,
	    RINGS_RESULT_BYTES), *slot);
	return 0;
}

static void
assert_result(struct segment_fixture *f, int i, uint64_t offset, int present)
{
	uint8_t	want[RINGS_RESULT_BYTES], got[RINGS_RESULT_BYTES];

	result_make(want, i);
	/* arena_holds (the fast path's) says what arena_read finds. */
	if (!present) {
		assert_int_equal(arena_holds(&f->seg, offset, sizeof got), -1);
		assert_int_equal(arena_read(&f->seg, offset, sizeof got, got),
		    -1);
		return;
	}
	assert_int_equal(arena_holds(&f->seg, offset, sizeof got), 0);
	/* Not a record of another length, nor one somewhere else. */
	assert_int_equal(arena_holds(&f->seg, offset, sizeof got - 8), -1);
	assert_int_equal(arena_holds(&f->seg, offset + 8, sizeof got), -1);
	assert_int_equal(arena_read(&f->seg, offset, sizeof got, got), 0);
	assert_memory_equal(got, want, sizeof got);
}

/*
 * Results not yet indexed are never overwritten: a full arena refuses
 * (ENOSPC) and asks for a checkpoint, which the scout asked for already
 * half an arena earlier; once indexed, the oldest are reused and their
 * reads say they are gone.
 */
static void
test_arena_reuses_only_indexed(void **state)
{
	struct segment_fixture	*f = *state;
	struct shm_header *h = f->seg.header;
	uint64_t	 offsets[64];
	uint32_t	 slots[64];
	uint8_t		 big[RINGS_ARENA_BYTES];
	int		 i, n;

	assert_int_equal(h->arena_bytes, RINGS_ARENA_BYTES);
	for (n = 0; n < 64; n++) {
		if (commit_effect(f, n, &slots[n], &offsets[n]) != 0)
			break;
		if (n == 4)
			assert_int_equal(atomic_load(&h->checkpoint_wanted), 0);
		if (n == 12)
			assert_int_equal(atomic_load(&h->checkpoint_wanted), 1);
	}
	assert_int_equal(errno, ENOSPC);
	assert_int_equal(n, RINGS_ARENA_BYTES / (16 + RINGS_RESULT_BYTES));
	assert_int_equal(atomic_load(&h->checkpoint_wanted), 1);
	for (i = 0; i < n; i++)
		assert_result(f, i, offsets[i], 1);
	/* Too large for the arena at all: never. */
	memset(big, 'x', sizeof big);
	assert_int_equal(arena_put(&f->seg, slots[0], big, sizeof big,
	    &offsets[63]), -1);
	assert_int_equal(errno, EINVAL);

	/* The first five become durable in the index. */
	subtab_mark_indexed(&f->seg, slots, 5);
	for (i = n; i < n + 5; i++)
		assert_int_equal(commit_effect(f, i, &slots[i], &offsets[i]),
		    0);
	for (i = 0; i < 5; i++)
		assert_result(f, i, offsets[i], 0);
	for (i = 5; i < n + 5; i++)
		assert_result(f, i, offsets[i], 1);
	/* The sixth is not indexed: the next refuses again. */
	assert_int_equal(commit_effect(f, n + 5, &slots[n + 5],
	    &offsets[n + 5]), -1);
	assert_int_equal(errno, ENOSPC);
	assert_result(f, 5, offsets[5], 1);
	assert_true(arena_used(&f->seg) <= h->arena_bytes);
}

/*
 * While a checkpoint runs the scout asks for none: the results it would
 * pass are in the copy under way (a second checkpoint right after would
 * copy the whole table again for the few commits made meanwhile).  Once
 * it is done the scout walks on from where it stopped, passing what that
 * checkpoint indexed and asking for what it did not.
 */
static void
test_arena_scout_waits_for_running_checkpoint(void **state)
{
	struct segment_fixture	*f = *state;
	struct shm_header *h = f->seg.header;
	uint64_t	 offsets[64];
	uint32_t	 slots[64];
	int		 i;

	for (i = 0; i < 4; i++)
		assert_int_equal(commit_effect(f, i, &slots[i], &offsets[i]),
		    0);
	atomic_store(&h->checkpoint_running, 1);
	/* Without the wait, the scout asked by the thirteenth. */
	for (i = 4; i < 13; i++)
		assert_int_equal(commit_effect(f, i, &slots[i], &offsets[i]),
		    0);
	assert_int_equal(atomic_load(&h->checkpoint_wanted), 0);
	/* It indexed those thirteen. */
	subtab_mark_indexed(&f->seg, slots, 13);
	atomic_store(&h->checkpoint_running, 0);
	assert_int_equal(commit_effect(f, 13, &slots[13], &offsets[13]), 0);
	assert_int_equal(atomic_load(&h->checkpoint_wanted), 0);
	/* Those after it are not indexed: asked for, half an arena ahead. */
	for (i = 14; i < 28; i++)
		assert_int_equal(commit_effect(f, i, &slots[i], &offsets[i]),
		    0);
	assert_int_equal(atomic_load(&h->checkpoint_wanted), 1);
}

/*
 * A result put by a request that holds the slot's claim and has not
 * recorded its commit yet is spared; once the claim is gone (released,
 * or its worker dead) and no slot names it, its space is reused.
 */
static void
test_arena_spares_commit_in_flight(void **state)
{
	struct segment_fixture		*f = *state;
	struct subtab_acquire	 a;
	uint8_t			 result[RINGS_RESULT_BYTES];
	uint64_t		 offset, other;
	uint32_t		 slot;
	int			 i;

	memset(&a, 0, sizeof a);
	a.key = "fx\x1f" "inflight";
	a.key_length = strlen(a.key);
	a.want.kind = SUBTAB_KIND_EFFECT;
	a.want.schema = SUBTAB_SCHEMA_GENERIC_JSON_V1;
	a.index_checked = 1;
	a.claim.worker = 1;
	a.claim.generation = registry_start(&f->seg, 0);
	a.claim.token = 1;
	assert_int_equal(subtab_acquire(&f->seg, &a), SUBTAB_INSERTED);
	result_make(result, 1000);
	assert_int_equal(arena_put(&f->seg, a.slot, result, sizeof result,
	    &offset), 0);
	/* Others, each indexed at once: reusable, all but the first. */
	for (i = 0;; i++) {
		if (commit_effect(f, i, &slot, &other) != 0)
			break;
		subtab_mark_indexed(&f->seg, &slot, 1);
		assert_true(i < 64);
	}
	assert_int_equal(errno, ENOSPC);
	assert_result(f, 1000, offset, 1);
	assert_int_equal(subtab_release(&f->seg, a.slot, &a.claim), 0);
	assert_int_equal(commit_effect(f, i, &slot, &other), 0);
	assert_result(f, 1000, offset, 0);
}

/*
 * Issue 27, item 3: a completion is never refused for a claim it holds
 * itself.  The oldest result in the arena is that of an effect whose
 * slot was evicted and given to a new key; the completion of the new
 * key, claiming the slot, reclaims those bytes (no slot names them, and
 * its own claim is no commit in flight), where it used to be refused
 * until it gave its claim up.  Another slot's put is still refused
 * meanwhile: to it, the claimed slot's bytes may be a commit in flight.
 */
static void
test_arena_own_claim_never_blocks(void **state)
{
	struct segment_fixture		*f = *state;
	struct shm_header	*h = f->seg.header;
	struct subtab_acquire	 a;
	uint8_t			 result[RINGS_RESULT_BYTES];
	uint64_t		 offsets[32], offset;
	uint32_t		 slots[32];
	int			 i, n;

	/* fx-0..3 fill the four slots, each indexed at once. */
	for (i = 0; i < 4; i++) {
		assert_int_equal(commit_effect(f, i, &slots[i], &offsets[i]),
		    0);
		subtab_mark_indexed(&f->seg, &slots[i], 1);
	}
	/* A new key evicts fx-0 and takes its slot. */
	memset(&a, 0, sizeof a);
	a.key = "fx\x1f" "new";
	a.key_length = strlen(a.key);
	a.want.kind = SUBTAB_KIND_EFFECT;
	a.want.schema = SUBTAB_SCHEMA_GENERIC_JSON_V1;
	a.index_checked = 1;
	a.evictions = atomic_load(&h->evictions);
	a.claim.worker = 1;
	a.claim.generation = registry_start(&f->seg, 0);
	a.claim.token = 1;
	assert_int_equal(subtab_acquire(&f->seg, &a), SUBTAB_INSERTED);
	assert_int_equal(a.slot, slots[0]);
	/* Others fill the arena, until fx-0's bytes are the ones to go. */
	for (n = 4; n < 32; n++) {
		if (commit_effect(f, n, &slots[n], &offsets[n]) != 0)
			break;
		subtab_mark_indexed(&f->seg, &slots[n], 1);
	}
	assert_true(n < 32);
	assert_int_equal(errno, ENOSPC);
	assert_result(f, 0, offsets[0], 1);
	/* The claimer of fx-0's old slot puts: its own claim is no bar. */
	result_make(result, 1000);
	if (arena_put(&f->seg, a.slot, result, sizeof result, &offset) != 0)
		fail_msg("the new key's own put: %s", strerror(errno));
	assert_result(f, 0, offsets[0], 0);
	assert_result(f, 1000, offset, 1);
}

static int
setup_four_slots(void **state)
{
	return unit_segment_setup(state, "rings", 4, RINGS_ARENA_BYTES);
}

/*
 * ring_store and ring_load (a record's bytes, word by word, four at a
 * turn) give back every length from 0 to 200 bytes at every word of
 * a ring, and ring_load writes nothing past the length it was given.
 */
static void
test_ring_words_every_length(void **state)
{
	uint64_t	ring[64];
	uint8_t		in[256], out[256];
	size_t		n, at, i;

	(void)state;
	for (i = 0; i < sizeof in; i++)
		in[i] = (uint8_t)(i * 7 + 3);
	for (at = 0; at + 200 <= sizeof ring; at += 8) {
		for (n = 0; n <= 200; n++) {
			memset(ring, 0xee, sizeof ring);
			memset(out, 0x55, sizeof out);
			ring_store((uint8_t *)ring, at, in, n);
			ring_load((const uint8_t *)ring, at, out, n);
			assert_memory_equal(out, in, n);
			for (i = n; i < sizeof out; i++)
				assert_int_equal(out[i], 0x55);
		}
	}
}

/* The figure: --capacity 1000000 under 300 MB of segment. */
static void
test_segment_size(void **state)
{
	size_t	bytes = shm_bytes_for_capacity(1000000);

	(void)state;
	print_message("segment at --capacity 1000000: %zu bytes\n", bytes);
	assert_true(bytes < 300000000);
	assert_int_equal(shm_arena_bytes_for_capacity(1000000), 8000000);
	assert_int_equal(shm_receipts_bytes_for_capacity(1000000), 8000000);
	assert_int_equal(shm_arena_bytes_for_capacity(16),
	    SHM_ARENA_MIN_BYTES);
	assert_int_equal(shm_receipts_bytes_for_capacity(16),
	    SHM_RECEIPT_STORE_MIN_BYTES);
	assert_int_equal(shm_arena_bytes_for_capacity(SHM_MAX_CAPACITY),
	    SHM_ARENA_MAX_BYTES);
}

/*
 * A record the tail has passed is gone even where its bytes are still
 * there: one left before a lap's pad, when the next record goes to the
 * following lap's start and the tail jumps over it.  Records in bytes
 * of the smallest arena (65552): A [0, 40000), X [40000, 56000), a pad;
 * B at the next lap's start [0, 32000) passes only A; C, too large for
 * the rest of that lap, goes to the lap after, and the tail passes X,
 * the pad and B while C overwrites only [0, 36000).  X's bytes are
 * intact, yet arena_holds and arena_read must refuse them.
 */
static void
test_arena_holds_refuses_passed_record(void **state)
{
	struct segment_fixture	*f = *state;
	struct shm_header	*h = f->seg.header;
	static uint8_t		 buf[40000];
	uint64_t		 a, x, b, c;

	assert_int_equal(h->arena_bytes, 65552);
	memset(buf, 'x', sizeof buf);
	/* No slot names them: each is reclaimable once passed. */
	assert_int_equal(arena_put(&f->seg, ARENA_NO_SLOT, buf, 40000 - 16,
	    &a), 0);
	assert_int_equal(arena_put(&f->seg, ARENA_NO_SLOT, buf, 16000 - 16,
	    &x), 0);
	assert_int_equal(x, 40000 + 16);
	assert_int_equal(arena_put(&f->seg, ARENA_NO_SLOT, buf, 32000 - 16,
	    &b), 0);
	assert_int_equal(b, 65552 + 16);
	assert_int_equal(atomic_load(&h->arena_tail), 40000);
	assert_int_equal(arena_holds(&f->seg, a, 40000 - 16), -1);
	assert_int_equal(arena_holds(&f->seg, x, 16000 - 16), 0);

	assert_int_equal(arena_put(&f->seg, ARENA_NO_SLOT, buf, 36000 - 16,
	    &c), 0);
	assert_int_equal(c, 2 * 65552 + 16);
	assert_true(atomic_load(&h->arena_tail) > x);
	/* X's bytes are untouched (C ends at 36000, the pad is at 32000)... */
	assert_memory_equal(f->seg.arena + 40000 + 16, buf, 16000 - 16);
	/* ...but the tail is past them: no read may trust them. */
	assert_int_equal(arena_holds(&f->seg, x, 16000 - 16), -1);
	assert_int_equal(arena_read(&f->seg, x, 16000 - 16, buf), -1);
	assert_int_equal(arena_holds(&f->seg, b, 32000 - 16), -1);
	assert_int_equal(arena_holds(&f->seg, c, 36000 - 16), 0);
}

/*
 * An arena smaller than one record of the largest result is refused,
 * naming the least (issue 27: 64 bytes were taken, then a 42-byte
 * result refused for ever).
 */
static void
test_arena_least(void **state)
{
	struct shm_segment	 seg;
	char			*cause = NULL;

	(void)state;
	assert_int_equal(SHM_ARENA_LEAST_BYTES, 65552);
	assert_int_equal(shm_create_sized("/nonexistent/idem-rings-least", 4,
	    SHM_ARENA_LEAST_BYTES - 8, &seg, &cause), -1);
	assert_non_null(cause);
	assert_non_null(strstr(cause, "at least 65552"));
	free(cause);
	cause = NULL;
	assert_int_equal(shm_create_sized("/nonexistent/idem-rings-least", 4,
	    64, &seg, &cause), -1);
	free(cause);
}

/*
 * A cached result (the PostgreSQL store's: arena_put_cached, owned by no
 * slot) never makes the arena refuse and never asks for an index pass:
 * three arenas' worth are put, each readable right after its put, each
 * gone (never torn) once a lap of later ones passed it.  With arena_put
 * and committed slots not yet indexed the put after the first lap is
 * refused (test_arena_reuses_only_indexed).
 */
static void
test_arena_cached_reclaimable_at_once(void **state)
{
	struct segment_fixture	*f = *state;
	struct shm_header	*h = f->seg.header;
	uint8_t			 result[RINGS_RESULT_BYTES];
	uint8_t			 big[RINGS_ARENA_BYTES];
	uint64_t		 offsets[3 * RINGS_ARENA_BYTES /
				    (16 + RINGS_RESULT_BYTES)];
	size_t			 i, n = sizeof offsets / sizeof offsets[0];
	size_t			 per_lap = RINGS_ARENA_BYTES /
				    (16 + RINGS_RESULT_BYTES);

	for (i = 0; i < n; i++) {
		result_make(result, (int)i);
		assert_int_equal(arena_put_cached(&f->seg, result,
		    sizeof result, &offsets[i]), 0);
		assert_result(f, (int)i, offsets[i], 1);
		if (i >= per_lap)
			assert_result(f, (int)(i - per_lap), offsets[i - per_lap],
			    0);
	}
	assert_int_equal(atomic_load(&h->checkpoint_wanted), 0);
	/* Too large for the arena at all: never, as arena_put. */
	memset(big, 'x', sizeof big);
	assert_int_equal(arena_put_cached(&f->seg, big, sizeof big,
	    &offsets[0]), -1);
	assert_int_equal(errno, EINVAL);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_arena_cached_reclaimable_at_once, setup_small_arena,
		    unit_segment_teardown),
		cmocka_unit_test_setup_teardown(
		    test_receipts_wrap_and_forget_overwritten, setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(test_receipts_names_wrap,
		    setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(
		    test_receipts_never_torn_under_writer, setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(
		    test_receipts_only_for_the_entry_built_from, setup_one_slot,
		    unit_segment_teardown),
		cmocka_unit_test_setup_teardown(test_arena_reuses_only_indexed,
		    setup_small_arena, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(
		    test_arena_scout_waits_for_running_checkpoint,
		    setup_small_arena, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(
		    test_arena_spares_commit_in_flight, setup_small_arena,
		    unit_segment_teardown),
		cmocka_unit_test_setup_teardown(
		    test_arena_own_claim_never_blocks, setup_four_slots,
		    unit_segment_teardown),
		cmocka_unit_test_setup_teardown(
		    test_arena_holds_refuses_passed_record, setup_small_arena,
		    unit_segment_teardown),
		cmocka_unit_test(test_ring_words_every_length),
		cmocka_unit_test(test_segment_size),
		cmocka_unit_test(test_arena_least),
	};

	return FILTER_RUN(tests);
}
