/* SPDX-License-Identifier: ISC */
/*
 * fslocal.h: which file systems the watch and the inbox view vouch for
 * (fslocal.c), and the tests' stand-in for one that is not local.
 */
#ifndef FSLOCAL_H
#define FSLOCAL_H

/*
 * A statfs f_type whose every writer is this kernel, so inotify hears
 * of every name made in it: the type's name; NULL for any other type.
 */
const char	*fslocal_name(unsigned long f_type);

/*
 * Does the test's stand-in for NFS (IDEM_CRASH_WATCH=remote: every
 * directory; remote:DIR: the one relative to the root) make relpath's
 * file system, though listed, count as remote?  relpath NULL: does it
 * make every directory's?  Always 0 in a build without fault injection.
 */
int		 fslocal_counts_remote(const char *relpath);

#endif
