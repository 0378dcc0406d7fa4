/* SPDX-License-Identifier: ISC */
/*
 * tree.c: removing a unit test's scratch directory, shared by the store's
 * unit tests so that each does not carry its own recursive walk.
 */
#include <sys/stat.h>

#include <ftw.h>
#include <stdio.h>

#include "tree.h"

static int
remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

void
unit_remove_tree(const char *path)
{
	nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}
