/* SPDX-License-Identifier: ISC */
/*
 * pg.h: the PostgreSQL store (idemd --store postgresql://...), the
 * authoritative record of several brokers on one workspace: the schema
 * and its migrations (pg_schema.c), the submissions, numbers and leases
 * (pg_conn.c), the batched grants and commits (pg_batch.c), the
 * history's bulk work: import, compaction, counts (pg_history.c), the
 * rows idemctl store verify reads (pg_verify.c).
 * The protocol, its durability points and its fencing are in
 * doc/cluster.md; every function here is one step of it.
 *
 * Only built with configure --with-postgresql (HAVE_POSTGRESQL).
 */
#ifndef IDEM_PG_H
#define IDEM_PG_H

#include <stdint.h>

#include "protocol.h"
#include "shm.h"

/* The schema this build reads and writes (idem_schema_version). */
#define PGSTORE_SCHEMA_VERSION		3
/*
 * A submission's key (workspace, kind, scope, client_submission_id) as
 * one text, unambiguous: the workspace's 36 characters, the kind's
 * digits and ':', the scope's length in characters and ':', the scope,
 * the id.  Schema version 3 indexes it (unique), and every lookup of a
 * key compares it, so that the one index whose value it is serves the
 * lookup whatever the planner knows of the table (pg_schema.c).
 */
#define PGSTORE_KEY_SQL(workspace, kind, scope, id) \
	workspace "::text || " kind "::text || ':' || length(" scope \
	")::text || ':' || " scope " || " id
/* The key's row, the key being $1 to $4 of the statement. */
#define PGSTORE_KEY_WHERE \
	"(" PGSTORE_KEY_SQL("workspace_id", "kind", "scope", \
	"client_submission_id") ") = (" PGSTORE_KEY_SQL("$1::uuid", \
	"$2::smallint", "$3::text", "$4::text") ")"
/*
 * A compacted row's state (idemctl compact --store): committed, its
 * receipt's body and file digest dropped (an effect keeps its result's
 * digest), the tombstone's facts kept.
 * Outside the journal's state numbers (shm.h), which the other states
 * of the column are.
 */
#define PGSTORE_STATE_TOMBSTONE		10
#define PGSTORE_STATE_TOMBSTONE_S	"10"	/* the same, in SQL */
/* --host-id's (protocol.h, where the broker's limits are). */
#define PGSTORE_MAX_HOST_ID_BYTES	IDEM_STORE_MAX_HOST_ID_BYTES
/* A workspace id: a lower-case UUID, 36 characters. */
#define PGSTORE_WORKSPACE_ID_BYTES	36
/* A fence token: 64 random bits as 16 lower-case hex digits. */
#define PGSTORE_TOKEN_BYTES		16
/* Seconds a connection attempt may take (the URI may say otherwise). */
#define PGSTORE_CONNECT_TIMEOUT_S	"5"
/*
 * A half-open TCP connection (the server's host gone without a FIN or
 * RST) must end, not hold a creation thread, or a round of its worker's
 * statements (pg_group.c), for ever: TCP keepalives probe an idle
 * connection after 10 s, every 5 s, 3 times (dead after ~25 s), and
 * data the server has not acknowledged for 30 s ends it
 * (tcp_user_timeout).  A statement that waits on the server (a lock, a
 * WAL flush) is not idle data: the kernel still acknowledges.  The URI
 * may set its own (doc/cluster.md, "Connections").
 */
#define PGSTORE_KEEPALIVES_IDLE_S	"10"
#define PGSTORE_KEEPALIVES_INTERVAL_S	"5"
#define PGSTORE_KEEPALIVES_COUNT	"3"
#define PGSTORE_TCP_USER_TIMEOUT_MS	"30000"
/* --lease-ms and --store-connections (protocol.h). */
#define PGSTORE_DEFAULT_LEASE_MS	IDEM_STORE_DEFAULT_LEASE_MS
#define PGSTORE_MIN_LEASE_MS		IDEM_STORE_MIN_LEASE_MS
#define PGSTORE_MAX_LEASE_MS		IDEM_STORE_MAX_LEASE_MS
#define PGSTORE_DEFAULT_CONNECTIONS	IDEM_STORE_DEFAULT_CONNECTIONS
#define PGSTORE_MAX_CONNECTIONS		IDEM_STORE_MAX_CONNECTIONS

struct pg_conn;				/* libpq's PGconn, kept opaque here */

struct pgstore {
	struct pg_conn	*conn;
	unsigned	 prepared;	/* statements prepared on conn
					   (pg_conn.c) */
	char		*uri;
	char		 workspace[PGSTORE_WORKSPACE_ID_BYTES + 1];
	char		 host[PGSTORE_MAX_HOST_ID_BYTES + 1];
	int		 lease_ms;
	uint32_t	 max_seq;	/* 10^digits - 1 */
	/* The highest number used on disk that day (taskfile_scan_max_seq). */
	int		(*scan)(enum subtab_kind, uint32_t date,
			    uint32_t *max_seq, void *arg);
	void		*scan_arg;
	/*
	 * conn's session as a row's owner (pg_claim.c): its backend's pid
	 * and start (microseconds since 1970), passed by value to a claim
	 * that another thread's session sends (pg_batch.c's round); 0
	 * until asked of the session.
	 */
	int		 session_pid;
	char		 session_started[24];
};

/* Which row: kind, scope ('' for a task, the task_id of a report). */
struct pgstore_key {
	enum subtab_kind	 kind;
	const char		*scope;
	const char		*id;
};

/* A row, as much of it as idemd needs. */
struct pgstore_row {
	/* The facts in the shape of the local table (key_length 0). */
	struct subtab_entry	 entry;
	int64_t			 epoch;
	char			 token[PGSTORE_TOKEN_BYTES + 1];
	char			 owner[PGSTORE_MAX_HOST_ID_BYTES + 1];
	int			 lease_granted;
	int64_t			 lease_ms_left;	/* server's clock; < 0: expired */
	int			 owner_alive;	/* its session is connected */
	/* A tombstone: entry.state says committed (a task: no file digest). */
	int			 pruned;
	char			*receipt;	/* committed: its bytes (malloc'd) */
};
void	pgstore_row_clear(struct pgstore_row *);

/* ---- pg_schema.c ---------------------------------------------------- */

/*
 * The schema's version in the database: 0 if it has none (never
 * initialised), else the version; -1 with *cause on an error.
 */
int	pgstore_schema_version(struct pg_conn *, int *version, char **cause);
/*
 * Bring the schema to PGSTORE_SCHEMA_VERSION in one transaction (from 0:
 * create it).  *from and *to say what was done; a database newer than
 * this build is refused.  Concurrent callers serialize on an advisory
 * lock.
 */
int	pgstore_migrate(struct pg_conn *, int *from, int *to, char **cause);

/* ---- pg_conn.c ------------------------------------------------------ */

/* Connect (without touching the schema). */
struct pg_conn *pgstore_connect(const char *uri, char **cause);
void	pgstore_disconnect(struct pg_conn *);
/*
 * Connect and check the schema's version (a mismatch names the command
 * to run).  st's workspace, host, lease_ms, max_seq and scan are the
 * caller's to fill before.
 */
int	pgstore_open(struct pgstore *, const char *uri, char **cause);
void	pgstore_close(struct pgstore *);

/*
 * Every call below returns -1 with *cause (malloc'd) when PostgreSQL
 * cannot be reached or fails: the caller answers storage_unavailable;
 * the next call reconnects.
 */

/* The row of key: 1 and row filled, 0 if none. */
int	pgstore_read(struct pgstore *, const struct pgstore_key *,
	    struct pgstore_row *, char **cause);
/*
 * Reserve: a number from the day's counter (the server's day, past the
 * disk's highest) and the row, state reserved, epoch 1, a fresh token,
 * the lease from now (pgstore_claim's statement).  want gives
 * the schema, request digest and roles.  1: reserved, row filled; 0: the
 * row exists already (nothing changed); -1 with errno ERANGE: the day's
 * numbers are used up (nothing changed).
 */
int	pgstore_reserve(struct pgstore *, const struct pgstore_key *,
	    const struct subtab_entry *want, struct pgstore_row *,
	    char **cause);
/*
 * The reservation (doc/cluster.md, "Creation, step by step", 3): the
 * disk scan, then one statement that returns the key's row if it has
 * one (row filled, 0 returned, nothing changed) or takes a number and
 * inserts the row: 1 as pgstore_reserve says.  It commits without
 * waiting for the WAL flush: the grant's synchronous commit makes it
 * durable, so nothing may be answered or linked on the claim's
 * strength before a synchronous commit.
 */
int	pgstore_claim(struct pgstore *, const struct pgstore_key *,
	    const struct subtab_entry *want, struct pgstore_row *,
	    char **cause);

/*
 * The claim in parts, so that another thread's session may send its
 * first turn in a round (pg_batch.c; doc/cluster.md, "One round a
 * worker"): _begin makes the turn's parameters (the disk scan, the
 * owner's session by value: st's, made if it has none) and needs no
 * round trip unless st has no connection; the round fills res; _end
 * judges it (and clears it): 1, 0, -1 as pgstore_claim, or 2:
 * another turn, which _next runs on st's own connection, as many as
 * pgstore_claim would.  pgstore_claim is _begin, then _next.
 */
struct pgstore_claim {
	const struct pgstore_key *key;
	const struct subtab_entry *want;
	struct pgstore_row	*row;
	int			 tries;
	uint32_t		 day;
	char			 schema[4];
	char			 digest[2 * IDEM_SHA256_BYTES + 1];
	char			 day_s[16], disk_s[16], max_s[16], lease[16];
	char			 roles[IDEM_MAX_TASK_ID_BYTES];
	char			 sender[IDEM_MAX_ROLE_BYTES + 1];
	char			 recipient[IDEM_MAX_RECIPIENT_BYTES + 1];
	char			 token[PGSTORE_TOKEN_BYTES + 1];
	char			 pid[16];
	char			 started[24];
	struct pg_result	*res;		/* the statement's */
	int			 raise;		/* the day's counter first */
};
int	pgstore_claim_begin(struct pgstore *, struct pgstore_claim *,
	    const struct pgstore_key *, const struct subtab_entry *want,
	    struct pgstore_row *, char **cause);
int	pgstore_claim_end(struct pgstore *, struct pgstore_claim *,
	    char **cause);
int	pgstore_claim_next(struct pgstore *, struct pgstore_claim *,
	    char **cause);
/*
 * st's connection ended (the next call makes a new one): a claim whose
 * outcome is not known leaves no row that looks owned by a live session.
 */
void	pgstore_drop(struct pgstore *);
/* Results a round read and nobody judged. */
void	pgstore_claim_clear(struct pgstore_claim *);
/*
 * The row of key as pgstore_read, once durable: a synchronous commit
 * after it was read, so that an answer given on the strength of an
 * unfinished row (another broker's claim) survives a server crash.
 */
int	pgstore_read_durable(struct pgstore *, const struct pgstore_key *,
	    struct pgstore_row *, char **cause);
/*
 * The owner's temporary exists: grant its lease.  1: granted; 0: fenced
 * (the epoch or token moved: a takeover), nothing changed.  It is
 * _send then _wait, the two halves cluster.c calls apart so that its
 * fsync of the temporary runs while the server flushes the grant's WAL:
 * _send (0, or -1 with *cause: nothing is pending), then, always after
 * a 0, _wait with the same arguments, which answers 1, 0 or -1.
 * Nothing else may use the store's connection between the two.
 */
int	pgstore_grant(struct pgstore *, const struct pgstore_key *,
	    int64_t epoch, const char *token, char **cause);
int	pgstore_grant_send(struct pgstore *, const struct pgstore_key *,
	    int64_t epoch, const char *token, char **cause);
int	pgstore_grant_wait(struct pgstore *, const struct pgstore_key *,
	    int64_t epoch, const char *token, char **cause);
/*
 * The name was taken by another writer before anything was promised: a
 * fresh number under the same fence (row's date and seq updated).  1, 0
 * fenced, -1 (ERANGE: used up).
 */
int	pgstore_renumber(struct pgstore *, const struct pgstore_key *,
	    int64_t epoch, const char *token, struct pgstore_row *,
	    char **cause);
/*
 * Commit: state committed, the file's digest and the receipt's bytes,
 * if (epoch, token) is still the row's and it is not committed.  1:
 * committed; 0: fenced, nothing changed.
 */
int	pgstore_commit(struct pgstore *, const struct pgstore_key *,
	    int64_t epoch, const char *token, const uint8_t *file_digest,
	    const char *receipt, char **cause);
/*
 * ---- rounds and batches (pg_batch.c; doc/cluster.md, "Group commit")
 *
 * A round: every statement a worker's creation threads have waiting, in
 * one libpq pipeline on one session (one round trip): each claim's
 * statement (its own transaction, committed without the flush),
 * then the grants and commits as one statement over arrays (one
 * transaction, one synchronous commit, so one WAL flush for them all
 * and for the claims before it), or a lone member's own statement.
 * Each grant or commit member's row is changed under its own fence,
 * exactly as pgstore_grant's or pgstore_commit's would be; the rows are
 * locked in the order of their keys, so two batches never wait for each
 * other in a cycle.  What a member learns is only whether its row came
 * back (returned), read once the command's last result, the commit's,
 * is in; a claim member gets its result (claim->res).
 */
enum pgstore_round_op {
	PGSTORE_OP_CLAIM,
	PGSTORE_OP_GRANT,
	PGSTORE_OP_COMMIT
};
struct pgstore_batch_member {
	enum pgstore_round_op	 op;
	const struct pgstore_key *key;
	int64_t			 epoch;
	const char		*token;
	const uint8_t		*file_digest;	/* a commit's */
	const char		*receipt;	/* a commit's */
	struct pgstore_claim	*claim;		/* a claim's turn */
	int			 returned;	/* _wait: granted or committed */
};
/* How a batch failed (pgstore_batch_wait's -1). */
enum pgstore_batch_failure {
	/*
	 * The connection lost, or the server gone, after the send: the
	 * outcome is unknown (the batch may have committed).  The
	 * connection is dropped; the next call makes a new one.
	 */
	PGSTORE_BATCH_LOST,
	/* Rolled back, worth one more try (40xxx, 57014). */
	PGSTORE_BATCH_TRANSIENT,
	/* Rolled back, any other error: the members go alone. */
	PGSTORE_BATCH_FAILED
};
/*
 * The grants and commits alone (n members, at most
 * PGSTORE_MAX_CONNECTIONS, op GRANT or COMMIT), one statement over
 * arrays, outside a pipeline (a round's retry after a transient
 * error): 0, or -1
 * with *cause (nothing was sent that could commit; the connection is
 * dropped).  Then, always after a 0, _wait: 0 with each member's
 * returned filled, or -1 with *cause and *failure.  Nothing else may use
 * the store's connection between the two.
 */
int	pgstore_batch_send(struct pgstore *,
	    struct pgstore_batch_member *const *, size_t n, char **cause);
int	pgstore_batch_wait(struct pgstore *,
	    struct pgstore_batch_member *const *, size_t n,
	    enum pgstore_batch_failure *, char **cause);
/*
 * A round (members of any op, at most PGSTORE_MAX_CONNECTIONS): 0 sent;
 * -2 with *cause: nothing of it was sent (each member may go alone); or
 * -1 with *cause: nothing of its grants and commits committed, and a
 * claim's outcome is not known (the connection is dropped).  Then,
 * always after a 0, _wait: every claim member whose result came has
 * claim->res (the others' outcome is not known); 0 with each grant
 * and commit member's returned, or -1 with *cause and *failure for
 * them (a claim not read makes it LOST: the connection broke).
 */
int	pgstore_round_send(struct pgstore *,
	    struct pgstore_batch_member *const *, size_t n, char **cause);
int	pgstore_round_wait(struct pgstore *,
	    struct pgstore_batch_member *const *, size_t n,
	    enum pgstore_batch_failure *, char **cause);

/*
 * Take over an unfinished row whose lease expired by the server's clock
 * or whose owner's session is gone, if its epoch is still epoch: epoch
 * + 1, a fresh token, this host's session, the lease from now, not
 * granted.  1: taken, row filled with the new fence; 0: not allowed (the
 * owner is alive and its lease runs, or someone moved the epoch).
 */
int	pgstore_takeover(struct pgstore *, const struct pgstore_key *,
	    int64_t epoch, struct pgstore_row *, char **cause);
/* A legacy call's number (no row: the counter only). -1 ERANGE: used up. */
int	pgstore_legacy_number(struct pgstore *, enum subtab_kind,
	    uint32_t *date, uint32_t *seq, int64_t *now_ms, char **cause);
/*
 * Every unfinished row of the workspace, oldest first, to fn (its key's
 * scope and id, and the row); fn returning non-zero stops.
 */
int	pgstore_unfinished(struct pgstore *, int (*fn)(const char *scope,
	    const char *id, const struct pgstore_row *, void *), void *arg,
	    char **cause);

/*
 * For pg_history.c: a working connection (made again if it was lost),
 * and a failed statement's result as *cause (the result cleared; -1,
 * errno EIO).
 */
struct pg_result;			/* libpq's PGresult */
/* A failed statement: *cause names it, errno EIO, res cleared; -1. */
int	pgstore_conn_failed(struct pg_conn *, struct pg_result *,
	    const char *what, char **cause);
struct pg_conn *pgstore_conn(struct pgstore *, char **cause);
int	pgstore_failed(struct pgstore *, struct pg_result *, const char *what,
	    char **cause);

/*
 * Rows of kind by state: counts[state] (SUBTAB_STATE_COUNT entries); a
 * tombstone counts as committed.
 */
int	pgstore_counts(struct pgstore *, enum subtab_kind,
	    uint32_t counts[SUBTAB_STATE_COUNT], char **cause);

/*
 * ---- effects (doc/cluster.md, "Effects") ----------------------------
 *
 * An effect is a row of kind SUBTAB_KIND_EFFECT, its effect_kind the
 * scope.  Read into a pgstore_row: entry.state is SUBTAB_RESERVED,
 * _RELEASED, _OUTCOME_UNKNOWN (stored by a resolve) or _COMMITTED;
 * entry.attempt is the epoch and entry.fence the owner token as a number
 * (the fence "<attempt>-<token>"); entry.created_at_ms is committed_at,
 * entry.file_digest the result's digest, entry.effect_flags
 * SUBTAB_EFFECT_RECOVERED (the lease_granted column: an effect has no
 * temporary); row->receipt is the committed result's bytes and
 * row->lease_ms_left the lease by the server's clock.  Each call is one
 * statement, so one transaction; each change is a compare-and-set.
 */
int	pgstore_effect_read(struct pgstore *, const struct pgstore_key *,
	    struct pgstore_row *, char **cause);
/*
 * The first begin: the row, reserved, attempt 1, a fresh token, the
 * lease from now.  1: reserved, row filled; 0: not inserted (a row
 * exists: read again).
 */
int	pgstore_effect_reserve(struct pgstore *, const struct pgstore_key *,
	    const uint8_t *request_digest, int64_t lease_ms,
	    struct pgstore_row *, char **cause);
/*
 * A begin after not_applied: released -> reserved, attempt + 1, a fresh
 * token, the lease from now, if (epoch, token) and the state are still
 * those read.  1: row filled; 0: the row moved (read again).
 */
int	pgstore_effect_rebegin(struct pgstore *, const struct pgstore_key *,
	    int64_t epoch, const char *token, int64_t lease_ms,
	    struct pgstore_row *, char **cause);
/* A complete's or resolve's transition, and its compare-and-set. */
struct pgstore_effect_change {
	int64_t		 epoch;		/* as read */
	const char	*token;		/* as read */
	int		 from_state;	/* as read */
	int		 to_state;
	const char	*result;	/* committed: the result's bytes */
	const uint8_t	*result_digest;	/* committed */
	int		 recovered;	/* committed by a resolve */
	int		 lapsed_only;	/* a reserved row only once its lease lapsed */
};
/* 1: changed, row filled (committed_at by the server's clock); 0: moved. */
int	pgstore_effect_settle(struct pgstore *, const struct pgstore_key *,
	    const struct pgstore_effect_change *, struct pgstore_row *,
	    char **cause);

/*
 * effect_extend: the lease of a reserved row ends lease_ms from now, by
 * the server's clock, if (epoch, token) are still those read and the
 * lease has not lapsed by that clock; updated_at becomes now (the lease's
 * grant).  1: row filled; 0: the row moved or the lease lapsed (read
 * again and judge).
 */
int	pgstore_effect_extend(struct pgstore *, const struct pgstore_key *,
	    int64_t epoch, const char *token, int64_t lease_ms,
	    struct pgstore_row *, char **cause);

/*
 * Every effect of the workspace not committed (reserved, released,
 * outcome_unknown), oldest first, to fn (its effect_kind and id, and the
 * row); fn returning non-zero stops.  pgstore_unfinished lists the
 * others.
 */
int	pgstore_effects_unfinished(struct pgstore *, int (*fn)(const char *scope,
	    const char *id, const struct pgstore_row *, void *), void *arg,
	    char **cause);

/* ---- pg_history.c ---------------------------------------------------- */

/* What store_import_row found (idemctl store import). */
enum pgstore_import_result {
	PGSTORE_IMPORT_ADDED,		/* the row was written */
	PGSTORE_IMPORT_PRESENT,		/* the same facts are there already */
	PGSTORE_IMPORT_CONFLICT		/* other facts: *cause says which */
};
/*
 * One transaction for the whole import: begin it, give every committed
 * row (tombstone: receipt NULL) and legacy number, then finish it:
 * commit (counters raised past every number of the workspace) or, with
 * commit 0, roll back, so a failed import writes nothing.
 */
int	pgstore_import_begin(struct pgstore *, char **cause);
int	pgstore_import_row(struct pgstore *, const struct pgstore_key *,
	    const struct subtab_entry *, const char *receipt,
	    enum pgstore_import_result *, char **cause);
/*
 * An effect (kind 3, key's scope its effect_kind): committed with its
 * result's exact bytes (result) or, tombstone, its result's digest
 * only; or released.  Day 0 and a random seq, as a begin's row.
 */
int	pgstore_import_effect(struct pgstore *, const struct pgstore_key *,
	    const struct subtab_entry *, const char *result, int tombstone,
	    enum pgstore_import_result *, char **cause);
int	pgstore_import_legacy(struct pgstore *, enum subtab_kind,
	    uint32_t date, uint32_t seq, enum pgstore_import_result *,
	    char **cause);
/*
 * A day's counter raised to at least next_seq (the local allocator's
 * position: numbers of calls without an id that no record keeps).
 */
int	pgstore_import_counter(struct pgstore *, enum subtab_kind,
	    uint32_t date, uint32_t next_seq, char **cause);
int	pgstore_import_finish(struct pgstore *, int commit, char **cause);
/*
 * Compaction: every committed task, report and effect row created (an
 * effect's: committed) more than days days ago by the server's clock
 * becomes a tombstone, in one transaction; *pruned: how many.
 */
int	pgstore_compact(struct pgstore *, int days, uint64_t *pruned,
	    char **cause);
/* The workspace's rows (tasks, reports, effects), as stats shows them. */
struct pgstore_history {
	uint64_t	submissions;	/* every row */
	uint64_t	committed;	/* with its receipt */
	uint64_t	in_flight;	/* reserved, task_created, outcome_unknown */
	uint64_t	tombstones;	/* compacted */
	uint64_t	effects;	/* the effect rows among them */
};
int	pgstore_history_counts(struct pgstore *, struct pgstore_history *,
	    char **cause);

/* ---- pg_verify.c ---------------------------------------------------- */

/*
 * A row as idemctl store verify reads it (strings valid during fn only).
 * A task or report row has no scope (""), an effect row no task_id,
 * epoch or owner_token ("", 0, "") and only it a receipt.
 */
struct pgstore_verify_row {
	enum subtab_kind	 kind;
	const char		*scope;
	const char		*client_submission_id;
	const char		*task_id;
	const char		*file_digest_hex;	/* NULL: none */
	const char		*owner_token;
	int			 state;		/* or PGSTORE_STATE_TOMBSTONE */
	int64_t			 epoch;
	const char		*receipt;	/* NULL: none */
};
/*
 * The workspace's task and report rows (effects 0) or its effect rows
 * (effects 1), each to fn: how many, or -1 with *cause, the server's
 * message as libpq gives it (a line).
 */
int	pgstore_verify_rows(struct pg_conn *, const char *workspace,
	    int effects, void (*fn)(const struct pgstore_verify_row *, void *),
	    void *arg, char **cause);
/*
 * Every (kind, date, seq) more than one task or report row holds, with
 * how many: 0, or -1 with *cause as above.
 */
int	pgstore_verify_numbers(struct pg_conn *, const char *workspace,
	    void (*fn)(enum subtab_kind, uint32_t date, uint32_t seq,
	    unsigned count, void *), void *arg, char **cause);

/* A fresh token: 64 random bits, hex. */
void	pgstore_new_token(char out[PGSTORE_TOKEN_BYTES + 1]);

#endif
