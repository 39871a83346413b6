#!/usr/bin/env bash
# Fails when git tracks a file larger than the limit (5 MiB by default,
# CHATD_MAX_FILE_BYTES overrides it), so a binary or a data dump never
# reaches the repository, where every clone would pay for it. The embedded
# web build (pkg/webui/static) is exempt by name: it is committed on purpose
# so that go build needs no Node.
#
# It reads the tracked files (staged ones included) as they are in the work
# tree, which on CI's clean checkout is the commit.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

limit=${CHATD_MAX_FILE_BYTES:-$((5 * 1024 * 1024))}
exempt='pkg/webui/static/'

found=0
while IFS= read -r -d '' path; do
	case "$path" in "$exempt"*) continue ;; esac
	[ -f "$path" ] && [ ! -L "$path" ] || continue
	size=$(stat -c %s -- "$path")
	if [ "$size" -gt "$limit" ]; then
		if [ "$found" -eq 0 ]; then
			echo "tracked files over $limit bytes (keep binaries and data out of git; only $exempt is exempt):"
		fi
		printf '  %s (%d bytes)\n' "$path" "$size"
		found=1
	fi
done < <(git ls-files -z --cached)

if [ "$found" -ne 0 ]; then
	echo "remove them with 'git rm --cached <path>' and add them to .gitignore"
	exit 1
fi
echo "no tracked file over $limit bytes"
