/* SPDX-License-Identifier: ISC */
/*
 * taskfile_int.h: what the taskfile*.c files share and nothing else
 * includes: the FCoP directories they all name, the error helper (a
 * kind's name prefix, taskfile_kind_prefix, is store.h's).
 */
#ifndef TASKFILE_INT_H
#define TASKFILE_INT_H

#define TASKFILE_LIFECYCLE_DIR		"_lifecycle"
#define TASKFILE_HISTORY_DIR		"history"
/* The FCoP envelope version that FCoP's reference library speaks. */
#define TASKFILE_FCOP_VERSION		1

/*
 * Set *cause to "<what>: <strerror(errno)>" and return -1 with errno
 * unchanged (taskfile.c).
 */
int	taskfile_fail(char **cause, const char *fmt, ...)
	    __attribute__((format(printf, 2, 3)));

#endif /* TASKFILE_INT_H */
