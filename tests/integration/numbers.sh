#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every view of one job states the same numbers. Two sites dial a global
# coordinator on loopback (real daemons, real certificates) that serves
# /metrics and the dashboard; a two-round job with site-level central
# differential privacy runs to its end. Then `xfed job status` (text and
# --json), `xfed job watch`, `xfed job metrics`, the coordinator's /metrics,
# the dashboard's /api/jobs and /api/jobs/ID/metrics (through the token flow
# of docs/dashboard.md), `xfed job report --json` and `xfed job export
# --json` must agree on the rounds, the bytes up and down (the sum of the
# metrics rows, docs/metrics.md "A job's traffic"), epsilon, the test
# accuracy and the model digest (and the model file's digest where shown).
# usage: numbers.sh BUILD_DIR [WITH_REPORT]   (0: a build without cairo, no report)
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
with_report=${2:-1}
label=numbers_agree
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"
fed_name=numbers
metrics=1
command -v curl >/dev/null || { echo "FAIL [$label]: curl is missing" >&2; exit 1; }
setup_work xf-numbers
coord_flags=(--residency-policy off --dashboard 127.0.0.1:0 --dashboard-port-file "$work/dash.port")
federation s1:eu:direct s2:eu:direct
wait_file "$work/coord.mport"
wait_file "$work/dash.port"
v=$work/views
mkdir -p "$v"

cat >"$work/job.json" <<JSON
{"name": "numbers", "model": {"arch": "logreg"}, "data": {"dataset": "fmnist", "tags": ["fmnist"]},
 "rounds": 2, "min_sites": 2, "round_deadline_s": 600,
 "local": {"epochs": 1, "batch_size": 64, "lr": 0.05}, "seed": 11,
 "privacy": {"unit": "site", "mode": "central", "clip": 1.0, "target_epsilon": 8, "delta": 1e-5}}
JSON
job=$(cli job submit "$work/job.json" --json | json_field job_id)
[[ $job =~ ^[0-9]+$ ]] || fail "no job id from submit: '$job'"
wait_done "$job"

# Each view, as a user reads it.
cli job status "$job" --json >"$v/status.json" || fail "xfed job status --json"
cli job status "$job" >"$v/status.txt" || fail "xfed job status"
cli job watch "$job" >"$v/watch.out" 2>"$v/watch.err" || fail "xfed job watch: $(cat "$v/watch.err")"
cli job metrics "$job" --json >"$v/metrics.json" || fail "xfed job metrics --json"
curl -sS --max-time 10 "http://127.0.0.1:$(cat "$work/coord.mport")/metrics" >"$v/prom.txt" ||
  fail "no /metrics from the coordinator"
url=$(cli dashboard --json | json_field url)
[[ $url == https://127.0.0.1:* ]] || fail "xfed dashboard printed '$url'"
base=${url%%/login*}
curl -sSk --max-time 10 -c "$work/cookies" -o /dev/null "$url" || fail "the dashboard's login"
curl -sSk --max-time 10 -b "$work/cookies" "$base/api/jobs" >"$v/dash-jobs.json" ||
  fail "the dashboard's /api/jobs"
curl -sSk --max-time 10 -b "$work/cookies" "$base/api/jobs/$job/metrics" >"$v/dash-metrics.json" ||
  fail "the dashboard's /api/jobs/$job/metrics"
report=''
if ((with_report)); then
  report=$v/report.json
  cli job report "$job" --out "$work/report.svg" --json >"$report" || fail "xfed job report"
fi
cli job export "$job" --out "$work/model.xfm" --json >"$v/export.json" || fail "xfed job export"

python3 - "$v" "$job" "$report" <<'PY' || fail "the views of job $job disagree"
import json, math, re, sys
v, job, report = sys.argv[1], sys.argv[2], sys.argv[3]
load = lambda name: json.load(open(f"{v}/{name}"))
status = load("status.json")
ok = True
def same(what, got, want):
    global ok
    good = (got == want if not isinstance(want, float) or not isinstance(got, float)
            else math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12))
    print(f"{what}: {got!r}{'' if good else f' but status --json says {want!r}  MISMATCH'}")
    ok = ok and good

rounds, up, down = status["rounds_committed"], status["bytes_up"], status["bytes_down"]
eps, acc, digest = status["epsilon"], status["test_accuracy"], status["model_digest"]
file_digest = status.get("model_file_digest")
def holds(what, good):
    global ok
    print(f"status --json: {what}{'' if good else '  FALSE'}")
    ok = ok and good
holds(f"done after {rounds} of 2 rounds", status["state"] == "done" and rounds == status["rounds"] == 2)
holds(f"epsilon {eps!r} accounted", isinstance(eps, float) and eps > 0)
holds(f"accuracy {acc!r} in [0, 1]", isinstance(acc, float) and 0 <= acc <= 1)
holds(f"model digest {digest!r} and model file digest {file_digest!r}, two values",
      all(isinstance(d, str) and re.fullmatch("[0-9a-f]{64}", d) for d in (digest, file_digest))
      and digest != file_digest)
holds(f"{up} bytes up and {down} down", up > 0 and down > 0)

# The rows: one definition of the traffic; the rounds trained; the newest
# round's epsilon; the accuracy of the evaluated round, weighted by records.
def rows_agree(where, rows):
    same(f"{where}: bytes up, summed", sum(r["bytes_up"] for r in rows), up)
    same(f"{where}: bytes down, summed", sum(r["bytes_down"] for r in rows), down)
    same(f"{where}: rounds trained", len({r["round"] for r in rows if r["bytes_up"] > 0}), rounds)
    last = max(r["round"] for r in rows)
    same(f"{where}: epsilon of round {last}",
         max(r["epsilon"] for r in rows if r["round"] == last and r["epsilon"] is not None), eps)
    ev = [r for r in rows if r["round"] == status["eval_round"] and r["test_accuracy"] is not None]
    w = sum(r["samples"] or 1 for r in ev)
    same(f"{where}: accuracy of round {status['eval_round']}",
         sum((r["samples"] or 1) * r["test_accuracy"] for r in ev) / w, acc)
rows_agree("xfed job metrics", load("metrics.json")["rows"])
rows_agree("dashboard /api/jobs/ID/metrics", load("dash-metrics.json")["rows"])

# The dashboard's job is `xfed job status --json`'s.
(dj,) = [j for j in load("dash-jobs.json")["jobs"] if str(j["job_id"]) == job]
for k in ("rounds_committed", "bytes_up", "bytes_down", "epsilon", "test_accuracy",
          "model_digest", "model_file_digest"):
    same(f"dashboard /api/jobs {k}", dj.get(k), status.get(k))

# Prometheus.
prom = {}
for line in open(f"{v}/prom.txt"):
    m = re.match(r'^(xfed_job_[a-z_]+)\{([^}]*)\} (\S+)$', line)
    if m and f'job_id="{job}"' in m.group(2):
        prom[(m.group(1), m.group(2))] = float(m.group(3))
def series(name, **labels):
    hits = [val for (n, l), val in prom.items()
            if n == name and all(f'{k}="{x}"' in l for k, x in labels.items())]
    assert len(hits) == 1, (name, labels, prom)
    return hits[0]
same("/metrics xfed_job_rounds_completed_total", series("xfed_job_rounds_completed_total"), float(rounds))
same("/metrics xfed_job_bytes_total up", series("xfed_job_bytes_total", direction="up"), float(up))
same("/metrics xfed_job_bytes_total down", series("xfed_job_bytes_total", direction="down"), float(down))
same("/metrics xfed_job_epsilon", series("xfed_job_epsilon"), eps)

# The text views print the same figures, formatted.
def mb(b):
    x, u = float(b), 0
    while x >= 1000 and u < 5:
        x, u = x / 1000, u + 1
    return f"{b} B" if u == 0 else f"{x:.1f} {['B', 'kB', 'MB', 'GB', 'TB', 'PB'][u]}"
text = open(f"{v}/status.txt").read()
def shows(where, body, want):
    global ok
    good = want in body
    print(f"{where} shows {want!r}{'' if good else '  MISSING'}")
    ok = ok and good
shows("status", text, f"round       {rounds}/{rounds}, {rounds} committed")
shows("status", text, f"traffic     {mb(up)} up, {mb(down)} down")
shows("status", text, f"epsilon     {eps:.4g}\n")
shows("status", text, f"accuracy    {acc:.4f} ")
shows("status", text, f"model       {digest}\n")
shows("status", text, f"model file  {file_digest}\n")
watch = open(f"{v}/watch.out").read()
shows("watch", watch, f"final accuracy={acc:.4f} rounds={rounds} epsilon={eps:.4g} uplink_bytes={up}\n")
progress = open(f"{v}/watch.err").read().strip().splitlines()[-1]
for want in (f"up {mb(up)}", f"down {mb(down)}", f"epsilon {eps:.4g}", f"accuracy {acc:.4f}"):
    shows("watch's line", progress, want)

# The report draws the rows; export writes the model status names.
if report:
    r = json.load(open(report))
    same("report rounds", r["rounds"], rounds)
    same("report bytes up", r["bytes_up"], up)
    same("report bytes down", r["bytes_down"], down)
    same("report epsilon", r["epsilon"], eps)
    same("report accuracy", r["test_accuracy"], acc)
e = load("export.json")
same("export round", e["round"], rounds)
same("export model_digest", e["model_digest"], digest)
same("export model_file_digest", e.get("model_file_digest"), file_digest)
sys.exit(0 if ok else 1)
PY
# The exported model file is the coordinator's blob, byte for byte.
b2=$(python3 -c 'import hashlib,sys; print(hashlib.blake2b(open(sys.argv[1],"rb").read(), digest_size=32).hexdigest())' "$work/model.xfm")
[[ $b2 == "$(json_field model_file_digest <"$v/status.json")" ]] ||
  fail "the exported model file hashes to $b2, not the status's model file digest"
finish
echo "numbers_agree: status, watch, metrics, /metrics, the dashboard, report and export agree on job $job"
