/* SPDX-License-Identifier: ISC */
/*
 * replytext.h: replies written as text, byte for byte what jansson's
 * compact, order-preserving dump of the same tree writes (replytext.c).
 */
#ifndef IDEM_REPLYTEXT_H
#define IDEM_REPLYTEXT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/*
 * A reply being written.  Its buffer belongs to the text and grows as
 * needed; failed says an allocation failed (the text is then unusable).
 */
struct replytext {
	char	*buf;
	size_t	 length;
	size_t	 size;
	int	 failed;
};

void	replytext_init(struct replytext *);
void	replytext_free(struct replytext *);
/* Bytes as they are (punctuation, member names, a serialised value). */
void	replytext_raw(struct replytext *, const void *, size_t);
void	replytext_lit(struct replytext *, const char *);
/* length bytes of the text itself from offset, appended again. */
void	replytext_copy(struct replytext *, size_t offset, size_t length);
/* A JSON string holding length bytes of s (UTF-8), escaped as jansson. */
void	replytext_string(struct replytext *, const char *s, size_t length);
void	replytext_int(struct replytext *, int64_t);
/* Any value (a request's id): its compact dump. */
void	replytext_value(struct replytext *, json_t *);

#endif
