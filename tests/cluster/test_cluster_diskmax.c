/* SPDX-License-Identifier: ISC */
/*
 * test_cluster_diskmax.c: where a claim on PostgreSQL gets the day's
 * highest number on disk (doc/cluster.md, "Claim"): from the watch,
 * without a scan of the workspace, where the watch vouches for every
 * name; from a scan where it cannot (an overflow of its queue, a stage
 * moved in, no inotify, a network file system).  Either way a number a
 * foreign FCoP writer used is skipped.  The broker runs with IDEM_DEBUG,
 * which logs every scan ("disk scan for"); the cases count those lines.
 */
#include <sys/mount.h>
#include <sys/stat.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "cluster_harness.h"

static struct pgserver	server;
static struct node	node;
static char		node_root[256];
static char		today[9];
static int		next_id;
/* A tmpfs a case mounted, unmounted by the teardown if the case failed. */
static char		mounted[PATH_MAX];
/* A stage broker_start mounts a tmpfs on before the broker starts. */
static const char	*premount;
static void	mount_tmpfs(const char *);

/* One broker, one worker, on a fresh workspace; watch as IDEM_CRASH_WATCH. */
static void
broker_start(const char *watch)
{
	char		 env_watch[64];
	const char	*env[3] = { "IDEM_DEBUG=1", NULL, NULL };

	if (watch != NULL) {
		snprintf(env_watch, sizeof env_watch, "IDEM_CRASH_WATCH=%s",
		    watch);
		env[1] = env_watch;
	}
	cluster_store_reset(&server);
	cluster_fresh_root(node_root);
	if (premount != NULL) {
		char	path[PATH_MAX];

		snprintf(path, sizeof path, "%s/_lifecycle", node_root);
		assert_true(mkdir(path, 0755) == 0 || errno == EEXIST);
		snprintf(path, sizeof path, "%s/%s", node_root, premount);
		assert_true(mkdir(path, 0755) == 0 || errno == EEXIST);
		mount_tmpfs(premount);
		premount = NULL;
	}
	cluster_node_init(&node, server.uri, node_root, "a");
	assert_int_equal(cluster_node_start(&node, "30000", "1", NULL, NULL,
	    env), 0);
	harness_today(today);
}

static void
broker_finish(void)
{
	cluster_node_kill(&node);
	cluster_rm_root(node_root);
}

/* Lines of the broker's log holding text. */
static int
log_count(const char *text)
{
	FILE	*f;
	char	 line[4096];
	int	 n = 0;

	assert_non_null(f = fopen(node.b.log, "r"));
	while (fgets(line, sizeof line, f) != NULL) {
		if (strstr(line, text) != NULL)
			n++;
	}
	fclose(f);
	return n;
}

static int
scans(void)
{
	return log_count("disk scan for TASK");
}

/* A new task created: its number. */
static int
create(void)
{
	char		 id[32];
	json_t		*reply;
	const char	*task_id;
	int		 seq;

	snprintf(id, sizeof id, "diskmax-%d", next_id++);
	reply = harness_call_once(&node.b, harness_write_task(id,
	    "Beside a foreign writer"));
	assert_non_null(reply);
	assert_string_equal(harness_str(reply, "disposition"), "created");
	task_id = harness_receipt_str(reply, "task_id");
	harness_skip_if_date_moved(today, task_id);
	seq = atoi(task_id + strlen("TASK-20261205-"));
	json_decref(reply);
	return seq;
}

/* A foreign FCoP writer's TASK file of number seq in dir (under root). */
static void
foreign_file(const char *dir, int seq)
{
	char	path[PATH_MAX];
	int	fd;

	snprintf(path, sizeof path, "%s/%s/TASK-%s-%03d-QA-to-DEV.md",
	    node_root, dir, today, seq);
	assert_true((fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
	    0644)) >= 0);
	dprintf(fd, "---\nprotocol: fcop\nversion: 1\nsender: QA\n"
	    "recipient: DEV\n---\nA foreign task, %03d.\n", seq);
	close(fd);
}

/*
 * A foreign file made between two claims is skipped by the next claim,
 * and neither claim after the first scans: the watch's sighting moved
 * the day's highest number on.
 */
static void
a_foreign_file_is_skipped_without_a_scan(void **state)
{
	char	path[PATH_MAX];
	int	first, second, third;

	(void)state;
	broker_start(NULL);
	assert_int_equal(log_count("the watch sees every name"), 1);
	first = create();
	assert_int_equal(scans(), 1);	/* the day's first */
	foreign_file("_lifecycle/inbox", first + 1);
	second = create();
	assert_true(second > first + 1);
	assert_int_equal(scans(), 1);
	/* A new stage is a refresh of the watch: the next claim scans. */
	snprintf(path, sizeof path, "%s/_lifecycle/extra", node_root);
	assert_int_equal(mkdir(path, 0755), 0);
	third = create();
	assert_true(third > second);
	assert_int_equal(scans(), 2);
	/* A jump, in a stage idem does not link in. */
	foreign_file("_lifecycle/extra", third + 20);
	assert_true(create() > third + 20);
	assert_true(create() > third + 21);
	assert_int_equal(scans(), 2);
	broker_finish();
}

/* A new report on task_id: its number. */
static int
report(const char *task_id)
{
	char		 id[32];
	json_t		*reply;
	const char	*report_id;
	int		 seq;

	snprintf(id, sizeof id, "diskmax-r-%d", next_id++);
	reply = harness_call_once(&node.b, json_pack("{s:s, s:s, s:s, "
	    "s:{s:s, s:s}}", "op", "write_report", "task_id", task_id,
	    "client_submission_id", id, "report", "sender", "DEV", "body",
	    "Done beside a foreign writer"));
	assert_non_null(reply);
	assert_true(json_is_true(json_object_get(reply, "ok")));
	assert_false(json_is_true(json_object_get(reply, "deduplicated")));
	report_id = harness_str(reply, "report_id");
	harness_skip_if_date_moved(today, report_id);
	seq = atoi(report_id + strlen("REPORT-20261205-"));
	json_decref(reply);
	return seq;
}

/*
 * The same for REPORT numbers in reports/: a foreign report made
 * between two claims is skipped with no scan after the day's first of
 * that kind (the sighting moved the REPORT number on, not the TASK one).
 */
static void
a_foreign_report_is_skipped_without_a_scan(void **state)
{
	char	 path[PATH_MAX], task_id[64];
	json_t	*reply;
	int	 first, second, fd;

	(void)state;
	broker_start(NULL);
	reply = harness_call_once(&node.b, harness_write_task("diskmax-t",
	    "A task to report on"));
	assert_non_null(reply);
	assert_string_equal(harness_str(reply, "disposition"), "created");
	snprintf(task_id, sizeof task_id, "%s",
	    harness_receipt_str(reply, "task_id"));
	json_decref(reply);
	first = report(task_id);
	assert_int_equal(log_count("disk scan for REPORT"), 1);
	snprintf(path, sizeof path, "%s/reports/REPORT-%s-%03d-DEV-to-QA.md",
	    node_root, today, first + 1);
	assert_true((fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
	    0644)) >= 0);
	dprintf(fd, "---\nprotocol: fcop\nversion: 1\nsender: DEV\n"
	    "recipient: QA\nstatus: done\n---\nA foreign report.\n");
	close(fd);
	second = report(task_id);
	assert_true(second > first + 1);
	assert_true(report(task_id) > second);
	assert_int_equal(log_count("disk scan for REPORT"), 1);
	assert_int_equal(scans(), 1);	/* the task's */
	broker_finish();
}

/*
 * The queue overflows while nobody reads it (the master stopped, no
 * claim): the foreign file made after the overflow has no event, and the
 * next claim scans and skips it.
 */
static void
an_overflow_makes_the_next_claim_scan(void **state)
{
	char	 path[PATH_MAX];
	FILE	*f;
	long	 queued = 16384, i;
	int	 first;

	(void)state;
	if ((f = fopen("/proc/sys/fs/inotify/max_queued_events", "r")) !=
	    NULL) {
		if (fscanf(f, "%ld", &queued) != 1)
			queued = 16384;
		fclose(f);
	}
	if (queued > 1000000)
		harness_skip("max_queued_events is %ld: too many files to "
		    "overflow it", queued);
	broker_start(NULL);
	first = create();
	assert_int_equal(scans(), 1);
	/* The master reads the queue once a second: not now. */
	assert_int_equal(kill(node.b.pid, SIGSTOP), 0);
	/* Files in the root: each an event, none a number (no directory: a
	 * directory made would be a refresh by itself). */
	for (i = 0; i <= queued; i++) {
		int fd;

		snprintf(path, sizeof path, "%s/flood-%ld", node_root, i);
		assert_true((fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC,
		    0644)) >= 0);
		close(fd);
	}
	foreign_file("_lifecycle/inbox", first + 30);
	assert_int_equal(kill(node.b.pid, SIGCONT), 0);
	assert_true(create() > first + 30);
	assert_int_equal(log_count("inotify queue overflow"), 1);
	assert_int_equal(scans(), 2);
	assert_true(create() > first + 31);
	assert_int_equal(scans(), 2);
	broker_finish();
}

/*
 * A stage (review, made empty at start-up) replaced by another directory
 * moved in, whose file was made before anyone watched it: the next
 * claim scans.
 */
static void
a_stage_moved_in_makes_the_next_claim_scan(void **state)
{
	char	from[PATH_MAX], to[PATH_MAX];
	int	first;

	(void)state;
	broker_start(NULL);
	first = create();
	assert_int_equal(scans(), 1);
	snprintf(from, sizeof from, "%s/review.new", node_root);
	snprintf(to, sizeof to, "%s/_lifecycle/review", node_root);
	assert_int_equal(mkdir(from, 0755), 0);
	foreign_file("review.new", first + 40);
	/* Made before it was watched: no event of the file, only of the move. */
	assert_int_equal(rename(from, to), 0);
	assert_true(create() > first + 40);
	assert_int_equal(scans(), 2);
	/* Replaced again: moved away, another moved in. */
	snprintf(from, sizeof from, "%s/_lifecycle/review", node_root);
	snprintf(to, sizeof to, "%s/review.old", node_root);
	assert_int_equal(rename(from, to), 0);
	snprintf(from, sizeof from, "%s/review.new", node_root);
	assert_int_equal(mkdir(from, 0755), 0);
	foreign_file("review.new", first + 50);
	snprintf(to, sizeof to, "%s/_lifecycle/review", node_root);
	assert_int_equal(rename(from, to), 0);
	assert_true(create() > first + 50);
	assert_int_equal(scans(), 3);
	broker_finish();
}

/*
 * A worker killed after read(2) took a foreign file's event from the
 * queue and before it noted it (IDEM_CRASH_WATCH=die-after-read): the
 * event is gone.  The next owner of the allocator's lock repairs it by
 * refreshing the watch, so the retry on the respawned worker scans and
 * skips the foreign number.
 */
static void
a_worker_killed_after_reading_the_queue_loses_no_number(void **state)
{
	char	 id[32];
	json_t	*reply;
	int	 first, seq;

	(void)state;
	cluster_need_fault_injection();
	broker_start("die-after-read");
	first = create();
	assert_int_equal(scans(), 1);
	/* The master reads the queue once a second: only the worker now. */
	assert_int_equal(kill(node.b.pid, SIGSTOP), 0);
	foreign_file("_lifecycle/inbox", first + 1);
	snprintf(id, sizeof id, "diskmax-%d", next_id++);
	reply = harness_call_once(&node.b, harness_write_task(id,
	    "Beside a foreign writer"));
	assert_true(reply == NULL ||
	    !json_is_true(json_object_get(reply, "ok")));
	json_decref(reply);
	assert_int_equal(kill(node.b.pid, SIGCONT), 0);
	reply = cluster_call_until_final(&node.b, harness_write_task(id,
	    "Beside a foreign writer"));
	assert_non_null(reply);
	assert_string_equal(harness_str(reply, "disposition"), "created");
	seq = atoi(harness_receipt_str(reply, "task_id") +
	    strlen("TASK-20261205-"));
	json_decref(reply);
	assert_int_equal(log_count("dying after reading the watch's queue"),
	    1);
	assert_true(seq > first + 1);
	assert_int_equal(scans(), 2);
	broker_finish();
}

/* Mount a tmpfs on dir (under root); skipped (77) without the right to. */
static void
mount_tmpfs(const char *dir)
{
	char	path[PATH_MAX];

	if (geteuid() != 0)
		harness_skip("needs root to mount a tmpfs (CI runs as root)");
	snprintf(path, sizeof path, "%s/%s", node_root, dir);
	if (mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m") ==
	    -1) {
		if (errno == EPERM)
			harness_skip("mount(2) refused (EPERM): a container "
			    "without CAP_SYS_ADMIN");
		fail_msg("mount tmpfs on %s: %s", path, strerror(errno));
	}
	snprintf(mounted, sizeof mounted, "%s", path);
}

static void
unmount_tmpfs(void)
{
	assert_int_equal(umount2(mounted, 0), 0);
	mounted[0] = '\0';
}

/* The fixture's teardown: a mount a failed case left, then its nodes. */
static int
unmount_and_kill(void **state)
{
	if (mounted[0] != '\0') {
		if (umount2(mounted, MNT_DETACH) == -1)
			fprintf(stderr, "umount %s: %s\n", mounted,
			    strerror(errno));
		mounted[0] = '\0';
	}
	return cluster_kill_live_nodes(state);
}

/*
 * A tmpfs mounted on a stage after start-up: inotify says nothing (its
 * watch stays on the covered directory), but the mount table's poll
 * does, so the next claim's drain refreshes the watch and the claim
 * scans: a foreign file made on the mount is skipped, and one made on
 * it after that is seen without a scan (the mount's root is watched).
 */
static void
a_mount_on_a_stage_makes_the_next_claim_scan(void **state)
{
	int	first, second;

	(void)state;
	broker_start(NULL);
	first = create();
	assert_int_equal(scans(), 1);
	mount_tmpfs("_lifecycle/review");
	foreign_file("_lifecycle/review", first + 10);
	second = create();
	assert_true(second > first + 10);
	assert_int_equal(scans(), 2);
	assert_int_equal(log_count("the mount table changed"), 1);
	foreign_file("_lifecycle/review", second + 10);
	assert_true(create() > second + 10);
	assert_int_equal(scans(), 2);
	unmount_tmpfs();
	broker_finish();
}

/*
 * A tmpfs on a stage when the broker starts, unmounted after the first
 * claim: the stage underneath was never watched.  A foreign file made
 * there is skipped by the next claim (IN_UNMOUNT, and the mount table,
 * each make its drain refresh: the case fails only without both).
 */
static void
an_unmount_from_a_stage_makes_the_next_claim_scan(void **state)
{
	int	first;

	(void)state;
	premount = "_lifecycle/review";
	broker_start(NULL);
	first = create();
	assert_int_equal(scans(), 1);
	assert_true(create() > first);
	assert_int_equal(scans(), 1);
	unmount_tmpfs();
	foreign_file("_lifecycle/review", first + 20);
	assert_true(create() > first + 20);
	assert_int_equal(scans(), 2);
	broker_finish();
}

/* Where the watch cannot vouch, every claim scans, as before it. */
static void
claims_scan(const char *watch, const char *said)
{
	int	first, second;

	cluster_need_fault_injection();
	broker_start(watch);
	assert_int_equal(log_count(said), 1);
	assert_int_equal(log_count("the watch sees every name"), 0);
	first = create();
	assert_int_equal(scans(), 1);
	foreign_file("_lifecycle/inbox", first + 1);
	second = create();
	assert_true(second > first + 1);
	assert_int_equal(scans(), 2);
	assert_true(create() > second);
	assert_int_equal(scans(), 3);
	broker_finish();
}

/*
 * A directory made after start-up on a file system the watch cannot
 * vouch for (IDEM_CRASH_WATCH=remote:_lifecycle/extra: its real statfs
 * classified, then counted as remote): from its refresh on every claim
 * scans, and the log says which directory and why, once.
 */
static void
a_directory_made_later_on_a_remote_file_system(void **state)
{
	char	path[PATH_MAX];
	int	first, second, third;

	(void)state;
	cluster_need_fault_injection();
	broker_start("remote:_lifecycle/extra");
	assert_int_equal(log_count("the watch sees every name"), 1);
	first = create();
	second = create();
	assert_true(second > first);
	assert_int_equal(scans(), 1);
	snprintf(path, sizeof path, "%s/_lifecycle/extra", node_root);
	assert_int_equal(mkdir(path, 0755), 0);
	third = create();
	assert_true(third > second);
	assert_int_equal(scans(), 2);
	assert_int_equal(log_count("the watch cannot vouch for "
	    "_lifecycle/extra: its file system ("), 1);
	assert_int_equal(log_count(") counts as remote (IDEM_CRASH_WATCH)"),
	    1);
	/* Each claim scans now: a foreign file in it is skipped by a scan. */
	foreign_file("_lifecycle/extra", third + 5);
	assert_true(create() > third + 5);
	assert_int_equal(scans(), 3);
	assert_true(create() > third + 6);
	assert_int_equal(scans(), 4);
	assert_int_equal(log_count("the watch cannot vouch for _"), 1);
	broker_finish();
}

static void
without_inotify_every_claim_scans(void **state)
{
	(void)state;
	claims_scan("off", "by a scan of the workspace at every claim");
}

static void
on_a_network_file_system_every_claim_scans(void **state)
{
	(void)state;
	/*
	 * The watch's line, not a worker's inboxview line, which also
	 * says "counts as remote" and may come before or after this count
	 * (workers start after the master says it is ready).
	 */
	claims_scan("remote", "counts as remote (IDEM_CRASH_WATCH): every "
	    "claim scans");
}

#define T(name)	cmocka_unit_test_setup_teardown(name, cluster_arm_watchdog, \
	unmount_and_kill)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(a_foreign_file_is_skipped_without_a_scan),
		T(a_foreign_report_is_skipped_without_a_scan),
		T(an_overflow_makes_the_next_claim_scan),
		T(a_stage_moved_in_makes_the_next_claim_scan),
		T(a_worker_killed_after_reading_the_queue_loses_no_number),
		T(a_directory_made_later_on_a_remote_file_system),
		T(a_mount_on_a_stage_makes_the_next_claim_scan),
		T(an_unmount_from_a_stage_makes_the_next_claim_scan),
		T(without_inotify_every_claim_scans),
		T(on_a_network_file_system_every_claim_scans),
	};

	return cluster_main(&server, tests, sizeof tests / sizeof tests[0]);
}
