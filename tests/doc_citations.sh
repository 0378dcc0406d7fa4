#!/bin/sh
# SPDX-License-Identifier: ISC
# Every citation of a doc's section in the tree, written as
# (doc/NAME.md, "Title") or [NAME.md](NAME.md), "Title" in code, tests
# and docs, names something that exists in doc/NAME.md: a heading that
# begins with the title (or contains it), a bold lead (**Title...**), a
# paragraph that begins with it, or a table row whose first cell is it.
# Docs get condensed and headings renamed; a citation left pointing at
# nothing sends a reader nowhere.  Fails naming each one.
set -u
src=${IDEM_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$src" || exit 99
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }

python3 - <<'PY'
import os, re, subprocess, sys

listed = subprocess.run(["git", "ls-files"], capture_output=True, text=True)
if listed.returncode != 0:	# a release tarball: every file below
	files = [os.path.relpath(os.path.join(d, f)) for d, _, fs in
	    os.walk(".") for f in fs]
else:
	files = listed.stdout.split()

def plain(s):
	return re.sub(r"[`*]", "", s).strip()

# What each doc offers to be cited: headings, bold leads, paragraph
# beginnings, tables' first cells.
targets = {}
for f in files:
	if not (f.startswith("doc/") and f.endswith(".md")):
		continue
	text = open(f, encoding="utf-8").read()
	heads = [plain(m.group(1)) for m in
	    re.finditer(r"^#+\s+(.*)$", text, re.M)]
	leads = [plain(m.group(1)) for m in
	    re.finditer(r"\*\*([^*]+)\*\*", text)]
	leads += [plain(m.group(1)) for m in
	    re.finditer(r"(?:^|\n\n)\s*([A-Za-z`][^\n]*)", text)]
	leads += [plain(m.group(1)) for m in
	    re.finditer(r"^\|\s*([^|]+?)\s*\|", text, re.M)]
	targets[os.path.basename(f)] = (heads, leads)

# NAME.md, an optional anchor or link's end, then the quoted title,
# which may run on over two more lines of a comment.
cite = re.compile(r'(?:doc/)?([a-z_-]+\.md)(?:#[a-z0-9-]+)?\)?,?[ \t]*\n?'
    r'[ \t]*(?:[*#/]+[ \t]*)?"([A-Za-z0-9`\'][^"\n]*'
    r'(?:\n[^"\n]+){0,2})"')
bad = 0
for f in files:
	if not re.search(r"\.(c|h|md|sh|py|mjs|js|am|in)$", f):
		continue
	try:
		text = open(f, encoding="utf-8").read()
	except (OSError, UnicodeDecodeError):
		continue
	for m in cite.finditer(text):
		if m.group(1) not in targets:
			continue
		title = re.sub(r"\s*\n\s*(?:[*#/]+\s*)?", " ", m.group(2))
		title = plain(title)
		heads, leads = targets[m.group(1)]
		if any(h.startswith(title) or title in h for h in heads) or \
		    any(l.startswith(title) for l in leads):
			continue
		line = text.count("\n", 0, m.start()) + 1
		print(f'FAIL: {f}:{line}: {m.group(1)} has no "{title}"')
		bad += 1
sys.exit(1 if bad else 0)
PY
