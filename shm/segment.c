/* SPDX-License-Identifier: ISC */
/*
 * segment.c: creating, attaching and destroying the shared-memory
 * segment, and its layout.  The creator fills the header and the locks,
 * and writes the magic last; an attacher refuses a segment whose magic or
 * layout (version, struct sizes, cache line, capacity) it does not share.
 */
#include <sys/mman.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "shm.h"

static size_t
round_up(size_t n, size_t to)
{
	return (n + to - 1) / to * to;
}

static uint32_t
bucket_count_for(uint32_t capacity)
{
	uint32_t	n = 16;

	while (n < 2 * (uint64_t)capacity)
		n <<= 1;
	return n;
}

static uint64_t
per_slot(uint32_t capacity, uint64_t bytes, uint64_t min, uint64_t max)
{
	uint64_t	n = (uint64_t)capacity * bytes;

	n = n < min ? min : n > max ? max : n;
	return n / 8 * 8;	/* whole 8-byte words: the rings copy words */
}

uint64_t
shm_arena_bytes_for_capacity(uint32_t capacity)
{
	return per_slot(capacity, SHM_ARENA_BYTES_PER_SLOT,
	    SHM_ARENA_MIN_BYTES, SHM_ARENA_MAX_BYTES);
}

uint64_t
shm_receipts_bytes_for_capacity(uint32_t capacity)
{
	return per_slot(capacity, SHM_RECEIPT_BYTES_PER_SLOT,
	    SHM_RECEIPT_STORE_MIN_BYTES, SHM_RECEIPT_STORE_MAX_BYTES);
}

/*
 * Offsets of every region after the header, and the total size; an
 * arena_bytes of 0 is the capacity's default.
 */
static void
layout(uint32_t capacity, uint64_t arena_bytes, struct shm_header *h)
{
	uint64_t	at;

	h->header_bytes = sizeof(struct shm_header);
	h->slot_bytes = sizeof(struct subtab_slot);
	h->cacheline_bytes = SHM_CACHELINE_BYTES;
	h->capacity = capacity;
	h->bucket_count = bucket_count_for(capacity);
	h->heap_bytes = (uint64_t)capacity * SHM_HEAP_BYTES_PER_SLOT +
	    SUBTAB_MAX_KEY_BYTES;
	h->ring_bytes = SHM_RING_BYTES;

	at = round_up(sizeof(struct shm_header), SHM_CACHELINE_BYTES);
	h->buckets_offset = at;
	at = round_up(at + (uint64_t)h->bucket_count * sizeof(uint32_t),
	    SHM_CACHELINE_BYTES);
	h->slots_offset = at;
	at += (uint64_t)capacity * sizeof(struct subtab_slot);
	h->heap_offset = at;
	at = round_up(at + h->heap_bytes, SHM_CACHELINE_BYTES);
	h->ring_offset = at;
	at = round_up(at + h->ring_bytes, SHM_CACHELINE_BYTES);
	h->arena_bytes = arena_bytes == 0 ?
	    shm_arena_bytes_for_capacity(capacity) : arena_bytes / 8 * 8;
	h->arena_offset = at;
	at = round_up(at + h->arena_bytes, 4096);
	h->receipts_bytes = shm_receipts_bytes_for_capacity(capacity);
	h->receipts_offset = at;
	at = round_up(at + h->receipts_bytes, 4096);
	h->peer_slots = SHM_PEER_SLOTS;
	h->peers_offset = at;
	at = round_up(at + (uint64_t)h->peer_slots * sizeof(uint64_t), 4096);
	h->sighted_offset = at;
	at = round_up(at + (uint64_t)SUBTAB_KIND_COUNT *
	    SEQALLOC_SIGHTED_BYTES, 4096);
	h->total_bytes = at;
}

size_t
shm_bytes_for_capacity(uint32_t capacity)
{
	struct shm_header	h;

	layout(capacity, 0, &h);
	return h.total_bytes;
}

int64_t
shm_now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void
shm_name_for_root(const char *root_realpath, char name[64])
{
	unsigned char	hash[crypto_hash_sha256_BYTES];
	char		hex[17];

	crypto_hash_sha256(hash, (const unsigned char *)root_realpath,
	    strlen(root_realpath));
	sodium_bin2hex(hex, sizeof hex, hash, 8);
	snprintf(name, 64, "/idem-%s", hex);
}

static void
locate(struct shm_segment *seg)
{
	char	*base = (char *)seg->header;

	seg->buckets = (uint32_t *)(base + seg->header->buckets_offset);
	seg->slots = (struct subtab_slot *)(base + seg->header->slots_offset);
	seg->heap = base + seg->header->heap_offset;
	seg->ring = (uint8_t *)(base + seg->header->ring_offset);
	seg->arena = (uint8_t *)(base + seg->header->arena_offset);
	seg->receipts = (uint8_t *)(base + seg->header->receipts_offset);
	seg->peers = (_Atomic uint64_t *)(base + seg->header->peers_offset);
	seg->sighted = (uint8_t *)(base + seg->header->sighted_offset);
}

int
shm_create(const char *root_realpath, uint32_t capacity,
    struct shm_segment *seg, char **cause)
{
	return shm_create_sized(root_realpath, capacity, 0, seg, cause);
}

int
shm_create_sized(const char *root_realpath, uint32_t capacity,
    uint64_t arena_bytes, struct shm_segment *seg, char **cause)
{
	struct shm_header	 h, *header;
	void			*base;
	int			 fd;
	unsigned		 i;

	memset(seg, 0, sizeof *seg);
	if (capacity == 0 || capacity > SHM_MAX_CAPACITY) {
		asprintf(cause, "capacity %u out of range", capacity);
		return -1;
	}
	shm_name_for_root(root_realpath, seg->name);
	if (arena_bytes > (1ULL << 40) || (arena_bytes != 0 &&
	    arena_bytes / 8 * 8 < SHM_ARENA_LEAST_BYTES)) {
		asprintf(cause, "result arena of %llu bytes out of range: "
		    "at least %llu (one result of the largest size, %u "
		    "bytes, and its header), at most 2^40",
		    (unsigned long long)arena_bytes,
		    (unsigned long long)SHM_ARENA_LEAST_BYTES,
		    (unsigned)SHM_MAX_RESULT_BYTES);
		return -1;
	}
	memset(&h, 0, sizeof h);
	layout(capacity, arena_bytes, &h);

	/*
	 * The journal is the truth; a segment left by a dead broker is
	 * stale by definition, and the caller holds the root's lock.
	 */
	shm_unlink(seg->name);
	fd = shm_open(seg->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd == -1) {
		asprintf(cause, "shm_open %s: %s", seg->name, strerror(errno));
		return -1;
	}
	if (ftruncate(fd, (off_t)h.total_bytes) == -1) {
		asprintf(cause, "ftruncate %s to %llu bytes: %s", seg->name,
		    (unsigned long long)h.total_bytes, strerror(errno));
		goto fail;
	}
	base = mmap(NULL, h.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
	    fd, 0);
	if (base == MAP_FAILED) {
		asprintf(cause, "mmap %s: %s", seg->name, strerror(errno));
		goto fail;
	}
	close(fd);

	header = base;
	memcpy(header, &h, sizeof h);
	header->magic = 0;
	header->layout_version = SHM_LAYOUT_VERSION;
	header->started_at_ms = shm_now_ms();
	randombytes_buf(header->hash_key, sizeof header->hash_key);
	if (shm_lock_init(&header->table_lock) != 0 ||
	    shm_lock_init(&header->alloc_lock) != 0 ||
	    shm_lock_init(&header->ring_lock) != 0 ||
	    shm_lock_init(&header->peer_lock) != 0) {
		asprintf(cause, "initialising robust mutexes: %s",
		    strerror(errno));
		munmap(base, h.total_bytes);
		shm_unlink(seg->name);
		return -1;
	}
	for (i = 0; i < SHM_MAX_WORKERS; i++)
		atomic_store(&header->workers[i].generation, 1);
	seg->header = header;
	seg->size = h.total_bytes;
	locate(seg);
	/* ftruncate gave zeroed pages: buckets and slots start empty. */
	atomic_store_explicit(&header->magic, SHM_MAGIC, memory_order_release);
	return 0;

fail:
	close(fd);
	shm_unlink(seg->name);
	return -1;
}

int
shm_attach(const char *root_realpath, struct shm_segment *seg, char **cause)
{
	struct shm_header	 expect, *header;
	struct stat		 st;
	void			*base;
	int			 fd;

	memset(seg, 0, sizeof *seg);
	shm_name_for_root(root_realpath, seg->name);
	fd = shm_open(seg->name, O_RDWR | O_CLOEXEC, 0);
	if (fd == -1) {
		asprintf(cause, "shm_open %s: %s", seg->name, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) == -1 || (size_t)st.st_size < sizeof *header) {
		asprintf(cause, "segment %s is too small", seg->name);
		close(fd);
		return -1;
	}
	base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
	    MAP_SHARED, fd, 0);
	close(fd);
	if (base == MAP_FAILED) {
		asprintf(cause, "mmap %s: %s", seg->name, strerror(errno));
		return -1;
	}
	header = base;
	memset(&expect, 0, sizeof expect);
	layout(header->capacity, header->arena_bytes, &expect);
	if (atomic_load_explicit(&header->magic, memory_order_acquire) !=
	    SHM_MAGIC || header->layout_version != SHM_LAYOUT_VERSION ||
	    header->header_bytes != expect.header_bytes ||
	    header->slot_bytes != expect.slot_bytes ||
	    header->cacheline_bytes != expect.cacheline_bytes ||
	    header->total_bytes != expect.total_bytes ||
	    header->peer_slots != expect.peer_slots ||
	    header->total_bytes != (uint64_t)st.st_size) {
		asprintf(cause, "segment %s has another layout or is not "
		    "initialised", seg->name);
		munmap(base, (size_t)st.st_size);
		return -1;
	}
	seg->header = header;
	seg->size = (size_t)st.st_size;
	locate(seg);
	return 0;
}

void
shm_detach(struct shm_segment *seg)
{
	if (seg->header != NULL)
		munmap(seg->header, seg->size);
	seg->header = NULL;
}

void
shm_destroy(struct shm_segment *seg)
{
	shm_detach(seg);
	if (seg->name[0] != '\0')
		shm_unlink(seg->name);
}
