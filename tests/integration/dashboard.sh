#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The coordinator's web dashboard (docs/dashboard.md) with the real daemons:
# a federation of two sites runs a job; `xfed dashboard` gets a one-use URL
# over the CLI session; headless Chromium (Debian's chromium, driven by
# python3-selenium through chromium-driver) opens it twice. Before any
# residency policy exists (the coordinator runs with it off) the page lists
# the sites that train and their datasets, shows a finished job's last round
# of sites and says why its ε chart is empty in the words of `xfed job
# report`; after two policy versions it shows the running job's rounds and
# sites and draws its curve on an accuracy axis of [0, 1], with no console
# error. Requests without a session, with a made-up token or with the spent
# one are 401.
# usage: dashboard.sh BUILD_DIR [SCREENSHOT.png]
# XF_DASH_ROUNDS=N waits for N committed rounds (default 2) before the page
# is opened, for a screenshot with longer curves; XF_DASH_SHOTS=DIR copies
# both visits' screenshots (no-policy.png, dashboard.png) there.
set -euo pipefail
build=$(cd "${1:?usage: dashboard.sh BUILD_DIR [SCREENSHOT.png]}" && pwd)
shot=${2:-}
label=dashboard
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
[[ -x $py ]] || py=python3
for tool in chromium chromedriver curl; do
  command -v "$tool" >/dev/null ||
    { echo "FAIL [dashboard]: $tool is missing (deploy/install-deps.sh test installs it)" >&2; exit 1; }
done
"$py" -c 'import selenium' 2>/dev/null ||
  { echo "FAIL [dashboard]: python3-selenium is missing for $py (deploy/install-deps.sh test installs it)" >&2; exit 1; }

setup_work xf-dashboard
coord_flags=(--residency-policy off --dashboard 127.0.0.1:0 --dashboard-port-file "$work/dash.port")
federation s1:eu:direct s2:us:direct
wait_file "$work/dash.port"
dport=$(cat "$work/dash.port")
base=https://127.0.0.1:$dport

# A job without differential privacy, run to its end first.
cat >"$work/plain.json" <<JSON
{"name": "plain", "model": {"arch": "mlp", "hidden": [32]},
 "data": {"dataset": "fmnist"}, "rounds": 2, "min_sites": 2, "round_deadline_s": 120,
 "local": {"epochs": 1, "batch_size": 64, "lr": 0.05, "momentum": 0.9}, "seed": 7}
JSON
plain=$(cli job submit "$work/plain.json" 2>/dev/null | head -n 1)
[[ $plain =~ ^[0-9]+$ ]] || fail "no job id from submit: '$plain'"
wait_done "$plain" 300

# Long enough to be running while the page is looked at; cancelled after.
cat >"$work/job.json" <<JSON
{"name": "dash", "model": {"arch": "mlp", "hidden": [32]},
 "data": {"dataset": "fmnist"}, "rounds": 200, "min_sites": 2, "round_deadline_s": 120,
 "local": {"epochs": 1, "batch_size": 64, "lr": 0.05, "momentum": 0.9}, "seed": 11,
 "privacy": {"unit": "record", "mode": "local", "clip": 1.0, "target_epsilon": 8, "delta": 1e-5}}
JSON
job=$(cli job submit "$work/job.json" 2>/dev/null | head -n 1)
[[ $job =~ ^[0-9]+$ ]] || fail "no job id from submit: '$job'"
for ((i = 0; i < 1500; i++)); do
  c=$(job_field "$job" rounds_committed || true)
  [[ -n $c ]] && ((c >= ${XF_DASH_ROUNDS:-2})) && break
  sleep 0.2
done
((c >= ${XF_DASH_ROUNDS:-2})) || fail "job $job did not commit ${XF_DASH_ROUNDS:-2} rounds"

# visit NAME [PLAIN_JOB]: a fresh URL for the compliance user, opened in
# Chromium (dashboard_browser.py); the screenshot is $work/NAME.png.
visit() {
  local url
  url=$(comp dashboard --json | json_field url)
  [[ $url == "$base/login?token="* ]] || fail "xfed dashboard printed '$url'"
  if grep -q "${url##*token=}" "$work"/logs/*.log; then fail "a log holds the dashboard token"; fi
  "$py" "$src/tests/integration/dashboard_browser.py" "$url" "$job" "$work/$1.png" "${@:2}" \
    >"$work/browser.out" 2>&1 || { cat "$work/browser.out" >&2; fail "the page in Chromium ($1)"; }
  cat "$work/browser.out"
  # The token was spent by the browser's visit.
  [[ $(code "$url") == 401 ]] || fail "the spent token is not 401 on a second use"
}
code() { curl -sk -o /dev/null -w '%{http_code}' "$@"; }

# No policy yet: the sites that train are listed all the same.
visit no-policy "$plain"

# Two policy versions, for the sites, datasets and diff the page shows.
cat >"$work/policy.json" <<JSON
{"regions": [{"name": "eu", "jurisdiction": "EU GDPR"}, {"name": "us", "jurisdiction": "US"}],
 "sites": [{"name": "s1", "region": "eu"}, {"name": "s2", "region": "us"}],
 "datasets": [{"name": "fmnist", "site": "s1", "classification": "internal", "tags": ["fmnist"]}],
 "rules": []}
JSON
comp policy import "$work/policy.json" --reason "the dashboard test's federation" >/dev/null ||
  fail "cannot import the policy"
sed 's/"tags": \["fmnist"\]}\]/"tags": ["fmnist"]}, {"name": "fmnist", "site": "s2", "classification": "internal", "tags": ["fmnist"]}]/' \
  "$work/policy.json" >"$work/policy2.json"
comp policy import "$work/policy2.json" --reason "s2's dataset" >/dev/null ||
  fail "cannot import the second policy version"

for path in / /api/jobs /api/sites /api/audit /static/app.js /static/chart.js; do
  [[ $(code "$base$path") == 401 ]] || fail "$path without a session is not 401"
done
[[ $(code "$base/login?token=$(printf '%064d' 7)") == 401 ]] || fail "a made-up token is not 401"
[[ $(code -H "Cookie: xf_dash=$(printf '%064d' 7)" "$base/api/jobs") == 401 ]] ||
  fail "a made-up session cookie is not 401"

# Compliance sees the audit trail too.
visit dashboard
[[ -z $shot ]] || cp "$work/dashboard.png" "$shot"
[[ -z ${XF_DASH_SHOTS:-} ]] || cp "$work/no-policy.png" "$work/dashboard.png" "$XF_DASH_SHOTS/"

cli job cancel "$job" >/dev/null || fail "cannot cancel job $job"
finish
echo "dashboard: page in headless Chromium lists the sites without a policy, shows job $plain's last round and why it has no ε, and job $job's rounds and curve; no session, a made-up token or a spent one get 401"
