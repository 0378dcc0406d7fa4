/* SPDX-License-Identifier: ISC */
/*
 * fslocal.h: which file systems the watch vouches for (fslocal.c).
 */
#ifndef FSLOCAL_H
#define FSLOCAL_H

/*
 * A statfs f_type whose every writer is this kernel, so inotify hears
 * of every name made in it: the type's name; NULL for any other type.
 */
const char	*fslocal_name(unsigned long f_type);

#endif
