#!/bin/sh
# SPDX-License-Identifier: ISC
# contrib/systemd/idemd.service as make install writes it (ExecStart the
# installed idemd) passes systemd-analyze verify, and says what idemd(8)
# promises: Type=notify, ExecReload by SIGHUP, the state and runtime
# directories as the root and socket's home.  Skips without
# systemd-analyze.
set -u
unit=${IDEM_SRCDIR:?set IDEM_SRCDIR to the source tree}/contrib/systemd/idemd.service
IDEMD=${IDEMD:?set IDEMD to the idemd binary}
. "$(dirname "$0")/lib.sh"

for want in 'Type=notify' 'ExecReload=/bin/kill -HUP $MAINPID' \
    'StateDirectory=idem' 'RuntimeDirectory=idem' \
    'ExecStart=/usr/local/sbin/idemd --root /var/lib/idem ' \
    '--socket /run/idem/idemd.sock'; do
	if grep -qF -- "$want" "$unit"; then
		pass "the unit has $want"
	else
		fail "the unit lacks $want"
	fi
done

if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "SKIP: no systemd-analyze to verify the unit ($failures failed above)"
	[ "$failures" -eq 0 ] || exit 1
	exit 77
fi
make_tmp unit
# As installed: ExecStart names this build's idemd (it must exist); the
# man page it cites is not installed yet (--man=no).
sed "s|/usr/local/sbin/idemd|$IDEMD|" "$unit" >"$tmp/idemd.service"
# A key it cannot parse is only a warning (exit 0): any output fails.
if systemd-analyze verify --man=no "$tmp/idemd.service" >"$tmp/out" 2>&1 &&
    ! [ -s "$tmp/out" ]; then
	pass "systemd-analyze verify"
else
	fail "systemd-analyze verify: $(cat "$tmp/out")"
fi
finish
