#!/usr/bin/env bash
# Functions stay under 80 lines: clippy's `too_many_lines` (threshold in
# clippy.toml, denied through the workspace lints) enforces it, and the only
# exceptions are the functions listed, each with its reason, in
# scripts/long-functions.txt. This check fails when a function carries
# `#[allow(clippy::too_many_lines)]` without an entry there, when an entry
# has no reason or no longer matches an allowed function (so the list stays
# honest), and when the lint is allowed for a whole module or crate.
#
#   bash scripts/check-long-functions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ALLOW=scripts/long-functions.txt
status=0

declare -A listed=()
while read -r path name reason; do
	[[ -z $path || $path == \#* ]] && continue
	if [[ -z $reason ]]; then
		echo "check-long-functions: $ALLOW: $path $name has no reason" >&2
		status=1
	fi
	listed["$path $name"]=1
done <"$ALLOW"

# "path name" of every function that allows the lint: the first `fn NAME`
# after the attribute (other attributes and doc lines may stand between).
declare -A found=()
while IFS= read -r -d '' f; do
	grep -q 'clippy::too_many_lines' "$f" || continue
	if grep -qE '#!\[allow\([^]]*clippy::too_many_lines' "$f"; then
		echo "check-long-functions: $f allows too_many_lines for a whole module: allow it on single functions listed in $ALLOW" >&2
		status=1
	fi
	while read -r name; do
		found["$f $name"]=1
	done < <(awk '
		/#\[allow\([^]]*clippy::too_many_lines/ { want = 1; next }
		want && match($0, /fn [A-Za-z0-9_]+/) {
			print substr($0, RSTART + 3, RLENGTH - 3); want = 0
		}' "$f")
done < <(git ls-files -z -- '*.rs')

for k in "${!found[@]}"; do
	if [[ -z ${listed[$k]:-} ]]; then
		echo "check-long-functions: ${k% *} allows too_many_lines on fn ${k#* } without an entry in $ALLOW: split it, or list it with the reason" >&2
		status=1
	fi
done
for k in "${!listed[@]}"; do
	if [[ -z ${found[$k]:-} ]]; then
		echo "check-long-functions: $ALLOW lists fn ${k#* } in ${k% *}, which no longer allows too_many_lines: remove the entry" >&2
		status=1
	fi
done
exit "$status"
