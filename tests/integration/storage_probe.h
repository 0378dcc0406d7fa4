/* SPDX-License-Identifier: ISC */
/*
 * storage_probe.h: what the storage-fault tests (test_storage with the
 * fault shim, test_full_disk on a real full file system) share: calls,
 * the checks of an outcome and of the files behind a receipt, the worker
 * pids, and the probe of a broker under a fault (every connection and
 * every worker kept, reads answered, writes refused).
 */
#ifndef STORAGE_PROBE_H
#define STORAGE_PROBE_H

#include <sys/types.h>

#include <stdint.h>

#include <jansson.h>

#include "integration/harness.h"

/* --inflight-wait-ms for the brokers under test: the bound on every answer. */
#define TEST_INFLIGHT_WAIT_MS	3000
#define TEST_INFLIGHT_WAIT	"3000"
/*
 * Writes resume by themselves once the fault clears: within the
 * journal's reopen retry (100 ms); this is ten of them.
 */
#define TEST_RESUME_MS		1000
/* Connections sending at once while a fault holds. */
#define TEST_CONNECTIONS	4
#define TEST_MAX_WORKERS	16

void	 assert_storage_unavailable(json_t *reply);
/* TASK files in the inbox whose front matter names submission id. */
int	 count_tasks_of(const struct broker *, const char *id);
/* Entries of dir (relative to the root) named prefix...suffix. */
int	 count_named(const struct broker *, const char *dir,
	    const char *prefix, const char *suffix);
/* The receipt's file is in place and its bytes are the ones recorded. */
void	 assert_receipt_file(const struct broker *, json_t *reply);
/* The receipt as canonical text (malloc'd). */
char	*receipt_text(json_t *reply);
/* A retry must answer reused with exactly this receipt. */
void	 assert_reused_as(struct broker *, const char *id,
	    const char *subject, const char *receipt);
/* The worker pids, sorted; at least one. */
int	 workers_now(struct broker *, pid_t pids[TEST_MAX_WORKERS]);
/* No worker was restarted: the same pids, and stats counts none. */
void	 assert_same_workers(struct broker *, const pid_t *before, int n);
void	 assert_served_during_fault(struct broker *, const char *committed_id,
	    const char *committed_subject, const char *receipt,
	    const char *prefix, int writes_fail);

#endif
