/* SPDX-License-Identifier: ISC */
/*
 * test_fastpath_begun.c: the proceeds' cache (broker/fastpath_begun.c),
 * alone.  A commit takes back the hint and external key its proceed
 * left only when the key (length and bytes), the attempt, the fence and
 * the request digest are all the proceed's: each is changed on its own
 * here and must miss, so that removing any one comparison fails a case.
 * A hit is consumed; a miss takes nothing; a proceed whose hint is not
 * valid, not an effect_begin's or of another key leaves the cache as it
 * was; two keys that share an entry, the newer wins.
 *
 * Which entry a key uses is found by asking the cache itself (a proceed
 * into an empty one, then the entry it filled), not by repeating its
 * hash here: two keys collide when they fill the same entry.  Keys that
 * do not share an entry would miss whatever is compared, so every miss
 * below that is about the key uses a key of the same entry.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "integration/filter.h"
#include "fastpath.h"
#include "protocol.h"
#include "shm.h"

/* An effect's table key: "kind 0x1f id", as the broker builds it. */
#define KEY_PLAIN	"email\x1f" "order-0000"

/* A hint of op for key, its fingerprint filled with mark. */
static struct fastpath_hint
hint_of(enum fastscan_op op, const char *key, size_t key_length,
    uint8_t mark)
{
	struct fastpath_hint	h;

	memset(&h, 0, sizeof h);
	h.valid = 1;
	h.op = op;
	memset(h.fingerprint, mark, sizeof h.fingerprint);
	assert_true(key_length <= sizeof h.key);
	h.key_length = key_length;
	memcpy(h.key, key, key_length);
	return h;
}

/* An effect's entry with attempt, fence and a digest filled with mark. */
static struct subtab_entry
entry_of(uint32_t attempt, uint64_t fence, uint8_t mark)
{
	struct subtab_entry	e;

	memset(&e, 0, sizeof e);
	e.attempt = attempt;
	e.fence = fence;
	memset(e.request_digest, mark, sizeof e.request_digest);
	return e;
}

/* An external key: 39 characters of mark and the NUL. */
static void
external_key_of(char out[IDEM_EFFECT_EXTERNAL_KEY_SIZE], char mark)
{
	memset(out, mark, IDEM_EFFECT_EXTERNAL_KEY_SIZE - 1);
	out[IDEM_EFFECT_EXTERNAL_KEY_SIZE - 1] = '\0';
}

/* A zeroed cache: empty. */
static struct fastpath *
cache_new(void)
{
	struct fastpath	*fp = calloc(1, sizeof *fp);

	assert_non_null(fp);
	return fp;
}

/* Proceed key with a hint of its own (fingerprint mark), entry, xkey. */
static void
proceed(struct fastpath *fp, const char *key, size_t key_length,
    uint8_t mark, const struct subtab_entry *e, char xmark)
{
	struct fastpath_hint	h;
	char			xkey[IDEM_EFFECT_EXTERNAL_KEY_SIZE];

	h = hint_of(FASTSCAN_EFFECT_BEGIN, key, key_length, mark);
	external_key_of(xkey, xmark);
	fastpath_effect_proceeded(fp, &h, key, key_length, e, xkey);
}

/* The entry of the cache that key uses: the one a proceed fills. */
static size_t
entry_index(const char *key, size_t key_length)
{
	struct fastpath		*fp = cache_new();
	struct subtab_entry	 e = entry_of(1, 1, 1);
	size_t			 i, found = FASTPATH_BEGUN;

	proceed(fp, key, key_length, 1, &e, 'x');
	for (i = 0; i < FASTPATH_BEGUN; i++)
		if (fp->begun[i].hint.valid) {
			assert_int_equal(found, FASTPATH_BEGUN);
			found = i;
		}
	assert_true(found < FASTPATH_BEGUN);
	free(fp);
	return found;
}

/* A key of the same length as KEY_PLAIN, another, in the same entry. */
static void
same_entry_same_length(char out[sizeof KEY_PLAIN])
{
	size_t	want = entry_index(KEY_PLAIN, strlen(KEY_PLAIN));
	int	n;

	/* 9,999 keys, each in the entry with a chance of 1 in 64. */
	for (n = 1; n < 10000; n++) {
		snprintf(out, sizeof KEY_PLAIN, "email\x1f" "order-%04d", n);
		if (entry_index(out, strlen(out)) == want)
			return;
	}
	fail_msg("no key of %zu bytes shares entry %zu", strlen(KEY_PLAIN),
	    want);
}

/*
 * A key (long) and a prefix of it (its first *prefix_length bytes) that
 * use the same entry.
 */
static void
same_entry_prefix(char *long_key, size_t size, size_t *prefix_length)
{
	int	n;

	for (n = 0; n < 10000; n++) {
		snprintf(long_key, size, "email\x1f" "order-%d/retry", n);
		*prefix_length = strlen(long_key) - strlen("/retry");
		if (entry_index(long_key, strlen(long_key)) ==
		    entry_index(long_key, *prefix_length))
			return;
	}
	fail_msg("no key and prefix share an entry");
}

/*
 * Whether the commit of e under key is one this cache remembers: if so,
 * its hint and external key are checked against the proceed's (mark,
 * xmark), and taken.
 */
static int
begun_as(struct fastpath *fp, const char *key, size_t key_length,
    const struct subtab_entry *e, uint8_t mark, char xmark)
{
	struct fastpath_hint	got, want;
	char			xkey[IDEM_EFFECT_EXTERNAL_KEY_SIZE];
	char			xwant[IDEM_EFFECT_EXTERNAL_KEY_SIZE];

	memset(&got, 0, sizeof got);
	if (!fastpath_effect_begun(fp, key, key_length, e, &got, xkey))
		return 0;
	want = hint_of(FASTSCAN_EFFECT_BEGIN, key, key_length, mark);
	assert_true(got.valid);
	assert_int_equal(got.op, FASTSCAN_EFFECT_BEGIN);
	assert_memory_equal(got.fingerprint, want.fingerprint,
	    sizeof want.fingerprint);
	assert_int_equal(got.key_length, key_length);
	assert_memory_equal(got.key, key, key_length);
	external_key_of(xwant, xmark);
	assert_memory_equal(xkey, xwant, sizeof xwant);
	return 1;
}

/* A proceed, then the commit of its attempt and fence: a hit, as kept. */
static void
test_commit_of_proceed_hits(void **state)
{
	struct fastpath		*fp = cache_new();
	struct subtab_entry	 e = entry_of(3, 0x1122334455667788ULL, 0xa5);

	(void)state;
	proceed(fp, KEY_PLAIN, strlen(KEY_PLAIN), 0x11, &e, 'k');
	assert_true(begun_as(fp, KEY_PLAIN, strlen(KEY_PLAIN), &e, 0x11,
	    'k'));
	free(fp);
}

/* The hit is consumed: the same commit asked again misses. */
static void
test_hit_is_consumed(void **state)
{
	struct fastpath		*fp = cache_new();
	struct subtab_entry	 e = entry_of(1, 42, 0x5a);

	(void)state;
	proceed(fp, KEY_PLAIN, strlen(KEY_PLAIN), 0x22, &e, 'c');
	assert_true(begun_as(fp, KEY_PLAIN, strlen(KEY_PLAIN), &e, 0x22,
	    'c'));
	assert_false(begun_as(fp, KEY_PLAIN, strlen(KEY_PLAIN), &e, 0x22,
	    'c'));
	free(fp);
}

/*
 * A commit differing from the proceed in one thing misses, and takes
 * nothing: the proceed's own commit still hits after it.
 */
static void
assert_miss_then_own_hit(const char *key, size_t key_length,
    const struct subtab_entry *other)
{
	struct fastpath		*fp = cache_new();
	struct subtab_entry	 e = entry_of(2, 0xfeedfacecafebeefULL, 0x3c);

	proceed(fp, KEY_PLAIN, strlen(KEY_PLAIN), 0x33, &e, 'm');
	assert_false(begun_as(fp, key, key_length, other != NULL ? other : &e,
	    0x33, 'm'));
	assert_true(begun_as(fp, KEY_PLAIN, strlen(KEY_PLAIN), &e, 0x33,
	    'm'));
	free(fp);
}

/* Another key of the same length, in the same entry (its bytes). */
static void
test_other_key_same_length_misses(void **state)
{
	char	other[sizeof KEY_PLAIN];

	(void)state;
	same_entry_same_length(other);
	assert_miss_then_own_hit(other, strlen(other), NULL);
}

/*
 * A prefix of the proceed's key, in the same entry (its length: the
 * bytes it has are the proceed's).
 */
static void
test_prefix_key_misses(void **state)
{
	struct fastpath		*fp = cache_new();
	struct subtab_entry	 e = entry_of(2, 77, 0x3c);
	char			 key[64];
	size_t			 prefix_length;

	(void)state;
	same_entry_prefix(key, sizeof key, &prefix_length);
	proceed(fp, key, strlen(key), 0x44, &e, 'p');
	assert_false(begun_as(fp, key, prefix_length, &e, 0x44, 'p'));
	assert_true(begun_as(fp, key, strlen(key), &e, 0x44, 'p'));
	free(fp);
}

/* Another attempt, fence equal. */
static void
test_other_attempt_misses(void **state)
{
	struct subtab_entry	e = entry_of(3, 0xfeedfacecafebeefULL, 0x3c);

	(void)state;
	assert_miss_then_own_hit(KEY_PLAIN, strlen(KEY_PLAIN), &e);
}

/* Another fence, attempt equal: only the random part differs. */
static void
test_other_fence_misses(void **state)
{
	struct subtab_entry	e = entry_of(2, 0xfeedfacecafebeeeULL, 0x3c);

	(void)state;
	assert_miss_then_own_hit(KEY_PLAIN, strlen(KEY_PLAIN), &e);
}

/* Another request digest: one byte changed, at its start, at its end. */
static void
test_other_request_digest_misses(void **state)
{
	struct subtab_entry	e = entry_of(2, 0xfeedfacecafebeefULL, 0x3c);

	(void)state;
	e.request_digest[0] ^= 0x01;
	assert_miss_then_own_hit(KEY_PLAIN, strlen(KEY_PLAIN), &e);
	e.request_digest[0] ^= 0x01;
	e.request_digest[sizeof e.request_digest - 1] ^= 0x80;
	assert_miss_then_own_hit(KEY_PLAIN, strlen(KEY_PLAIN), &e);
}

/*
 * A proceed of hint that the cache must not keep: afterwards the earlier
 * proceed of KEY_PLAIN still hits, and the refused one's commit misses.
 */
static void
assert_not_remembered(const struct fastpath_hint *hint)
{
	struct fastpath		*fp = cache_new();
	struct subtab_entry	 kept = entry_of(1, 1001, 0x66);
	struct subtab_entry	 refused = entry_of(2, 2002, 0x77);
	char			 xkey[IDEM_EFFECT_EXTERNAL_KEY_SIZE];
	struct fastpath_hint	 got;

	proceed(fp, KEY_PLAIN, strlen(KEY_PLAIN), 0x55, &kept, 'o');
	external_key_of(xkey, 'n');
	fastpath_effect_proceeded(fp, hint, KEY_PLAIN, strlen(KEY_PLAIN),
	    &refused, xkey);
	assert_false(fastpath_effect_begun(fp, KEY_PLAIN, strlen(KEY_PLAIN),
	    &refused, &got, xkey));
	assert_true(begun_as(fp, KEY_PLAIN, strlen(KEY_PLAIN), &kept, 0x55,
	    'o'));
	free(fp);
}

static void
test_invalid_hint_not_remembered(void **state)
{
	struct fastpath_hint	h = hint_of(FASTSCAN_EFFECT_BEGIN, KEY_PLAIN,
	    strlen(KEY_PLAIN), 0x99);

	(void)state;
	h.valid = 0;
	assert_not_remembered(&h);
}

static void
test_write_task_hint_not_remembered(void **state)
{
	struct fastpath_hint	h = hint_of(FASTSCAN_WRITE_TASK, KEY_PLAIN,
	    strlen(KEY_PLAIN), 0x99);

	(void)state;
	assert_not_remembered(&h);
}

/* A hint of another key: other bytes, a longer key, a shorter one. */
static void
test_hint_of_other_key_not_remembered(void **state)
{
	static const char	longer[] = KEY_PLAIN "0";
	struct fastpath_hint	h = hint_of(FASTSCAN_EFFECT_BEGIN, KEY_PLAIN,
	    strlen(KEY_PLAIN), 0x99);

	(void)state;
	h.key[strlen(KEY_PLAIN) - 1] ^= 0x01;
	assert_not_remembered(&h);
	h = hint_of(FASTSCAN_EFFECT_BEGIN, longer, strlen(longer), 0x99);
	assert_not_remembered(&h);
	h = hint_of(FASTSCAN_EFFECT_BEGIN, KEY_PLAIN, strlen(KEY_PLAIN) - 1,
	    0x99);
	assert_not_remembered(&h);
}

/*
 * Two keys in one entry, each proceeded with the same attempt, fence and
 * digest: the newer wins, the older misses (without taking the newer),
 * and the newer's commit gets the newer's hint and external key.
 */
static void
test_newer_key_in_entry_wins(void **state)
{
	struct fastpath		*fp = cache_new();
	struct subtab_entry	 e = entry_of(1, 9, 0x12);
	char			 other[sizeof KEY_PLAIN];

	(void)state;
	same_entry_same_length(other);
	proceed(fp, KEY_PLAIN, strlen(KEY_PLAIN), 0x01, &e, 'a');
	proceed(fp, other, strlen(other), 0x02, &e, 'b');
	assert_false(begun_as(fp, KEY_PLAIN, strlen(KEY_PLAIN), &e, 0x01,
	    'a'));
	assert_true(begun_as(fp, other, strlen(other), &e, 0x02, 'b'));
	free(fp);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_commit_of_proceed_hits),
		cmocka_unit_test(test_hit_is_consumed),
		cmocka_unit_test(test_other_key_same_length_misses),
		cmocka_unit_test(test_prefix_key_misses),
		cmocka_unit_test(test_other_attempt_misses),
		cmocka_unit_test(test_other_fence_misses),
		cmocka_unit_test(test_other_request_digest_misses),
		cmocka_unit_test(test_invalid_hint_not_remembered),
		cmocka_unit_test(test_write_task_hint_not_remembered),
		cmocka_unit_test(test_hint_of_other_key_not_remembered),
		cmocka_unit_test(test_newer_key_in_entry_wins),
	};

	return FILTER_RUN(tests);
}
