#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The soak: one long job on the real daemons, to show that memory stays flat
# and that restarts lose nothing. The real xfed-coord and SITES real
# xfed-site daemons on loopback with a federation's real certificates, a
# softmax regression on Fashion-MNIST shards of 1,200 records, ROUNDS rounds;
# every RESTART rounds one site (the next in turn) is killed with SIGKILL and
# started again on its directory; one CLI client (`xfed job watch`) follows
# the job the whole time while the sampler polls `xfed job status` and
# `xfed job list`. At every committed round the sampler records each
# process's VmRSS (/proc/PID/status) and the size of the journal (coord.db
# with its -wal and -shm) and of the blob store. At the end:
#   - each process's least-squares RSS slope over rounds FROM..ROUNDS in
#     KiB/round (a process started again is measured from FROM rounds after
#     its start, when that leaves at least 100 rounds), against the bound
#     of +-1 KiB/round;
#   - the journal's and the blob store's growth per round over the same
#     rounds (least squares, bytes/round), with checkpoint_retention KEEP;
#   - from the journal, that every committed round counted all SITES sites
#     (nothing a restart interrupted was lost: the job's min_sites is SITES,
#     so an attempt a kill cut short is retried once the site is back);
#   - the same job run again on a fresh federation without restarts, and
#     the two final model digests compared (the peer measured in the same
#     run: the restarts must not change the model).
# Exit status 1 when a round lost a site, the job did not finish, or the
# digests differ; the slope verdict is reported, not enforced.
#
# usage: bench/soak.sh [--sites N] [--rounds R] [--restart-every K] [--from F]
#                      [--retention KEEP] [--no-baseline] [--out DIR]
#   defaults: 50 sites, 1000 rounds, a restart every 50 rounds, slopes from
#   round 100, checkpoint_retention 10; --restart-every 0 restarts nothing.
#   DIR (default: a temporary directory, removed) keeps rss.csv,
#   storage.csv, restarts.csv and summary.json of each run.
# Environment: XF_BENCH_BUILD (build directory, default build), XF_FMNIST
# (the Fashion-MNIST directory), XF_KEEP_WORK=1 keeps the federations.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
sites_n=50 rounds=1000 every=50 from=100 keep=10 baseline=1 out=''
while (($#)); do
  case $1 in
    --sites) sites_n=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --restart-every) every=$2; shift 2 ;;
    --from) from=$2; shift 2 ;;
    --retention) keep=$2; shift 2 ;;
    --no-baseline) baseline=0; shift ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '3,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for v in sites_n rounds every from keep; do
  [[ ${!v} =~ ^[0-9]+$ ]] || { echo "soak.sh: --${v/_n/} wants a whole number, not '${!v}'" >&2; exit 2; }
done
((sites_n >= 1 && rounds >= 1)) || { echo "soak.sh: --sites and --rounds must be at least 1" >&2; exit 2; }
build=$(cd "${XF_BENCH_BUILD:-build}" && pwd)
data=${XF_FMNIST:-/usr/share/datasets/fashion-mnist}
xfed=$build/cli/xfed site_bin=$build/site/xfed-site coord_bin=$build/coordinator/xfed-coord
for b in "$xfed" "$site_bin" "$coord_bin"; do
  [[ -x $b ]] || { echo "soak.sh: $b is missing; build first (cmake --build $build)" >&2; exit 1; }
done
[[ -f $data/train-images-idx3-ubyte.gz || -f $data/train-images-idx3-ubyte ]] ||
  { echo "soak.sh: Fashion-MNIST is not at $data (apt install dataset-fashion-mnist, or set XF_FMNIST)" >&2; exit 1; }
ulimit -n 4096 2>/dev/null || true

top=$(mktemp -d "${TMPDIR:-/tmp}/xf-soak-XXXXXX")
fed=$top/federation
pids=()
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ -n ${XF_KEEP_WORK:-} ]]; then echo "kept $top" >&2; else rm -rf "$top"; fi
}
trap cleanup EXIT
trap 'exit 143' TERM INT
fail() { echo "soak.sh: $*" >&2; exit 1; }
tls() { echo --cert "$fed/issued/$1.crt" --key "$fed/issued/$1.key" --ca "$fed/ca.crt" --crl "$fed/crl.pem"; }
site_name() { printf 's%02d' "$1"; }
wait_file() {
  local i
  for ((i = 0; i < 300; i++)); do [[ -s $1 ]] && return 0; sleep 0.1; done
  fail "no $1"
}

# The federation's identities, and shards of 1,200 records: the data is cut
# in at least 50 parts whatever SITES is, so a round costs the same per
# site at every size.
XF_LOG_LEVEL=warn "$xfed" pki init --dir "$fed" --federation xfed >/dev/null
XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind coordinator --name coord >/dev/null
XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind user --name rita --role researcher >/dev/null
for ((n = 1; n <= sites_n; n++)); do
  XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind site --name "$(site_name "$n")" --region eu >/dev/null
done
parts=$((sites_n > 50 ? sites_n : 50))
XF_LOG_LEVEL=warn "$xfed" data split --data "$data" --sites "$parts" --scheme iid --seed 7 \
  --out "$top/shards" >/dev/null
cat >"$top/job.json" <<EOF
{
  "name": "soak",
  "model": {"arch": "logreg"},
  "data": {"dataset": "fmnist", "tags": ["fmnist"]},
  "rounds": $rounds,
  "sites_per_round": 1.0,
  "min_sites": $sites_n,
  "round_deadline_s": 120,
  "local": {"epochs": 1, "batch_size": 64, "optimizer": "sgd", "lr": 0.05,
            "momentum": 0, "weight_decay": 0, "prox_mu": 0},
  "strategy": {"name": "fedavg", "server_lr": 1.0},
  "privacy": {"unit": "site", "mode": "none"},
  "secure_aggregation": {"enabled": false},
  "compression": {"uplink": "none", "downlink": "none"},
  "seed": 42
}
EOF

# run NAME RESTART_EVERY: one federation and one job; leaves $top/NAME/digest.
run() {
  local name=$1 restart=$2 w=$top/$1 port n s i
  mkdir -p "$w/logs" "$w/sites"
  # min_sites is every site, so the job waits for a site that is down: the
  # grace after a coordinator restart is not what this measures.
  echo "{\"residency_policy\": \"off\", \"checkpoint_retention\": $keep}" >"$w/coord.json"
  # shellcheck disable=SC2046
  XF_LOG_LEVEL=info "$coord_bin" $(tls coord) --config "$w/coord.json" --state "$w/coord" \
    --listen 127.0.0.1:0 --port-file "$w/coord.port" 2>>"$w/logs/coord.log" &
  local coord_pid=$!
  pids+=("$coord_pid")
  wait_file "$w/coord.port"
  port=$(cat "$w/coord.port")
  declare -A pid_of
  for ((n = 1; n <= sites_n; n++)); do
    s=$(site_name "$n")
    # shellcheck disable=SC2046
    XF_LOG_LEVEL=warn "$site_bin" init --dir "$w/sites/$s" --name "$s" --region eu \
      --coordinator "127.0.0.1:$port" $(tls "$s") --threads 1 --backend cpu >/dev/null
    XF_LOG_LEVEL=warn "$site_bin" dataset add --dir "$w/sites/$s" --name fmnist \
      --path "$top/shards/site-$n" --tag fmnist >/dev/null
    XF_LOG_LEVEL=warn "$site_bin" run --dir "$w/sites/$s" 2>>"$w/logs/$s.log" &
    pid_of[$s]=$!
    pids+=("$!")
    # The sampler kills it: no job notice from this shell.
    disown
  done
  for ((i = 0; i < 1200; i++)); do
    (($(grep -c 'event=site_announced' "$w/logs/coord.log" || true) >= sites_n)) && break
    sleep 0.25
  done
  (($(grep -c 'event=site_announced' "$w/logs/coord.log" || true) >= sites_n)) ||
    fail "$name: the $sites_n sites did not all announce themselves"
  # shellcheck disable=SC2046 # tls gives several words
  cli() { XF_LOG_LEVEL=warn "$xfed" "$@" --coordinator "127.0.0.1:$port" $(tls rita); }
  # The sampler follows the coordinator's log, samples every committed
  # round and does the restarts (bench/soak_sample.py); it starts before
  # the job so that it sees every round.
  {
    printf '{"coord_log": "%s", "coord_state": "%s", "out": "%s", "rounds": %d,' \
      "$w/logs/coord.log" "$w/coord" "$w" "$rounds"
    printf ' "restart_every": %d, "spawned": "%s", "later": "%s", "procs": {"coord": %d' \
      "$restart" "$w/spawned" "$w/later" "$coord_pid"
    for s in "${!pid_of[@]}"; do printf ', "%s": %d' "$s" "${pid_of[$s]}"; done
    printf '}, "sites": {'
    local sep=''
    for s in "${!pid_of[@]}"; do
      printf '%s"%s": {"argv": ["%s", "run", "--dir", "%s"], "log": "%s"}' "$sep" "$s" \
        "$site_bin" "$w/sites/$s" "$w/logs/$s.log"
      sep=', '
    done
    printf '}}\n'
  } >"$w/sampler.json"
  : >"$w/spawned"
  python3 "$src/bench/soak_sample.py" "$w/sampler.json" &
  local sampler_pid=$!
  pids+=("$sampler_pid")
  local job
  job=$(cli job submit "$top/job.json") || fail "$name: the job was refused"
  # The CLI client that stays: it follows the job until it ends.
  cli job watch "$job" --interval 0.5 >"$w/watch.out" 2>>"$w/logs/watch.log" &
  local watch_pid=$!
  pids+=("$watch_pid")
  echo "watch $watch_pid" >"$w/later.tmp" && mv "$w/later.tmp" "$w/later"
  # The CLI client that polls: status and list, twice a second.
  (while :; do
    cli job status "$job" --json >/dev/null 2>&1 || true
    cli job list >/dev/null 2>&1 || true
    sleep 0.5
  done) &
  local poll_pid=$!
  pids+=("$poll_pid")
  local sampler_st=0
  wait "$sampler_pid" || sampler_st=$?
  mapfile -t -O "${#pids[@]}" pids <"$w/spawned"
  ((sampler_st == 0)) || fail "$name: the sampler stopped ($sampler_st)"
  local state='' js i
  for ((i = 0; i < 3000; i++)); do
    js=$(cli job status "$job" --json 2>/dev/null) || { sleep 0.2; continue; }
    state=$(sed -n 's/.*"state": *"\([a-z]*\)".*/\1/p' <<<"$js" | head -n 1)
    [[ $state == "done" || $state == failed || $state == cancelled ]] && break
    sleep 0.2
  done
  [[ $state == "done" ]] || fail "$name: the job ended $state: $(cli job status "$job" 2>&1)"
  wait "$watch_pid" 2>/dev/null || true
  kill "$poll_pid" 2>/dev/null || true
  sed -n 's/.*"model_digest": *"\([0-9a-f]*\)".*/\1/p' <<<"$js" | head -n 1 >"$w/digest"
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  # Sites the sampler started are not this shell's children.
  for p in "${pids[@]}"; do
    for ((i = 0; i < 100; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
  done
  pids=()
  [[ -s $w/digest ]] || fail "$name: no model digest in the job's status"
}

echo "soak: $sites_n sites, $rounds rounds, a restart every $every rounds, checkpoint_retention $keep" >&2
run restarts "$every"
((baseline)) && run plain 0
st=0
python3 - "$top" "$sites_n" "$rounds" "$every" "$from" "$keep" "$baseline" <<'PY' || st=$?
import csv, json, os, sqlite3, statistics, sys
top, sites, rounds, every, start, keep, baseline = sys.argv[1], *map(int, sys.argv[2:])
BOUND = 1.0  # KiB/round

def slope(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0

def lost_rounds(run):
    """Committed rounds that did not count every site, and retried attempts."""
    db = sqlite3.connect(f"file:{top}/{run}/coord/coord.db?mode=ro", uri=True)
    short = db.execute("SELECT round, reported FROM rounds WHERE outcome = 'committed'"
                       " AND reported < ? ORDER BY round", (sites,)).fetchall()
    committed = db.execute("SELECT count(*) FROM rounds WHERE outcome = 'committed'").fetchone()[0]
    retried = db.execute("SELECT count(*) FROM rounds WHERE outcome = 'retried'").fetchone()[0]
    kept = db.execute("SELECT count(*) FROM rounds WHERE outcome = 'committed'"
                      " AND pruned IS NULL").fetchone()[0]
    db.close()
    return short, committed, retried, kept

def analyse(run):
    d = f"{top}/{run}"
    series = {}
    for row in csv.DictReader(open(f"{d}/rss.csv")):
        series.setdefault((row["process"], int(row["pid"])), []).append(
            (int(row["round"]), int(row["rss_kib"]), float(row["seconds"])))
    procs, worst, unmeasured = [], 0.0, []
    for (name, pid), pts in sorted(series.items()):
        first = pts[0][0]
        lo = start if first <= 1 else first + start
        win = [(r, v) for r, v, _ in pts if lo <= r <= rounds]
        if len(win) < min(100, max(2, rounds - start)) or len(win) < 2:
            unmeasured.append({"process": name, "pid": pid, "from_round": first})
            continue
        s = slope([r for r, _ in win], [v for _, v in win])
        worst = max(worst, abs(s))
        procs.append({"process": name, "pid": pid, "rounds": [win[0][0], win[-1][0]],
                      "rss_kib_first": win[0][1], "rss_kib_last": win[-1][1],
                      "slope_kib_per_round": round(s, 4)})
    st = [r for r in csv.DictReader(open(f"{d}/storage.csv"))]
    win = [r for r in st if start <= int(r["round"]) <= rounds] or st
    xs = [int(r["round"]) for r in win]
    times = [float(r["seconds"]) for r in st]
    per_round = [b - a for a, b in zip(times, times[1:])]
    short, committed, retried, kept = lost_rounds(run)
    return {
        "processes_measured": len(procs), "processes_unmeasured": unmeasured,
        "max_abs_rss_slope_kib_per_round": round(worst, 4),
        "rss_slope_within_bound": worst <= BOUND,
        "rss_slopes": procs,
        "journal_growth_bytes_per_round": round(slope(xs, [int(r["journal_bytes"]) + int(r["wal_bytes"]) for r in win]), 1) if len(xs) > 1 else None,
        "journal_bytes_end": int(st[-1]["journal_bytes"]) + int(st[-1]["wal_bytes"]),
        "blob_growth_bytes_per_round": round(slope(xs, [int(r["blob_bytes"]) for r in win]), 1) if len(xs) > 1 else None,
        "blob_bytes_end": int(st[-1]["blob_bytes"]), "blob_files_end": int(st[-1]["blob_files"]),
        "rounds_sampled": len(st), "rounds_committed": committed, "rounds_short_of_all_sites": short,
        "attempts_retried": retried, "checkpoints_kept": kept,
        "restarts": sum(1 for _ in open(f"{d}/restarts.csv")) - 1,
        "seconds": round(times[-1], 1) if times else None,
        "median_round_s": round(statistics.median(per_round), 3) if per_round else None,
        "model_digest": open(f"{d}/digest").read().strip(),
    }

res = {"sites": sites, "rounds": rounds, "restart_every": every, "slope_from_round": start,
       "checkpoint_retention": keep, "restarts_run": analyse("restarts")}
if baseline:
    res["plain_run"] = analyse("plain")
    res["digests_equal"] = res["restarts_run"]["model_digest"] == res["plain_run"]["model_digest"]
json.dump(res, open(f"{top}/summary.json", "w"), indent=1)
r = res["restarts_run"]
print(f"restarts run: {r['rounds_committed']} rounds in {r['seconds']} s (median round {r['median_round_s']} s), "
      f"{r['restarts']} restarts, {r['attempts_retried']} attempts retried, "
      f"{len(r['rounds_short_of_all_sites'])} rounds short of {sites} sites", file=sys.stderr)
print(f"  RSS slope over rounds {start}-{rounds}: max |slope| {r['max_abs_rss_slope_kib_per_round']} KiB/round "
      f"over {r['processes_measured']} processes ({'within' if r['rss_slope_within_bound'] else 'OUTSIDE'} +-{BOUND}); "
      f"{len(r['processes_unmeasured'])} restarted too late to measure", file=sys.stderr)
print(f"  journal {r['journal_growth_bytes_per_round']} B/round (end {r['journal_bytes_end']} B), "
      f"blobs {r['blob_growth_bytes_per_round']} B/round (end {r['blob_bytes_end']} B in {r['blob_files_end']} files, "
      f"{r['checkpoints_kept']} rounds' checkpoints kept)", file=sys.stderr)
if baseline:
    print(f"  final model {r['model_digest']}; without restarts {res['plain_run']['model_digest']}: "
          f"{'equal' if res['digests_equal'] else 'DIFFERENT'}", file=sys.stderr)
print(json.dumps({k: v for k, v in res.items()}, separators=(",", ":")))
bad = bool(r["rounds_short_of_all_sites"])
if baseline and (not res["digests_equal"] or res["plain_run"]["rounds_short_of_all_sites"]):
    bad = True
# Every site counted from round 1, so no round is kept for a retraining:
# checkpoint_retention alone says how many rounds keep their checkpoint.
if keep and r["checkpoints_kept"] != min(keep, rounds):
    print(f"soak.sh: {r['checkpoints_kept']} rounds kept their checkpoint, not "
          f"checkpoint_retention's {min(keep, rounds)}", file=sys.stderr)
    bad = True
sys.exit(1 if bad else 0)
PY
if [[ -n $out ]]; then
  mkdir -p "$out"
  cp "$top/summary.json" "$out/" 2>/dev/null || true
  for r in restarts plain; do
    [[ -d $top/$r ]] || continue
    mkdir -p "$out/$r"
    cp "$top/$r"/{rss.csv,storage.csv,restarts.csv,digest} "$out/$r/"
  done
fi
exit $st
