#!/bin/sh
# SPDX-License-Identifier: ISC
# contrib/systemd/idemd.service and idemd.socket as make install writes
# them (ExecStart the installed idemd) pass systemd-analyze verify, also
# with the PostgreSQL-over-TCP drop-in, and say what idemd(8) promises:
# Type=notify, ExecReload by SIGHUP, the state directory as the root,
# the socket systemd's (idemd.socket, which the service requires), the
# hardening (UMask=0077, ProtectProc=invisible, SystemCallFilter,
# PrivateNetwork), which systemd-analyze security rates 2.0 or better
# (offline: the unit file is read, nothing runs); the drop-in gives the
# network back and widens RestrictAddressFamilies.  Skips without
# systemd-analyze.
set -u
dir=${IDEM_SRCDIR:?set IDEM_SRCDIR to the source tree}/contrib/systemd
unit=$dir/idemd.service
socket=$dir/idemd.socket
dropin=$dir/postgresql-tcp.conf
IDEMD=${IDEMD:?set IDEMD to the idemd binary}
. "$(dirname "$0")/lib.sh"

# has FILE LINE: FILE holds LINE, the whole line.
has() {
	if grep -qxF -- "$2" "$1"; then
		pass "$(basename "$1") has $2"
	else
		fail "$(basename "$1") lacks $2"
	fi
}

for want in 'Type=notify' 'ExecReload=/bin/kill -HUP $MAINPID' \
    'StateDirectory=idem' 'ExecStart=/usr/local/sbin/idemd --root /var/lib/idem' \
    'Requires=idemd.socket' 'After=idemd.socket' 'Also=idemd.socket' \
    'UMask=0077' 'ProtectProc=invisible' 'SystemCallFilter=@system-service' \
    'PrivateNetwork=yes' 'RestrictAddressFamilies=AF_UNIX'; do
	has "$unit" "$want"
done
for want in 'ListenStream=/run/idem/idemd.sock' 'SocketMode=0660' \
    'SocketGroup=idem' 'Accept=no' 'WantedBy=sockets.target'; do
	has "$socket" "$want"
done
for want in 'PrivateNetwork=no' \
    'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6'; do
	has "$dropin" "$want"
done
# The socket is systemd's now: idemd binds none of its own there.
if grep '^ExecStart=' "$unit" | grep -q -- '--socket'; then
	fail "ExecStart still names --socket: idemd.socket owns it"
else
	pass "ExecStart leaves the socket to idemd.socket"
fi

if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "SKIP: no systemd-analyze to verify the units ($failures failed above)"
	[ "$failures" -eq 0 ] || exit 1
	exit 77
fi
make_tmp unit
# As installed: ExecStart names this build's idemd (it must exist); the
# man page it cites is not installed yet (--man=no).
sed "s|/usr/local/sbin/idemd|$IDEMD|" "$unit" >"$tmp/idemd.service"
cp "$socket" "$tmp/idemd.socket"
# A key it cannot parse is only a warning (exit 0): any output fails.
if (cd "$tmp" && systemd-analyze verify --man=no idemd.service \
    idemd.socket) >"$tmp/out" 2>&1 && ! [ -s "$tmp/out" ]; then
	pass "systemd-analyze verify idemd.service idemd.socket"
else
	fail "systemd-analyze verify: $(cat "$tmp/out")"
fi

# The exposure, offline: "Overall exposure level for idemd.service: 0.5".
rate() {
	(cd "$1" && systemd-analyze security --offline=true \
	    idemd.service) >"$tmp/security" 2>&1
	sed -n 's/.*Overall exposure level for idemd.service: \([0-9.]*\).*/\1/p' \
	    "$tmp/security"
}
level=$(rate "$tmp")
if [ -n "$level" ] && awk "BEGIN { exit !($level <= 2.0) }"; then
	pass "systemd-analyze security rates idemd.service $level (2.0 or better)"
else
	fail "systemd-analyze security: ${level:-no level} (wanted 2.0 or better)"
	sed 's/^/	| /' "$tmp/security"
fi

# The drop-in, where systemd finds it beside the unit: verified, and it
# lifts PrivateNetwork (the rating says the service may reach the
# network) while the rest holds.
mkdir "$tmp/idemd.service.d" && cp "$dropin" "$tmp/idemd.service.d/"
if (cd "$tmp" && systemd-analyze verify --man=no idemd.service \
    idemd.socket) >"$tmp/out" 2>&1 && ! [ -s "$tmp/out" ]; then
	pass "systemd-analyze verify with the postgresql-tcp.conf drop-in"
else
	fail "systemd-analyze verify with the drop-in: $(cat "$tmp/out")"
fi
rate "$tmp" >/dev/null
if grep -q '✗ PrivateNetwork=' "$tmp/security" &&
    grep -q '✗ RestrictAddressFamilies=~AF_(INET|INET6)' "$tmp/security"; then
	pass "the drop-in gives the network and Internet sockets back"
else
	fail "the drop-in did not lift PrivateNetwork and AF_INET:"
	sed 's/^/	| /' "$tmp/security"
fi
finish
