/* SPDX-License-Identifier: ISC */
/* tree.h: the unit tests' scratch directories (tree.c). */
#ifndef UNIT_TREE_H
#define UNIT_TREE_H

/* Remove path and everything below it; symlinks are removed, not followed. */
void	unit_remove_tree(const char *path);

#endif
