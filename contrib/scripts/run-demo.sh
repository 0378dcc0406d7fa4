#!/bin/sh
# SPDX-License-Identifier: ISC
# Quick start (1): install what is missing, build, start idemd on its
# default root ./fcop, and show a create, a retry that is reused, and a
# conflict.  idemd keeps serving afterwards; Ctrl-C stops it.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
sh "$top/contrib/scripts/install-deps.sh"
sh "$top/contrib/scripts/build.sh" build
cd "$top"
ready=$(mktemp -u)
mkfifo "$ready"
build/broker/idemd --ready-fd 3 3>"$ready" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$ready"' EXIT INT TERM
read -r _ <"$ready"
rm -f "$ready"
ctl=build/contrib/idemctl
id="demo-$(date +%s)"
echo "== idemctl status"
$ctl status
echo "== create: submission $id"
$ctl submit --id "$id" --sender PM --recipient DEV --subject "Fix login" \
    --body "Steps: reproduce, fix"
echo "== retry with the same id and content: the first receipt comes back"
$ctl submit --id "$id" --sender PM --recipient DEV --subject "Fix login" \
    --body "Steps: reproduce, fix"
echo "== same id, other content: conflict, no new task"
$ctl submit --id "$id" --sender PM --recipient DEV --subject "Fix logout" \
    --body "Steps: reproduce, fix" || true
echo "== the FCoP inbox"
ls fcop/_lifecycle/inbox
echo "idemd (pid $pid) keeps serving $top/fcop; Ctrl-C stops it."
wait $pid
