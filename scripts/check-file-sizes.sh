#!/usr/bin/env bash
# Fails when a Rust or Go source file tracked by git is longer than the limit
# (800 lines) and is not listed, with its reason, in scripts/large-files.txt;
# also fails on an entry of that list without a reason, or whose file is
# gone or back under the limit (so the list stays honest).
#
#   bash scripts/check-file-sizes.sh
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=800
ALLOW=scripts/large-files.txt
status=0

declare -A allowed=()
while read -r path reason; do
	[[ -z $path || $path == \#* ]] && continue
	if [[ -z $reason ]]; then
		echo "check-file-sizes: $ALLOW: $path has no reason" >&2
		status=1
	fi
	allowed[$path]=1
done <"$ALLOW"

while IFS= read -r -d '' f; do
	[[ -f $f ]] || continue
	n=$(wc -l <"$f")
	if ((n > LIMIT)) && [[ -z ${allowed[$f]:-} ]]; then
		echo "check-file-sizes: $f has $n lines (limit $LIMIT): split it, or list it in $ALLOW with the reason" >&2
		status=1
	fi
done < <(git ls-files -z -- '*.rs' '*.go')

for f in "${!allowed[@]}"; do
	if [[ ! -f $f ]]; then
		echo "check-file-sizes: $ALLOW lists $f, which does not exist: remove the entry" >&2
		status=1
	elif (($(wc -l <"$f") <= LIMIT)); then
		echo "check-file-sizes: $f is within $LIMIT lines now: remove it from $ALLOW" >&2
		status=1
	fi
done
exit "$status"
