/* SPDX-License-Identifier: ISC */
/*
 * test_subtab.c: the shared-memory segment: table reserve, lookup, claims
 * and full; a process that dies holding a lock (and one that dies in the
 * middle of an insert) leaves the table usable and correct; numbers are
 * never handed out twice; the journal hand-off ring; the table mapped
 * ahead of a replay changes nothing a replay writes.
 */
#include <sys/mman.h>
#include <sys/wait.h>

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "integration/filter.h"
#include "segment.h"

static int
setup(void **state)
{
	return unit_segment_setup(state, "subtab", 64, 0);
}

static int
setup_tiny(void **state)
{
	return unit_segment_setup(state, "subtab", 3, 0);
}

static int
setup_one(void **state)
{
	return unit_segment_setup(state, "subtab", 1, 0);
}

/* Slots and keys of several of the prefault's strides. */
static int
setup_large(void **state)
{
	return unit_segment_setup(state, "subtab", 40000, 0);
}

static struct subtab_acquire
request(const char *key, uint8_t digest_byte, uint32_t worker,
    uint32_t generation, uint32_t token)
{
	struct subtab_acquire	a;

	memset(&a, 0, sizeof a);
	a.key = key;
	a.key_length = strlen(key);
	a.want.kind = SUBTAB_KIND_TASK;
	a.want.schema = SUBTAB_SCHEMA_WRITE_TASK_V1;
	memset(a.want.request_digest, digest_byte, SHM_SHA256_BYTES);
	memcpy(a.want.sender, "PM", 2);
	a.want.sender_length = 2;
	memcpy(a.want.recipient, "DEV", 3);
	a.want.recipient_length = 3;
	a.claim.worker = worker;
	a.claim.generation = generation;
	a.claim.token = token;
	a.today = 20261202;
	a.index_checked = 1;	/* no index here: a miss inserts */
	return a;
}

static uint32_t
start_worker(struct segment_fixture *f, unsigned index)
{
	return registry_start(&f->seg, index);
}

static void
test_reserve_then_lookup(void **state)
{
	struct segment_fixture		*f = *state;
	uint32_t		 gen = start_worker(f, 0);
	struct subtab_acquire	 a = request("run-42/step-3", 7, 1, gen, 1);
	struct subtab_entry	 e;
	uint32_t		 slot;
	char			 key[64];

	assert_int_equal(subtab_acquire(&f->seg, &a), SUBTAB_INSERTED);
	assert_int_equal(a.found.state, SUBTAB_RESERVED);
	assert_int_equal(a.found.date, 20261202);
	assert_int_equal(a.found.seq, 1);
	assert_int_equal(subtab_lookup(&f->seg, "run-42/step-3", 13, &e,
	    &slot), 1);
	assert_int_equal(slot, a.slot);
	assert_int_equal(e.seq, 1);
	assert_int_equal(subtab_key(&f->seg, slot, key, sizeof key), 13);
	assert_string_equal(key, "run-42/step-3");
	assert_int_equal(subtab_lookup(&f->seg, "run-42/step-4", 13, &e,
	    NULL), 0);
	assert_int_equal(f->seg.header->state_counts[SUBTAB_RESERVED], 1);
}

static void
test_claim_excludes_others_until_released(void **state)
{
	struct segment_fixture		*f = *state;
	uint32_t		 g0 = start_worker(f, 0), g1 = start_worker(f, 1);
	struct subtab_acquire	 first = request("id-1", 1, 1, g0, 1);
	struct subtab_acquire	 second = request("id-1", 1, 2, g1, 1);
	struct subtab_acquire	 third = request("id-1", 1, 2, g1, 2);
	struct subtab_entry	 done;
	uint64_t		 end;

	assert_int_equal(subtab_acquire(&f->seg, &first), SUBTAB_INSERTED);
	/* Not in the journal until its claimer records it. */
	assert_true(f->seg.slots[first.slot].journal_end ==
	    SUBTAB_NOT_JOURNALED);
	/* A live claim makes even a matching request wait. */
	assert_int_equal(subtab_acquire(&f->seg, &second), SUBTAB_BUSY);
	assert_int_equal(atomic_load(&f->seg.slots[first.slot].waiters), 1);

	done = first.found;
	done.state = SUBTAB_COMMITTED;
	/* The new state goes to the ring and the slot in one step. */
	assert_int_equal(subtab_record(&f->seg, first.slot, &first.claim,
	    &done, "record", 6, &end), 0);
	assert_int_equal(end, f->seg.header->ring_head);
	assert_int_equal(f->seg.slots[first.slot].journal_end, end);
	/* Only the claimer may record, and nothing is appended then. */
	assert_int_equal(subtab_record(&f->seg, first.slot, &second.claim,
	    &done, "record", 6, &end), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(f->seg.header->ring_head, 6);
	assert_int_equal(subtab_release(&f->seg, first.slot, &first.claim), 1);
	assert_int_equal(subtab_acquire(&f->seg, &third), SUBTAB_DONE);
	assert_int_equal(third.found.seq, first.found.seq);
	assert_int_equal(f->seg.header->state_counts[SUBTAB_COMMITTED], 1);
	assert_int_equal(f->seg.header->state_counts[SUBTAB_RESERVED], 0);
}

static void
test_mismatch_and_dead_claim(void **state)
{
	struct segment_fixture		*f = *state;
	uint32_t		 g0 = start_worker(f, 0), g1 = start_worker(f, 1);
	struct subtab_acquire	 first = request("id-2", 1, 1, g0, 1);
	struct subtab_acquire	 other = request("id-2", 9, 2, g1, 1);
	struct subtab_acquire	 retry = request("id-2", 1, 2, g1, 2);

	assert_int_equal(subtab_acquire(&f->seg, &first), SUBTAB_INSERTED);
	/* Worker 0 dies: its claim lapses with its generation. */
	registry_exit(&f->seg, 0);
	assert_int_equal(subtab_acquire(&f->seg, &other), SUBTAB_MISMATCH);
	assert_int_equal(subtab_acquire(&f->seg, &retry), SUBTAB_CLAIMED);
	assert_int_equal(retry.found.state, SUBTAB_RESERVED);
	assert_int_equal(retry.found.seq, first.found.seq);
}

static void
test_full_loses_nothing(void **state)
{
	struct segment_fixture		*f = *state;
	uint32_t		 gen = start_worker(f, 0);
	struct subtab_acquire	 a;
	struct subtab_entry	 e;
	char			 key[16];
	int			 i;

	for (i = 0; i < 3; i++) {
		snprintf(key, sizeof key, "k%d", i);
		a = request(key, 1, 1, gen, (uint32_t)i + 1);
		assert_int_equal(subtab_acquire(&f->seg, &a), SUBTAB_INSERTED);
	}
	a = request("k3", 1, 1, gen, 9);
	assert_int_equal(subtab_acquire(&f->seg, &a), SUBTAB_FULL);
	for (i = 0; i < 3; i++) {
		snprintf(key, sizeof key, "k%d", i);
		assert_int_equal(subtab_lookup(&f->seg, key, strlen(key), &e,
		    NULL), 1);
		assert_int_equal(e.seq, (uint32_t)i + 1);
	}
	/* The failed insert took no number. */
	assert_int_equal(f->seg.header->alloc[0].next_seq, 4);
}

/*
 * The table as a cache: a committed slot is evicted for a new key only
 * once it is marked indexed, never one in flight; the evicted key is
 * gone from the table (the index answers for it), every other key is
 * still found (the bucket removal broke no probe chain), and an
 * acquire that checked the index before an eviction is sent back to it.
 */
static void
test_eviction_only_of_indexed_committed(void **state)
{
	struct segment_fixture		*f = *state;
	uint32_t		 gen = start_worker(f, 0);
	struct subtab_acquire	 a, stale;
	struct subtab_entry	 e;
	uint32_t		 slots[3];
	char			 key[16];
	int			 i, found;

	/* Three slots: k0 committed, k1 committed, k2 reserved. */
	for (i = 0; i < 3; i++) {
		snprintf(key, sizeof key, "k%d", i);
		a = request(key, 1, 1, gen, (uint32_t)i + 1);
		assert_int_equal(subtab_acquire(&f->seg, &a), SUBTAB_INSERTED);
		slots[i] = a.slot;
		e = a.found;
		e.state = i < 2 ? SUBTAB_COMMITTED : SUBTAB_RESERVED;
		assert_int_equal(subtab_record(&f->seg, a.slot, &a.claim, &e,
		    "r", 1, &(uint64_t){ 0 }), 0);
		subtab_release(&f->seg, a.slot, &a.claim);
	}
	/* Nothing indexed: full, and a checkpoint is asked for. */
	stale = request("k3", 1, 1, gen, 9);
	assert_int_equal(subtab_acquire(&f->seg, &stale), SUBTAB_FULL);
	assert_int_equal(f->seg.header->checkpoint_wanted, 1);
	assert_int_equal(subtab_unindexed(&f->seg), 2);
	/* The reserved slot is never marked, whatever the caller asks. */
	subtab_mark_indexed(&f->seg, slots, 3);
	assert_int_equal(f->seg.header->indexed_count, 2);
	assert_int_equal(subtab_unindexed(&f->seg), 0);

	a = request("k3", 1, 1, gen, 10);
	a.evictions = atomic_load(&f->seg.header->evictions);
	assert_int_equal(subtab_acquire(&f->seg, &a), SUBTAB_INSERTED);
	assert_int_equal(atomic_load(&f->seg.header->evictions), 1);
	assert_int_equal(f->seg.header->slots_used, 3);
	assert_true(a.slot == slots[0] || a.slot == slots[1]);
	/* Exactly one of k0, k1 left; k2 (in flight) and k3 are there. */
	found = subtab_lookup(&f->seg, "k0", 2, &e, NULL) +
	    subtab_lookup(&f->seg, "k1", 2, &e, NULL);
	assert_int_equal(found, 1);
	assert_int_equal(subtab_lookup(&f->seg, "k2", 2, &e, NULL), 1);
	assert_int_equal(e.state, SUBTAB_RESERVED);
	assert_int_equal(subtab_lookup(&f->seg, "k3", 2, &e, NULL), 1);
	assert_int_equal(e.state, SUBTAB_RESERVED);

	/* Checked the index before that eviction: look again. */
	stale = request("k4", 1, 1, gen, 11);
	stale.evictions = 0;
	assert_int_equal(subtab_acquire(&f->seg, &stale), SUBTAB_NOT_HERE);
	/* Never checked: look first. */
	stale.index_checked = 0;
	stale.evictions = atomic_load(&f->seg.header->evictions);
	assert_int_equal(subtab_acquire(&f->seg, &stale), SUBTAB_NOT_HERE);
	/* The last indexed one goes for k4; then only in-flight remain. */
	stale.index_checked = 1;
	assert_int_equal(subtab_acquire(&f->seg, &stale), SUBTAB_INSERTED);
	assert_int_equal(subtab_lookup(&f->seg, "k0", 2, &e, NULL) +
	    subtab_lookup(&f->seg, "k1", 2, &e, NULL), 0);
	a = request("k5", 1, 1, gen, 12);
	a.evictions = atomic_load(&f->seg.header->evictions);
	assert_int_equal(subtab_acquire(&f->seg, &a), SUBTAB_FULL);
	assert_int_equal(f->seg.header->state_counts[SUBTAB_RESERVED], 3);
	assert_int_equal(f->seg.header->state_counts[SUBTAB_COMMITTED], 0);
}

/* Replay with a table smaller than the history: apply evicts too. */
static void
test_apply_evicts_indexed(void **state)
{
	struct segment_fixture		*f = *state;
	struct subtab_entry	 e, got;
	char			 key[16];
	int			 i, present = 0;

	memset(&e, 0, sizeof e);
	e.kind = SUBTAB_KIND_TASK;
	e.state = SUBTAB_COMMITTED;
	e.date = 20261202;
	for (i = 0; i < 3; i++) {
		snprintf(key, sizeof key, "old-%d", i);
		e.seq = (uint32_t)i + 1;
		assert_int_equal(subtab_apply(&f->seg, key, strlen(key), &e),
		    0);
	}
	e.seq = 10;
	errno = 0;
	assert_int_equal(subtab_apply(&f->seg, "new-0", 5, &e), -1);
	assert_int_equal(errno, ENOSPC);
	subtab_mark_all_indexed(&f->seg);
	for (i = 0; i < 3; i++) {
		snprintf(key, sizeof key, "new-%d", i);
		e.seq = (uint32_t)i + 10;
		assert_int_equal(subtab_apply(&f->seg, key, strlen(key), &e),
		    0);
	}
	for (i = 0; i < 3; i++) {
		snprintf(key, sizeof key, "new-%d", i);
		assert_int_equal(subtab_lookup(&f->seg, key, strlen(key), &got,
		    NULL), 1);
		assert_int_equal(got.seq, (uint32_t)i + 10);
		snprintf(key, sizeof key, "old-%d", i);
		present += subtab_lookup(&f->seg, key, strlen(key), &got, NULL);
	}
	assert_int_equal(present, 0);
	assert_int_equal(atomic_load(&f->seg.header->evictions), 3);
	/* A repair recounts what an eviction keeps in the header. */
	assert_int_equal(subtab_repair(&f->seg), 0);
	assert_int_equal(f->seg.header->indexed_count, 0);
	assert_int_equal(f->seg.header->free_count, 0);
	assert_int_equal(f->seg.header->state_counts[SUBTAB_COMMITTED], 3);
}

/*
 * Replay's path: the hash subtab_prefetch returns, given to
 * subtab_apply_hashed, files an entry where every lookup finds it, and
 * a second apply of the same key overwrites it, as subtab_apply does.
 */
static void
test_apply_hashed_as_apply(void **state)
{
	struct segment_fixture		*f = *state;
	struct subtab_entry	 e, got;
	char			 key[16];
	uint32_t		 hash;
	int			 i;

	memset(&e, 0, sizeof e);
	e.kind = SUBTAB_KIND_TASK;
	e.state = SUBTAB_RESERVED;
	e.date = 20261202;
	for (i = 0; i < 40; i++) {
		snprintf(key, sizeof key, "replay-%d", i);
		e.seq = (uint32_t)i + 1;
		hash = subtab_prefetch(&f->seg, key, strlen(key));
		if (i % 2 == 0)
			assert_int_equal(subtab_apply_hashed(&f->seg, key,
			    strlen(key), hash, &e), 0);
		else
			assert_int_equal(subtab_apply(&f->seg, key,
			    strlen(key), &e), 0);
	}
	e.state = SUBTAB_COMMITTED;
	e.seq = 99;
	hash = subtab_prefetch(&f->seg, "replay-7", 8);
	assert_int_equal(subtab_apply_hashed(&f->seg, "replay-7", 8, hash,
	    &e), 0);
	assert_int_equal(f->seg.header->slots_used, 40);
	for (i = 0; i < 40; i++) {
		snprintf(key, sizeof key, "replay-%d", i);
		assert_int_equal(subtab_lookup(&f->seg, key, strlen(key), &got,
		    NULL), 1);
		assert_int_equal(got.seq, i == 7 ? 99 : (uint32_t)i + 1);
		assert_int_equal(got.state, i == 7 ? SUBTAB_COMMITTED :
		    SUBTAB_RESERVED);
	}
}

static void
test_owner_death_under_lock(void **state)
{
	struct segment_fixture		*f = *state;
	uint32_t		 gen = start_worker(f, 0);
	struct subtab_acquire	 a = request("after-death", 3, 1, gen, 1);
	struct subtab_entry	 e;
	pid_t			 pid;
	int			 status;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		pthread_mutex_lock(&f->seg.header->table_lock.mutex);
		_exit(0);	/* dies holding the table lock */
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(subtab_acquire(&f->seg, &a), SUBTAB_INSERTED);
	assert_int_equal(subtab_lookup(&f->seg, "after-death", 11, &e, NULL),
	    1);
	/* Marked consistent: it works again and again. */
	assert_int_equal(pthread_mutex_trylock(
	    &f->seg.header->table_lock.mutex), 0);
	pthread_mutex_unlock(&f->seg.header->table_lock.mutex);
}

/*
 * In a child: do what an insert does under the table lock, up to and
 * (with publish) including the store of the bucket, then die holding the
 * lock before the counters move.
 */
static void
die_mid_insert(struct segment_fixture *f, const char *key, int publish)
{
	struct shm_header	*h = f->seg.header;
	struct subtab_slot	*s = &f->seg.slots[h->slots_used];
	unsigned char		 out[crypto_shorthash_siphash24_BYTES];
	uint32_t		 hash, mask = h->bucket_count - 1, b;
	size_t			 length = strlen(key);

	pthread_mutex_lock(&h->table_lock.mutex);
	crypto_shorthash_siphash24(out, (const unsigned char *)key, length,
	    h->hash_key);
	memcpy(&hash, out, sizeof hash);
	memcpy(f->seg.heap + h->heap_used, key, length);
	s->key_hash = hash;
	s->key_offset = h->heap_used;
	/* As insert() does: at least the heap's average per slot. */
	s->key_room = length > SHM_HEAP_BYTES_PER_SLOT ? (uint16_t)length :
	    SHM_HEAP_BYTES_PER_SLOT;
	memset(&s->entry, 0, sizeof s->entry);
	s->entry.kind = SUBTAB_KIND_TASK;
	s->entry.state = SUBTAB_RESERVED;
	s->entry.key_length = (uint16_t)length;
	atomic_store(&s->state, SUBTAB_RESERVED);
	if (publish) {
		for (b = hash & mask; f->seg.buckets[b] != 0; b = (b + 1) & mask)
			;
		f->seg.buckets[b] = h->slots_used + 1;
	}
	_exit(0);
}

static void
run_death_mid_insert(struct segment_fixture *f, int publish)
{
	struct shm_header	*h = f->seg.header;
	uint32_t		 gen = start_worker(f, 0);
	struct subtab_acquire	 a = request("before", 1, 1, gen, 1);
	struct subtab_acquire	 c = request("after", 1, 1, gen, 2);
	struct subtab_entry	 e;
	uint64_t		 heap_before;
	pid_t			 pid;
	int			 status;

	assert_int_equal(subtab_acquire(&f->seg, &a), SUBTAB_INSERTED);
	heap_before = h->heap_used;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		die_mid_insert(f, "torn", publish);
	assert_int_equal(waitpid(pid, &status, 0), pid);

	/* The first lock after the death repairs. */
	assert_int_equal(subtab_lookup(&f->seg, "torn", 4, &e, NULL),
	    publish ? 1 : 0);
	assert_int_equal(h->slots_used, publish ? 2 : 1);
	assert_int_equal(h->heap_used, heap_before +
	    (publish ? SHM_HEAP_BYTES_PER_SLOT : 0));
	assert_int_equal(h->state_counts[SUBTAB_RESERVED], publish ? 2 : 1);
	assert_int_equal(subtab_lookup(&f->seg, "before", 6, &e, NULL), 1);
	/* And the table goes on working. */
	assert_int_equal(subtab_acquire(&f->seg, &c), SUBTAB_INSERTED);
	assert_int_equal(subtab_lookup(&f->seg, "after", 5, &e, NULL), 1);
	assert_int_equal(h->slots_used, publish ? 3 : 2);
}

static void
test_owner_death_mid_insert_published(void **state)
{
	run_death_mid_insert(*state, 1);
}

static void
test_owner_death_mid_insert_unpublished(void **state)
{
	run_death_mid_insert(*state, 0);
}

static void
test_numbers_never_repeat(void **state)
{
	struct segment_fixture	*f = *state;
	uint32_t	 date, seq, last = 0;
	int		 i;

	for (i = 0; i < 100; i++) {
		assert_int_equal(seqalloc_next(&f->seg, SUBTAB_KIND_TASK,
		    20261202, NULL, NULL, &date, &seq), 0);
		assert_int_equal(date, 20261202);
		assert_true(seq > last);
		last = seq;
	}
	/* Replay saw a higher number: it is skipped. */
	seqalloc_note_used(&f->seg, SUBTAB_KIND_TASK, 20261202, 500);
	assert_int_equal(seqalloc_next(&f->seg, SUBTAB_KIND_TASK, 20261202,
	    NULL, NULL, &date, &seq), 0);
	assert_int_equal(seq, 501);
	/* A new day starts at 1; reports count on their own. */
	assert_int_equal(seqalloc_next(&f->seg, SUBTAB_KIND_TASK, 20261203,
	    NULL, NULL, &date, &seq), 0);
	assert_int_equal(date, 20261203);
	assert_int_equal(seq, 1);
	assert_int_equal(seqalloc_next(&f->seg, SUBTAB_KIND_REPORT, 20261203,
	    NULL, NULL, &date, &seq), 0);
	assert_int_equal(seq, 1);
	/* The clock stepping back keeps the later date. */
	assert_int_equal(seqalloc_next(&f->seg, SUBTAB_KIND_TASK, 20261202,
	    NULL, NULL, &date, &seq), 0);
	assert_int_equal(date, 20261203);
	assert_int_equal(seq, 2);
}

static int
scan_says_41(enum subtab_kind kind, uint32_t date, uint32_t *max, void *arg)
{
	int	*calls = arg;

	(*calls)++;
	*max = date == 20261202 ? 41 : 0;
	return 0;
}

static void
test_numbers_skip_disk(void **state)
{
	struct segment_fixture	*f = *state;
	uint32_t	 date, seq;
	int		 calls = 0;

	assert_int_equal(seqalloc_next(&f->seg, SUBTAB_KIND_TASK, 20261202,
	    scan_says_41, &calls, &date, &seq), 0);
	assert_int_equal(seq, 42);
	assert_int_equal(seqalloc_next(&f->seg, SUBTAB_KIND_TASK, 20261202,
	    scan_says_41, &calls, &date, &seq), 0);
	assert_int_equal(seq, 43);
	assert_int_equal(calls, 1);	/* once per date */
}

static int
scan_says_998(enum subtab_kind kind, uint32_t date, uint32_t *max, void *arg)
{
	*max = date == 20261202 ? 998 : 0;
	return 0;
}

/*
 * A day's numbers stop at 999 (SEQALLOC_DEFAULT_MAX): ERANGE, nothing
 * taken, nothing inserted in the table; the next day starts at 1, so a
 * retry then reserves.  alloc_max_seq (--sequence-digits) moves the end.
 */
static void
test_numbers_stop_at_999(void **state)
{
	struct segment_fixture		*f = *state;
	uint32_t		 gen = start_worker(f, 0);
	struct subtab_acquire	 a = request("past-999", 7, 1, gen, 1);
	struct subtab_entry	 e;
	uint32_t		 date, seq, used;

	assert_int_equal(seqalloc_next(&f->seg, SUBTAB_KIND_TASK, 20261202,
	    scan_says_998, NULL, &date, &seq), 0);
	assert_int_equal(seq, 999);
	errno = 0;
	assert_int_equal(seqalloc_next(&f->seg, SUBTAB_KIND_TASK, 20261202,
	    scan_says_998, NULL, &date, &seq), -1);
	assert_int_equal(errno, ERANGE);
	/* Reports count apart. */
	assert_int_equal(seqalloc_next(&f->seg, SUBTAB_KIND_REPORT, 20261202,
	    NULL, NULL, &date, &seq), 0);
	assert_int_equal(seq, 1);

	used = f->seg.header->slots_used;
	a.scan = scan_says_998;
	assert_int_equal(subtab_acquire(&f->seg, &a), SUBTAB_ALLOC_FAILED);
	assert_int_equal(errno, ERANGE);
	assert_int_equal(f->seg.header->slots_used, used);
	assert_int_equal(subtab_lookup(&f->seg, "past-999", 8, &e, NULL), 0);
	/* Still the same day: the same answer. */
	assert_int_equal(subtab_acquire(&f->seg, &a), SUBTAB_ALLOC_FAILED);
	/* The next day the same request reserves number 1. */
	a.today = 20261203;
	assert_int_equal(subtab_acquire(&f->seg, &a), SUBTAB_INSERTED);
	assert_int_equal(a.found.date, 20261203);
	assert_int_equal(a.found.seq, 1);

	/* Four digits: 9999 is the last. */
	f->seg.header->alloc_max_seq = 9999;
	seqalloc_note_used(&f->seg, SUBTAB_KIND_TASK, 20261203, 9998);
	assert_int_equal(seqalloc_next(&f->seg, SUBTAB_KIND_TASK, 20261203,
	    NULL, NULL, &date, &seq), 0);
	assert_int_equal(seq, 9999);
	assert_int_equal(seqalloc_next(&f->seg, SUBTAB_KIND_TASK, 20261203,
	    NULL, NULL, &date, &seq), -1);
	assert_int_equal(errno, ERANGE);
}

/* subtab_acquire of a new key, the index checked since the last eviction. */
static enum subtab_verdict
acquire_new(struct segment_fixture *f, struct subtab_acquire *a)
{
	a->evictions = atomic_load(&f->seg.header->evictions);
	return subtab_acquire(&f->seg, a);
}

/* Commit a with e's state, its claim dropped, and mark it indexed. */
static void
commit_indexed(struct segment_fixture *f, struct subtab_acquire *a)
{
	struct subtab_entry	e = a->found;

	e.state = SUBTAB_COMMITTED;
	assert_int_equal(subtab_record(&f->seg, a->slot, &a->claim, &e, "r",
	    1, &(uint64_t){ 0 }), 0);
	subtab_release(&f->seg, a->slot, &a->claim);
	subtab_mark_indexed(&f->seg, &a->slot, 1);
}

/*
 * Every slot a checkpoint copies is one it can store: a committed
 * entry has its key (the index refuses one without: issue 27).
 */
static void
assert_slots_storable(struct segment_fixture *f)
{
	struct subtab_entry	 entries[64];
	char			 keys[64][SUBTAB_MAX_KEY_BYTES];
	uint32_t		 flags[64], n, i;

	n = subtab_copy_flags(&f->seg, 0, 64, entries, keys, flags);
	assert_true(n > 0);
	for (i = 0; i < n; i++)
		if (entries[i].state == SUBTAB_COMMITTED &&
		    entries[i].key_length == 0)
			fail_msg("slot %u: committed with no key", i);
}

/*
 * Issue 27, item 1: a creation refused after its room was found (the
 * day's numbers used up) evicts nothing: every indexed entry is still
 * in the table, no slot is left committed without a key (which every
 * checkpoint then failed to store), and the next day's creation evicts
 * one and reserves.
 */
static void
test_refused_creation_evicts_nothing(void **state)
{
	struct segment_fixture	*f = *state;
	uint32_t		 gen = start_worker(f, 0), date, seq;
	struct subtab_acquire	 a;
	struct subtab_entry	 e;
	char			 key[16];
	int			 i;

	for (i = 0; i < 3; i++) {
		snprintf(key, sizeof key, "k%d", i);
		a = request(key, 1, 1, gen, (uint32_t)i + 1);
		assert_int_equal(acquire_new(f, &a), SUBTAB_INSERTED);
		commit_indexed(f, &a);
	}
	/* The day's numbers used up. */
	assert_int_equal(seqalloc_next(&f->seg, SUBTAB_KIND_TASK, 20261202,
	    scan_says_998, NULL, &date, &seq), 0);
	assert_int_equal(seq, 999);
	a = request("k3", 1, 1, gen, 9);
	a.scan = scan_says_998;
	assert_int_equal(acquire_new(f, &a), SUBTAB_ALLOC_FAILED);
	assert_int_equal(errno, ERANGE);
	assert_int_equal(atomic_load(&f->seg.header->evictions), 0);
	assert_int_equal(f->seg.header->free_count, 0);
	assert_int_equal(f->seg.header->indexed_count, 3);
	assert_int_equal(f->seg.header->state_counts[SUBTAB_COMMITTED], 3);
	for (i = 0; i < 3; i++) {
		snprintf(key, sizeof key, "k%d", i);
		assert_int_equal(subtab_lookup(&f->seg, key, strlen(key), &e,
		    NULL), 1);
	}
	assert_slots_storable(f);
	assert_int_equal(subtab_repair(&f->seg), 0);
	assert_int_equal(f->seg.header->state_counts[SUBTAB_COMMITTED], 3);

	/* The next day: one evicted, k3 reserved, still all storable. */
	a.today = 20261203;
	assert_int_equal(acquire_new(f, &a), SUBTAB_INSERTED);
	assert_int_equal(atomic_load(&f->seg.header->evictions), 1);
	assert_slots_storable(f);
	assert_int_equal(subtab_repair(&f->seg), 0);
	assert_int_equal(f->seg.header->state_counts[SUBTAB_COMMITTED], 2);
	assert_int_equal(f->seg.header->state_counts[SUBTAB_RESERVED], 1);
}

/*
 * A reservation its claimer never recorded (refused after the insert:
 * the journal failed) is forgotten when the claim is dropped: the slot
 * is free for another key, the key is not in the table (a retry
 * inserts anew, with a new number), and nothing else moved.  One that
 * was recorded stays.
 */
static void
test_unrecorded_reservation_forgotten(void **state)
{
	struct segment_fixture	*f = *state;
	uint32_t		 gen = start_worker(f, 0);
	struct subtab_acquire	 a, b;
	struct subtab_entry	 e;
	uint32_t		 slot;

	char			 key[16];
	int			 i;

	/* Three slots: two recorded, the third refused before its record. */
	for (i = 0; i < 2; i++) {
		snprintf(key, sizeof key, "kept-%d", i);
		a = request(key, 1, 1, gen, (uint32_t)i + 1);
		assert_int_equal(acquire_new(f, &a), SUBTAB_INSERTED);
		e = a.found;
		assert_int_equal(subtab_record(&f->seg, a.slot, &a.claim, &e,
		    "r", 1, &(uint64_t){ 0 }), 0);
		subtab_release(&f->seg, a.slot, &a.claim);
	}
	b = request("refused", 1, 1, gen, 3);
	assert_int_equal(acquire_new(f, &b), SUBTAB_INSERTED);
	slot = b.slot;
	assert_int_equal(b.found.seq, 3);
	subtab_release(&f->seg, b.slot, &b.claim);
	assert_int_equal(subtab_lookup(&f->seg, "refused", 7, &e, NULL), 0);
	assert_int_equal(subtab_lookup(&f->seg, "kept-0", 6, &e, NULL), 1);
	assert_int_equal(subtab_lookup(&f->seg, "kept-1", 6, &e, NULL), 1);
	assert_int_equal(f->seg.header->free_count, 1);
	assert_int_equal(f->seg.header->state_counts[SUBTAB_RESERVED], 2);
	assert_slots_storable(f);
	/* Its slot serves the next key (no other is free, none indexed). */
	b = request("other", 1, 1, gen, 4);
	assert_int_equal(acquire_new(f, &b), SUBTAB_INSERTED);
	assert_int_equal(b.slot, slot);
	assert_int_equal(b.found.seq, 4);
	assert_int_equal(subtab_repair(&f->seg), 0);
	assert_int_equal(f->seg.header->free_count, 0);
	/* The refused key, again: the table is full of work in flight. */
	b = request("refused", 1, 1, gen, 5);
	assert_int_equal(acquire_new(f, &b), SUBTAB_FULL);
}

/*
 * A key of length bytes, different for each n (n < 36^length): n's
 * digits in base 36, then a filler.
 */
static void
long_key(char *key, size_t length, int n)
{
	static const char	digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
	size_t			i;

	memset(key, '-', length);
	for (i = 0; i < length && (i == 0 || n > 0); i++, n /= 36)
		key[i] = digits[n % 36];
	key[length] = '\0';
}

/* No two live keys' rooms overlap, and all lie inside the used heap. */
static void
assert_heap_sound(struct segment_fixture *f)
{
	struct shm_header	*h = f->seg.header;
	struct subtab_slot	*s, *t;
	uint32_t		 i, j;

	assert_true(h->heap_used <= h->heap_bytes);
	for (i = 0; i < h->slots_used; i++) {
		s = &f->seg.slots[i];
		if (s->entry.key_length == 0)
			continue;
		assert_true(s->key_room >= s->entry.key_length);
		assert_true(s->key_offset + s->key_room <= h->heap_used);
		for (j = i + 1; j < h->slots_used; j++) {
			t = &f->seg.slots[j];
			if (t->entry.key_length == 0)
				continue;
			if (s->key_offset < t->key_offset + t->key_room &&
			    t->key_offset < s->key_offset + s->key_room)
				fail_msg("slots %u and %u share key room", i, j);
		}
	}
}

/*
 * Issue 27, item 2: once 200 short ids have cycled through 64 slots,
 * every key room is a short one and the heap's end is used up; a key of
 * any length up to the maximum (an effect's: kind, separator, id) is
 * still served while committed entries can be evicted, several of them
 * giving up their rooms to it; every key left is still found, whole.
 * Then keys of every length, mixed: each served, the heap sound.
 */
static void
test_long_keys_after_cycling(void **state)
{
	struct segment_fixture	*f = *state;
	uint32_t		 gen = start_worker(f, 0);
	struct subtab_acquire	 a;
	struct subtab_entry	 e;
	static const size_t	 lengths[] = { 150, 180, SUBTAB_MAX_KEY_BYTES,
	    57, 3, SUBTAB_MAX_KEY_BYTES, 200, 1, 329, 100 };
	char			 key[SUBTAB_MAX_KEY_BYTES + 1];
	uint32_t		 token = 1;
	enum subtab_verdict	 v;
	int			 i, n;

	for (i = 0; i < 200; i++) {
		snprintf(key, sizeof key, "short-%d", i);
		a = request(key, 1, 1, gen, token++);
		assert_int_equal(acquire_new(f, &a), SUBTAB_INSERTED);
		commit_indexed(f, &a);
	}
	assert_int_equal(f->seg.header->slots_used, 64);
	for (i = 0; i < (int)(sizeof lengths / sizeof *lengths); i++) {
		long_key(key, lengths[i], i);
		a = request(key, 1, 1, gen, token++);
		if (acquire_new(f, &a) != SUBTAB_INSERTED)
			fail_msg("a key of %zu bytes: not inserted (full: %d)",
			    lengths[i], a.full);
		commit_indexed(f, &a);
		assert_heap_sound(f);
		assert_slots_storable(f);
	}
	/*
	 * The keys moved by the compactions are whole: each still in the
	 * table is found by its whole key, the latest surely is.
	 */
	for (i = 0, n = 0; i < (int)(sizeof lengths / sizeof *lengths); i++) {
		long_key(key, lengths[i], i);
		n += subtab_lookup(&f->seg, key, lengths[i], &e, NULL);
	}
	assert_int_equal(subtab_lookup(&f->seg, key, lengths[i - 1], &e,
	    NULL), 1);
	assert_true(n >= 1);
	for (i = 0; i < 64; i++) {
		snprintf(key, sizeof key, "short-%d", 199 - i);
		n += subtab_lookup(&f->seg, key, strlen(key), &e, NULL);
	}
	/* The 64 slots hold 64 keys, every one found. */
	assert_int_equal(n + f->seg.header->free_count, 64);
	/* Many more, of every length: never refused. */
	for (i = 0; i < 2000; i++) {
		size_t length = 3 + (size_t)(i * 37) %
		    (SUBTAB_MAX_KEY_BYTES - 2);

		long_key(key, length, 100 + i);
		a = request(key, 1, 1, gen, token++);
		a.want.kind = SUBTAB_KIND_EFFECT;	/* a day has 999 numbers */
		if ((v = acquire_new(f, &a)) != SUBTAB_INSERTED)
			fail_msg("key %d of %zu bytes: %d, not inserted (full: %d; "
			    "indexed %u free %u heap %lu/%lu)", i, length,
			    v, a.full, f->seg.header->indexed_count,
			    f->seg.header->free_count,
			    (unsigned long)f->seg.header->heap_used,
			    (unsigned long)f->seg.header->heap_bytes);
		commit_indexed(f, &a);
		assert_int_equal(subtab_lookup(&f->seg, key, length, &e, NULL),
		    1);
	}
	assert_heap_sound(f);
	assert_int_equal(subtab_repair(&f->seg), 0);
	assert_heap_sound(f);
}

/*
 * Keys of 100 bytes fill the heap before the slots are all used; a
 * longest key then fits no victim's room and gathers room for a fresh
 * slot, evicting others, whose buckets move (linear probing's backward
 * shift): the new key must go where a probe finds it, not into the
 * empty bucket found before the evictions.  Each round a new segment
 * (a new hash key), so that the evictions meet the new key's chain.
 */
#define GATHER_ROUNDS	200

static void
test_gather_for_a_fresh_slot(void **state)
{
	struct segment_fixture	*f;
	struct subtab_acquire	 a;
	struct subtab_entry	 e;
	char			 key[SUBTAB_MAX_KEY_BYTES + 1];
	uint32_t		 gen;
	int			 round, i, gathered = 0;

	(void)state;
	for (round = 0; round < GATHER_ROUNDS; round++) {
		assert_int_equal(unit_segment_setup((void **)&f, "gather", 64,
		    0), 0);
		gen = start_worker(f, 0);
		for (i = 0; i < 39; i++) {
			long_key(key, 100, i);
			a = request(key, 1, 1, gen, (uint32_t)i + 1);
			a.want.kind = SUBTAB_KIND_EFFECT;
			assert_int_equal(acquire_new(f, &a), SUBTAB_INSERTED);
			commit_indexed(f, &a);
		}
		assert_int_equal(f->seg.header->slots_used, 39);
		long_key(key, SUBTAB_MAX_KEY_BYTES, 1000);
		a = request(key, 1, 1, gen, 100);
		a.want.kind = SUBTAB_KIND_EFFECT;
		assert_int_equal(acquire_new(f, &a), SUBTAB_INSERTED);
		gathered += a.slot == 39;
		if (subtab_lookup(&f->seg, key, SUBTAB_MAX_KEY_BYTES, &e,
		    NULL) != 1)
			fail_msg("round %d: the gathering key is not found",
			    round);
		for (i = 0; i < 39; i++) {
			long_key(key, 100, i);
			(void)subtab_lookup(&f->seg, key, 100, &e, NULL);
		}
		assert_heap_sound(f);
		assert_int_equal(subtab_repair(&f->seg), 0);
		unit_segment_teardown((void **)&f);
	}
	/* The fresh slot was the one taken every round. */
	assert_int_equal(gathered, GATHER_ROUNDS);
}

/*
 * With --capacity 1 the table holds one maximal key: keys of the
 * maximal length and of one byte take turns in the one slot.
 */
static void
test_capacity_one_holds_a_maximal_key(void **state)
{
	struct segment_fixture	*f = *state;
	uint32_t		 gen = start_worker(f, 0);
	struct subtab_acquire	 a;
	char			 key[SUBTAB_MAX_KEY_BYTES + 1];
	int			 i;

	for (i = 0; i < 20; i++) {
		long_key(key, i % 2 ? 1 + (size_t)i / 10 :
		    SUBTAB_MAX_KEY_BYTES, i);
		a = request(key, 1, 1, gen, (uint32_t)i + 1);
		a.want.kind = SUBTAB_KIND_EFFECT;	/* no numbers */
		assert_int_equal(acquire_new(f, &a), SUBTAB_INSERTED);
		commit_indexed(f, &a);
		assert_heap_sound(f);
	}
}

/*
 * When the keys that may not be evicted hold the heap, a long key is
 * refused and the refusal says so (the key space, not the slots); a
 * short one is still served.
 */
static void
test_key_space_full_says_so(void **state)
{
	struct segment_fixture	*f = *state;
	uint32_t		 gen = start_worker(f, 0);
	struct subtab_acquire	 a;
	char			 key[SUBTAB_MAX_KEY_BYTES + 1];
	int			 i;

	/* Three slots, 3 * 56 + 329 bytes of heap: two reserved 200s. */
	for (i = 0; i < 2; i++) {
		long_key(key, 200, i);
		a = request(key, 1, 1, gen, (uint32_t)i + 1);
		assert_int_equal(acquire_new(f, &a), SUBTAB_INSERTED);
	}
	a = request("short", 1, 1, gen, 3);
	assert_int_equal(acquire_new(f, &a), SUBTAB_INSERTED);
	commit_indexed(f, &a);
	long_key(key, SUBTAB_MAX_KEY_BYTES, 9);
	a = request(key, 1, 1, gen, 4);
	assert_int_equal(acquire_new(f, &a), SUBTAB_FULL);
	assert_int_equal(a.full, SUBTAB_FULL_KEYS);
	/* Nothing was evicted for it. */
	assert_int_equal(atomic_load(&f->seg.header->evictions), 0);
	a = request("other", 1, 1, gen, 5);
	assert_int_equal(acquire_new(f, &a), SUBTAB_INSERTED);
	/* Now no slot at all: the slots' cause. */
	a = request("third", 1, 1, gen, 6);
	assert_int_equal(acquire_new(f, &a), SUBTAB_FULL);
	assert_int_equal(a.full, SUBTAB_FULL_SLOTS);
}

/*
 * A holder that dies in the middle of a compaction's move leaves the
 * key whole in the header's scratch: the repair puts it where it goes.
 */
static void
test_repair_finishes_a_compaction_move(void **state)
{
	struct segment_fixture	*f = *state;
	struct shm_header	*h = f->seg.header;
	uint32_t		 gen = start_worker(f, 0);
	struct subtab_acquire	 a;
	struct subtab_entry	 e;
	struct subtab_slot	*s;
	char			 key[SUBTAB_MAX_KEY_BYTES + 1];

	long_key(key, 120, 1);
	a = request(key, 1, 1, gen, 1);
	assert_int_equal(acquire_new(f, &a), SUBTAB_INSERTED);
	s = &f->seg.slots[a.slot];
	/* Mid-move (in place): the key in the scratch, its room torn. */
	memcpy(h->compact_key, key, 120);
	h->compact_to = s->key_offset;
	h->compact_slot = a.slot + 1;
	memset(f->seg.heap + s->key_offset, '#', 60);
	assert_int_equal(subtab_repair(&f->seg), 0);
	assert_int_equal(h->compact_slot, 0);
	assert_int_equal(subtab_lookup(&f->seg, key, 120, &e, NULL), 1);
}

static void
test_ring_wraps_and_fills(void **state)
{
	struct segment_fixture	*f = *state;
	struct iovec	 iov[2];
	uint8_t		 chunk[1000], out[1000];
	uint64_t	 end, pending_end, ring = f->seg.header->ring_bytes;
	uint64_t	 appended = 0;
	int		 n;

	memset(chunk, 0xab, sizeof chunk);
	/* Fill the ring to the brim: the next append is refused. */
	while (appended + sizeof chunk <= ring) {
		assert_int_equal(handoff_append(&f->seg, chunk, sizeof chunk,
		    &end), 0);
		appended += sizeof chunk;
		assert_int_equal(end, appended);
	}
	assert_int_equal(handoff_append(&f->seg, chunk, sizeof chunk, &end),
	    -1);
	assert_int_equal(errno, ENOSPC);
	n = handoff_pending(&f->seg, iov, &pending_end);
	assert_int_equal(n, 1);
	assert_int_equal(pending_end, appended);
	handoff_taken(&f->seg, pending_end);
	handoff_durable(&f->seg, pending_end);

	/* Now one record straddles the end of the ring. */
	memset(chunk, 0x5c, sizeof chunk);
	chunk[0] = 1;
	chunk[sizeof chunk - 1] = 2;
	assert_int_equal(handoff_append(&f->seg, chunk, sizeof chunk, &end),
	    0);
	n = handoff_pending(&f->seg, iov, &pending_end);
	assert_int_equal(pending_end, end);
	assert_int_equal(n, ring % sizeof chunk == 0 ? 1 : 2);
	memcpy(out, iov[0].iov_base, iov[0].iov_len);
	if (n == 2)
		memcpy(out + iov[0].iov_len, iov[1].iov_base, iov[1].iov_len);
	assert_memory_equal(out, chunk, sizeof chunk);
}

/*
 * The journal epoch (handoff.c): once a failure dropped records, later
 * flushes make positions above them durable, and only the epoch a
 * record was appended in tells it was lost.
 */
static void
test_epoch_judges_durability(void **state)
{
	struct segment_fixture		*f = *state;
	struct shm_header	*h = f->seg.header;
	uint64_t		 kept, lost, failed, after;

	assert_int_equal(handoff_epoch(h), 0);
	assert_int_equal(handoff_append(&f->seg, "aaaa", 4, &kept), 0);
	assert_int_equal(handoff_is_durable(h, kept, 0), 0);
	handoff_taken(&f->seg, kept);
	handoff_durable(&f->seg, kept);
	assert_int_equal(handoff_is_durable(h, kept, 0), 1);

	/* Appended, then the flush fails. */
	assert_int_equal(handoff_append(&f->seg, "bbbb", 4, &lost), 0);
	handoff_failed(&f->seg);
	assert_int_equal(atomic_load(&h->journal_failed), 1);
	assert_int_equal(handoff_epoch(h), 1);
	assert_int_equal(handoff_is_durable(h, lost, 0), -1);
	assert_int_equal(handoff_is_durable(h, kept, 0), 1);
	/* Read while failed: what was durable still is. */
	assert_int_equal(handoff_is_durable(h, kept, 1), 1);
	assert_int_equal(handoff_is_durable(h, lost, 1), -1);
	/* Appended while failed: never written. */
	assert_int_equal(handoff_append(&f->seg, "cccc", 4, &failed), 0);
	assert_int_equal(handoff_is_durable(h, failed, 1), -1);

	assert_int_equal(handoff_reopened(&f->seg), 0);
	assert_int_equal(handoff_epoch(h), 2);
	assert_int_equal(atomic_load(&h->journal_failed), 0);
	assert_int_equal(atomic_load(&h->ring_taken), h->ring_head);

	/* A flush after the reopen passes the dropped positions. */
	assert_int_equal(handoff_append(&f->seg, "dddd", 4, &after), 0);
	assert_int_equal(handoff_is_durable(h, after, 2), 0);
	handoff_taken(&f->seg, after);
	handoff_durable(&f->seg, after);
	assert_int_equal(handoff_is_durable(h, after, 2), 1);
	assert_true(atomic_load(&h->ring_durable) > lost);
	assert_int_equal(handoff_is_durable(h, lost, 0), -1);
	assert_int_equal(handoff_is_durable(h, failed, 1), -1);
	assert_int_equal(handoff_is_durable(h, kept, 0), 1);

	/* A second failure: older epochs count as lost, never durable. */
	handoff_failed(&f->seg);
	assert_int_equal(handoff_reopened(&f->seg), 0);
	assert_int_equal(handoff_epoch(h), 4);
	assert_int_equal(handoff_is_durable(h, after, 2), 1);
	assert_int_equal(handoff_is_durable(h, lost, 0), -1);
	assert_int_equal(handoff_is_durable(h, kept, 0), -1);
	/* Replayed at start-up. */
	assert_int_equal(handoff_is_durable(h, 0, 0), 1);
}

/*
 * A journal failure that takes a commit back also takes back the slot's
 * "indexed": a checkpoint gives the index only durable commits (it waits
 * for its copy to be durable), and should a lost one be indexed all the
 * same, the flag would let the slot be evicted and the index serve the
 * lost commit for ever instead of the retry's (found by review).
 */
static void
test_settle_unmarks_indexed(void **state)
{
	struct segment_fixture	*f = *state;
	struct shm_header	*h = f->seg.header;
	uint32_t		 gen = start_worker(f, 0);
	struct subtab_acquire	 moved = request("moved", 3, 1, gen, 3);
	struct subtab_unsettled	*rows;
	struct subtab_entry	 e, done, entries[8];
	char			 keys[8][SUBTAB_MAX_KEY_BYTES];
	uint32_t		 flags[8];
	uint64_t		 end;
	size_t			 count;

	assert_int_equal(subtab_acquire(&f->seg, &moved), SUBTAB_INSERTED);
	assert_int_equal(subtab_record(&f->seg, moved.slot, &moved.claim,
	    &moved.found, "m", 1, &end), 0);
	handoff_taken(&f->seg, end);
	handoff_durable(&f->seg, end);
	/* moved's commit appended, marked indexed, then the journal fails. */
	done = moved.found;
	done.state = SUBTAB_COMMITTED;
	assert_int_equal(subtab_record(&f->seg, moved.slot, &moved.claim,
	    &done, "M", 1, &end), 0);
	subtab_mark_indexed(&f->seg, &moved.slot, 1);
	assert_int_equal(h->indexed_count, 1);
	handoff_failed(&f->seg);
	assert_int_equal(subtab_unsettled(&f->seg, h->ring_lost_from, &rows,
	    &count), 0);
	assert_int_equal(count, 1);
	assert_int_equal(rows[0].slot, moved.slot);
	rows[0].durable = 1;
	rows[0].entry = moved.found;
	assert_int_equal(subtab_settle(&f->seg, h->ring_lost_from, rows,
	    count), 0);
	free(rows);
	assert_int_equal(subtab_lookup(&f->seg, "moved", 5, &e, NULL), 1);
	assert_int_equal(e.state, SUBTAB_RESERVED);
	assert_int_equal(h->indexed_count, 0);
	assert_int_equal(subtab_copy_flags(&f->seg, 0, 8, entries, keys,
	    flags), 1);
	assert_false(flags[moved.slot] & SUBTAB_SLOT_INDEXED);
}

/* A slot whose record a journal failure dropped goes back, or empty. */
static void
test_settle_sets_back_lost_states(void **state)
{
	struct segment_fixture		*f = *state;
	struct shm_header	*h = f->seg.header;
	uint32_t		 gen = start_worker(f, 0);
	struct subtab_acquire	 kept = request("kept", 1, 1, gen, 1);
	struct subtab_acquire	 lost = request("lost", 2, 1, gen, 2);
	struct subtab_acquire	 moved = request("moved", 3, 1, gen, 3);
	struct subtab_acquire	 again = request("lost", 4, 1, gen, 4);
	struct subtab_unsettled	*rows;
	struct subtab_entry	 e, done;
	struct subtab_row	*snap;
	uint32_t		 counts[SUBTAB_STATE_COUNT], lost_seq;
	uint64_t		 end;
	size_t			 count, n;

	assert_int_equal(subtab_acquire(&f->seg, &kept), SUBTAB_INSERTED);
	done = kept.found;
	done.state = SUBTAB_COMMITTED;
	assert_int_equal(subtab_record(&f->seg, kept.slot, &kept.claim, &done,
	    "k", 1, &end), 0);
	assert_int_equal(subtab_acquire(&f->seg, &moved), SUBTAB_INSERTED);
	assert_int_equal(subtab_record(&f->seg, moved.slot, &moved.claim,
	    &moved.found, "m", 1, &end), 0);
	handoff_taken(&f->seg, end);
	handoff_durable(&f->seg, end);
	/* Not durable: a fresh reservation, and a step past a durable one. */
	assert_int_equal(subtab_acquire(&f->seg, &lost), SUBTAB_INSERTED);
	lost_seq = lost.found.seq;
	assert_int_equal(subtab_record(&f->seg, lost.slot, &lost.claim,
	    &lost.found, "l", 1, &end), 0);
	done = moved.found;
	done.state = SUBTAB_COMMITTED;
	assert_int_equal(subtab_record(&f->seg, moved.slot, &moved.claim,
	    &done, "M", 1, &end), 0);
	handoff_failed(&f->seg);

	assert_int_equal(subtab_unsettled(&f->seg, h->ring_lost_from, &rows,
	    &count), 0);
	assert_int_equal(count, 2);
	assert_int_equal(rows[0].slot, moved.slot);
	assert_int_equal(rows[0].key_length, 5);
	assert_memory_equal(rows[0].key, "moved", 5);
	assert_int_equal(rows[1].slot, lost.slot);
	/* What replay would find: moved's reservation, nothing of lost. */
	rows[0].durable = 1;
	rows[0].entry = moved.found;
	/* A row missing: nothing is changed, look again. */
	assert_int_equal(subtab_settle(&f->seg, h->ring_lost_from, rows, 1), 1);
	assert_int_equal(atomic_load(&h->journal_failed), 1);
	assert_int_equal(subtab_lookup(&f->seg, "lost", 4, &e, NULL), 1);

	assert_int_equal(subtab_settle(&f->seg, h->ring_lost_from, rows,
	    count), 0);
	free(rows);
	assert_int_equal(atomic_load(&h->journal_failed), 0);
	assert_int_equal(handoff_epoch(h), 2);
	assert_int_equal(atomic_load(&h->ring_taken), h->ring_head);
	assert_int_equal(subtab_lookup(&f->seg, "lost", 4, &e, NULL), 0);
	assert_int_equal(subtab_lookup(&f->seg, "moved", 5, &e, NULL), 1);
	assert_int_equal(e.state, SUBTAB_RESERVED);
	assert_int_equal(subtab_lookup(&f->seg, "kept", 4, &e, NULL), 1);
	assert_int_equal(e.state, SUBTAB_COMMITTED);
	assert_int_equal(h->state_counts[SUBTAB_RESERVED], 1);
	assert_int_equal(h->state_counts[SUBTAB_COMMITTED], 1);
	assert_int_equal(subtab_snapshot(&f->seg, SUBTAB_KIND_TASK, 0, &snap,
	    &n, counts), 0);
	free(snap);
	assert_int_equal(n, 2);
	assert_int_equal(counts[SUBTAB_EMPTY], 0);
	/* Nothing left to settle. */
	assert_int_equal(subtab_unsettled(&f->seg, h->ring_lost_from, &rows,
	    &count), 0);
	free(rows);
	assert_int_equal(count, 0);

	/* The lost id is free again, in its slot, with a new number. */
	assert_int_equal(subtab_release(&f->seg, lost.slot, &lost.claim), 0);
	assert_int_equal(subtab_acquire(&f->seg, &again), SUBTAB_INSERTED);
	assert_int_equal(again.slot, lost.slot);
	assert_true(again.found.seq > lost_seq);
	assert_int_equal(again.found.request_digest[0], 4);
	assert_true(f->seg.slots[again.slot].journal_end ==
	    SUBTAB_NOT_JOURNALED);
	assert_int_equal(h->slots_used, 3);
	assert_int_equal(h->state_counts[SUBTAB_RESERVED], 2);
}

static void
test_attach_checks_layout(void **state)
{
	struct segment_fixture		*f = *state;
	struct shm_segment	 other;
	char			*cause = NULL;

	assert_int_equal(shm_attach(f->root, &other, &cause), 0);
	assert_int_equal(other.header->capacity, f->seg.header->capacity);
	shm_detach(&other);
	/* A segment whose layout differs is refused. */
	f->seg.header->slot_bytes++;
	assert_int_equal(shm_attach(f->root, &other, &cause), -1);
	assert_non_null(cause);
	free(cause);
	f->seg.header->slot_bytes--;
}

/*
 * The fast path's receipt store: only a committed slot names stored
 * bytes, once while they are there; any later record of the slot
 * forgets them.  (Its ring: test_rings.)
 */
static void
test_receipts_only_for_committed(void **state)
{
	struct segment_fixture		*f = *state;
	uint32_t		 gen = start_worker(f, 0);
	struct subtab_acquire	 a = request("fast-1", 3, 1, gen, 1);
	struct subtab_entry	 e;
	uint8_t			 got[SHM_RECEIPT_MAX_BYTES];
	uint8_t			 big[SHM_RECEIPT_MAX_BYTES + 1];
	uint64_t		 end;
	size_t			 length;

	assert_int_equal(subtab_acquire(&f->seg, &a), SUBTAB_INSERTED);
	assert_int_equal(receipts_put(&f->seg, a.slot, "fast-1", 6, &a.found,
	    "r", 1), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(receipts_get(&f->seg, a.slot, got, &length), 0);
	e = a.found;
	e.state = SUBTAB_COMMITTED;
	assert_int_equal(subtab_record(&f->seg, a.slot, &a.claim, &e, "x", 1,
	    &end), 0);
	assert_int_equal(receipts_put(&f->seg, a.slot, "fast-1", 6, &e,
	    "reply", 5), 0);
	assert_int_equal(receipts_get(&f->seg, a.slot, got, &length), 1);
	assert_int_equal(length, 5);
	assert_memory_equal(got, "reply", 5);
	assert_int_equal(receipts_put(&f->seg, a.slot, "fast-1", 6, &e,
	    "other", 5), -1);
	assert_int_equal(errno, EEXIST);
	/* Not for another key (the slot was evicted and taken meanwhile). */
	assert_int_equal(receipts_put(&f->seg, a.slot, "fast-2", 6, &e, "r", 1),
	    -1);
	assert_int_equal(errno, EINVAL);
	/* Recorded again (a recovery): forgotten. */
	assert_int_equal(subtab_record(&f->seg, a.slot, &a.claim, &e, "x", 1,
	    &end), 0);
	assert_int_equal(receipts_get(&f->seg, a.slot, got, &length), 0);
	/* Replayed over: forgotten too. */
	assert_int_equal(receipts_put(&f->seg, a.slot, "fast-1", 6, &e,
	    "reply", 5), 0);
	assert_int_equal(subtab_apply(&f->seg, "fast-1", 6, &e), 0);
	assert_int_equal(receipts_get(&f->seg, a.slot, got, &length), 0);
	memset(big, 'b', sizeof big);
	assert_int_equal(receipts_put(&f->seg, a.slot, "fast-1", 6, &e,
	    big, 0), -1);
	assert_int_equal(receipts_put(&f->seg, a.slot, "fast-1", 6, &e,
	    big, sizeof big), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(receipts_get(&f->seg, a.slot, got, &length), 0);
}

/* Replay-style entries key-<from>.. key-<to - 1>, each seq its number. */
static void
apply_range(struct segment_fixture *f, int from, int to)
{
	struct subtab_entry	 e;
	char			 key[32];
	int			 i;

	memset(&e, 0, sizeof e);
	e.kind = SUBTAB_KIND_TASK;
	e.state = SUBTAB_COMMITTED;
	e.date = 20261204;
	for (i = from; i < to; i++) {
		snprintf(key, sizeof key, "prefault-key-%d", i);
		e.seq = (uint32_t)i + 1;
		assert_int_equal(subtab_apply(&f->seg, key, strlen(key), &e),
		    0);
	}
}

/*
 * The prefault thread maps the table while a replay writes it: every
 * entry written before, during and after reads back as written, the
 * buckets are all resident once it stops (they fit its first stride,
 * which a stop never cuts; these 30 keys touch at most 30 of their 128
 * pages), and stopping twice is harmless.
 */
static void
test_prefault_maps_and_changes_nothing(void **state)
{
	struct segment_fixture	*f = *state;
	struct shm_prefault	 p;
	struct subtab_entry	 got;
	const struct shm_header	*h = f->seg.header;
	uintptr_t		 page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t		 start, end;
	unsigned char		*resident;
	size_t			 pages, i;
	char			 key[32];
	int			 n;

	apply_range(f, 0, 10);
	assert_int_equal(shm_prefault_start(&p, &f->seg), 0);
	apply_range(f, 10, 20);
	shm_prefault_stop(&p);
	apply_range(f, 20, 30);
	shm_prefault_stop(&p);
	for (n = 0; n < 30; n++) {
		snprintf(key, sizeof key, "prefault-key-%d", n);
		assert_int_equal(subtab_lookup(&f->seg, key, strlen(key), &got,
		    NULL), 1);
		assert_int_equal(got.seq, (uint32_t)n + 1);
		assert_int_equal(got.state, SUBTAB_COMMITTED);
	}
	assert_int_equal(h->slots_used, 30);
	if (p.error == ENOSYS || p.error == EINVAL) {
		/* run-tests.sh lists the case with this reason. */
		printf("SKIP: a kernel without MADV_POPULATE_WRITE "
		    "(madvise: %s)\n", strerror(p.error));
		fflush(stdout);
		skip();
	}
	assert_int_equal(p.error, 0);
	start = (uintptr_t)f->seg.buckets & ~(page - 1);
	end = ((uintptr_t)(f->seg.buckets + h->bucket_count) + page - 1) &
	    ~(page - 1);
	pages = (end - start) / page;
	assert_true(pages >= 128);
	assert_non_null(resident = malloc(pages));
	assert_int_equal(mincore((void *)start, end - start, resident), 0);
	for (i = 0; i < pages; i++)
		assert_true(resident[i] & 1);
	free(resident);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_reserve_then_lookup,
		    setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(
		    test_claim_excludes_others_until_released, setup,
		    unit_segment_teardown),
		cmocka_unit_test_setup_teardown(test_mismatch_and_dead_claim,
		    setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(test_full_loses_nothing,
		    setup_tiny, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(
		    test_eviction_only_of_indexed_committed, setup_tiny,
		    unit_segment_teardown),
		cmocka_unit_test_setup_teardown(test_apply_evicts_indexed,
		    setup_tiny, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(test_apply_hashed_as_apply,
		    setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(test_owner_death_under_lock,
		    setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(
		    test_owner_death_mid_insert_published, setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(
		    test_owner_death_mid_insert_unpublished, setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(test_numbers_never_repeat,
		    setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(test_numbers_skip_disk,
		    setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(test_numbers_stop_at_999,
		    setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(
		    test_refused_creation_evicts_nothing, setup_tiny,
		    unit_segment_teardown),
		cmocka_unit_test_setup_teardown(test_long_keys_after_cycling,
		    setup, unit_segment_teardown),
		cmocka_unit_test(test_gather_for_a_fresh_slot),
		cmocka_unit_test_setup_teardown(
		    test_unrecorded_reservation_forgotten, setup_tiny,
		    unit_segment_teardown),
		cmocka_unit_test_setup_teardown(
		    test_capacity_one_holds_a_maximal_key, setup_one,
		    unit_segment_teardown),
		cmocka_unit_test_setup_teardown(test_key_space_full_says_so,
		    setup_tiny, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(
		    test_repair_finishes_a_compaction_move, setup,
		    unit_segment_teardown),
		cmocka_unit_test_setup_teardown(test_ring_wraps_and_fills,
		    setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(test_epoch_judges_durability,
		    setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(test_settle_unmarks_indexed,
		    setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(test_settle_sets_back_lost_states,
		    setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(test_attach_checks_layout,
		    setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(
		    test_receipts_only_for_committed, setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(
		    test_prefault_maps_and_changes_nothing, setup_large,
		    unit_segment_teardown),
	};

	return FILTER_RUN(tests);
}
