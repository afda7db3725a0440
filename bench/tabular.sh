#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The tabular example's job (deploy/jobs/credit-mlp.json: a declared MLP
# 25-64-32-2 trained with AdamW) three ways, on the same data, per seed:
#   xfed central     `xfed train` on the pooled training split, epochs =
#                    the job's rounds x local epochs, constant lr (round 1's)
#   pytorch central  bench/torch_tabular.py: the same layers, AdamW, lr,
#                    weight decay, batch and epochs, on the same encoded
#                    features (Debian's python3-torch)
#   xfed federated   the job itself: a coordinator and --sites sites on
#                    loopback with real certificates, the training split cut
#                    by --scheme, FedAvg; the final model exported as .npz
# Every model is scored on the same pooled test split (2000 records) by
# bench/torch_tabular.py score: accuracy, and AUC of the probability of
# "yes". The data set is deploy/data/make-credit.py's default (seed
# 20261126); SEED varies the split, the job's seed and PyTorch's. Prints a
# line per run and a Markdown table of the medians.
#
# usage: bench/tabular.sh [--build DIR] [--sites N] [--scheme S] [--seeds "1 2 3"]
#                         [--dir DIR] [--keep]
#   --scheme S   iid or dirichlet:ALPHA (default iid)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=build
sites=4
scheme=iid
seeds="1 2 3"
dir=''
keep=0
while (($#)); do
  case "$1" in
    --build) build=${2:?}; shift 2 ;;
    --sites) sites=${2:?}; shift 2 ;;
    --scheme) scheme=${2:?}; shift 2 ;;
    --seeds) seeds=${2:?}; shift 2 ;;
    --dir) dir=${2:?}; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '3,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "tabular.sh: unknown option '$1'; see bench/tabular.sh --help" >&2; exit 2 ;;
  esac
done
py=/usr/bin/python3
"$py" -c 'import torch, numpy' 2>/dev/null ||
  { echo "tabular.sh: $py cannot import torch and numpy (deploy/install-deps.sh bench installs python3-torch)" >&2; exit 2; }
build=$(cd "$build" && pwd)
xfed=$build/cli/xfed site_bin=$build/site/xfed-site coord_bin=$build/coordinator/xfed-coord
[[ -z $dir ]] && dir=$(mktemp -d "${TMPDIR:-/tmp}/xf-tabular-XXXXXX")
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
spec=$root/deploy/jobs/credit-mlp.json
pids=()
stop_all() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
cleanup() {
  stop_all
  if ((keep == 0)); then rm -rf "$dir"; else echo "tabular.sh: kept $dir" >&2; fi
}
trap cleanup EXIT
export XF_LOG_LEVEL=warn

# The job's hyperparameters, for the central runs.
read -r rounds epochs lr wd batch < <("$py" - "$spec" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
l = j["local"]
print(j["rounds"], l["epochs"], l["lr"], l["weight_decay"], l["batch_size"])
PY
)
central_epochs=$((rounds * epochs))

"$py" deploy/data/make-credit.py --out "$dir/credit"
# The pooled data as xfed encodes it (one-hot, normalized with the training
# split's statistics): what PyTorch trains on and every model is scored on.
"$xfed" data split --data "$dir/credit" --sites 1 --scheme iid --out "$dir/pooled" >/dev/null
pooled=$dir/pooled/site-1
score() { "$py" bench/torch_tabular.py score --data "$pooled" --npz "$1"; }
field() { "$py" -c 'import json, sys; print("%.4f" % json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

federate() { # federate SEED OUT.npz: prints the job's last line
  local seed=$1 out=$2 run=$dir/fed-$1 n i k port
  mkdir -p "$run/logs"
  local fed=$run/federation
  tls() { echo --cert "$fed/issued/$1.crt" --key "$fed/issued/$1.key" --ca "$fed/ca.crt" --crl "$fed/crl.pem"; }
  "$xfed" pki init --dir "$fed" --federation tabular >/dev/null
  "$xfed" pki issue --dir "$fed" --kind coordinator --name coord >/dev/null
  "$xfed" pki issue --dir "$fed" --kind user --name researcher --role researcher >/dev/null
  "$xfed" data split --data "$dir/credit" --sites "$sites" --scheme "$scheme" --seed "$seed" \
    --out "$run/shards" >/dev/null
  # shellcheck disable=SC2046
  XF_LOG_LEVEL=info "$coord_bin" $(tls coord) --state "$run/coord" --listen 127.0.0.1:0 \
    --port-file "$run/coord.port" --residency-policy off 2>"$run/logs/coord.log" &
  pids+=($!)
  for ((i = 0; i < 300; i++)); do [[ -s "$run/coord.port" ]] && break; sleep 0.1; done
  port=$(cat "$run/coord.port")
  for n in $(seq 1 "$sites"); do
    "$xfed" pki issue --dir "$fed" --kind site --name "site-$n" --region eu >/dev/null
    # shellcheck disable=SC2046
    "$site_bin" init --dir "$run/sites/site-$n" --name "site-$n" --region eu \
      --coordinator "127.0.0.1:$port" $(tls "site-$n") --threads 1 --backend cpu >/dev/null
    "$site_bin" dataset add --dir "$run/sites/site-$n" --name credit \
      --path "$run/shards/site-$n" >/dev/null
    XF_LOG_LEVEL=info "$site_bin" run --dir "$run/sites/site-$n" 2>"$run/logs/site-$n.log" &
    pids+=($!)
  done
  for ((i = 0; i < 600; i++)); do
    k=$(grep -c 'event=site_announced' "$run/logs/coord.log" || true)
    ((k >= sites)) && break
    sleep 0.2
  done
  sed "s/\"seed\": 42/\"seed\": $seed/" "$spec" >"$run/job.json"
  # shellcheck disable=SC2046
  "$xfed" job submit "$run/job.json" --wait --coordinator "127.0.0.1:$port" $(tls researcher) \
    >"$run/job.out"
  # shellcheck disable=SC2046
  "$xfed" job export 1 --out "$out" --coordinator "127.0.0.1:$port" $(tls researcher) >/dev/null
  stop_all
  tail -n 1 "$run/job.out"
}

rows=$dir/rows.tsv
: >"$rows"
for seed in $seeds; do
  sed "s/\"epochs\": $epochs,/\"epochs\": $central_epochs,/; s/\"seed\": 42/\"seed\": $seed/" \
    "$spec" >"$dir/central.json"
  "$xfed" train --spec "$dir/central.json" --data "$dir/credit" --save "$dir/central.xfm" >/dev/null 2>"$dir/central.log" ||
    { cat "$dir/central.log" >&2; exit 1; }
  "$xfed" model export "$dir/central.xfm" --out "$dir/central-$seed.npz" >/dev/null
  xc=$(score "$dir/central-$seed.npz")
  pt=$("$py" bench/torch_tabular.py train --data "$pooled" --epochs "$central_epochs" --lr "$lr" \
    --weight-decay "$wd" --batch "$batch" --seed "$seed")
  start=$(date +%s)
  last=$(federate "$seed" "$dir/fed-$seed.npz")
  wall=$(($(date +%s) - start))
  xf=$(score "$dir/fed-$seed.npz")
  echo "seed $seed: xfed central $xc"
  echo "seed $seed: pytorch central $pt"
  echo "seed $seed: xfed federated $xf ($last; ${wall} s)"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$seed" \
    "$(field "$xc" accuracy)" "$(field "$xc" auc)" "$(field "$pt" accuracy)" "$(field "$pt" auc)" \
    "$(field "$xf" accuracy)" "$(field "$xf" auc)" "$wall" >>"$rows"
done

"$py" - "$rows" "$sites" "$scheme" "$rounds" "$epochs" "$central_epochs" <<'PY'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().split("\n") if l]
sites, scheme, rounds, epochs, cep = sys.argv[2:7]
med = lambda i: statistics.median(float(r[i]) for r in rows)
n = len(rows)
print(f"\nmedians of {n} run{'s' if n > 1 else ''} (seeds {' '.join(r[0] for r in rows)}), "
      "test split of 2000 records\n")
print("| model trained by | data | accuracy | AUC |")
print("|---|---|---|---|")
print(f"| xfed central (`xfed train`) | pooled, {cep} epochs | {med(1):.4f} | {med(2):.4f} |")
print(f"| PyTorch central | pooled, {cep} epochs | {med(3):.4f} | {med(4):.4f} |")
print(f"| xfed federated | {sites} sites, {scheme}, {rounds} rounds x {epochs} epoch | {med(5):.4f} | {med(6):.4f} |")
print(f"\nfederated run wall time: median {med(7):.0f} s")
PY
