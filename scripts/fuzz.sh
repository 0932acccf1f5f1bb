#!/usr/bin/env bash
# fuzz.sh runs every fuzz target in the module (or in the packages given as
# arguments) for FUZZTIME each, one target at a time: go test -fuzz accepts
# only one package and one target per run. New inputs that fail are written
# to the package's testdata/fuzz, where they become part of the seed corpus.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fuzztime=${FUZZTIME:-15s}
(($#)) || set -- ./...

# For each package `go test -list` prints the matching names, one a line,
# and then "ok  <import path>  <time>" (or "?  <import path>  [no test
# files]"). Capture it first so a build failure stops the script.
listing=$(go test -list '^Fuzz' "$@")

targets=() # "<import path> <name>"
names=()
while IFS= read -r line; do
	case $line in
	Fuzz*) names+=("$line") ;;
	"ok "*)
		read -r _ pkg _ <<<"$line"
		for name in ${names[@]+"${names[@]}"}; do
			targets+=("$pkg $name")
		done
		names=()
		;;
	esac
done <<<"$listing"

if ((${#targets[@]} == 0)); then
	echo "fuzz.sh: no fuzz targets found"
	exit 0
fi

for target in "${targets[@]}"; do
	read -r pkg name <<<"$target"
	echo "--- $name in $pkg for $fuzztime"
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg"
done
