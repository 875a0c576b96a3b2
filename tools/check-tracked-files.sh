#!/usr/bin/env bash
# Fails when a tracked file is a built program or larger than the limit:
# every user of the lease, leasetest and kubernetes modules downloads the
# whole repository, and a committed binary makes each of them pay for it.
# A tracked file may be executable only when it is a script (starts with #!).
#
# usage: check-tracked-files.sh [MAX_BYTES]   (default 2 MiB)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
max=${1:-$((2 * 1024 * 1024))}
bad=0
while IFS= read -r -d '' f; do
	[ -f "$f" ] || continue # deleted in the work tree, not yet committed
	size=$(stat -c %s "$f")
	if [ "$size" -gt "$max" ]; then
		echo "error: $f is $size bytes, over the $max-byte limit for a tracked file" >&2
		bad=1
	fi
	magic=$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')
	case "$magic" in
	7f454c46 | cffaedfe | cefaedfe | feedfacf | feedface | cafebabe | 4d5a*)
		echo "error: $f is a built program (ELF, Mach-O or PE): build outputs stay out of the repository (see .gitignore)" >&2
		bad=1
		continue
		;;
	esac
	mode=$(git ls-files -s -- "$f" | cut -d' ' -f1)
	if [ "$mode" = 100755 ] && [ "$(head -c 2 "$f")" != '#!' ]; then
		echo "error: $f is tracked as executable but is not a script (no #! line)" >&2
		bad=1
	fi
done < <(git ls-files -z)
if [ "$bad" -ne 0 ]; then
	echo "Untrack them with git rm --cached and add them to .gitignore." >&2
	exit 1
fi
echo "tracked files: no built programs, none over $max bytes"
