#!/usr/bin/env bash
# Slurm integration example: ask the meshplan service for a plan, fetch its Slurm launch
# bundle, and submit it with sbatch.
#
#   MESHPLAN_URL=http://meshplan:8000 MESHPLAN_API_KEY=mp_... \
#     deploy/slurm/plan_and_submit.sh request.json [--partition gpu --account proj]
set -euo pipefail
request=${1:?usage: plan_and_submit.sh REQUEST.json [sbatch options...]}
shift
url=${MESHPLAN_URL:-http://127.0.0.1:8000}
auth="Authorization: Bearer ${MESHPLAN_API_KEY:?set MESHPLAN_API_KEY}"

# 1. plan (a cached plan comes back at once; a new search may take up to its time limit)
plan_id=$(curl -fsS -X POST "$url/v1/plans" -H "$auth" -H 'Content-Type: application/json' \
  -H "Idempotency-Key: $(sha256sum "$request" | cut -c1-32)" --data-binary @"$request" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
echo "plan $plan_id: $url/plans/$plan_id"

# 2. the Slurm bundle for meshplan's runner (framework=megatron|torchtitan|deepspeed for others)
workdir=$(mktemp -d)
curl -fsS "$url/v1/plans/$plan_id/launch?target=slurm&framework=meshplan&format=tar.gz" \
  -H "$auth" | tar -xz -C "$workdir"
script=$(find "$workdir" -name '*.sbatch' -o -name '*.sh' | head -1)
echo "launch files in $workdir"

# 3. submit; the run reports back with --report-url $url/v1/plans/$plan_id/runs
sbatch "$@" "$script"
