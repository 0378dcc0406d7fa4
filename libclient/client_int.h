/* SPDX-License-Identifier: ISC */
/*
 * client_int.h: what libidem's client*.c files share and nothing else
 * includes (not installed; none of it is exported: only idem_* is):
 * the connection, the disposition names' enum, client.c's helpers.
 */
#ifndef CLIENT_INT_H
#define CLIENT_INT_H

#ifndef nitems
#define nitems(a)	(sizeof (a) / sizeof (a)[0])
#endif

struct idem_conn {
	int	 fd;		/* -1 once the stream is unusable */
	char	*buf;		/* bytes read but not yet returned */
	size_t	 length;
	size_t	 size;
	/*
	 * The first taken bytes of buf: a line answered in place
	 * (client_call_pieces), dropped before the next read.
	 */
	size_t	 taken;
	char	*out;		/* the request line and its newline, sent */
	size_t	 out_size;
	int64_t	 timeout_ms;	/* the longest wait for a reply; 0: none */
	/*
	 * An answer was taken on this stream: from then on bytes waiting
	 * before a request are an answer nobody asked for.
	 */
	int	 answered;
	/* Where it connected: idem_effect_run's keeper connects there too. */
	char	 path[108];	/* sockaddr_un's sun_path */
};

/* A reply's "disposition": IDEM_DISPOSITIONS, protocol.h. */
enum client_disposition {
	CLIENT_DISPOSITION_NONE = -1,	/* absent, or none of them */
#define CLIENT_DISPOSITION_ENUM(sym, name)	CLIENT_DISPOSITION_##sym,
	IDEM_DISPOSITIONS(CLIENT_DISPOSITION_ENUM)
#undef CLIENT_DISPOSITION_ENUM
	CLIENT_DISPOSITION_COUNT
};

/*
 * client_wire_error's code for a well-formed error whose code this
 * library does not know; never seen by a caller: client_done (or
 * client_code_out) makes it IDEM_E_PROTOCOL without closing the stream.
 */
#define CLIENT_E_UNKNOWN_CODE	((enum idem_error_code)0x7fff)

void	client_error(struct idem_error *, enum idem_error_code,
	    const char *, ...) __attribute__((format(printf, 3, 4)));
struct idem_conn *client_connect(const char *socket_path, int64_t timeout_ms,
	    struct idem_error *);
int	client_timeout(int fd, int64_t timeout_ms, struct idem_error *);
/* CLOCK_MONOTONIC in milliseconds: deadlines and what is left of them. */
int64_t	client_now_ms(void);
json_t	*client_call_json(struct idem_conn *, json_t *request,
	    struct idem_error *);
json_t	*client_call_ok(struct idem_conn *, json_t *request,
	    struct idem_error *);
int	client_call_pieces(struct idem_conn *, const char *const *piece,
	    const size_t *length, size_t count, const char **answer,
	    size_t *answer_length, struct idem_error *);
int	client_call_line(struct idem_conn *, json_t *request, char **answer,
	    struct idem_error *);
int	client_done(struct idem_conn *, int rc, struct idem_error *);
int	client_code_out(struct idem_error *);
void	client_wire_error(json_t *response, struct idem_error *);
void	client_wire_error_of(const char *code, const char *message,
	    int retryable, const char *field, const char *reason,
	    struct idem_error *);
enum client_disposition client_disposition(const char *name);
int	client_copy(json_t *object, const char *key, char *out, size_t size,
	    int required, struct idem_error *);
int	client_bool(json_t *object, const char *key, int *out,
	    struct idem_error *);
int	client_int(json_t *object, const char *key, int64_t *out,
	    int required, struct idem_error *);
json_t	*client_string(const char *s, const char *field, struct idem_error *);
int	client_set(json_t *object, const char *key, json_t *value,
	    struct idem_error *);
json_t	*client_request_new(enum idem_op_code op, const char *inner_key,
	    json_t **inner, const char *task_id,
	    const char *client_submission_id, struct idem_error *);
int	client_receipt(json_t *holder, struct idem_receipt *,
	    struct idem_error *);
int	client_write_task(struct idem_conn *, const char *client_submission_id,
	    const struct idem_task *, struct idem_write_result *,
	    struct idem_error *);

#endif /* CLIENT_INT_H */
