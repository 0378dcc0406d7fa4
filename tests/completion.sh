#!/bin/sh
# SPDX-License-Identifier: ISC
# idemctl's shell completions, made from its command table by
# `idemctl completion bash|zsh|fish`: each parses in its shell and, when
# its completion function is called as the shell would call it, offers
# every command of idemctl --help, the options before a command, every
# option of every command (the table's own getopt tables, as `idemctl
# completion list` prints them), every subcommand, and nothing of
# another command's; after an option that takes a value it leaves file
# names to the shell.  bash: the function with COMP_WORDS; zsh: the
# function with words and CURRENT, compadd and _describe recording what
# they are given; fish: complete -C.  Skips only a shell that is missing
# (install-deps.sh installs zsh and fish).
set -u
IDEMCTL=${IDEMCTL:?set IDEMCTL to the idemctl binary}
. "$(dirname "$0")/lib.sh"
make_tmp completion

run "$IDEMCTL" completion list
expect 0 "idemctl completion list"
cp "$tmp/out" "$tmp/list"
run "$IDEMCTL" completion csh
expect 2 "a shell idemctl has no completion for"
# What make install installs is what the build made with this idemctl
# (BUILDDIR/completion/, BUILDDIR/contrib/idemctl).
built=$(dirname "$IDEMCTL")/..
for made in completion/idemctl:bash completion/_idemctl:zsh \
    completion/idemctl.fish:fish; do
	"$IDEMCTL" completion "${made#*:}" >"$tmp/made"
	if cmp -s "$built/${made%:*}" "$tmp/made"; then
		pass "the build made ${made%:*} with idemctl completion ${made#*:}"
	else
		fail "${made%:*} is not idemctl completion ${made#*:}'s output"
	fi
done
# The table is --help's: the same commands, in the same order.
"$IDEMCTL" --help | sed -n '/^commands:/,/^$/p' |
    awk 'NR > 1 && NF { print $1 }' >"$tmp/help-commands"
awk '$1 != "-" { print $1 }' "$tmp/list" | uniq >"$tmp/list-commands"
if cmp -s "$tmp/help-commands" "$tmp/list-commands" &&
    [ -s "$tmp/help-commands" ]; then
	pass "the completion table has --help's $(wc -l <"$tmp/help-commands") commands"
else
	fail "the completion table's commands differ from --help's:"
	diff "$tmp/help-commands" "$tmp/list-commands" | sed 's/^/	| /'
fi
if grep -qx completion "$tmp/list-commands"; then
	fail "the hidden completion command is listed"
else
	pass "the hidden completion command is neither in --help nor completed"
fi

# offered SHELL WANT WORD...: the shell's completion of "WORD..." (the
# last word the one being completed) offers each word of WANT.
offered() {
	shell=$1
	want=$2
	shift 2
	case $shell in
	bash)
		bash --norc --noprofile -c '. "$1"; shift
		    COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _idemctl
		    [ ${#COMPREPLY[@]} -eq 0 ] || printf "%s\n" "${COMPREPLY[@]}"' \
		    bash "$tmp/idemctl.bash" "$@" >"$tmp/got" 2>"$tmp/got.err"
		;;
	zsh)
		zsh -f -c 'compadd() { local -i i=${@[(i)--]}; print -rl -- "${@[i+1,-1]}"; }
		    _describe() { local a; for a in "${(@P)${@[-1]}}"; do print -r -- "${a%%:*}"; done; }
		    _files() { print -r -- "<files>"; }
		    compdef() { :; }
		    source "$1"; shift
		    words=("$@"); CURRENT=$#; _idemctl' \
		    zsh "$tmp/_idemctl" "$@" >"$tmp/got" 2>"$tmp/got.err"
		;;
	fish)
		line=$*
		# "idemctl stats " keeps its trailing blank: completing a new word.
		[ -n "$(eval echo \"\${$#}\")" ] || line="$line "
		fish -N -c 'source $argv[1]; complete -C $argv[2]' \
		    "$tmp/idemctl.fish" "$line" 2>"$tmp/got.err" |
		    cut -f1 >"$tmp/got"
		;;
	esac
	missing=
	for w in $want; do
		grep -qxF -- "$w" "$tmp/got" || missing="$missing $w"
	done
	if [ -z "$missing" ] && ! [ -s "$tmp/got.err" ]; then
		pass "$shell: \"$*\" offers $want"
	else
		fail "$shell: \"$*\" lacks$missing: got $(tr '\n' ' ' <"$tmp/got") $(cat "$tmp/got.err")"
	fi
}

# not_offered SHELL WORD WORDS...: WORD is not among the completions.
not_offered() {
	shell=$1
	word=$2
	shift 2
	offered "$shell" "" "$@" >/dev/null
	if grep -qxF -- "$word" "$tmp/got"; then
		fail "$shell: \"$*\" offers $word, another command's"
	else
		pass "$shell: \"$*\" does not offer $word"
	fi
}

for shell in bash zsh fish; do
	if ! command -v "$shell" >/dev/null 2>&1; then
		echo "SKIP: no $shell to load its completion into"
		skipped="${skipped:-} $shell"
		continue
	fi
	case $shell in
	bash) file=$tmp/idemctl.bash; check="bash -n" ;;
	zsh) file=$tmp/_idemctl; check="zsh -n" ;;
	fish) file=$tmp/idemctl.fish; check="fish --no-execute" ;;
	esac
	run "$IDEMCTL" completion "$shell"
	expect 0 "idemctl completion $shell"
	cp "$tmp/out" "$file"
	if $check "$file" 2>"$tmp/err"; then
		pass "$shell parses its completion"
	else
		fail "$shell cannot parse its completion: $(cat "$tmp/err")"
	fi

	offered "$shell" "$(tr '\n' ' ' <"$tmp/help-commands")" idemctl ""
	while read -r command rest; do
		case $rest in
		--*)
			if [ "$command" = - ]; then
				# fish completes the options before a command only
				# once they are being typed.
				offered "$shell" "$rest" idemctl --
			else
				offered "$shell" "$rest" idemctl "$command" --
			fi
			;;
		*)
			offered "$shell" "$rest" idemctl "$command" ""
			;;
		esac
	done <"$tmp/list"
	# After the global options and their values, the command is found.
	offered "$shell" "--text" idemctl --root /srv/fcop journal dump --
	not_offered "$shell" --prometheus idemctl status --
	not_offered "$shell" --with-workspace idemctl verify --
	# A subcommand is the first word only.
	not_offered "$shell" dump idemctl journal dump ""
	# A value's completion is the shell's file names, never options.
	not_offered "$shell" --json idemctl backup --root ""
done

# shellcheck disable=SC2086
if [ -n "${skipped:-}" ] && [ "$failures" -eq 0 ]; then
	echo "SKIP: no$skipped ($failures failed for the others)"
	exit 77
fi
finish
