#!/usr/bin/env bash
# Start-up of a one-step embedded `skein run` with memory on vs memory off: whole-process wall
# time, runs alternated so machine noise hits both alike, median of RUNS each (default 7).
#   scripts/bench-start.sh [path/to/skein]
set -euo pipefail
SKEIN=${1:-bin/skein}
SKEIN=$(cd "$(dirname "$SKEIN")" && pwd)/$(basename "$SKEIN")
RUNS=${RUNS:-7}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
printf 'rules:\n  - reply: {text: "Hello."}\n' > script.yaml
for mode in on off; do
  flag=true; [ "$mode" = off ] && flag=false
  printf 'agent: {name: assistant}\nllm: {provider: scripted, model: scripted, script: script.yaml}\nmemory: {enabled: %s}\n' "$flag" > "$mode.yaml"
done
now() { date +%s.%N; }
declare -A times
for i in $(seq "$RUNS"); do
  for mode in on off; do
    s=$(now)
    SKEIN_HOME="$dir/home-$mode" "$SKEIN" run --config "$mode.yaml" "say hello" > /dev/null 2>&1
    e=$(now)
    times[$mode]+="$(echo "$e - $s" | bc) "
  done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
on=$(echo "${times[on]}" | median)
off=$(echo "${times[off]}" | median)
echo "memory on:  median ${on}s of $RUNS (${times[on]})"
echo "memory off: median ${off}s of $RUNS (${times[off]})"
echo "ratio on/off: $(echo "scale=2; $on / $off" | bc)"
