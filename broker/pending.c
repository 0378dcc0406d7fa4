/* SPDX-License-Identifier: ISC */
/*
 * pending.c: a request that has to wait, and the journal hand-off.
 *
 * A request that changes state answers only once its journal record is
 * durable (SPEC.md: nothing acknowledged before it is fsync'd), and an
 * identical request waits for the one in flight.  Such a request becomes
 * a struct pending: pending_journal*() encodes its record, appends it to
 * the shared ring (handoff.c; subtab_record() for a claimed slot's new
 * state) and parks it on its worker; the master's journaling thread
 * flushes and wakes the workers with requests parked, and
 * pending_run_parked() resumes each request whose wait is over
 * (durable, room in the ring, or a claim released or timed out) by
 * calling its resume function.  Whatever the
 * outcome, the request ends in pending_reply(), once.
 *
 * One record is acknowledged before it is durable, by SPEC.md's leave:
 * an effect's lease extension (pending_journal_slot_nowait) that does
 * not shorten the lease (effect.c).  Lost in a crash, it leaves the
 * last durable expiry, an earlier one, which can only make an outcome
 * unknown sooner, never let a second caller in.
 *
 * A pending outlives its connection: a peer that is gone leaves it
 * running (p->conn NULL) so that the state it changes stays consistent;
 * only the reply is dropped.  This file never reads a socket: the
 * connection's side (worker.c) is reached through conn_start() and
 * conn_answer().
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>

#include "log.h"
#include "idemd.h"

struct pending *
pending_new(struct conn *c, json_t *id)
{
	struct pending	*p;

	if ((p = calloc(1, sizeof *p)) == NULL)
		return NULL;
	p->worker = conn_worker(c);
	p->conn = c;
	p->id = id != NULL ? json_incref(id) : NULL;
	p->wait = PENDING_RUNNING;
	conn_start(c, p);
	p->worker->running++;
	return p;
}

/*
 * pending_new with the op's own state: op_size bytes zeroed, freed with
 * op_free.  NULL if either is out of memory, the request then answered.
 */
struct pending *
pending_new_op(struct conn *c, json_t *id, size_t op_size,
    void (*op_free)(void *))
{
	struct pending	*p;
	void		*op;

	p = pending_new(c, id);
	op = calloc(1, op_size);
	if (p == NULL || op == NULL) {
		free(op);
		if (p != NULL)
			pending_reply(p, reply_error_simple(id, WIRE_INTERNAL,
			    1, "out of memory"));
		return NULL;
	}
	p->op = op;
	p->op_free = op_free;
	return p;
}

void
pending_free(struct pending *p)
{
	struct worker	*w = p->worker;

	w->running--;
	if (p->deadline != NULL)
		event_free(p->deadline);
	if (p->op_free != NULL)
		p->op_free(p->op);
	free(p->record_big);
	json_decref(p->id);
	free(p);
	worker_maybe_exit(w);
}

void
pending_reply(struct pending *p, json_t *reply)
{
	if (p->conn != NULL)
		conn_answer(p->conn, reply);
	else
		json_decref(reply);	/* the peer is gone */
	pending_free(p);
}

void
pending_reply_text(struct pending *p, const char *text, size_t length)
{
	if (p->conn != NULL)
		conn_answer_text(p->conn, text, length);
	pending_free(p);
}

/*
 * Count a request that is about to wait for durability or ring room
 * (before its record is appended or its durability judged: a journaler
 * that does not see the count has flushed nothing it waits for), and
 * uncount it when the wait ends.
 */
static void
loop_waiter(struct pending *p, int delta)
{
	struct shm_worker	*sw =
	    &p->worker->d->seg.header->workers[p->worker->index];

	/* This worker's count: a flush wakes only the loops that wait. */
	if (delta > 0)
		atomic_fetch_add(&sw->loop_waiters, 1);
	else
		atomic_fetch_sub(&sw->loop_waiters, 1);
}

static void
park(struct pending *p, enum pending_wait wait)
{
	p->wait = wait;
	TAILQ_INSERT_TAIL(&p->worker->parked, p, entry);
}

static void
unpark(struct pending *p)
{
	TAILQ_REMOVE(&p->worker->parked, p, entry);
	p->wait = PENDING_RUNNING;
}

/*
 * The journaler's kick for the records this loop appends: once the loop
 * has run every callback that was ready (worker.c's pass, then
 * pending_kick), so that the requests of one pass go to the journal
 * together, in one round, for one kick; at the latest every
 * PENDING_KICK_BATCH records, so that no pass holds the journal back
 * for long.  And only a journaler that sleeps is kicked: a busy one
 * takes the records with its next round (journaler_kick_idle: the ring
 * lock orders the appends before the look at its flag).
 */
#define PENDING_KICK_BATCH	32

void
pending_kick(struct worker *w)
{
	if (w->unkicked == 0)
		return;
	crash_point(CRASH_BEFORE_JOURNAL_KICK);
	w->unkicked = 0;
	journaler_kick_idle(w->d->seg.header, w->d->kick_fd);
}

static void
pending_kick_later(struct worker *w)
{
	if (++w->unkicked >= PENDING_KICK_BATCH)
		pending_kick(w);
}

static void
pending_try_append(struct pending *p)
{
	struct idemd	*d = p->worker->d;
	uint64_t	 end;

	/* Read before the append: an epoch that ends meanwhile judges the
	 * record lost, never the other way round (handoff.c). */
	p->epoch = handoff_epoch(d->seg.header);
	loop_waiter(p, 1);
	if ((p->record_claim != NULL ? subtab_record(&d->seg, p->record_slot,
	    p->record_claim, p->record_entry, p->record_data,
	    p->record_length, &end) : handoff_append(&d->seg, p->record_data,
	    p->record_length, &end)) != 0) {
		if (errno == ENOSPC) {
			/* The journaler's next flush frees room and wakes us. */
			park(p, PENDING_RING);
			journaler_kick(d->kick_fd);
			return;
		}
		loop_waiter(p, -1);
		log_warn("appending to the journal ring");
		p->journal_failed = 1;
		p->resume(p);
		return;
	}
	atomic_fetch_add(&d->seg.header->counters.journal_records,
	    p->record_count);
	p->wait_end = end;
	if (p->record_nowait) {
		/* In the ring is enough: the next round flushes it. */
		loop_waiter(p, -1);
		pending_kick_later(p->worker);
		p->resume(p);
		return;
	}
	park(p, PENDING_DURABLE);
	pending_kick_later(p->worker);
}

static void	pending_encode_append(struct pending *,
		    const struct journal_record *, pending_resume_fn);

void
pending_journal_slot(struct pending *p, const struct journal_record *record,
    uint32_t slot, const struct subtab_claim *claim,
    const struct subtab_entry *entry, pending_resume_fn resume)
{
	p->record_slot = slot;
	p->record_claim = claim;
	p->record_entry = entry;
	p->record_nowait = 0;
	pending_encode_append(p, record, resume);
}

void
pending_journal_slot_nowait(struct pending *p,
    const struct journal_record *record, uint32_t slot,
    const struct subtab_claim *claim, const struct subtab_entry *entry,
    pending_resume_fn resume)
{
	p->record_slot = slot;
	p->record_claim = claim;
	p->record_entry = entry;
	p->record_nowait = 1;
	pending_encode_append(p, record, resume);
}

void
pending_journal_slot_pair(struct pending *p, const struct journal_record *first,
    const struct journal_record *second, uint32_t slot,
    const struct subtab_claim *claim, const struct subtab_entry *entry,
    pending_resume_fn resume)
{
	size_t	n;

	p->record_slot = slot;
	p->record_claim = claim;
	p->record_entry = entry;
	p->record_nowait = 0;
	p->resume = resume;
	p->journal_failed = 0;
	p->record_count = 2;
	p->record_data = p->record;
	n = journal_encode(first, p->record, sizeof p->record);
	p->record_length = n == 0 ? 0 : journal_encode(second, p->record + n,
	    sizeof p->record - n);
	if (p->record_length == 0) {
		log_warn("encoding a journal record");
		p->journal_failed = 1;
		resume(p);
		return;
	}
	p->record_length += n;
	pending_try_append(p);
}

void
pending_wait_durable(struct pending *p, uint64_t end, uint64_t epoch,
    pending_resume_fn resume)
{
	p->resume = resume;
	p->journal_failed = 0;
	p->wait_end = end;
	p->epoch = epoch;
	loop_waiter(p, 1);
	park(p, PENDING_DURABLE);
	/* Already durable: the next wake-up resumes it; make sure one comes. */
	event_active(p->worker->local_wake_ev, EV_READ, 0);
}

void
pending_journal(struct pending *p, const struct journal_record *record,
    pending_resume_fn resume)
{
	p->record_claim = NULL;
	p->record_nowait = 0;
	pending_encode_append(p, record, resume);
}

static void
pending_encode_append(struct pending *p, const struct journal_record *record,
    pending_resume_fn resume)
{
	size_t	size;

	p->resume = resume;
	p->journal_failed = 0;
	p->record_count = 1;
	size = journal_encoded_size(record);
	if (size <= sizeof p->record)
		p->record_data = p->record;
	else {
		free(p->record_big);
		if ((p->record_big = malloc(size)) == NULL) {
			log_warn("a journal record of %zu bytes", size);
			p->journal_failed = 1;
			resume(p);
			return;
		}
		p->record_data = p->record_big;
	}
	p->record_length = journal_encode(record, (uint8_t *)p->record_data,
	    size);
	if (p->record_length == 0) {
		log_warn("encoding a journal record");
		p->journal_failed = 1;
		resume(p);
		return;
	}
	pending_try_append(p);
}

static void
pending_deadline(evutil_socket_t fd, short events, void *arg)
{
	struct pending	*p = arg;

	if (p->wait != PENDING_CLAIM)
		return;
	unpark(p);
	p->timed_out = 1;
	p->resume(p);
}

void
pending_wait_claim(struct pending *p, pending_resume_fn resume)
{
	struct timeval	tv;
	int		ms = p->worker->d->inflight_wait_ms;

	p->resume = resume;
	if (p->deadline == NULL) {
		p->deadline = evtimer_new(p->worker->base, pending_deadline, p);
		if (p->deadline == NULL) {
			p->timed_out = 1;
			resume(p);
			return;
		}
		tv.tv_sec = ms / 1000;
		tv.tv_usec = (ms % 1000) * 1000;
		evtimer_add(p->deadline, &tv);
	}
	park(p, PENDING_CLAIM);
}

void
pending_run_parked(struct worker *w)
{
	struct shm_header	*h = w->d->seg.header;
	TAILQ_HEAD(, pending)	 ready = TAILQ_HEAD_INITIALIZER(ready);
	struct pending		*p, *next;
	int			 durable;

	for (p = TAILQ_FIRST(&w->parked); p != NULL; p = next) {
		next = TAILQ_NEXT(p, entry);
		if (p->wait == PENDING_DURABLE) {
			/* Judged once: resume acts on this verdict. */
			durable = handoff_is_durable(h, p->wait_end, p->epoch);
			if (durable == 0)
				continue;
			p->journal_failed = durable < 0;
		}
		TAILQ_REMOVE(&w->parked, p, entry);
		TAILQ_INSERT_TAIL(&ready, p, entry);
	}
	/* Resuming may park again: on w->parked, not on this list. */
	while ((p = TAILQ_FIRST(&ready)) != NULL) {
		TAILQ_REMOVE(&ready, p, entry);
		switch (p->wait) {
		case PENDING_DURABLE:
			p->wait = PENDING_RUNNING;
			loop_waiter(p, -1);
			p->resume(p);
			break;
		case PENDING_RING:
			p->wait = PENDING_RUNNING;
			loop_waiter(p, -1);
			pending_try_append(p);
			break;
		case PENDING_CLAIM:
			p->wait = PENDING_RUNNING;
			p->resume(p);
			break;
		case PENDING_RUNNING:
			break;
		}
	}
}

/* A loopbreak or loopexit asked for: the loop must not run again. */
static int
pending_loop_ends(struct worker *w)
{
	return event_base_got_break(w->base) || event_base_got_exit(w->base);
}

/* No more connections open across the broker than the gate allows. */
static int
pending_lone_client(struct worker *w)
{
	return atomic_load(&w->d->seg.header->connections) <=
	    w->spin_max_connections;
}

/*
 * The watch.  A loop whose pass ended with requests parked for
 * durability (its loop_waiters) would sleep in epoll_wait until the
 * journaler's flush writes its wake eventfd.  On a virtual machine whose
 * idle vCPUs halt, waking a thread on one costs more than the rest of a
 * hand-off (doc/effects.md, "Where a lone client's write goes": about
 * 20 us from the wake-up to the thread running, against 3 to 8 us on a
 * CPU that is awake), and a lone client paid it on most records, once
 * or twice.  So the loop first watches the durable position in the
 * segment for at most w->watch_us (IDEM_WORKER_WATCH_US), and says so
 * (its shm_worker's watching) so that the flush skips the eventfd
 * write; once its requests are answered it watches for the next one for
 * at most IDEM_WORKER_LINGER_US (a lone client's next request comes
 * that soon), and so on, each bound counted from the last change: the
 * loop sleeps only once a bound ran out.  Between looks it runs
 * whatever else is ready (another client's request, a timer, without
 * blocking) and gives its CPU to any other runnable thread
 * (sched_yield): the journaling thread and the clients are not kept
 * waiting by it.  When it stops, it clears the flag and judges its
 * parked requests once more: a flush that saw the flag set and wrote
 * nothing published ring_durable before it read the flag, so this look
 * finds it (both sides store, then load the other's word, all
 * sequentially consistent).  A request is still answered only once
 * handoff_is_durable says its record is.
 *
 * Only for a lone client: with more than IDEM_SPIN_MAX_CONNECTIONS
 * connections open across the broker (the segment's count, looked at
 * before the watch and at each look) the loop sleeps at once, as
 * without the watch.  Several clients' requests overlap and keep the
 * vCPUs awake, the journal's batching does the rest, and a watch would
 * take CPU from them.
 */
void
pending_watch(struct worker *w)
{
	struct shm_header	*h = w->d->seg.header;
	struct shm_worker	*sw = &h->workers[w->index];
	uint64_t		 durable, epoch, seen_durable, seen_epoch;
	int64_t			 since, bound;
	int			 waiting, was_waiting;

	if (w->watch_us == 0 || atomic_load(&sw->loop_waiters) == 0 ||
	    !pending_lone_client(w))
		return;
	atomic_store(&sw->watching, 1);
	atomic_thread_fence(memory_order_seq_cst);
	since = clock_monotonic_us();
	was_waiting = 1;
	seen_durable = atomic_load(&h->ring_durable);
	seen_epoch = atomic_load(&h->journal_epoch);
	/*
	 * A flush published just before the flag was set may have read it
	 * clear yet not woken this loop (its loop_waiters read earlier), and
	 * the snapshot above already holds its position: judge the parked
	 * requests once now, or they would wait out the whole bound.
	 */
	pending_run_parked(w);
	for (;;) {
		durable = atomic_load(&h->ring_durable);
		epoch = atomic_load(&h->journal_epoch);
		if (durable != seen_durable || epoch != seen_epoch) {
			seen_durable = durable;
			seen_epoch = epoch;
			pending_run_parked(w);
		}
		/*
		 * A request resumed here may end the loop (worker_maybe_exit's
		 * loopbreak): stop before the next event_base_loop, which
		 * would clear that flag; worker_main looks at it next.
		 */
		if (pending_loop_ends(w))
			break;
		/* Another client's request, a reply's end, as the loop. */
		if (event_base_loop(w->base, EVLOOP_NONBLOCK) != 0 ||
		    pending_loop_ends(w))
			break;
		pending_kick(w);
		/* Waiting for durability, or for the next request. */
		waiting = atomic_load(&sw->loop_waiters) != 0;
		if (waiting != was_waiting) {
			was_waiting = waiting;
			since = clock_monotonic_us();
		}
		bound = waiting ? w->watch_us : IDEM_WORKER_LINGER_US;
		if (clock_monotonic_us() - since >= bound ||
		    !pending_lone_client(w))
			break;
		sched_yield();
	}
	atomic_store(&sw->watching, 0);
	atomic_thread_fence(memory_order_seq_cst);
	pending_run_parked(w);
	pending_kick(w);
}

/* The worker's loop has ended: its parked requests will never resume. */
void
pending_free_parked(struct worker *w)
{
	struct pending	*p;

	while ((p = TAILQ_FIRST(&w->parked)) != NULL) {
		TAILQ_REMOVE(&w->parked, p, entry);
		if (p->wait == PENDING_DURABLE || p->wait == PENDING_RING)
			loop_waiter(p, -1);
		pending_free(p);
	}
}
