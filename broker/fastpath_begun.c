/* SPDX-License-Identifier: ISC */
/*
 * fastpath_begun.c: the worker's proceeds, until their commit: the begin
 * lines this worker answered proceed to, by key, with the attempt and
 * fence each was given, its request digest and the external key it was
 * told (fastpath_effect_proceeded).  A commit of that attempt with that
 * fence takes the line's hint and the external key back
 * (fastpath_effect_begun), so that effect.c stores the reply its retries
 * get at the commit itself, and the first retry after a commit is fast
 * too (fastpath.c, DESIGN).
 *
 * A cache, never an authority: one entry a key's hash (FASTPATH_BEGUN
 * entries, in the worker's struct fastpath), a newer proceed overwrites
 * whatever the entry held, a hit is consumed, and a complete on another
 * worker finds nothing here.  A miss only costs the first retry the full
 * path, which stores the reply then.  A hit must be exact, so every
 * field is compared: the key (length and bytes), the attempt, the fence
 * and the request digest.  Nothing here is a file-scope variable.
 */
#include <string.h>

#include <sodium.h>

#include "fastpath.h"

/* Which entry a key uses: libsodium's short hash, under a fixed key. */
static struct fastpath_begun *
begun_of(struct fastpath *fp, const char *key, size_t key_length)
{
	static const unsigned char	 hash_key[crypto_shorthash_KEYBYTES];
	unsigned char			 h[crypto_shorthash_BYTES];

	crypto_shorthash(h, (const unsigned char *)key, key_length,
	    hash_key);
	return &fp->begun[h[0] % FASTPATH_BEGUN];
}

void
fastpath_effect_proceeded(struct fastpath *fp,
    const struct fastpath_hint *hint, const char *key, size_t key_length,
    const struct subtab_entry *entry, const char *external_key)
{
	struct fastpath_begun	*b;

	if (!hint->valid || hint->op != FASTSCAN_EFFECT_BEGIN ||
	    hint->key_length != key_length ||
	    memcmp(hint->key, key, key_length) != 0)
		return;
	b = begun_of(fp, key, key_length);
	b->hint = *hint;
	b->attempt = entry->attempt;
	b->fence = entry->fence;
	memcpy(b->request_digest, entry->request_digest,
	    sizeof b->request_digest);
	memcpy(b->external_key, external_key, sizeof b->external_key);
}

int
fastpath_effect_begun(struct fastpath *fp, const char *key,
    size_t key_length, const struct subtab_entry *entry,
    struct fastpath_hint *hint,
    char external_key[IDEM_EFFECT_EXTERNAL_KEY_SIZE])
{
	struct fastpath_begun	*b = begun_of(fp, key, key_length);

	/*
	 * The fence's random part is drawn for each proceed: equal, the
	 * commit is of the attempt that line was given.  The external key
	 * is a function of the key and the request digest, both compared.
	 */
	if (!b->hint.valid || b->hint.key_length != key_length ||
	    memcmp(b->hint.key, key, key_length) != 0 ||
	    b->attempt != entry->attempt || b->fence != entry->fence ||
	    memcmp(b->request_digest, entry->request_digest,
	    sizeof b->request_digest) != 0)
		return 0;
	*hint = b->hint;
	memcpy(external_key, b->external_key, sizeof b->external_key);
	b->hint.valid = 0;
	return 1;
}
