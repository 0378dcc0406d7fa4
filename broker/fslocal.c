/* SPDX-License-Identifier: ISC */
/*
 * fslocal.c: the file systems on which inotify reports every name made,
 * because every writer is this kernel (doc/cluster.md, "Claim").  A list
 * of the known-local types, not of the remote ones: a type not listed
 * (a network or cluster file system nobody thought of, FUSE, whatever
 * comes next) is not vouched for, and the PostgreSQL store's claims
 * scan the workspace there, as they must where other hosts write, and
 * a retry looks for its task by path (inboxview.c).  The one list of
 * local file systems in idem: whoever trusts inotify asks here.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fslocal.h"

/* The values are linux/magic.h's, but for the two it does not carry. */
static const struct {
	unsigned long	 type;
	const char	*name;
} fslocal_types[] = {
	{ 0xef53,	"ext2/ext3/ext4" },
	{ 0x58465342,	"xfs" },
	{ 0x9123683e,	"btrfs" },
	{ 0x01021994,	"tmpfs" },
	{ 0x858458f6,	"ramfs" },
	{ 0xf2f52010,	"f2fs" },
	{ 0x2fc12fc1,	"zfs" },	/* OpenZFS's ZFS_SUPER_MAGIC */
	{ 0xca451a4e,	"bcachefs" },	/* BCACHEFS_SUPER_MAGIC, Linux 6.7 */
	/*
	 * Every change goes through the overlay (the kernel's overlayfs
	 * documentation: changes to the layers beneath while it is mounted
	 * are not allowed), so its inotify sees them all.
	 */
	{ 0x794c7630,	"overlayfs" },
};

const char *
fslocal_name(unsigned long f_type)
{
	size_t	i;

	for (i = 0; i < sizeof fslocal_types / sizeof fslocal_types[0]; i++) {
		if (fslocal_types[i].type == f_type)
			return fslocal_types[i].name;
	}
	return NULL;
}

int
fslocal_counts_remote(const char *relpath)
{
#ifdef IDEM_FAULT_INJECTION
	const char	*how = getenv("IDEM_CRASH_WATCH");

	return how != NULL && (strcmp(how, "remote") == 0 ||
	    (relpath != NULL && strncmp(how, "remote:", 7) == 0 &&
	    strcmp(how + 7, relpath) == 0));
#else
	(void)relpath;
	return 0;
#endif
}
