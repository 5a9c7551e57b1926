#!/usr/bin/env bash
# Runs every go test -fuzz target in the repository (or those named as
# "pkg:Target" arguments) for FUZZTIME each, -parallel 1, JOBS at a time,
# and prints one outcome line per target. Crashers land in the package's
# testdata/fuzz/<Target>/ as regression inputs (go test keeps them there).
set -u
FUZZTIME=${FUZZTIME:-10m}
JOBS=${JOBS:-2}
LOG=${LOG:-fuzz-results.txt}
LOGDIR=${LOGDIR:-}
cd "$(dirname "$0")/.."
if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(grep -rln '^func Fuzz' --include='*_test.go' . | while read -r f; do
    d=$(dirname "$f")
    grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed "s#^func #${d}:#"
  done)
fi
run_one() {
  local pkg=${1%%:*} name=${1##*:}
  local start out rc
  start=$(date -u +%H:%M:%S)
  out=$(go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" -parallel 1 "$pkg" 2>&1)
  rc=$?
  local last
  last=$(printf '%s\n' "$out" | grep -E 'elapsed|^ok|FAIL|failing input' | tail -2 | tr '\n' ' ')
  echo "$start $pkg $name rc=$rc $last" >>"$LOG"
  if [ -n "$LOGDIR" ]; then
    mkdir -p "$LOGDIR"
    printf '%s\n' "$out" >"$LOGDIR/$(echo "$pkg" | tr '/.' '__')-$name.log"
  fi
}
i=0
for t in "${targets[@]}"; do
  run_one "$t" &
  i=$((i+1))
  if [ $((i % JOBS)) -eq 0 ]; then wait; fi
done
wait
