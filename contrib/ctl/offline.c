/* SPDX-License-Identifier: ISC */
/*
 * offline.c: idemctl's commands that read the files, offline and
 * read-only (journal dump, verify).  The store reads and judges
 * (store_records, store_verify: typed findings with their facts); this
 * file only says them, in words or as JSON.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE		/* vasprintf */
#endif

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "idem.h"
#include "store.h"
#include "idemctl.h"
#include "../idemctl_store.h"

/* ---- journal records as text -------------------------------------------- */

static const char *
kind_name(unsigned kind)
{
	return kind == SUBTAB_KIND_REPORT ? "report" :
	    kind == SUBTAB_KIND_EFFECT ? "effect" : "task";
}

static json_t *
time_or_null(int64_t ms)
{
	char	at[TASKFILE_TIME_BYTES];

	if (ms == 0)
		return json_null();
	taskfile_format_time(ms, at);
	return json_string(at);
}

/*
 * One record of the audit trail, every fact it holds, and where it is:
 * a journal segment and offset, or the checkpoint continued by segment.
 */
static json_t *
record_json(const struct journal_record *r, int checkpoint, uint64_t segment,
    uint64_t offset)
{
	const struct subtab_entry *e = &r->entry;
	char		 id[IDEM_MAX_TASK_ID_BYTES + 16];
	char		 path[IDEM_MAX_TASK_PATH_BYTES + 16];
	char		 hex[IDEM_DIGEST_HEX_SIZE];
	const char	*csid, *schema = subtab_schema_name(e->schema);
	const char	*sep;
	json_t		*j;

	if (r->type == JOURNAL_RECORD_EFFECT) {
		sep = memchr(r->key, SUBTAB_EFFECT_SEPARATOR, e->key_length);
		j = json_pack("{s:s,s:I,s:o,s:s,s:s,s:s}", "source",
		    checkpoint ? "checkpoint" : "journal", "segment",
		    (json_int_t)segment, "offset", checkpoint ? json_null() :
		    json_integer((json_int_t)offset), "type", "effect", "kind",
		    "effect", "state", subtab_state_name(e->state));
		json_object_set_new(j, "effect_kind", sep != NULL ?
		    json_stringn(r->key, (size_t)(sep - r->key)) : json_null());
		json_object_set_new(j, "client_submission_id", sep != NULL ?
		    json_stringn(sep + 1, e->key_length - (size_t)(sep + 1 -
		    r->key)) : json_null());
		json_object_set_new(j, "schema", schema != NULL ?
		    json_string(schema) : json_null());
		store_digest_hex(e->request_digest, hex);
		json_object_set_new(j, "request_digest", json_string(hex));
		json_object_set_new(j, "attempt", json_integer(e->attempt));
		json_object_set_new(j, "recovered", json_boolean(
		    e->effect_flags & SUBTAB_EFFECT_RECOVERED));
		json_object_set_new(j, "lease_expires_at",
		    time_or_null(e->lease_expires_ms));
		store_digest_hex(e->file_digest, hex);
		json_object_set_new(j, "result_digest", e->state ==
		    SUBTAB_COMMITTED ? json_string(hex) : json_null());
		json_object_set_new(j, "result", e->result_length > 0 ?
		    json_loadb((const char *)r->result, e->result_length,
		    JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL) : json_null());
		json_object_set_new(j, "reserved_at",
		    time_or_null(e->reserved_at_ms));
		json_object_set_new(j, "updated_at",
		    time_or_null(e->updated_at_ms));
		json_object_set_new(j, "committed_at",
		    time_or_null(e->created_at_ms));
		json_object_set_new(j, "peer_uid", json_integer(e->peer_uid));
		json_object_set_new(j, "peer_pid", json_integer(e->peer_pid));
		return j;
	}
	store_entry_id(e, id, sizeof id);
	taskfile_format_path(e->kind, id, path, sizeof path);
	csid = store_key_submission_id(e, r->key);
	j = json_pack("{s:s,s:I,s:o,s:s,s:s,s:s}", "source", checkpoint ?
	    "checkpoint" : "journal", "segment", (json_int_t)segment, "offset",
	    checkpoint ? json_null() : json_integer((json_int_t)offset),
	    "type", r->type == JOURNAL_RECORD_ENTRY ? "entry" : "?", "kind",
	    kind_name(e->kind), "state", subtab_state_name(e->state));
	json_object_set_new(j, "client_submission_id", csid != NULL ?
	    json_stringn(csid, e->key_length - (size_t)(csid - r->key)) :
	    json_null());
	if (e->kind == SUBTAB_KIND_REPORT) {
		json_object_set_new(j, "task_id", csid != NULL &&
		    csid > r->key ? json_stringn(r->key,
		    (size_t)(csid - r->key) - 1) : json_null());
		json_object_set_new(j, "report_id", json_string(id));
		json_object_set_new(j, "report_path", json_string(path));
	} else {
		json_object_set_new(j, "task_id", json_string(id));
		json_object_set_new(j, "task_path", json_string(path));
	}
	json_object_set_new(j, "schema", schema != NULL ? json_string(schema) :
	    json_null());
	store_digest_hex(e->request_digest, hex);
	json_object_set_new(j, "request_digest", schema != NULL ?
	    json_string(hex) : json_null());
	store_digest_hex(e->file_digest, hex);
	json_object_set_new(j, "file_digest", e->state >= SUBTAB_TASK_CREATED ?
	    json_string(hex) : json_null());
	json_object_set_new(j, "reserved_at", time_or_null(e->reserved_at_ms));
	json_object_set_new(j, "updated_at", time_or_null(e->updated_at_ms));
	json_object_set_new(j, "created_at", time_or_null(e->created_at_ms));
	json_object_set_new(j, "peer_uid", json_integer(e->peer_uid));
	json_object_set_new(j, "peer_pid", json_integer(e->peer_pid));
	return j;
}

/* ---- journal dump -------------------------------------------------------- */

struct dump {
	int	text;
};

/* One record, as JSON or one aligned line of text. */
static int
dump_record(const struct journal_record *r, const struct store_where *w,
    void *arg)
{
	struct dump	*d = arg;
	json_t		*j;
	char		 at[64];

	if ((j = record_json(r, w->checkpoint, w->segment, w->offset)) ==
	    NULL)
		return -1;
	if (w->checkpoint)
		snprintf(at, sizeof at, "ckpt-%" PRIu64, w->segment);
	else
		snprintf(at, sizeof at, "%" PRIu64 ":%" PRIu64, w->segment,
		    w->offset);
	if (d->text)
		printf("%-10s %-6s %-12s %-24s %-36s %s\n", at,
		    kind_name(r->entry.kind), subtab_state_name(r->entry.state),
		    ctl_string_member(j, "client_submission_id", "(legacy)"),
		    ctl_string_member(j, r->entry.kind == SUBTAB_KIND_REPORT ?
		    "report_id" : r->entry.kind == SUBTAB_KIND_EFFECT ?
		    "effect_kind" : "task_id", "?"),
		    ctl_string_member(j, "updated_at", "-"));
	else
		ctl_print_json(j);
	json_decref(j);
	return 0;
}

/* The journal's directory under the root; exit 2 if it is too long. */
static int
journal_dir(struct idemctl *ctl, char *out, size_t size)
{
	if (store_journal_dir(ctl_root(ctl), out, size) != 0)
		return ctl_fail(ctl, IDEMCTL_EXIT_USAGE, "root path too long");
	return 0;
}

/* Damage is a problem found (1); anything else, files unreadable (3). */
static int
load_failure_status(const struct store_loaded *loaded)
{
	return loaded->failure == STORE_CHECKPOINT_CORRUPT ||
	    loaded->failure == STORE_JOURNAL_CORRUPT ? IDEMCTL_EXIT_PROBLEM :
	    IDEMCTL_EXIT_UNREACHABLE;
}

/*
 * Without --sequence-digits, verify judges names by the digits idemd
 * last ran with on this root (ROOT/.idem/sequence-digits), else FCoP's
 * three.
 */
static int
recorded_digits(struct idemctl *ctl, unsigned *digits)
{
	char	*cause = NULL;
	int	 root_fd, rc;

	*digits = IDEM_DEFAULT_SEQUENCE_DIGITS;
	if ((root_fd = open(ctl_root(ctl), O_RDONLY | O_DIRECTORY |
	    O_CLOEXEC)) == -1)
		return 0;	/* store_verify names what is missing */
	rc = seqdigits_read(root_fd, digits, &cause);
	close(root_fd);
	/* A .idem store_verify refuses (a symlink, ...) is named there. */
	if (rc == -1 && errno == EINVAL) {
		rc = ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "%s", cause);
		free(cause);
		return rc;
	}
	free(cause);
	if (rc != 1)
		*digits = IDEM_DEFAULT_SEQUENCE_DIGITS;
	return 0;
}

const struct option ctl_journal_dump_options[] = {
	COMMON_OPTIONS,
	{ "text", no_argument, NULL, OPT_TEXT },
	{ NULL, 0, NULL, 0 }
};

static int
cmd_journal_dump(struct idemctl *ctl, int argc, char **argv)
{
	struct store_loaded	 loaded;
	struct dump		 d = { 0 };
	char			 dir[PATH_MAX];
	char			*cause = NULL;
	int			 ch, status;

	while ((ch = ctl_next_option(ctl, argc, argv,
	    ctl_journal_dump_options)) != -1) {
		if (ch == OPT_TEXT)
			d.text = 1;
	}
	if (optind != argc)
		ctl_usage_error(ctl, "no arguments expected");
	if (d.text && ctl->json)
		ctl_usage_error(ctl, "--json and --text exclude each other");
	if ((status = journal_dir(ctl, dir, sizeof dir)) != 0)
		return status;
	if (access(ctl_root(ctl), R_OK | X_OK) == -1)
		return ctl_fail(ctl, IDEMCTL_EXIT_UNREACHABLE, "cannot read "
		    "root %s: %s", ctl_root(ctl), strerror(errno));
	if (d.text)
		printf("%-10s %-6s %-12s %-24s %-36s %s\n", "SEG:OFFSET",
		    "KIND", "STATE", "CLIENT_SUBMISSION_ID", "TASK/REPORT_ID",
		    "UPDATED_AT");
	if (store_records(dir, dump_record, &d, &loaded, &cause) != 0) {
		fflush(stdout);
		status = ctl_fail(ctl, load_failure_status(&loaded), "%s",
		    cause != NULL ? cause : strerror(errno));
		free(cause);
		return status;
	}
	fflush(stdout);
	if (loaded.stats.torn_segment != 0)
		fprintf(stderr, "idemctl journal dump: warning: torn tail in "
		    "segment %016" PRIx64 ".jnl at offset %" PRIu64 " (%s): %"
		    PRIu64 " bytes of an append that never completed (or is "
		    "in flight)\n", loaded.stats.torn_segment,
		    loaded.stats.torn_offset, loaded.stats.torn_why != NULL ?
		    loaded.stats.torn_why : "?", loaded.stats.truncated_bytes);
	return IDEMCTL_EXIT_OK;
}

static const struct command journal_commands[] = {
	{ "journal dump", cmd_journal_dump, "the journal as an audit trail",
	    "[--root DIR] [--json | --text]",
"Print the journal, the broker's durable audit trail, one JSON object per\n"
"line and record, oldest first: where it is (source \"journal\" with its\n"
"segment and offset, or \"checkpoint\": a snapshot of the table that\n"
"replaced the segments before it, without legacy records), type, kind,\n"
"state, client_submission_id (and task_id for a report), the task or\n"
"report id and path, schema, request and file digests (hex), reserved,\n"
"updated and created times (ISO 8601, UTC) and the peer's uid and pid.\n"
"A submission has one record per transition; the last one holds.  --text\n"
"prints one aligned line per record instead.\n"
"\n"
"Read-only, safe beside a running broker: a torn tail (an append in\n"
"flight, or one a crash cut short) is a warning on stderr, corruption an\n"
"error naming the offset (exit 1) after the records before it.\n",
	    ctl_journal_dump_options, NULL, NULL, 0 }
};

int
cmd_journal(struct idemctl *ctl, int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "dump") == 0) {
		ctl->command = &journal_commands[0];
		return cmd_journal_dump(ctl, argc - 1, argv + 1);
	}
	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "-h") == 0)) {
		ctl_command_help(ctl->command, stdout);
		return IDEMCTL_EXIT_OK;
	}
	ctl_usage_error(ctl, argc < 2 ? "which journal command?" :
	    "unknown journal command");
}

/* ---- verify -------------------------------------------------------------- */

/* What verify prints: the store's findings, in words and as JSON. */
struct vout {
	struct store_verify	 sv;
	const char		*dir;
	json_t			*problems;
	json_t			*foreign;
};

static void	vout_add(struct vout *, const struct store_problem *,
		    json_t *, const char *, ...)
		    __attribute__((format(printf, 4, 5)));

/*
 * One finding, with a message for people and the facts (details, which
 * this consumes) for scripts.
 */
static void
vout_add(struct vout *o, const struct store_problem *p, json_t *details,
    const char *fmt, ...)
{
	static const char *const checks[] = {
		[STORE_CHECK_NO_JOURNAL] = "no_journal",
		[STORE_CHECK_JOURNAL_CORRUPT] = "journal_corrupt",
		[STORE_CHECK_TORN_TAIL] = "torn_tail",
		[STORE_CHECK_NUMBER_REUSED] = "number_reused",
		[STORE_CHECK_INTERMEDIATE] = "intermediate",
		[STORE_CHECK_FIND_FAILED] = "unreadable",
		[STORE_CHECK_FILE_UNREADABLE] = "unreadable",
		[STORE_CHECK_DIR_UNREADABLE] = "unreadable",
		[STORE_CHECK_DIR_READ_FAILED] = "unreadable",
		[STORE_CHECK_MISSING] = "missing",
		[STORE_CHECK_FILE_DIGEST] = "file_digest",
		[STORE_CHECK_RECORD_IDENTITY] = "identity",
		[STORE_CHECK_FILE_IDENTITY] = "identity",
		[STORE_CHECK_NOT_FCOP] = "not_fcop",
		[STORE_CHECK_DUPLICATE] = "duplicate",
		[STORE_CHECK_UNKNOWN_SUBMISSION] = "unknown_submission",
		[STORE_CHECK_TASK_ID_MISMATCH] = "task_id_mismatch",
		[STORE_CHECK_FOREIGN] = "foreign",
		[STORE_CHECK_INDEX_MISSING] = "index_missing",
		[STORE_CHECK_INDEX_CORRUPT] = "index_corrupt",
		[STORE_CHECK_INDEX_DISAGREES] = "index_disagrees",
		[STORE_CHECK_INDEX_LACKS] = "index_lacks",
		[STORE_CHECK_INDEX_STALE] = "index_stale",
		[STORE_CHECK_INDEX_BUSY] = "index_busy"
	};
	const char	*check = checks[p->check];
	va_list		 ap;
	char		*message;

	va_start(ap, fmt);
	if (vasprintf(&message, fmt, ap) == -1)
		message = NULL;
	va_end(ap);
	if (details == NULL)
		details = json_object();
	json_object_set_new(details, "severity", json_string(
	    p->severity == STORE_SEVERITY_WARNING ? "warning" : "error"));
	json_object_set_new(details, "check", json_string(check));
	json_object_set_new(details, "message", json_string(message != NULL ?
	    message : check));
	json_array_append_new(o->problems, details);
	free(message);
}

/* Where an effect's key (vr->key, NUL-terminated) puts its id, or NULL. */
static const char *
vrecord_effect_id(const struct store_vrecord *vr)
{
	const char	*sep = strchr(vr->key, SUBTAB_EFFECT_SEPARATOR);

	return sep != NULL ? sep + 1 : NULL;
}

/* An effect's record: its kind and id (no number, no file). */
static json_t *
vrecord_effect_details(const struct store_vrecord *vr)
{
	const char	*id = vrecord_effect_id(vr);
	json_t		*j;

	j = json_pack("{s:s,s:s,s:s,s:I,s:o}", "kind", "effect", "state",
	    subtab_state_name(vr->entry.state), "source", vr->checkpoint ?
	    "checkpoint" : "journal", "segment", (json_int_t)vr->segment,
	    "offset", vr->checkpoint ? json_null() :
	    json_integer((json_int_t)vr->offset));
	json_object_set_new(j, "effect_kind", id != NULL ?
	    json_stringn(vr->key, (size_t)(id - 1 - vr->key)) : json_null());
	json_object_set_new(j, "client_submission_id", id != NULL ?
	    json_string(id) : json_null());
	return j;
}

static json_t *
vrecord_details(const struct store_vrecord *vr, const char *path)
{
	const char	*csid = store_key_submission_id(&vr->entry, vr->key);
	json_t		*j;

	if (vr->entry.kind == SUBTAB_KIND_EFFECT)
		return vrecord_effect_details(vr);
	j = json_pack("{s:s,s:s,s:s,s:s,s:I,s:o}", "kind",
	    kind_name(vr->entry.kind), "id", vr->id, "state",
	    subtab_state_name(vr->entry.state), "source", vr->from_index ?
	    "index" : vr->checkpoint ? "checkpoint" : "journal", "segment",
	    (json_int_t)vr->segment,
	    "offset", vr->checkpoint ? json_null() :
	    json_integer((json_int_t)vr->offset));
	json_object_set_new(j, "client_submission_id", csid != NULL ?
	    json_string(csid) : json_null());
	if (path != NULL)
		json_object_set_new(j, "path", json_string(path));
	return j;
}

/* How a record is named in messages: TASK-... (submission "x", committed). */
static void
vrecord_name(const struct store_vrecord *vr, char *out, size_t size)
{
	const char	*csid = store_key_submission_id(&vr->entry, vr->key);
	const char	*id;

	if (vr->entry.kind == SUBTAB_KIND_EFFECT) {
		id = vrecord_effect_id(vr);
		snprintf(out, size, "effect %.*s \"%s\" (%s)", id != NULL ?
		    (int)(id - 1 - vr->key) : 0, vr->key, id != NULL ? id : "",
		    subtab_state_name(vr->entry.state));
		return;
	}
	if (csid != NULL)
		snprintf(out, size, "%s (submission \"%s\", %s)", vr->id, csid,
		    subtab_state_name(vr->entry.state));
	else
		snprintf(out, size, "%s (legacy %s)", vr->id,
		    kind_name(vr->entry.kind));
}

/* index_disagrees: the names of the facts that differ (STORE_FACT_*). */
static json_t *
facts_differ_json(unsigned differs)
{
	static const struct {
		unsigned	 bit;
		const char	*name;
	} facts[] = {
		{ STORE_FACT_STATE, "state" },
		{ STORE_FACT_SCHEMA, "schema" },
		{ STORE_FACT_NUMBER, "number" },
		{ STORE_FACT_REQUEST_DIGEST, "request_digest" },
		{ STORE_FACT_ATTEMPT, "attempt" },
		{ STORE_FACT_RESULT_DIGEST, "result_digest" },
		{ STORE_FACT_RESULT, "result" },
		{ STORE_FACT_COMMITTED_AT, "committed_at" },
		{ STORE_FACT_RECOVERED, "recovered" }
	};
	json_t		*a = json_array();
	size_t		 i;

	for (i = 0; i < sizeof facts / sizeof facts[0]; i++)
		if (differs & facts[i].bit)
			json_array_append_new(a, json_string(facts[i].name));
	return a;
}

/*
 * The facts index_disagrees compares, of the journal's record or the
 * index's entry (form: INDEX_FULL or INDEX_TOMBSTONE; 0 for a record).
 */
static json_t *
compared_json(const struct subtab_entry *e, int form)
{
	const char	*schema = subtab_schema_name(e->schema);
	char		 id[IDEM_MAX_TASK_ID_BYTES + 16];
	char		 hex[IDEM_DIGEST_HEX_SIZE];
	json_t		*j;

	j = json_pack("{s:s}", "state", subtab_state_name(e->state));
	if (form != 0)
		json_object_set_new(j, "form", json_string(form ==
		    INDEX_TOMBSTONE ? "tombstone" : "full"));
	json_object_set_new(j, "schema", schema != NULL ? json_string(schema) :
	    json_null());
	store_digest_hex(e->request_digest, hex);
	json_object_set_new(j, "request_digest", json_string(hex));
	if (e->kind != SUBTAB_KIND_EFFECT) {
		store_entry_id(e, id, sizeof id);
		json_object_set_new(j, "id", json_string(id));
		return j;
	}
	json_object_set_new(j, "attempt", json_integer(e->attempt));
	store_digest_hex(e->file_digest, hex);
	json_object_set_new(j, "result_digest", e->state == SUBTAB_COMMITTED ?
	    json_string(hex) : json_null());
	/* A tombstone keeps no result: its length is not a fact of it. */
	json_object_set_new(j, "result_bytes", form == INDEX_TOMBSTONE ?
	    json_null() : json_integer(e->result_length));
	json_object_set_new(j, "committed_at", time_or_null(e->created_at_ms));
	json_object_set_new(j, "recovered", json_boolean(e->effect_flags &
	    SUBTAB_EFFECT_RECOVERED));
	return j;
}

/* The facts of index_disagrees, and the names of those that differ. */
static json_t *
disagreement_json(const struct store_problem *p, char *names, size_t size)
{
	json_t	*d, *differs, *name;
	size_t	 i, n = 0;

	d = vrecord_details(p->record, NULL);
	differs = facts_differ_json(p->differs);
	names[0] = '\0';
	json_array_foreach(differs, i, name)
		n += (size_t)snprintf(names + (n < size ? n : size),
		    n < size ? size - n : 0, "%s%s", i > 0 ? ", " : "",
		    json_string_value(name));
	json_object_set_new(d, "differs", differs);
	json_object_set_new(d, "recorded", compared_json(&p->record->entry,
	    0));
	if (p->indexed != NULL)
		json_object_set_new(d, "indexed", compared_json(
		    &p->indexed->record.entry, p->indexed->form));
	return d;
}

/*
 * index_stale: the index is older than the newest checkpoint, which left
 * receipts to it alone; the words of idemd's refusal (broker/state.c),
 * since this is what an operator sees after a restore, before a start.
 */
static void
index_stale_found(struct vout *o, const struct store_problem *p)
{
	json_t	*d;
	char	 written[64];

	d = json_pack("{s:s,s:I,s:I}", "path", p->path, "checkpoint",
	    (json_int_t)p->segment, "receipts", (json_int_t)p->receipts);
	json_object_set_new(d, "index_checkpoint", p->index_checkpoint != 0 ?
	    json_integer((json_int_t)p->index_checkpoint) : json_null());
	if (p->index_checkpoint != 0)
		snprintf(written, sizeof written, "last written with "
		    "checkpoint-%016" PRIx64 ".snap", p->index_checkpoint);
	else
		snprintf(written, sizeof written, "never written with a "
		    "checkpoint");
	vout_add(o, p, d, "the index %s is older than the newest checkpoint, "
	    "%s/checkpoint-%016" PRIx64 ".snap (the index was %s), which "
	    "left %" PRIu64 " committed receipts to the index alone: it lacks "
	    "those given to it since, and idemd refuses to start on it.  "
	    "Restore an index taken with or after that checkpoint (idemctl "
	    "backup copies them together), or the whole backup this index "
	    "came from", p->path, o->dir, p->segment, written, p->receipts);
}

/* A finding of the store, in words. */
static void
verify_found(const struct store_problem *p, void *arg)
{
	struct vout			*o = arg;
	const struct store_vrecord	*vr = p->record;
	const struct journal_replay_stats *st = &o->sv.loaded.stats;
	const char			*cause;
	json_t				*d;
	char				 name[512], have[IDEM_DIGEST_HEX_SIZE];
	char				 want[IDEM_DIGEST_HEX_SIZE];
	char				 facts[160];

	if (vr != NULL)
		vrecord_name(vr, name, sizeof name);
	cause = p->cause != NULL ? p->cause : strerror(p->error);
	switch (p->check) {
	case STORE_CHECK_NO_JOURNAL:
		vout_add(o, p, NULL, "no journal at %s: idemd never ran on "
		    "this root, so every TASK file is foreign", p->path);
		break;
	case STORE_CHECK_JOURNAL_CORRUPT:
		d = json_pack("{s:I}", "segment", (json_int_t)p->segment);
		json_object_set_new(d, "offset", p->has_offset ?
		    json_integer((json_int_t)p->offset) : json_null());
		vout_add(o, p, d, "%s", p->cause != NULL ? p->cause :
		    "journal corrupt");
		break;
	case STORE_CHECK_TORN_TAIL:
		vout_add(o, p, json_pack("{s:I,s:I,s:I}", "segment",
		    (json_int_t)p->segment, "offset", (json_int_t)p->offset,
		    "bytes", (json_int_t)st->truncated_bytes), "journal %s/%016"
		    PRIx64 ".jnl: torn tail at offset %" PRIu64 " (%s): %"
		    PRIu64 " bytes of an append that never completed, or is "
		    "in flight; idemd cuts it at start-up", p->path,
		    p->segment, p->offset, st->torn_why != NULL ?
		    st->torn_why : "?", st->truncated_bytes);
		break;
	case STORE_CHECK_NUMBER_REUSED:
		vout_add(o, p, json_pack("{s:s,s:I,s:I}", "id", p->id,
		    "segment", (json_int_t)p->segment, "offset",
		    (json_int_t)p->offset), "%s is recorded for two "
		    "submissions (\"%s\" and \"%s\"): a number was handed out "
		    "twice", p->id, p->other_key, p->key);
		break;
	case STORE_CHECK_INTERMEDIATE:
		vout_add(o, p, vrecord_details(vr, NULL), "%s: %s", name,
		    vr->entry.state == SUBTAB_RESERVED ? "reserved, no file "
		    "recorded yet; a retry of the same request completes it" :
		    "file recorded but not committed; a retry of the same "
		    "request commits it");
		break;
	case STORE_CHECK_FIND_FAILED:
		vout_add(o, p, vrecord_details(vr, NULL), "%s: cannot look "
		    "for its file: %s", name, strerror(p->error));
		break;
	case STORE_CHECK_FILE_UNREADABLE:
		vout_add(o, p, vr != NULL ? vrecord_details(vr, p->path) :
		    json_pack("{s:s}", "path", p->path), "%s", cause);
		break;
	case STORE_CHECK_DIR_UNREADABLE:
	case STORE_CHECK_DIR_READ_FAILED:
		vout_add(o, p, json_pack("{s:s}", "path", p->path), "%s "
		    "directory %s: %s", p->check == STORE_CHECK_DIR_UNREADABLE ?
		    "cannot read" : "reading", p->path, strerror(p->error));
		break;
	case STORE_CHECK_MISSING:
		vout_add(o, p, vrecord_details(vr, NULL), "%s: %s.md is "
		    "nowhere in the workspace (not in _lifecycle/, history/ or "
		    "reports/)", name, vr->id);
		break;
	case STORE_CHECK_FILE_DIGEST:
		store_digest_hex(p->found_digest, have);
		store_digest_hex(p->recorded_digest, want);
		vout_add(o, p, vrecord_details(vr, p->path), "%s: %s has file "
		    "digest %s, the journal recorded %s (changed after idem "
		    "wrote it)", name, p->path, have, want);
		break;
	case STORE_CHECK_RECORD_IDENTITY:
		vout_add(o, p, vrecord_details(vr, p->path), "%s: %s names "
		    "client_submission_id \"%s\"", name, p->path,
		    p->client_submission_id);
		break;
	case STORE_CHECK_FILE_IDENTITY:
		vout_add(o, p, vrecord_details(vr, p->path), "%s has the name "
		    "of %s but no client_submission_id%s", p->path, name,
		    vr->entry.state == SUBTAB_RESERVED ? " (another writer "
		    "took the name; a retry answers conflict target_mismatch)" :
		    "");
		break;
	case STORE_CHECK_NOT_FCOP:
		vout_add(o, p, json_pack("{s:s,s:s}", "path", p->path,
		    "reason", p->reason), "%s: FCoP tools cannot read it: %s",
		    p->path, p->reason);
		break;
	case STORE_CHECK_DUPLICATE:
		vout_add(o, p, json_pack("{s:s,s:s}", "id", p->id, "path",
		    p->path), "%s is also at %s; FCoP tools and idem see only "
		    "one of them", p->path, p->other_path);
		break;
	case STORE_CHECK_UNKNOWN_SUBMISSION:
		vout_add(o, p, json_pack("{s:s,s:s,s:s}", "id", p->id, "path",
		    p->path, "client_submission_id", p->client_submission_id),
		    "%s names client_submission_id \"%s\", which no journal "
		    "record holds (not written by this broker, or the journal "
		    "lost it)", p->path, p->client_submission_id);
		break;
	case STORE_CHECK_TASK_ID_MISMATCH:
		vout_add(o, p, vrecord_details(vr, p->path), "%s names "
		    "client_submission_id \"%s\", but the journal binds it to "
		    "%s", p->path, p->client_submission_id, name);
		break;
	case STORE_CHECK_FOREIGN:
		json_array_append_new(o->foreign, json_string(p->path));
		break;
	case STORE_CHECK_INDEX_MISSING:
		vout_add(o, p, json_pack("{s:s,s:I}", "path", p->path,
		    "receipts", (json_int_t)o->sv.index_lost), "the index %s "
		    "is missing: %" PRIu64 " committed receipts were kept only "
		    "there; restore it from a backup", p->path,
		    o->sv.index_lost);
		break;
	case STORE_CHECK_INDEX_STALE:
		index_stale_found(o, p);
		break;
	case STORE_CHECK_INDEX_BUSY:
		vout_add(o, p, json_pack("{s:s}", "path", p->path), "the index "
		    "%s could not be read: other processes hold every reader "
		    "slot (%s).  Not damage: verify again once they let go",
		    p->path, p->cause != NULL ? p->cause : "MDB_READERS_FULL");
		break;
	case STORE_CHECK_INDEX_CORRUPT:
		vout_add(o, p, json_pack("{s:s}", "path", p->path), "%s",
		    p->cause != NULL ? p->cause : "index corrupt");
		break;
	case STORE_CHECK_INDEX_DISAGREES:
		d = disagreement_json(p, facts, sizeof facts);
		vout_add(o, p, d, "%s: the index's committed receipt is not "
		    "the one the %s's record holds (%s differ%s)", name,
		    vr->checkpoint ? "checkpoint" : "journal", facts,
		    strchr(facts, ',') != NULL ? "" : "s");
		break;
	case STORE_CHECK_INDEX_LACKS:
		vout_add(o, p, vrecord_details(vr, NULL), "%s: committed in "
		    "the checkpoint, which the index was written with, but "
		    "not in the index: its receipt is lost once the table "
		    "lets it go", name);
		break;
	}
}

static void
verify_print(struct vout *o)
{
	const struct store_verify	*v = &o->sv;
	const struct journal_replay_stats *st = &v->loaded.stats;
	const char			*dir = o->dir;
	json_t				*p;
	size_t				 i;

	printf("root        %s\n", v->root);
	if (v->loaded.checkpoint != 0)
		printf("checkpoint  %s/checkpoint-%016" PRIx64 ".snap: %" PRIu64
		    " submissions\n", dir, v->loaded.checkpoint,
		    v->loaded.checkpoint_records);
	printf("journal     %s: %" PRIu64 " records in %u segment%s, %s\n",
	    dir, st->records, st->segments, st->segments == 1 ? "" : "s",
	    !v->journal_complete ? "CORRUPT" : st->torn_segment != 0 ?
	    "torn tail" : "intact");
	printf("index       %" PRIu64 " committed receipts, %" PRIu64
	    " of tasks and reports only there; effects: %" PRIu64
	    " compared, %" PRIu64 " only there\n", v->index_entries,
	    v->index_only, v->index_effects, v->index_effects_only);
	printf("journal has %u submissions, %u legacy, %u reports: "
	    "%u present (%u moved by FCoP tools), %u intermediate; "
	    "%u effects committed\n", v->submissions, v->legacy, v->reports,
	    v->present, v->moved, v->intermediate, v->effects);
	if (v->journal_complete)
		printf("workspace   %u TASK files: %u idem, %u idem legacy, "
		    "%zu foreign\n", v->files, v->files_idem,
		    v->files_legacy, json_array_size(o->foreign));
	else
		printf("workspace   not checked against the journal: it is "
		    "corrupt, so a file may name a record past the damage\n");
	json_array_foreach(o->problems, i, p)
		printf("%s: %s\n", ctl_string_member(p, "severity", "error"),
		    ctl_string_member(p, "message", "?"));
	if (json_array_size(o->foreign) > 0) {
		printf("foreign TASK files (not written by idem%s; not an "
		    "error):\n", v->loaded.checkpoint != 0 ? ", or legacy "
		    "tasks from before the checkpoint, which keeps no legacy "
		    "records" : "");
		json_array_foreach(o->foreign, i, p)
			printf("  %s\n", json_string_value(p));
	}
	printf("verify: %s: %u problem%s, %u warning%s, %zu foreign file%s\n",
	    v->errors + v->unreadable > 0 ? "PROBLEMS" : "clean",
	    v->errors + v->unreadable, v->errors + v->unreadable == 1 ? "" :
	    "s", v->warnings, v->warnings == 1 ? "" : "s",
	    json_array_size(o->foreign), json_array_size(o->foreign) == 1 ?
	    "" : "s");
}

static void
verify_print_json(struct vout *o)
{
	const struct store_verify	*v = &o->sv;
	const struct journal_replay_stats *st = &v->loaded.stats;
	json_t				*j, *journal;

	journal = json_pack("{s:s,s:I,s:I,s:I,s:i,s:b}", "dir", o->dir,
	    "checkpoint_records", (json_int_t)v->loaded.checkpoint_records,
	    "records", (json_int_t)st->records, "bytes",
	    (json_int_t)st->bytes, "segments", (int)st->segments, "intact",
	    v->journal_complete && st->torn_segment == 0);
	json_object_set_new(journal, "checkpoint", v->loaded.checkpoint != 0 ?
	    json_integer((json_int_t)v->loaded.checkpoint) : json_null());
	json_object_set_new(journal, "corrupt", v->corrupt != NULL ?
	    json_string(v->corrupt) : json_null());
	if (st->torn_segment != 0)
		json_object_set_new(journal, "torn_tail", json_pack(
		    "{s:I,s:I,s:I,s:s}", "segment",
		    (json_int_t)st->torn_segment, "offset",
		    (json_int_t)st->torn_offset, "bytes",
		    (json_int_t)st->truncated_bytes, "reason",
		    st->torn_why != NULL ? st->torn_why : "?"));
	else
		json_object_set_new(journal, "torn_tail", json_null());
	j = json_pack("{s:b,s:s,s:o,s:{s:i,s:i,s:i,s:i,s:i,s:i},"
	    "s:{s:b,s:i,s:i,s:i},s:O,s:O,s:i,s:i}",
	    "ok", v->errors + v->unreadable == 0, "root", v->root,
	    "journal", journal,
	    "records", "submissions", (int)v->submissions, "legacy",
	    (int)v->legacy, "reports", (int)v->reports, "present",
	    (int)v->present, "moved", (int)v->moved, "intermediate",
	    (int)v->intermediate,
	    "files", "checked", v->journal_complete, "task_files",
	    (int)v->files, "idem", (int)v->files_idem, "legacy",
	    (int)v->files_legacy,
	    "problems", o->problems, "foreign", o->foreign,
	    "errors", (int)(v->errors + v->unreadable), "warnings",
	    (int)v->warnings);
	json_object_set_new(j, "index", json_pack("{s:I,s:I,s:I,s:I}",
	    "entries", (json_int_t)v->index_entries, "tasks_reports_only",
	    (json_int_t)v->index_only, "effects_compared",
	    (json_int_t)v->index_effects, "effects_only",
	    (json_int_t)v->index_effects_only));
	json_object_set_new(j, "effects", json_integer(v->effects));
	ctl_print_json(j);
	json_decref(j);
}

const struct option ctl_verify_options[] = {
	COMMON_OPTIONS,
	{ "sequence-digits", required_argument, NULL,
	    OPT_SEQUENCE_DIGITS },
	{ NULL, 0, NULL, 0 }
};

int
cmd_verify(struct idemctl *ctl, int argc, char **argv)
{
	static const char *const state_dir[] = {
		[STORE_STATE_DIR_MISSING] = "does not exist",
		[STORE_STATE_DIR_SYMLINK] = "is a symlink",
		[STORE_STATE_DIR_NOT_DIR] = "is not a directory"
	};
	struct vout	 o;
	struct store_verify *v = &o.sv;
	unsigned	 digits = 0;
	char		*end;
	long		 n;
	int		 ch;
	char		 dir[PATH_MAX];
	char		*cause = NULL;
	int		 status;

	while ((ch = ctl_next_option(ctl, argc, argv,
	    ctl_verify_options)) != -1) {
		if (ch != OPT_SEQUENCE_DIGITS)
			continue;
		errno = 0;
		n = strtol(optarg, &end, 10);
		if (errno != 0 || *end != '\0' || end == optarg ||
		    n < IDEM_MIN_SEQUENCE_DIGITS ||
		    n > IDEM_MAX_SEQUENCE_DIGITS)
			ctl_usage_error(ctl, "--sequence-digits must be %d to "
			    "%d (idemd's own)", IDEM_MIN_SEQUENCE_DIGITS,
			    IDEM_MAX_SEQUENCE_DIGITS);
		digits = (unsigned)n;
	}
	if (optind != argc)
		ctl_usage_error(ctl, "no arguments expected");
	if ((status = journal_dir(ctl, dir, sizeof dir)) != 0)
		return status;
	if (digits == 0 && (status = recorded_digits(ctl, &digits)) != 0)
		return status;

	memset(&o, 0, sizeof o);
	o.dir = dir;
	v->root = ctl_root(ctl);
	v->sequence_digits = digits;
	v->note = verify_found;
	v->arg = &o;
	o.problems = json_array();
	o.foreign = json_array();
	if (o.problems == NULL || o.foreign == NULL) {
		status = ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "out of memory");
		goto out;
	}
	if (store_verify(v, &cause) != 0) {
		switch (v->failure) {
		case STORE_VERIFY_ROOT_UNREADABLE:
			status = ctl_fail(ctl, IDEMCTL_EXIT_UNREACHABLE,
			    "cannot read root %s: %s", v->root,
			    strerror(v->error));
			break;
		case STORE_VERIFY_NOT_WORKSPACE:
			/* "clean" would be a claim about nothing. */
			status = ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "%s is not "
			    "an idem workspace: %s/%s %s; nothing to verify "
			    "(check --root or IDEM_ROOT)", v->root, v->root,
			    IDEM_STATE_DIR, state_dir[v->state_dir]);
			break;
		case STORE_VERIFY_JOURNAL_UNREADABLE:
			status = ctl_fail(ctl, IDEMCTL_EXIT_UNREACHABLE,
			    "cannot read the journal: %s", cause != NULL ?
			    cause : strerror(v->error));
			break;
		default:
			status = ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM,
			    "out of memory");
			break;
		}
		goto out;
	}

	if (ctl->json)
		verify_print_json(&o);
	else
		verify_print(&o);
	if (v->unreadable > 0)
		status = ctl_fail(ctl, IDEMCTL_EXIT_UNREACHABLE, "%u file%s or "
		    "director%s could not be read", v->unreadable,
		    v->unreadable == 1 ? "" : "s", v->unreadable == 1 ? "y" :
		    "ies");
	else if (v->errors > 0)
		status = ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "%u problem%s "
		    "found", v->errors, v->errors == 1 ? "" : "s");

out:
	free(cause);
	store_verify_free(v);
	json_decref(o.problems);
	json_decref(o.foreign);
	return status;
}

/* ---- compact -------------------------------------------------------------- */

const struct option ctl_compact_options[] = {
	COMMON_OPTIONS,
	{ "older-than", required_argument, NULL, OPT_OLDER_THAN },
	{ "store", required_argument, NULL, OPT_STORE },
	{ "store-file", required_argument, NULL, OPT_STORE_FILE },
	{ NULL, 0, NULL, 0 }
};

int
cmd_compact(struct idemctl *ctl, int argc, char **argv)
{
	const char	*store_file = NULL;
	char		*store = NULL;
	struct index	 x;
	char		 dir[PATH_MAX];
	char		*end, *cause = NULL;
	long long	 days = -1;
	uint64_t	 pruned;
	int64_t		 before;
	int		 ch;

	while ((ch = ctl_next_option(ctl, argc, argv,
	    ctl_compact_options)) != -1) {
		if (ch == OPT_STORE)
			idemctl_store_option(&store, optarg);
		if (ch == OPT_STORE_FILE)
			store_file = optarg;
		if (ch != OPT_OLDER_THAN)
			continue;
		errno = 0;
		days = strtoll(optarg, &end, 10);
		if (errno != 0 || *end != '\0' || end == optarg || days < 0 ||
		    days > IDEMCTL_MAX_COMPACT_DAYS)
			ctl_usage_error(ctl, "--older-than takes whole days, 0 "
			    "to %d", IDEMCTL_MAX_COMPACT_DAYS);
	}
	if (days < 0)
		ctl_usage_error(ctl, "--older-than DAYS is required");
	if (optind != argc)
		ctl_usage_error(ctl, "no arguments expected");
	if (store_file != NULL && idemctl_store_file(&store, store_file) != 0)
		return IDEMCTL_EXIT_USAGE;
	if (store != NULL && strcmp(store, "local") == 0) {
		free(store);
		store = NULL;
	}
	/* The PostgreSQL store's rows (contrib/idemctl_store.c). */
	if (store != NULL) {
		if (strncmp(store, "postgresql://", 13) != 0)
			ctl_usage_error(ctl, "--store is local or "
			    "postgresql://...");
		ch = idemctl_store_compact(store, ctl_root(ctl), (int)days,
		    ctl->json);
		explicit_bzero(store, strlen(store));
		free(store);
		return ch;
	}
	snprintf(dir, sizeof dir, "%s/%s", ctl_root(ctl), IDEM_INDEX_DIR);
	if (!index_exists(dir))
		return ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "no index at %s: "
		    "nothing to compact (idemd writes it at its first "
		    "checkpoint)", dir);
	if (sodium_init() < 0 || index_open(&x, dir, 0, &cause) != 0) {
		ch = ctl_fail(ctl, IDEMCTL_EXIT_UNREACHABLE, "%s",
		    cause != NULL ? cause : "cannot open the index");
		free(cause);
		return ch;
	}
	before = shm_now_ms() - (int64_t)days * 86400000;
	if (index_compact(&x, before, &pruned, &cause) != 0) {
		index_close(&x);
		ch = ctl_fail(ctl, IDEMCTL_EXIT_PROBLEM, "%s", cause != NULL ?
		    cause : "compaction failed");
		free(cause);
		return ch;
	}
	index_close(&x);
	if (ctl->json) {
		json_t	*j = json_pack("{s:I,s:I}", "pruned",
		    (json_int_t)pruned, "older_than_days", (json_int_t)days);

		ctl_print_json(j);
		json_decref(j);
	} else
		printf("compact: %" PRIu64 " receipt%s pruned to tombstones "
		    "(committed more than %lld day%s ago)\n", pruned,
		    pruned == 1 ? "" : "s", days, days == 1 ? "" : "s");
	return IDEMCTL_EXIT_OK;
}
