/* SPDX-License-Identifier: ISC */
/*
 * digest.h: internal interface of libclient/digest.c and
 * digest_fcop.c, shared with the broker (not installed).  digest.c owns
 * string normalization (CRLF and lone CR to LF, then NFC via utf8proc),
 * the JCS string encoding, the write-task-v1 / write-report-v1 /
 * generic-json-v1 canonical forms, and SHA-256 (libsodium);
 * digest_fcop.c the fcop-create-task-v1 one.
 */
#ifndef IDEM_DIGEST_H
#define IDEM_DIGEST_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "idem.h"
#include "protocol.h"

/*
 * A task with defaults applied and every string normalized.  All strings
 * live in one allocation owned by the struct; free with
 * digest_task_normalized_free().
 */
struct digest_task_normalized {
	struct idem_task	 task;		/* no NULL fields except thread_key, parent */
	size_t			 body_length;	/* body may hold no NUL, but saves a strlen */
	void			*storage;
};

/*
 * Normalize one string: CRLF and lone CR become LF, then Unicode NFC.
 * Returns a malloc'd NUL-terminated string (its length in *out_length),
 * or NULL with errno EILSEQ (invalid UTF-8) or ENOMEM.
 */
char	*digest_normalize_string(const char *s, size_t length,
	    size_t *out_length);

/* Apply defaults, normalize; -1 with errno EINVAL, EILSEQ or ENOMEM. */
int	 digest_task_normalize(const struct idem_task *,
	    struct digest_task_normalized *);
void	 digest_task_normalized_free(struct digest_task_normalized *);

/*
 * An fcop-create-task-v1 task normalized: defaults applied, strings
 * normalized, the body ending in exactly one LF, references
 * de-duplicated and sorted.  Free with digest_fcop_normalized_free().
 */
struct digest_fcop_normalized {
	struct idem_fcop_task	 task;
	char			**owned;	/* every string and the list */
	size_t			 owned_count;
};
int	 digest_fcop_normalize(const struct idem_fcop_task *,
	    struct digest_fcop_normalized *);
void	 digest_fcop_normalized_free(struct digest_fcop_normalized *);
int	 digest_fcop_canonical_normalized(const struct idem_fcop_task *,
	    char **canonical, size_t *length);
/* FCoP 4's grammars: operation_id, workspace_id, a TASK id in parent. */
int	 digest_fcop_operation_id_valid(const char *s, size_t length);
int	 digest_fcop_workspace_id_valid(const char *s, size_t length);
int	 digest_fcop_task_ref_valid(const char *s, size_t length);

/* Canonical bytes of an already normalized task (malloc'd, NUL-terminated). */
int	 digest_task_canonical_normalized(const struct idem_task *,
	    char **canonical, size_t *length);

/*
 * Write s as a JSON string literal the way RFC 8785 does.  With
 * yaml_safe, also escape as \u00XX / \uXXXX what YAML readers refuse or
 * fold inside a double-quoted scalar (U+007F..U+009F, U+2028, U+2029,
 * U+FEFF, U+FFFE, U+FFFF), so the value reads back identical from a
 * TASK file's front matter.  s must be valid UTF-8.  -1 on write error.
 */
int	 digest_write_json_string(FILE *, const char *s, size_t length,
	    int yaml_safe);

/*
 * generic-json-v1 (SPEC.md, "Effects"): the canonical bytes of
 * {"kind":kind,"request":request} (malloc'd, NUL-terminated): every
 * string, member names included, normalized as write-task-v1 does, then
 * JCS (RFC 8785): members sorted by UTF-16 code units, numbers in their
 * ECMAScript form.  -1 with errno EILSEQ (invalid UTF-8), EEXIST (two
 * member names equal after normalization), EDOM (an integer past
 * +-2^53, which JCS would print as another number), EINVAL (a NUL in a
 * string, or no kind), ELOOP (nested deeper than IDEM_MAX_JSON_DEPTH)
 * or ENOMEM.  *where (may be NULL) names the offending value as a
 * dotted path below "request" (a static buffer of the caller's: at
 * least 64 bytes, "" at the top).
 */
#define DIGEST_PATH_BYTES	64
int	 digest_generic_canonical(const char *kind, const json_t *request,
	    char **canonical, size_t *length, char where[DIGEST_PATH_BYTES]);
/*
 * The SHA-256 of that canonical form and its length, the same -1 and
 * errno, without keeping its bytes: what the broker judges a begin by.
 */
int	 digest_generic_sha256(const char *kind, const json_t *request,
	    uint8_t digest[IDEM_SHA256_BYTES], size_t *length,
	    char where[DIGEST_PATH_BYTES]);
/* An ECMAScript Number::toString of a finite double (JCS numbers). */
int	 digest_write_number(FILE *, double);

void	 digest_sha256(const void *data, size_t length,
	    uint8_t out[IDEM_SHA256_BYTES]);
void	 digest_to_hex(const uint8_t digest[IDEM_SHA256_BYTES],
	    char hex[IDEM_DIGEST_HEX_SIZE]);
/* 64 lower-case hex digits to bytes; -1 if not exactly that. */
int	 digest_from_hex(const char *hex, uint8_t out[IDEM_SHA256_BYTES]);

/* The FCoP role-code grammar ^[A-Z][A-Z0-9_]*(-[A-Z0-9_]+)*$, at most 16 bytes. */
int	 digest_role_code_valid(const char *s, size_t length);
/* A task recipient: a role code, or an FCoP slot ROLE.SLOT (DEV.D1). */
int	 digest_recipient_valid(const char *s, size_t length);

/* digest.c's pieces of a canonical form, for digest_fcop.c. */
/* Whether none of a list's count items is NULL. */
int	 digest_list_given(const char *const *items, size_t count);
/* "key":value, after a comma unless first; value NULL writes null. */
int	 digest_write_member(FILE *, int first, const char *key,
	    const char *value);
/* ,"key":[items] */
int	 digest_write_array(FILE *, const char *key, const char *const *items,
	    size_t count);
/* Close a memstream and hand back its bytes (failed: a write failed). */
int	 digest_finish(FILE *, int failed, char **buf, size_t *size,
	    char **canonical, size_t *length);
/* The hex SHA-256 of canonical bytes, which it frees. */
void	 digest_hex_of(char *canonical, size_t length,
	    char digest[IDEM_DIGEST_HEX_SIZE]);

#endif
