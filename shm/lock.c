/* SPDX-License-Identifier: ISC */
/*
 * lock.c: the one way to take a lock of the segment.  The mutexes are
 * robust and process-shared.  When the previous owner died holding one
 * (EOWNERDEAD), the repair function of the module that owns the guarded
 * data runs first; only if it succeeds is the mutex marked consistent.  A
 * failed repair unlocks without marking it, so the mutex becomes
 * unusable (ENOTRECOVERABLE) rather than trusted.
 *
 * shm/ logs nothing itself (it sits below the broker): what a lock goes
 * through is said to the warning hook idemd installs first thing
 * (shm_set_warn_hook), and the outcome is the return value and errno.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "shm.h"

/* What shm/ has to say (a lock repaired, ...): idemd's log. */
static shm_warn_fn warn_hook;

/* Fault injection: called with each lock just taken (crash tests). */
static shm_lock_hook_fn lock_hook;

void
shm_lock_set_hook(shm_lock_hook_fn hook)
{
	lock_hook = hook;
}

void
shm_set_warn_hook(shm_warn_fn hook)
{
	warn_hook = hook;
}

void
shm_warn(const char *fmt, ...)
{
	char	msg[256];
	va_list	ap;

	if (warn_hook == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	warn_hook(msg);
}

int
shm_lock_init(struct shm_lock *lock)
{
	pthread_mutexattr_t	attr;
	int			error;

	if ((error = pthread_mutexattr_init(&attr)) != 0)
		goto out;
	if ((error = pthread_mutexattr_setpshared(&attr,
	    PTHREAD_PROCESS_SHARED)) != 0 ||
	    (error = pthread_mutexattr_setrobust(&attr,
	    PTHREAD_MUTEX_ROBUST)) != 0 ||
	    (error = pthread_mutex_init(&lock->mutex, &attr)) != 0) {
		pthread_mutexattr_destroy(&attr);
		goto out;
	}
	pthread_mutexattr_destroy(&attr);
	return 0;
out:
	errno = error;
	return -1;
}

int
shm_lock(struct shm_segment *seg, struct shm_lock *lock,
    shm_repair_fn repair, const char *what)
{
	int	error;

	error = pthread_mutex_lock(&lock->mutex);
	if (error == 0) {
		if (lock_hook != NULL)
			lock_hook(what);
		return 0;
	}
	if (error == EOWNERDEAD) {
		shm_warn("%s lock: its owner died holding it; repairing",
		    what);
		if (repair != NULL && repair(seg) != 0) {
			shm_warn("%s lock: repair failed; the lock stays "
			    "unusable", what);
			pthread_mutex_unlock(&lock->mutex);
			errno = ENOTRECOVERABLE;
			return -1;
		}
		pthread_mutex_consistent(&lock->mutex);
		if (lock_hook != NULL)
			lock_hook(what);
		return 0;
	}
	shm_warn("%s lock: %s", what, strerror(error));
	errno = error;
	return -1;
}

void
shm_unlock(struct shm_lock *lock)
{
	pthread_mutex_unlock(&lock->mutex);
}
