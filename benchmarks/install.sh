#!/usr/bin/env bash
# Time the README's set-up command in a fresh virtual environment and a fresh copy of
# the repository (pip's download cache stays warm, as on a machine that has pip).
#   bash benchmarks/install.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$repo" archive HEAD | tar -x -C "$work"
cd "$work"
start=$(date +%s.%N)
python3 -m venv .venv && .venv/bin/pip install -q -c constraints/cpu.txt -e ".[dev]" 2>&1 \
  | grep -v "is ignored: it is neither a file nor a directory" || true
end=$(date +%s.%N)
.venv/bin/perflab --help >/dev/null
printf 'README set-up command in a fresh venv: %.0f s; venv size %s\n' \
  "$(echo "$end - $start" | bc)" "$(du -sh .venv | cut -f1)"
