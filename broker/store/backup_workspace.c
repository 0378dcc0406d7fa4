/* SPDX-License-Identifier: ISC */
/*
 * backup_workspace.c: a backup's part of the workspace (backup.c has
 * the state's): every file below the root but .idem/ listed with its
 * SHA-256 in DEST/.idem/backup-manifest (sha256sum's format, paths from
 * the root), and with --with-workspace copied into DEST, its
 * directories, modes and times kept, a symlink made again as a symlink
 * (never followed).  Then DEST/.idem/backup-info says what was taken.
 *
 * The workspace is copied after the journal's cut, so every task the
 * copied journal records as created has its file in the copy (unless
 * an FCoP tool moved it across the walk).  A TASK file made after the
 * cut names a submission the copy does not know: a restored broker
 * would answer a retry of it with a second task.  So the copy is read
 * by store_verify, and each such file (unknown_submission) is removed
 * from the copy and named in backup-info: after a restore, its retry
 * creates it again, as after a crash before its reservation.  An idem
 * REPORT file (one naming its client_submission_id) made after the cut
 * is found the same way (store_verify's report_keys) and left out: by
 * its key, not its number, since numbers reach the journal out of order
 * (one worker's reservation of N+1 can be durable before another's of
 * N, so a cut can hold N+1 and not N).
 */
#include <sys/stat.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "store.h"

#define WALK_BUF_BYTES	(256 * 1024)
#define WALK_MAX_DEPTH	64

struct walk {
	struct store_backup	*b;
	dev_t			 dest_dev;	/* DEST, if it is below the root */
	ino_t			 dest_ino;
	FILE			*manifest;
	FILE			*info;
	char			*buf;
	char			**cause;
	char			**removed;	/* after the cut: paths */
	size_t			 removed_count, removed_size;
};

static FILE	*state_stream(int, const char *);
static int	 stream_close(FILE *);

/* A file left out of the copy, for the manifest (paths from the root). */
static int
note_removed(struct walk *w, const char *path)
{
	char	**p;

	if (w->removed_count == w->removed_size) {
		w->removed_size = w->removed_size == 0 ? 16 :
		    w->removed_size * 2;
		if ((p = reallocarray(w->removed, w->removed_size,
		    sizeof *p)) == NULL)
			return -1;
		w->removed = p;
	}
	if ((w->removed[w->removed_count] = strdup(path)) == NULL)
		return -1;
	w->removed_count++;
	fprintf(w->info, "after the cut, not copied: %s\n", path);
	w->b->after_cut++;
	return 0;
}

static int
walk_fail(struct walk *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int
walk_fail(struct walk *w, const char *fmt, ...)
{
	va_list	ap;
	int	saved_errno = errno;

	free(*w->cause);
	*w->cause = NULL;
	va_start(ap, fmt);
	if (vasprintf(w->cause, fmt, ap) == -1)
		*w->cause = NULL;
	va_end(ap);
	errno = saved_errno;
	return -1;
}

/* A path as sha256sum writes it: "\" first when it escapes \ or \n. */
static void
manifest_line(FILE *f, const uint8_t digest[32], const char *path)
{
	const char	*p;
	int		 escape = strpbrk(path, "\\\n") != NULL;
	int		 i;

	if (escape)
		fputc('\\', f);
	for (i = 0; i < 32; i++)
		fprintf(f, "%02x", digest[i]);
	fputs("  ", f);
	for (p = path; *p != '\0'; p++) {
		if (*p == '\\')
			fputs("\\\\", f);
		else if (*p == '\n')
			fputs("\\n", f);
		else
			fputc(*p, f);
	}
	fputc('\n', f);
}

/* One regular file: hashed, and copied to to_dir when it is given. */
static int
walk_file(struct walk *w, int dir_fd, int to_dir, const char *name,
    const char *path, const struct stat *st)
{
	crypto_hash_sha256_state	 state;
	struct timespec			 times[2];
	uint8_t				 digest[32];
	ssize_t				 n;
	int				 fd, to = -1;

	if ((fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) ==
	    -1) {
		if (errno == ENOENT)
			return 0;	/* moved or removed meanwhile */
		return walk_fail(w, "reading %s: %s", path, strerror(errno));
	}
	if (to_dir != -1 && (to = openat(to_dir, name, O_WRONLY | O_CREAT |
	    O_EXCL | O_NOFOLLOW | O_CLOEXEC, st->st_mode & 07777)) == -1) {
		close(fd);
		return walk_fail(w, "creating %s in %s: %s", path, w->b->dest,
		    strerror(errno));
	}
	crypto_hash_sha256_init(&state);
	for (;;) {
		n = read(fd, w->buf, WALK_BUF_BYTES);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		crypto_hash_sha256_update(&state, (unsigned char *)w->buf,
		    (unsigned long long)n);
		if (to != -1 && durable_write_all(to, w->buf, (size_t)n) != 0)
			break;
	}
	if (n != 0) {
		walk_fail(w, "copying %s: %s", path, strerror(errno));
		goto bad;
	}
	crypto_hash_sha256_final(&state, digest);
	if (to != -1) {
		times[0] = st->st_atim;
		times[1] = st->st_mtim;
		if (futimens(to, times) != 0 || fsync(to) != 0) {
			walk_fail(w, "fsync %s in %s: %s", path, w->b->dest,
			    strerror(errno));
			goto bad;
		}
		close(to);
		w->b->workspace_bytes += (uint64_t)st->st_size;
	}
	close(fd);
	manifest_line(w->manifest, digest, path);
	w->b->workspace_files++;
	return 0;
bad:
	if (to != -1)
		close(to);
	close(fd);
	return -1;
}

/* The directory dir_fd (path from the root) and everything below it. */
static int
walk_dir(struct walk *w, int dir_fd, int to_dir, const char *path,
    int depth)
{
	DIR		*d;
	struct dirent	*e;
	struct stat	 st;
	char		 sub[PATH_MAX], target[PATH_MAX];
	ssize_t		 n;
	int		 fd, child, to_child, rc = 0;

	if (depth > WALK_MAX_DEPTH)
		return walk_fail(w, "%s: directories nested past %d",
		    path, WALK_MAX_DEPTH);
	if ((fd = dup(dir_fd)) == -1 || (d = fdopendir(fd)) == NULL) {
		if (fd != -1)
			close(fd);
		return walk_fail(w, "reading %s: %s", path, strerror(errno));
	}
	while (rc == 0 && (e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") ==
		    0 || (depth == 0 && strcmp(e->d_name, IDEM_STATE_DIR) == 0))
			continue;
		if ((size_t)snprintf(sub, sizeof sub, "%s%s%s", path,
		    path[0] != '\0' ? "/" : "", e->d_name) >= sizeof sub) {
			errno = ENAMETOOLONG;
			rc = walk_fail(w, "%s/%s: %s", path, e->d_name,
			    strerror(errno));
			break;
		}
		if (fstatat(dir_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			continue;	/* gone meanwhile */
		if (S_ISREG(st.st_mode))
			rc = walk_file(w, dir_fd, to_dir, e->d_name, sub, &st);
		else if (S_ISDIR(st.st_mode)) {
			/* DEST below the root: never copied into itself. */
			if (st.st_dev == w->dest_dev &&
			    st.st_ino == w->dest_ino) {
				fprintf(w->info, "skipped (the backup): %s\n",
				    sub);
				continue;
			}
			if ((child = openat(dir_fd, e->d_name, O_RDONLY |
			    O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) == -1)
				continue;	/* swapped meanwhile */
			to_child = -1;
			if (to_dir != -1 && (mkdirat(to_dir, e->d_name,
			    st.st_mode & 07777) != 0 || (to_child =
			    openat(to_dir, e->d_name, O_RDONLY | O_DIRECTORY |
			    O_NOFOLLOW | O_CLOEXEC)) == -1)) {
				rc = walk_fail(w, "creating %s in %s: %s", sub,
				    w->b->dest, strerror(errno));
				close(child);
				break;
			}
			rc = walk_dir(w, child, to_child, sub, depth + 1);
			if (rc == 0 && to_child != -1) {
				struct timespec	times[2] = { st.st_atim,
				    st.st_mtim };

				if (futimens(to_child, times) != 0 ||
				    fsync(to_child) != 0)
					rc = walk_fail(w, "fsync %s in %s: %s",
					    sub, w->b->dest, strerror(errno));
			}
			if (to_child != -1)
				close(to_child);
			close(child);
		} else if (S_ISLNK(st.st_mode)) {
			/* The link itself, never what it names. */
			n = readlinkat(dir_fd, e->d_name, target,
			    sizeof target - 1);
			if (n == -1)
				continue;
			target[n] = '\0';
			fprintf(w->info, "symlink: %s\n", sub);
			if (to_dir != -1 && symlinkat(target, to_dir,
			    e->d_name) != 0)
				rc = walk_fail(w, "creating %s in %s: %s", sub,
				    w->b->dest, strerror(errno));
		} else
			fprintf(w->info, "skipped (not a file): %s\n", sub);
	}
	closedir(d);
	return rc;
}

/*
 * The TASK files a restored broker would not know (made after the
 * journal's cut), found by store_verify on DEST and removed there.
 */
struct after_cut {
	struct walk	*w;
	int		 dest_fd;
	int		 failed;
};

static void
after_cut_note(const struct store_problem *p, void *arg)
{
	struct after_cut	*a = arg;
	char			 last[NAME_MAX + 1];
	int			 dir_fd;

	if (p->check != STORE_CHECK_UNKNOWN_SUBMISSION || p->path == NULL)
		return;
	/* Its directory fsync'd: backup-info's "complete" comes after. */
	if ((dir_fd = nofollow_parent(a->dest_fd, p->path, last)) == -1 ||
	    (unlinkat(dir_fd, last, 0) != 0 && errno != ENOENT) ||
	    fsync(dir_fd) != 0 || note_removed(a->w, p->path) != 0)
		a->failed = errno;
	if (dir_fd != -1)
		close(dir_fd);
}

static int
remove_after_cut(struct walk *w, int dest_fd)
{
	struct store_verify	 v;
	struct after_cut	 a;
	char			 root[32];
	char			*cause = NULL;
	int			 rc;

	memset(&v, 0, sizeof v);
	memset(&a, 0, sizeof a);
	a.w = w;
	a.dest_fd = dest_fd;
	/* DEST's directory, not its name (which may be a symlink now). */
	snprintf(root, sizeof root, "/proc/self/fd/%d", dest_fd);
	v.root = root;
	v.sequence_digits = w->b->sequence_digits;
	v.note = after_cut_note;
	v.arg = &a;
	v.report_keys = 1;
	rc = store_verify(&v, &cause);
	if (rc == 0 && !v.journal_complete) {
		/* Its files were not checked: none would be left out. */
		walk_fail(w, "reading the copy's journal back: %s",
		    v.corrupt != NULL ? v.corrupt : "incomplete");
		store_verify_free(&v);
		free(cause);
		return -1;
	}
	store_verify_free(&v);
	if (rc != 0) {
		walk_fail(w, "reading the copy back: %s", cause != NULL ?
		    cause : "store_verify failed");
		free(cause);
		return -1;
	}
	free(cause);
	if (a.failed != 0) {
		errno = a.failed;
		return walk_fail(w, "removing a file made after the cut from "
		    "%s: %s", w->b->dest, strerror(errno));
	}
	return 0;
}

/*
 * The manifest without the files left out of the copy, so that
 * sha256sum -c of a restored root checks what it has: rewritten through
 * a temporary, renamed over it.
 */
static int
manifest_drop(struct walk *w, int dest_state_fd)
{
	static const char	 temp[] = "." STORE_BACKUP_MANIFEST ".tmp";
	FILE			*in = NULL, *out = NULL;
	char			*line = NULL;
	size_t			 size = 0, i;
	ssize_t			 n;
	int			 fd, keep, rc = -1;

	if (fflush(w->manifest) != 0 ||
	    (fd = openat(dest_state_fd, STORE_BACKUP_MANIFEST, O_RDONLY |
	    O_NOFOLLOW | O_CLOEXEC)) == -1 || (in = fdopen(fd, "r")) == NULL ||
	    (out = state_stream(dest_state_fd, temp)) == NULL)
		goto out;
	while ((n = getline(&line, &size, in)) > 0) {
		/* "<64 hex>  PATH\n": the left-out names need no escape. */
		keep = 1;
		for (i = 0; keep && i < w->removed_count; i++)
			keep = !(n == 66 + (ssize_t)strlen(w->removed[i]) + 1 &&
			    strncmp(line + 66, w->removed[i], (size_t)n - 67) ==
			    0);
		if (keep && fputs(line, out) == EOF)
			goto out;
	}
	if (ferror(in) || stream_close(out) != 0) {
		out = NULL;
		goto out;
	}
	out = NULL;
	if (renameat(dest_state_fd, temp, dest_state_fd,
	    STORE_BACKUP_MANIFEST) != 0 || fsync(dest_state_fd) != 0)
		goto out;
	rc = 0;
out:
	if (rc != 0)
		walk_fail(w, "rewriting %s/%s/%s: %s", w->b->dest,
		    IDEM_STATE_DIR, STORE_BACKUP_MANIFEST, strerror(errno));
	if (out != NULL)
		fclose(out);
	if (in != NULL)
		fclose(in);
	free(line);
	return rc;
}

/* A stream on a new file of DEST/.idem/ (O_EXCL, never a symlink). */
static FILE *
state_stream(int dest_state_fd, const char *name)
{
	FILE	*f;
	int	 fd;

	if ((fd = openat(dest_state_fd, name, O_WRONLY | O_CREAT | O_EXCL |
	    O_NOFOLLOW | O_CLOEXEC, 0600)) == -1)
		return NULL;
	if ((f = fdopen(fd, "w")) == NULL)
		close(fd);
	return f;
}

static int
stream_close(FILE *f)
{
	int	rc = 0;

	if (f == NULL)
		return 0;
	if (fflush(f) != 0 || fsync(fileno(f)) != 0)
		rc = -1;
	if (fclose(f) != 0)
		rc = -1;
	return rc;
}

int
backup_workspace(struct store_backup *b, int root_fd, int dest_fd,
    int dest_state_fd, char **cause)
{
	struct walk	 w;
	struct stat	 st;
	int		 rc = -1;

	memset(&w, 0, sizeof w);
	w.b = b;
	w.cause = cause;
	if (fstat(dest_fd, &st) != 0)
		return walk_fail(&w, "%s: %s", b->dest, strerror(errno));
	w.dest_dev = st.st_dev;
	w.dest_ino = st.st_ino;
	if ((w.buf = malloc(WALK_BUF_BYTES)) == NULL ||
	    (w.manifest = state_stream(dest_state_fd,
	    STORE_BACKUP_MANIFEST)) == NULL ||
	    (w.info = state_stream(dest_state_fd, STORE_BACKUP_INFO)) ==
	    NULL) {
		walk_fail(&w, "creating %s/%s: %s", b->dest, IDEM_STATE_DIR,
		    strerror(errno));
		goto out;
	}
	fprintf(w.info, "idem backup of %s\nstarted_ms: %lld\n"
	    "with_workspace: %s\ncheckpoint: %llu\nsegments: %llu..%llu\n"
	    "journal_records: %llu\njournal_bytes: %llu\n"
	    "torn_tail_cut_bytes: %llu\nindex: %s\nindex_entries: %llu\n"
	    "index_checkpoint: %llu\nstate_files: %u\n", b->root,
	    (long long)b->started_ms, b->with_workspace ? "yes" : "no",
	    (unsigned long long)b->checkpoint,
	    (unsigned long long)b->first_segment,
	    (unsigned long long)b->last_segment,
	    (unsigned long long)b->records,
	    (unsigned long long)b->journal_bytes,
	    (unsigned long long)b->torn_bytes,
	    b->index_copied ? "copied" : "none",
	    (unsigned long long)b->index.entries,
	    (unsigned long long)b->index.checkpoint, b->state_files);
	if (walk_dir(&w, root_fd, b->with_workspace ? dest_fd : -1, "", 0) !=
	    0)
		goto out;
	if (b->with_workspace && (remove_after_cut(&w, dest_fd) != 0 ||
	    (w.removed_count > 0 && manifest_drop(&w, dest_state_fd) != 0)))
		goto out;
	/* Reading the copy back made LMDB's reader table: not the state's. */
	(void)unlinkat(dest_state_fd, "index/lock.mdb", 0);
	/* Last: a copy that failed half-way never says it is complete. */
	fprintf(w.info, "workspace_files: %llu\nworkspace_bytes_copied: "
	    "%llu\nafter_cut: %u\ncomplete: yes\n",
	    (unsigned long long)b->workspace_files,
	    (unsigned long long)b->workspace_bytes, b->after_cut);
	rc = 0;
out:
	if (stream_close(w.manifest) != 0 && rc == 0)
		rc = walk_fail(&w, "writing %s/%s/%s: %s", b->dest,
		    IDEM_STATE_DIR, STORE_BACKUP_MANIFEST, strerror(errno));
	if (stream_close(w.info) != 0 && rc == 0)
		rc = walk_fail(&w, "writing %s/%s/%s: %s", b->dest,
		    IDEM_STATE_DIR, STORE_BACKUP_INFO, strerror(errno));
	if (rc == 0 && (fsync(dest_state_fd) != 0 || fsync(dest_fd) != 0))
		rc = walk_fail(&w, "fsync %s: %s", b->dest, strerror(errno));
	while (w.removed_count > 0)
		free(w.removed[--w.removed_count]);
	free(w.removed);
	free(w.buf);
	return rc;
}
