/* SPDX-License-Identifier: ISC */
/*
 * fastpath.h: retries answered from a stored reply, without the parse
 * (fastpath.c), and the proceeds kept until their commit
 * (fastpath_begun.c).
 */
#ifndef IDEM_FASTPATH_H
#define IDEM_FASTPATH_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "fastscan.h"
#include "protocol.h"
#include "shm.h"

struct conn;
struct idemd;
struct submission;

/* The fingerprint of the request being handled, for fastpath_remember. */
struct fastpath_hint {
	int		 valid;
	enum fastscan_op op;
	uint8_t		 fingerprint[IDEM_FAST_FINGERPRINT_BYTES];
	/* The table's key: the submission id, or "kind 0x1f id" (effects). */
	size_t		 key_length;
	char		 key[SUBTAB_MAX_KEY_BYTES];
};

/*
 * A begin line this worker answered proceed to, with the attempt and
 * fence it was given and the external key it was told, of that request
 * digest (fastpath_effect_proceeded): its commit's receipt names the same
 * key, which is then not hashed again.
 */
struct fastpath_begun {
	struct fastpath_hint	hint;
	uint32_t		attempt;
	uint64_t		fence;
	uint8_t			request_digest[IDEM_SHA256_BYTES];
	char			external_key[IDEM_EFFECT_EXTERNAL_KEY_SIZE];
};

#define FASTPATH_BEGUN		64

/*
 * A worker's fast path (struct worker's fast, passed to every call that
 * needs it): the fingerprint of the line being dispatched, kept between
 * fastpath_answer and the op (fastpath_hint_take), and the proceeds'
 * cache, until their commit.  Zeroed: empty.
 */
struct fastpath {
	struct fastpath_hint	current;
	struct fastpath_begun	begun[FASTPATH_BEGUN];
};

/*
 * Answer line from the receipt store if it is a retry the fast path
 * knows (1: answered, counted and sent); 0: handle it in full.  Either
 * way the line's fingerprint is kept for fastpath_hint_take.
 */
int	fastpath_answer(struct conn *, const char *line, size_t length);
/*
 * The kept fingerprint, once: op_write_task or op_effect_begin, while
 * its line is handled.
 */
void	fastpath_hint_take(struct fastpath *, struct fastpath_hint *);
/*
 * Store the reply a retry of a durably committed write-task-v1
 * submission gets, for the request of hint, unless one is stored.
 */
void	fastpath_remember(struct idemd *, const struct fastpath_hint *,
	    const struct submission *, json_t *receipt);
/*
 * Store text (a reply after its {"ok":true,, without "id"), the answer
 * a retry of the effect_begin of hint gets, built from entry (its
 * effect's, under key) and the result's bytes once it is durably
 * committed, if the table still holds entry; unless one is stored.
 */
void	fastpath_remember_effect_text(struct idemd *,
	    const struct fastpath_hint *, const char *key, size_t key_length,
	    const struct subtab_entry *entry, const char *text, size_t length);
/*
 * effect_begin answered proceed (entry: its attempt and fence) to the
 * line of hint, with external_key: kept until that attempt commits,
 * for fastpath_effect_begun.
 */
void	fastpath_effect_proceeded(struct fastpath *,
	    const struct fastpath_hint *, const char *key, size_t key_length,
	    const struct subtab_entry *entry, const char *external_key);
/*
 * Whether this worker answered proceed to the attempt and fence of
 * entry, now committing, under key: 1 with that line's hint and the
 * external key the proceed gave (both taken).
 */
int	fastpath_effect_begun(struct fastpath *, const char *key,
	    size_t key_length, const struct subtab_entry *entry,
	    struct fastpath_hint *,
	    char external_key[IDEM_EFFECT_EXTERNAL_KEY_SIZE]);

#endif
