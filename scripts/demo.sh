#!/usr/bin/env bash
# make demo: scaffold a project into a temporary folder and run it offline on the embedded mesh,
# four times, to show a tool failure becoming a standing guideline that the fourth run follows.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
skein="$root/bin/skein"
demo="$(mktemp -d -t skein-demo.XXXXXX)"
trap 'rm -rf "$demo"' EXIT
# Run as root, skein runs tools as nobody (docs/security.md): nobody must reach the project.
chmod 755 "$demo"
export SKEIN_HOME="$demo/.skein"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "skein init $demo"
"$skein" init "$demo"
cd "$demo"

for i in 1 2 3; do
	step "run $i: skein run --config agent.offline.yaml \"Greet Ada\""
	"$skein" run --config agent.offline.yaml --session-id "demo-$i" "Greet Ada"
done

step "what the mesh learned: skein inspect-memory"
"$skein" inspect-memory --config agent.offline.yaml "greet with the hello tool"

step "run 4: the standing guideline is in the system prompt"
"$skein" run --config agent.offline.yaml --session-id demo-4 "Greet Ada"

step "its trace: skein trace show demo-4"
"$skein" trace show demo-4 --config agent.offline.yaml

step "files: $SKEIN_HOME/traces/demo-4.jsonl and $SKEIN_HOME/logs/demo-4.log"
cat "$SKEIN_HOME/logs/demo-4.log"
