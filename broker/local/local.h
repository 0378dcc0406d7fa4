/* SPDX-License-Identifier: ISC */
/*
 * local.h: the local backend (the shared-memory table, the journal, the
 * index and the files of one broker), as backend.c sees it, and the
 * calls its files share.  Only backend.c and broker/local/ include it.
 */
#ifndef LOCAL_H
#define LOCAL_H

#include "backend.h"

extern const struct backend local_backend;

#endif
