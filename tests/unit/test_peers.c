/* SPDX-License-Identifier: ISC */
/*
 * test_peers.c: the peer table of the shared segment (shm/peers.c):
 * limits per pid and per uid across workers, exact counts through many
 * admissions and releases of thousands of pids (which exercises the
 * backward-shift deletion on long chains), a dead worker's share given
 * back, a full table refused, and the repair of a duplicate that a
 * worker dying in the middle of a deletion leaves.
 */
#include <errno.h>
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

#include "integration/filter.h"
#include "segment.h"

#define PEERS_TEST_PIDS		4000	/* x3 workers: never full, chains long */
#define PEERS_TEST_WORKERS	3
#define PEERS_TEST_ROUNDS	60000

static int
setup(void **state)
{
	return unit_segment_setup(state, "peers", 16, 0);
}

/* Entries in use: every admitted (peer, worker) pair has one. */
static unsigned
entries(struct segment_fixture *f)
{
	unsigned	i, n = 0;

	for (i = 0; i < f->seg.header->peer_slots; i++)
		n += atomic_load(&f->seg.peers[i]) != 0;
	return n;
}

static void
test_limits_across_workers(void **state)
{
	struct segment_fixture	*f = *state;
	int		 i;

	/* Pid 100 of uid 7: 4 per pid, 6 per uid, over two workers. */
	for (i = 0; i < 4; i++)
		assert_int_equal(peers_admit(&f->seg, (unsigned)i % 2, 100, 7,
		    4, 6), PEERS_ADMITTED);
	assert_int_equal(peers_admit(&f->seg, 0, 100, 7, 4, 6),
	    PEERS_PID_LIMIT);
	assert_int_equal(peers_admit(&f->seg, 1, 100, 7, 4, 6),
	    PEERS_PID_LIMIT);
	assert_int_equal(peers_count(&f->seg, 0, 100), 4);
	/* Another pid of the same uid: two more, then the uid is full. */
	assert_int_equal(peers_admit(&f->seg, 1, 101, 7, 4, 6),
	    PEERS_ADMITTED);
	assert_int_equal(peers_admit(&f->seg, 0, 101, 7, 4, 6),
	    PEERS_ADMITTED);
	assert_int_equal(peers_admit(&f->seg, 0, 101, 7, 4, 6),
	    PEERS_UID_LIMIT);
	assert_int_equal(peers_count(&f->seg, 1, 7), 6);
	/* A refusal counted nothing; another uid is not affected. */
	assert_int_equal(peers_count(&f->seg, 0, 101), 2);
	assert_int_equal(peers_admit(&f->seg, 0, 200, 8, 4, 6),
	    PEERS_ADMITTED);
	/* A release makes room again. */
	peers_release(&f->seg, 1, 100, 7);
	assert_int_equal(peers_count(&f->seg, 0, 100), 3);
	assert_int_equal(peers_admit(&f->seg, 0, 101, 7, 4, 6),
	    PEERS_ADMITTED);
	/* Worker 1 dies: its share of each peer is given back. */
	peers_forget_worker(&f->seg, 1);
	assert_int_equal(peers_count(&f->seg, 0, 100), 2);
	assert_int_equal(peers_count(&f->seg, 0, 101), 2);
	assert_int_equal(peers_count(&f->seg, 1, 7), 4);
	assert_int_equal(peers_count(&f->seg, 1, 8), 1);
}

/*
 * Random admissions and releases of thousands of pids on three workers,
 * against a plain model: every count always exact, and once everything
 * is released (or forgotten) the table is empty again.
 */
static void
test_counts_exact_under_churn(void **state)
{
	struct segment_fixture	*f = *state;
	static uint16_t	 held[PEERS_TEST_PIDS][PEERS_TEST_WORKERS];
	uint32_t	 pid, uid, by_uid[4] = { 0 };
	unsigned	 w, round, i, total;

	memset(held, 0, sizeof held);
	for (round = 0; round < PEERS_TEST_ROUNDS; round++) {
		pid = randombytes_uniform(PEERS_TEST_PIDS);
		w = randombytes_uniform(PEERS_TEST_WORKERS);
		uid = pid % 4;
		if (held[pid][w] > 0 && randombytes_uniform(2) == 0) {
			peers_release(&f->seg, w, pid + 1, uid);
			held[pid][w]--;
			by_uid[uid]--;
		} else {
			total = held[pid][0] + held[pid][1] + held[pid][2];
			assert_int_equal(peers_admit(&f->seg, w, pid + 1, uid,
			    3, 1000000), total >= 3 ? PEERS_PID_LIMIT :
			    PEERS_ADMITTED);
			if (total < 3) {
				held[pid][w]++;
				by_uid[uid]++;
			}
		}
		if (round % 5000 == 0) {
			for (i = 0; i < PEERS_TEST_PIDS; i += 7)
				assert_int_equal(peers_count(&f->seg, 0, i + 1),
				    held[i][0] + held[i][1] + held[i][2]);
			for (i = 0; i < 4; i++)
				assert_int_equal(peers_count(&f->seg, 1, i),
				    by_uid[i]);
		}
	}
	for (i = 0; i < PEERS_TEST_PIDS; i++)
		assert_int_equal(peers_count(&f->seg, 0, i + 1),
		    held[i][0] + held[i][1] + held[i][2]);
	/* Worker 2 dies; workers 0 and 1 release all theirs. */
	peers_forget_worker(&f->seg, 2);
	for (i = 0; i < PEERS_TEST_PIDS; i++) {
		for (w = 0; w < 2; w++) {
			while (held[i][w] > 0) {
				peers_release(&f->seg, w, i + 1, i % 4);
				held[i][w]--;
			}
		}
		assert_int_equal(peers_count(&f->seg, 0, i + 1), 0);
	}
	assert_int_equal(entries(f), 0);
}

/* Past the table's size: refused (PEERS_FULL), never a lost count. */
static void
test_full_table_refuses(void **state)
{
	struct segment_fixture	*f = *state;
	uint32_t	 slots = f->seg.header->peer_slots, pid;
	enum peers_verdict v = PEERS_ADMITTED;

	/* Each admission takes a pid entry; the uid's is shared. */
	for (pid = 1; pid <= slots + 1; pid++) {
		v = peers_admit(&f->seg, 0, pid, 0, 10, 1000000);
		if (v != PEERS_ADMITTED)
			break;
	}
	assert_int_equal(v, PEERS_FULL);
	assert_int_equal(pid, slots);	/* slots - 1 pids and the uid */
	assert_int_equal(peers_count(&f->seg, 1, 0), slots - 1);
	/* A release frees an entry: the next one fits. */
	peers_release(&f->seg, 0, 1, 0);
	assert_int_equal(peers_admit(&f->seg, 0, pid, 0, 10, 1000000),
	    PEERS_ADMITTED);
	peers_forget_worker(&f->seg, 0);
	assert_int_equal(entries(f), 0);
}

/*
 * A worker that died in the middle of a deletion's shift left an entry
 * twice in its chain: the repair removes the copy and the counts are
 * exact again.
 */
static void
test_repair_removes_a_duplicate(void **state)
{
	struct segment_fixture	*f = *state;
	uint32_t	 i, first = UINT32_MAX, mask;
	uint64_t	 w;

	for (i = 1; i <= 50; i++)
		assert_int_equal(peers_admit(&f->seg, 1, i, 5, 10, 100),
		    PEERS_ADMITTED);
	mask = f->seg.header->peer_slots - 1;
	/* Copy an entry to the empty slot after its chain, as a shift does. */
	for (i = 0; i <= mask; i++) {
		w = atomic_load(&f->seg.peers[i]);
		if (w != 0 && (w & (1ULL << 32)) == 0) {	/* a pid's */
			first = i;
			break;
		}
	}
	assert_true(first != UINT32_MAX);
	for (i = (first + 1) & mask; atomic_load(&f->seg.peers[i]) != 0;
	    i = (i + 1) & mask)
		;
	atomic_store(&f->seg.peers[i], atomic_load(&f->seg.peers[first]));
	assert_int_equal(peers_count(&f->seg, 0, (uint32_t)w), 2);
	assert_int_equal(peers_repair(&f->seg), 0);
	assert_int_equal(peers_count(&f->seg, 0, (uint32_t)w), 1);
	assert_int_equal(entries(f), 51);
	peers_forget_worker(&f->seg, 1);
	assert_int_equal(entries(f), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_limits_across_workers,
		    setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(test_counts_exact_under_churn,
		    setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(test_full_table_refuses,
		    setup, unit_segment_teardown),
		cmocka_unit_test_setup_teardown(test_repair_removes_a_duplicate,
		    setup, unit_segment_teardown),
	};

	/* randombytes_uniform's, as libsodium asks before any call. */
	if (sodium_init() < 0)
		return 1;
	return FILTER_RUN(tests);
}
