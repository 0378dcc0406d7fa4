/* SPDX-License-Identifier: ISC */
/*
 * peers.c: open connections counted per peer process and per peer uid
 * (SO_PEERCRED) across every worker, so that one local client cannot
 * hold all of --max-connections (--max-connections-per-pid,
 * --max-connections-per-uid).
 *
 * DESIGN
 *
 * A fixed open-addressing table (linear probing) in the segment, under
 * its own robust lock (never held with another).  One entry per (kind,
 * id, worker): each worker's share is kept apart so that the master can
 * give back a dead worker's connections (peers_forget_worker), as it
 * gives back its total.  An entry is one 64-bit word, so that every
 * change is a single store:
 *
 *	bits  0..31	the pid or uid
 *	bit  32		kind: 0 pid, 1 uid
 *	bits 33..39	worker index
 *	bits 40..63	connections (at least 1: an entry at 0 is deleted)
 *
 * A word of 0 is an empty slot.  Every entry of one (kind, id) lies in
 * the chain from its home slot to the next empty one, so the total of a
 * peer is the sum over that chain.  Deletion shifts later entries of the
 * chain back (no tombstones, so chains do not grow with dead pids).  A
 * worker dying in the middle of a shift leaves at worst one entry twice
 * in its chain (it is copied before its old place is reused); the repair
 * removes such duplicates, which no other path ever makes.
 */
#include <errno.h>
#include <string.h>

#include <sodium.h>

#include "shm.h"

#define PEER_ID(w)	((uint32_t)(w))
#define PEER_KIND(w)	((unsigned)((w) >> 32) & 1)
#define PEER_WORKER(w)	((unsigned)((w) >> 33) & 0x7f)
#define PEER_COUNT(w)	((uint32_t)((w) >> 40))
#define PEER_KEY(w)	((w) & ((1ULL << 40) - 1))	/* kind, id, worker */
#define PEER_PEER(w)	((w) & ((1ULL << 33) - 1))	/* kind, id */
#define PEER_MAX_COUNT	((1U << 24) - 1)

static uint64_t
peer_word(unsigned kind, uint32_t id, unsigned worker, uint32_t count)
{
	return (uint64_t)id | (uint64_t)(kind & 1) << 32 |
	    (uint64_t)(worker & 0x7f) << 33 | (uint64_t)count << 40;
}

static uint32_t
peer_home(struct shm_segment *seg, uint64_t peer)
{
	unsigned char	in[5], out[crypto_shorthash_siphash24_BYTES];
	uint32_t	h;

	in[0] = (unsigned char)(peer >> 32);
	in[1] = (unsigned char)peer;
	in[2] = (unsigned char)(peer >> 8);
	in[3] = (unsigned char)(peer >> 16);
	in[4] = (unsigned char)(peer >> 24);
	crypto_shorthash_siphash24(out, in, sizeof in, seg->header->hash_key);
	memcpy(&h, out, sizeof h);
	return h & (seg->header->peer_slots - 1);
}

/*
 * The chain of peer (kind, id): its total over all workers, the slot of
 * worker's own entry (-1: none) and the empty slot ending the chain
 * (-1: the table is full).
 */
static void
peer_scan(struct shm_segment *seg, uint64_t peer, unsigned worker,
    uint64_t *total, long *mine, long *empty)
{
	uint32_t	mask = seg->header->peer_slots - 1, i, n;
	uint64_t	w;

	*total = 0;
	*mine = -1;
	*empty = -1;
	i = peer_home(seg, peer);
	for (n = 0; n <= mask; n++, i = (i + 1) & mask) {
		w = atomic_load(&seg->peers[i]);
		if (w == 0) {
			*empty = i;
			return;
		}
		if (PEER_PEER(w) == peer) {
			*total += PEER_COUNT(w);
			if (PEER_WORKER(w) == worker)
				*mine = i;
		}
	}
}

/* Empty slot i, shifting back the entries of the chain after it. */
static void
peer_delete(struct shm_segment *seg, uint32_t i)
{
	uint32_t	mask = seg->header->peer_slots - 1, j = i, k, n;
	uint64_t	w;

	for (n = 0; n < mask; n++) {
		j = (j + 1) & mask;
		if ((w = atomic_load(&seg->peers[j])) == 0)
			break;
		k = peer_home(seg, PEER_PEER(w));
		/* Stays if its home lies cyclically in (i, j]. */
		if (i <= j ? (k > i && k <= j) : (k > i || k <= j))
			continue;
		atomic_store(&seg->peers[i], w);	/* now twice: see DESIGN */
		i = j;
	}
	atomic_store(&seg->peers[i], 0);
}

/* Add n (1 or -1) to worker's entry for peer. */
static int
peer_add(struct shm_segment *seg, uint64_t peer, unsigned worker, int n)
{
	uint64_t	total, w;
	long		mine, empty;

	peer_scan(seg, peer, worker, &total, &mine, &empty);
	if (mine >= 0) {
		w = atomic_load(&seg->peers[mine]);
		if (n < 0 && PEER_COUNT(w) <= 1)
			peer_delete(seg, (uint32_t)mine);
		else if (n > 0 && PEER_COUNT(w) >= PEER_MAX_COUNT)
			return -1;
		else
			atomic_store(&seg->peers[mine], n > 0 ?
			    w + (1ULL << 40) : w - (1ULL << 40));
		return 0;
	}
	if (n < 0)
		return 0;	/* never counted (a repair lost it): nothing owed */
	if (empty < 0)
		return -1;
	atomic_store(&seg->peers[empty], peer_word((unsigned)(peer >> 32),
	    (uint32_t)peer, worker, 1));
	return 0;
}

int
peers_repair(struct shm_segment *seg)
{
	uint32_t	mask = seg->header->peer_slots - 1, i, j, n;
	uint64_t	w, v;
	unsigned	removed = 0;

	for (i = 0; i <= mask; i++) {
		if ((w = atomic_load(&seg->peers[i])) == 0)
			continue;
		for (j = (i + 1) & mask, n = 0; n < mask; n++,
		    j = (j + 1) & mask) {
			if ((v = atomic_load(&seg->peers[j])) == 0)
				break;
			if (PEER_KEY(v) == PEER_KEY(w)) {
				peer_delete(seg, j);
				removed++;
				break;
			}
		}
	}
	if (removed > 0)
		shm_warn("peer table: removed %u entries a dead worker left "
		    "twice", removed);
	return 0;
}

enum peers_verdict
peers_admit(struct shm_segment *seg, unsigned worker, uint32_t pid,
    uint32_t uid, uint32_t max_per_pid, uint32_t max_per_uid)
{
	struct shm_header	*h = seg->header;
	uint64_t		 by_pid = peer_word(0, pid, 0, 0);
	uint64_t		 by_uid = peer_word(1, uid, 0, 0);
	uint64_t		 total;
	long			 mine, empty;
	enum peers_verdict	 verdict = PEERS_ADMITTED;

	if (shm_lock(seg, &h->peer_lock, peers_repair, "peer") != 0)
		return PEERS_UNCOUNTED;
	peer_scan(seg, by_pid, worker, &total, &mine, &empty);
	if (total >= max_per_pid) {
		verdict = PEERS_PID_LIMIT;
		goto out;
	}
	peer_scan(seg, by_uid, worker, &total, &mine, &empty);
	if (total >= max_per_uid) {
		verdict = PEERS_UID_LIMIT;
		goto out;
	}
	if (peer_add(seg, by_pid, worker, 1) != 0)
		verdict = PEERS_FULL;
	else if (peer_add(seg, by_uid, worker, 1) != 0) {
		peer_add(seg, by_pid, worker, -1);
		verdict = PEERS_FULL;
	}
out:
	shm_unlock(&h->peer_lock);
	return verdict;
}

void
peers_release(struct shm_segment *seg, unsigned worker, uint32_t pid,
    uint32_t uid)
{
	struct shm_header	*h = seg->header;

	if (shm_lock(seg, &h->peer_lock, peers_repair, "peer") != 0)
		return;
	peer_add(seg, peer_word(0, pid, 0, 0), worker, -1);
	peer_add(seg, peer_word(1, uid, 0, 0), worker, -1);
	shm_unlock(&h->peer_lock);
}

void
peers_forget_worker(struct shm_segment *seg, unsigned worker)
{
	struct shm_header	*h = seg->header;
	uint32_t		 mask = h->peer_slots - 1, i;
	uint64_t		 w;
	int			 again = 1;

	if (shm_lock(seg, &h->peer_lock, peers_repair, "peer") != 0)
		return;
	/* A shift can bring an entry of worker back to a slot passed. */
	while (again) {
		again = 0;
		for (i = 0; i <= mask; i++) {
			while ((w = atomic_load(&seg->peers[i])) != 0 &&
			    PEER_WORKER(w) == worker) {
				peer_delete(seg, i);
				again = 1;
			}
		}
	}
	shm_unlock(&h->peer_lock);
}

uint32_t
peers_count(struct shm_segment *seg, int by_uid, uint32_t id)
{
	struct shm_header	*h = seg->header;
	uint64_t		 total;
	long			 mine, empty;

	if (shm_lock(seg, &h->peer_lock, peers_repair, "peer") != 0)
		return 0;
	peer_scan(seg, peer_word(by_uid ? 1 : 0, id, 0, 0), 0, &total, &mine,
	    &empty);
	shm_unlock(&h->peer_lock);
	return (uint32_t)total;
}
