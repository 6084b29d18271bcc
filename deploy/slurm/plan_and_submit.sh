#!/usr/bin/env bash
# An sbatch-style front for users: ask the meshplan service for a plan for this request, submit
# it through the service (POST /v1/plans/{id}/submissions, backend slurm), print the job id the
# way sbatch does. The service writes the sbatch script, tracks the job, and (unless --no-report)
# gives the job a token to post its measured run back to the plan.
#
#   MESHPLAN_URL=http://meshplan:8000 MESHPLAN_API_KEY=mp_... \
#     deploy/slurm/plan_and_submit.sh [-p PART] [-A ACCT] [-t TIME] [-N NODES] REQUEST.json
#
# Options (sbatch's spellings where sbatch has one):
#   -p, --partition P     -A, --account A     -t, --time HH:MM:SS     -N, --nodes N
#   -D, --chdir DIR (default: the current directory, as for sbatch)      -J, --job-name NAME
#   --export NAME=VALUE   add one variable to the job's environment (repeatable)
#   --deployment FILE     a JSON deployment document the options above are laid over
#   --framework F         meshplan (default) | megatron | torchtitan | deepspeed
#   --plan-id ID          submit a stored plan instead of planning REQUEST.json
#   --no-report           the job does not post its RunReport back
#   --parsable            print only the job id
# Prints "Submitted batch job <id>" (stdout) and the submission's URL (stderr). Exit 2 on a usage
# error, 1 when the service refuses (its problem detail is printed), 0 on success.
set -euo pipefail

die() { echo "plan_and_submit: $*" >&2; exit 2; }
need() { [[ $# -ge 2 && -n $2 ]] || die "$1 needs a value"; }

url=${MESHPLAN_URL:-http://127.0.0.1:8000}
key=${MESHPLAN_API_KEY:-}
partition="" account="" time_limit="" nodes="" chdir="" job_name="" deployment="" plan_id=""
framework=meshplan report=true parsable=false request=""
exports=()
while [[ $# -gt 0 ]]; do
  case $1 in
    -p | --partition) need "$@"; partition=$2; shift 2 ;;
    -A | --account) need "$@"; account=$2; shift 2 ;;
    -t | --time) need "$@"; time_limit=$2; shift 2 ;;
    -N | --nodes) need "$@"; nodes=$2; shift 2 ;;
    -D | --chdir) need "$@"; chdir=$2; shift 2 ;;
    -J | --job-name) need "$@"; job_name=$2; shift 2 ;;
    --export) need "$@"; [[ $2 == *=* ]] || die "--export takes NAME=VALUE, got '$2'"
      exports+=("$2"); shift 2 ;;
    --deployment) need "$@"; deployment=$2; shift 2 ;;
    --framework) need "$@"; framework=$2; shift 2 ;;
    --plan-id) need "$@"; plan_id=$2; shift 2 ;;
    --no-report) report=false; shift ;;
    --parsable) parsable=true; shift ;;
    -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [[ -z $request ]] || die "one REQUEST.json only, got '$request' and '$1'"
      request=$1; shift ;;
  esac
done
[[ -n $key ]] || die "set MESHPLAN_API_KEY"
[[ -n $plan_id || -n $request ]] || die "usage: plan_and_submit.sh [options] REQUEST.json (or --plan-id ID)"
[[ -z $request || -r $request ]] || die "cannot read $request"
[[ -z $deployment || -r $deployment ]] || die "cannot read $deployment"
[[ -z $nodes || $nodes =~ ^[1-9][0-9]*$ ]] || die "--nodes must be a positive integer, got '$nodes'"

# call METHOD PATH [BODY-FILE]: the response body on stdout; on HTTP >= 400 the problem's detail
# on stderr and exit 1
call() {
  local out status
  out=$(mktemp)
  status=$(curl -sS -o "$out" -w '%{http_code}' -X "$1" "$url$2" \
    -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
    ${3:+--data-binary @"$3"} ${4:+-H "Idempotency-Key: $4"}) || { rm -f "$out"; exit 1; }
  if ((status >= 400)); then
    python3 - "$out" "$status" >&2 <<'PY' || cat "$out" >&2
import json, sys
doc = json.load(open(sys.argv[1]))
print(f"plan_and_submit: {sys.argv[2]} {doc.get('title', '')}: {doc.get('detail', doc)}")
PY
    rm -f "$out"
    exit 1
  fi
  cat "$out"
  rm -f "$out"
}
field() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

# 1. the plan (a cached plan comes back at once; a new search may take up to its time limit)
if [[ -z $plan_id ]]; then
  plan_id=$(call POST /v1/plans "$request" "$(sha256sum "$request" | cut -c1-32)" | field id)
  echo "plan $plan_id: $url/plans/$plan_id" >&2
fi

# 2. the submission: the deployment document with the options laid over it
body=$(mktemp)
trap 'rm -f "$body"' EXIT
python3 - "$body" "$deployment" "$framework" "$report" "$partition" "$account" "$time_limit" \
  "$nodes" "$chdir" "$job_name" "${exports[@]}" <<'PY'
import json, os, sys
out, deployment, framework, report, partition, account, time, nodes, chdir, name, *exports = sys.argv[1:]
dep = json.load(open(deployment)) if deployment else {}
for key, value in (("partition", partition), ("account", account), ("time", time),
                   ("workdir", chdir), ("job_name", name)):
    if value:
        dep[key] = value
if nodes:
    dep["nodes"] = int(nodes)
dep.setdefault("workdir", os.getcwd())  # like sbatch: the job runs where it was submitted
env = dep.setdefault("env", {})
for item in exports:
    k, _, v = item.partition("=")
    env[k] = v
doc = {"backend": "slurm", "framework": framework, "report": report == "true", "deployment": dep}
json.dump(doc, open(out, "w"))
PY
submission=$(call POST "/v1/plans/$plan_id/submissions" "$body")
sid=$(field id <<<"$submission")
job=$(field scheduler_job_id <<<"$submission")
echo "submission $sid: $url/v1/submissions/$sid" >&2
if $parsable; then echo "$job"; else echo "Submitted batch job $job"; fi
