#!/usr/bin/env bash
# Runs the workplace's shared harness (../shared/bench/compare.sh, module
# benchharness) on this checkout, with the rampmeter adapter derived from
# adapters/rampmeter.go by TestSharedAdapter (the shared harness predates
# this module's layout, and sends no request bodies, so rampmeter-ai is left
# out). From the repository root:
#
#   benchmarks/shared-compare.sh                                  # ~12 min
#   SECTIONS="decision middleware" benchmarks/shared-compare.sh  # ~5 min
#
# Every knob of compare.sh (SECTIONS, COUNT, OUT, ...) passes through;
# SHARED names the harness's folder (default: ../shared/bench beside the
# checkout).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${SHARED:-$root/../shared/bench}
[ -x "$shared/compare.sh" ] || { echo "shared-compare.sh: no $shared/compare.sh (set SHARED)" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rampmeter-adapter.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
RAMPMETER_SHARED_ADAPTER=$tmp/rampmeter.go go -C "$root/benchmarks" test -count=1 -run '^TestSharedAdapter$' . >/dev/null
cd "$root"
ADAPTER=$tmp/rampmeter.go PROJECT=$root "$shared/compare.sh"
