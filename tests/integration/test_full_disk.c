/* SPDX-License-Identifier: ISC */
/*
 * test_full_disk.c: idemd on a real file system that fills up.  The
 * root is a small tmpfs mounted for the test, so the disk is really
 * full: no shim, every write and flush of the broker (journal, TASK
 * files, directories) meets the kernel's own ENOSPC.
 *
 * While it is full the broker must keep every connection and every
 * worker, answer what needs no new durable write and refuse the rest
 * storage_unavailable (storage_probe.c); once space is freed, writes
 * resume by themselves (the test measures how fast), each refused id
 * completes with one TASK file, and no acknowledged receipt is lost or
 * changed, across a restart too.
 *
 * Mounting needs root: as anyone else, or where the mount is refused
 * (a container without the capability), the test skips (exit 77) and
 * says why.
 */
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sodium.h>

#include "integration/filter.h"
#include "integration/harness.h"
#include "integration/storage_probe.h"

#define TEST_WATCHDOG_SECONDS	60
/* Room for the topology, the journal and a few files; then filled. */
#define TEST_FS_OPTIONS		"size=1m,mode=0755"
#define TEST_FILL_CHUNK		4096
/* Writes while full: enough to use up the last page of the journal. */
#define TEST_FULL_WRITES	16

static struct broker	b;
static int		mounted;

static void
unmount_root(void)
{
	if (mounted && umount2(b.root, MNT_DETACH) == 0)
		mounted = 0;
}

static int
teardown(void **state)
{
	harness_watchdog(0);
	if (b.pid != 0)
		harness_kill(&b);
	unmount_root();
	if (b.root[0] != '\0')
		fprintf(stderr, "kept %s and %s\n", b.root, b.log);
	return 0;
}

/* Write to a filler file until the file system says ENOSPC. */
static int
fill(void)
{
	char	path[400], chunk[TEST_FILL_CHUNK];
	ssize_t	n;
	int	fd;

	memset(chunk, 'x', sizeof chunk);
	snprintf(path, sizeof path, "%s/filler", b.root);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_int_not_equal(fd, -1);
	for (;;) {
		n = write(fd, chunk, sizeof chunk);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			break;
	}
	assert_int_equal(errno, ENOSPC);
	return fd;
}

static void
unfill(int fd)
{
	char	path[400];

	snprintf(path, sizeof path, "%s/filler", b.root);
	assert_int_equal(close(fd), 0);
	assert_int_equal(unlink(path), 0);
}

static void
full_file_system_keeps_serving(void **state)
{
	static const char *const args[] = {
		"--inflight-wait-ms", TEST_INFLIGHT_WAIT, NULL
	};
	const char	*ids[1 + TEST_CONNECTIONS + TEST_FULL_WRITES + 1];
	char		 names[TEST_CONNECTIONS + TEST_FULL_WRITES][32];
	char		*receipts[1 + TEST_CONNECTIONS + TEST_FULL_WRITES];
	pid_t		 workers[TEST_MAX_WORKERS];
	json_t		*reply;
	int64_t		 freed, took = -1;
	int		 fd, i, n, count = 0, tries = 0;

	harness_watchdog(TEST_WATCHDOG_SECONDS);
	assert_int_equal(harness_start(&b, args, NULL), 0);
	reply = harness_submit(&b, "full/early", "full/early");
	harness_assert_outcome(reply, "created", 1, 1, 0);
	receipts[0] = receipt_text(reply);
	json_decref(reply);
	ids[count++] = "full/early";
	n = workers_now(&b, workers);

	fd = fill();
	assert_served_during_fault(&b, "full/early", "full/early", receipts[0],
	    "full", 1);
	for (i = 0; i < TEST_CONNECTIONS; i++)
		snprintf(names[i], sizeof names[i], "full/%d", i);
	for (i = 0; i < TEST_FULL_WRITES; i++) {
		snprintf(names[TEST_CONNECTIONS + i], sizeof names[0],
		    "full/more-%d", i);
		reply = harness_submit(&b, names[TEST_CONNECTIONS + i],
		    names[TEST_CONNECTIONS + i]);
		assert_storage_unavailable(reply);
		json_decref(reply);
	}
	assert_served_during_fault(&b, "full/early", "full/early", receipts[0],
	    "full", 1);
	assert_int_equal(harness_count_tasks(&b), 1);
	assert_same_workers(&b, workers, n);

	/* Space comes back: the first write after it must get through. */
	unfill(fd);
	freed = harness_now_ms();
	for (;;) {
		reply = harness_submit(&b, names[0], names[0]);
		tries++;
		if (json_is_true(json_object_get(reply, "ok")))
			break;
		assert_storage_unavailable(reply);
		json_decref(reply);
		if (harness_now_ms() - freed > TEST_RESUME_MS)
			fail_msg("writes still refused %d ms after space was "
			    "freed", TEST_RESUME_MS);
	}
	took = harness_now_ms() - freed;
	fprintf(stderr, "writes resumed %lld ms after space was freed "
	    "(%d tries)\n", (long long)took, tries);
	json_decref(reply);

	for (i = 0; i < TEST_CONNECTIONS + TEST_FULL_WRITES; i++) {
		reply = harness_submit(&b, names[i], names[i]);
		harness_assert_bool(reply, "ok", 1);
		assert_string_equal(harness_receipt_str(reply, "state"),
		    "committed");
		assert_receipt_file(&b, reply);
		receipts[count] = receipt_text(reply);
		ids[count++] = names[i];
		json_decref(reply);
		assert_int_equal(count_tasks_of(&b, names[i]), 1);
	}
	ids[count] = NULL;
	assert_reused_as(&b, "full/early", "full/early", receipts[0]);
	assert_int_equal(harness_count_tasks(&b), count);
	assert_int_equal(count_named(&b, "_lifecycle/inbox", ".TASK-", ""), 0);
	assert_same_workers(&b, workers, n);

	/* Every receipt, byte for byte, from what the journal holds. */
	assert_int_equal(harness_stop(&b), 0);
	assert_int_equal(harness_start(&b, args, NULL), 0);
	for (i = 0; i < count; i++)
		assert_reused_as(&b, ids[i], ids[i], receipts[i]);
	assert_int_equal(harness_count_tasks(&b), count);
	assert_int_equal(harness_stop(&b), 0);
	for (i = 0; i < count; i++)
		free(receipts[i]);

	unmount_root();
	assert_int_equal(mounted, 0);
	harness_cleanup(&b);
	b.root[0] = '\0';
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(full_file_system_keeps_serving,
		    teardown),
	};

	if (geteuid() != 0) {
		printf("SKIP: test_full_disk mounts a small tmpfs as the "
		    "broker's root, which needs root\n");
		return 77;
	}
	harness_fresh_root(&b);
	if (mount("tmpfs", b.root, "tmpfs", MS_NOSUID | MS_NODEV,
	    TEST_FS_OPTIONS) == -1) {
		printf("SKIP: mount -t tmpfs -o %s on %s: %s\n",
		    TEST_FS_OPTIONS, b.root, strerror(errno));
		rmdir(b.root);
		return 77;
	}
	mounted = 1;
	if (sodium_init() < 0)
		return 1;
	return FILTER_RUN(tests);
}
