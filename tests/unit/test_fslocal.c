/* SPDX-License-Identifier: ISC */
/*
 * test_fslocal.c: the file systems the watch vouches for (fslocal.c),
 * checked against the kernel's own values (linux/magic.h): the local
 * ones listed, the network, cluster, FUSE and pseudo file systems not,
 * nor a type nobody listed; and a real statfs of /proc (not vouched for).
 */
#include <sys/vfs.h>

#include <linux/magic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "integration/filter.h"
#include "fslocal.h"

static const struct {
	unsigned long	 type;
	const char	*name;	/* NULL: not vouched for */
} cases[] = {
	{ EXT2_SUPER_MAGIC,	"ext2/ext3/ext4" },
	{ EXT4_SUPER_MAGIC,	"ext2/ext3/ext4" },
	{ XFS_SUPER_MAGIC,	"xfs" },
	{ BTRFS_SUPER_MAGIC,	"btrfs" },
	{ TMPFS_MAGIC,		"tmpfs" },
	{ RAMFS_MAGIC,		"ramfs" },
	{ F2FS_SUPER_MAGIC,	"f2fs" },
	{ OVERLAYFS_SUPER_MAGIC, "overlayfs" },
	{ 0x2fc12fc1,		"zfs" },
	{ 0xca451a4e,		"bcachefs" },
	{ NFS_SUPER_MAGIC,	NULL },
	{ SMB_SUPER_MAGIC,	NULL },
	{ CIFS_SUPER_MAGIC,	NULL },
	{ SMB2_SUPER_MAGIC,	NULL },
	{ FUSE_SUPER_MAGIC,	NULL },
	{ CEPH_SUPER_MAGIC,	NULL },
	{ V9FS_MAGIC,		NULL },
	{ AFS_SUPER_MAGIC,	NULL },
	{ AFS_FS_MAGIC,		NULL },
	{ CODA_SUPER_MAGIC,	NULL },
	{ PROC_SUPER_MAGIC,	NULL },
	{ SYSFS_MAGIC,		NULL },
	{ 0x01161970,		NULL },	/* GFS2 */
	{ 0x0bd00bd0,		NULL },	/* Lustre */
	{ 0x47504653,		NULL },	/* GPFS */
	{ 0,			NULL },
	{ 0x12345678,		NULL },	/* one nobody listed */
};

static void
types_classified(void **state)
{
	const char	*got;
	size_t		 i;

	(void)state;
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		got = fslocal_name(cases[i].type);
		if (cases[i].name == NULL) {
			if (got != NULL)
				fail_msg("0x%lx vouched for as %s",
				    cases[i].type, got);
		} else if (got == NULL || strcmp(got, cases[i].name) != 0)
			fail_msg("0x%lx: %s, not %s", cases[i].type,
			    got != NULL ? got : "not vouched for",
			    cases[i].name);
	}
}

/* What statfs really returns for /proc is not vouched for. */
static void
proc_not_vouched_for(void **state)
{
	struct statfs	sfs;

	(void)state;
	assert_int_equal(statfs("/proc", &sfs), 0);
	assert_int_equal((unsigned long)sfs.f_type, PROC_SUPER_MAGIC);
	assert_null(fslocal_name((unsigned long)sfs.f_type & 0xffffffffUL));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(types_classified),
		cmocka_unit_test(proc_not_vouched_for),
	};

	return FILTER_RUN(tests);
}
