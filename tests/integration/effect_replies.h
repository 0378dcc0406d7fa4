/* SPDX-License-Identifier: ISC */
/*
 * effect_replies.h: the checks of every effect reply over a raw
 * connection to a broker (effect_replies.c), for a test program on
 * either store.  Each fails the running cmocka test on a reply that is
 * not jansson's bytes in SPEC.md's order or a receipt that differs.
 */
#ifndef IDEM_TEST_EFFECT_REPLIES_H
#define IDEM_TEST_EFFECT_REPLIES_H

struct broker;

/* Every answer but a lapse's, for results of every kind and size. */
void	effect_replies_answers(int fd);
/* Leases that lapse: outcome_unknown, stored, recovered; every id. */
void	effect_replies_lapses(int fd);
/*
 * The local store's tombstone: b started with
 * effect_replies_compact_args (the least arena, a checkpoint every 4
 * KiB), its receipt compacted (idemctl) and its bytes reused.
 */
extern const char *const effect_replies_compact_args[];
void	effect_replies_tombstone(struct broker *b, int fd);

#endif
