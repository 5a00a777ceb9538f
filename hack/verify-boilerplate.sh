#!/usr/bin/env bash
# `make lint`: every Go file of the repository starts with the licence line
# of hack/boilerplate.go.txt and a blank line (so that it never becomes
# part of a package comment); a //go:build line may come first, as
# controller-gen writes it. With --fix, the line is added where missing.
set -euo pipefail
cd "$(dirname "$0")/.."
header=$(head -n1 hack/boilerplate.go.txt)
fix=false
[[ ${1:-} == --fix ]] && fix=true
missing=()
while IFS= read -r -d '' f; do
  [[ -f $f ]] || continue
  # The first two lines after an optional //go:build line and blank line.
  start=1
  if [[ $(head -n1 "$f") == //go:build* ]]; then start=3; fi
  first=$(sed -n "${start}p" "$f")
  second=$(sed -n "$((start + 1))p" "$f")
  if [[ $first == "$header" && -z $second ]]; then
    continue
  fi
  if $fix && [[ $first != "$header" ]]; then
    { head -n $((start - 1)) "$f"; printf '%s\n\n' "$header"; tail -n +"$start" "$f"; } >"$f.tmp" && mv "$f.tmp" "$f"
    continue
  fi
  missing+=("$f")
done < <(git ls-files -z -- '*.go')
if ((${#missing[@]})); then
  printf '%s\n' "${missing[@]}" >&2
  echo "these Go files do not start with the line of hack/boilerplate.go.txt and a blank line: run hack/verify-boilerplate.sh --fix" >&2
  exit 1
fi
