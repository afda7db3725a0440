#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# External trainers in a real federation (docs/trainers.md): two native sites
# (s1, s2) and one site (s3) whose dataset is trained by a program. By MODE:
#   contract  s3's trainer is the plain-Python tests/data/trainer/tiny_trainer.py
#             (its weights are global + 0.25): a two-round mlp job ends done
#             with s3's updates in every round, the trainer's log kept in the
#             site directory and its work directory gone; then a job asking
#             for record-level privacy fails because s3, declared
#             --trainer-dp none, refuses it, and the researcher's job status
#             says how to fix it; once s3's dataset is registered again
#             with --trainer-dp declared, the same job ends done and s3's
#             ledger charges the DP its trainer declared.
#   torch     s3's trainer is deploy/trainers/torch_trainer.py (PyTorch):
#             lenet5 for 3 rounds ends done with a test accuracy above 0.5,
#             and in every round the PyTorch model's accuracy of the weights
#             it received is xfed-site's, up to 2 test records whose two
#             best classes the float kernels order otherwise (the layer
#             table read right);
#             then, registered with --trainer-dp declared, it does DP-SGD for
#             a record-level job that ends done, and s3's ledger charges it.
#             Exit 77 (skipped) when python3 cannot import torch.
# usage: trainer.sh BUILD_DIR contract|torch
set -euo pipefail
build=$(cd "${1:?usage: trainer.sh BUILD_DIR contract|torch}" && pwd)
mode=${2:?usage: trainer.sh BUILD_DIR contract|torch}
label=trainer-$mode
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"

case $mode in
  contract) ;;
  torch)
    if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
      echo "SKIP: /usr/bin/python3 cannot import torch (deploy/install-deps.sh test installs python3-torch)" >&2
      exit 77
    fi ;;
  *) echo "unknown mode $mode: contract or torch" >&2; exit 2 ;;
esac

setup_work xfed-trainer
coord_flags=(--region us --residency-policy off)
if [[ $mode == contract ]]; then
  ln -s "$src/tests/data/trainer/tiny_trainer.py" "$work/good.py"
  dataset_flags[s3]="--trainer $work/good.py --trainer-timeout 300"
else
  dataset_flags[s3]="--trainer $src/deploy/trainers/torch_trainer.py --trainer-timeout 900"
fi
federation s1:us:direct s2:us:direct s3:us:direct

"$site_bin" dataset list --dir "$work/sites/s3" --json >"$work/s3.json"
grep -q '"program"' "$work/s3.json" || fail "s3's dataset has no trainer: $(cat "$work/s3.json")"

if [[ $mode == contract ]]; then
  cat >"$work/job.json" <<JSON
{"name": "trainer", "model": {"arch": "mlp", "hidden": [32]},
 "data": {"dataset": "fmnist"}, "rounds": 2, "min_sites": 3, "round_deadline_s": 300,
 "local": {"epochs": 1, "batch_size": 64, "lr": 0.05},
 "seed": 11}
JSON
  cli job submit "$work/job.json" >/dev/null
  wait_done 1 600
  n=$(grep -c 'event=trainer_done .*dataset=fmnist' "$work/logs/s3.log" || true)
  ((n >= 2)) || fail "s3's trainer ran $n times, not once per round"
  grep -q 'event=trainer_done' "$work/logs/s1.log" && fail "s1 ran a trainer"
  logs=("$work"/sites/s3/trainers/*.log)
  if [[ ! -f ${logs[0]} ]] || ! grep -q "trained" "${logs[0]}"; then
    fail "no trainer log in s3's site directory"
  fi
  dirs=$(find "$work/sites/s3/trainers" -mindepth 1 -type d | wc -l)
  ((dirs == 0)) || fail "the trainer's work directory outlived its task"
  # Record-level privacy: s3's trainer declares none, so s3 refuses and the
  # job (min_sites 3) cannot run; the researcher sees why and how to fix it.
  sed 's/"seed": 11}/"seed": 11, "privacy": {"unit": "record", "mode": "local", "clip": 1.0, "target_epsilon": 2, "delta": 1e-5}}/' \
    "$work/job.json" >"$work/record.json"
  cli job submit "$work/record.json" >/dev/null
  st=$(wait_end 2 300)
  [[ $st == failed ]] || fail "the record-level job is '$st', not failed"
  cli job status 2 >"$work/status2.txt" 2>&1 || true
  if ! grep -q -- "--trainer-dp declared" "$work/status2.txt" || ! grep -q "Opacus" "$work/status2.txt"; then
    fail "the job's status does not say how to fix s3's refusal: $(cat "$work/status2.txt")"
  fi
  # The operator declares DP: the same job runs, and s3's ledger charges what
  # its trainer declared (tiny_trainer.py under the name dp reports exactly
  # what task.json asks for).
  ln -s "$src/tests/data/trainer/tiny_trainer.py" "$work/dp.py"
  "$site_bin" dataset rm --dir "$work/sites/s3" --name fmnist >/dev/null
  "$site_bin" dataset add --dir "$work/sites/s3" --name fmnist --path "$work/shards/site-3" \
    --tag fmnist --trainer "$work/dp.py" --trainer-dp declared >/dev/null
  kill -HUP "${site_pid[s3]}"
  cli job submit "$work/record.json" >/dev/null
  wait_done 3 600
  grep -q 'event=privacy_charged .*dataset=fmnist' "$work/logs/s3.log" || fail "s3 charged no ledger"
  spent=$("$site_bin" ledger --dir "$work/sites/s3" --name fmnist --json | json_field epsilon)
  awk -v e="$spent" 'BEGIN { exit !(e > 0 && e <= 2) }' || fail "s3's ledger says '$spent', not in (0, 2]"
  echo "contract: s3 trained by an external program in $n tasks; record-level job refused: $(grep -o "dataset 'fmnist': its external trainer[^;]*" "$work/status2.txt" | head -n 1); with DP declared, s3's ledger epsilon $spent"
else
  cat >"$work/job.json" <<JSON
{"name": "torch", "model": {"arch": "cnn", "preset": "lenet5"},
 "data": {"dataset": "fmnist"}, "rounds": 3, "min_sites": 3, "round_deadline_s": 1200,
 "local": {"epochs": 1, "batch_size": 32, "lr": 0.05, "momentum": 0.9},
 "seed": 11}
JSON
  cli job submit "$work/job.json" >/dev/null
  wait_done 1 1500
  grep -q 'event=trainer_done' "$work/logs/s3.log" || fail "s3's PyTorch trainer never finished a task"
  # The PyTorch model reads the weights as xfed lays them out: its accuracy
  # on s3's test split of the model it received is xfed-site's own
  # evaluation of that model, in every round. The two compute the logits
  # with other float kernels, so a record whose two best classes are within
  # float rounding of each other may go either way: they may be 2 records
  # apart (each figure logged to 4 decimals). Weights read wrong are tens
  # of points off.
  n_test=$(json_field test_records <"$work/s3.json")
  [[ $n_test =~ ^[0-9]+$ ]] && ((n_test > 0)) || fail "s3's dataset lists no test records: $(cat "$work/s3.json")"
  for f in "$work"/sites/s3/trainers/1-r*-a*.log; do
    b=$(basename "$f" .log)
    r=${b#1-r} a=${b##*-a}
    r=${r%%-*}
    torch_acc=$(sed -n 's/.*received model test accuracy \([0-9.]*\).*/\1/p' "$f" | tail -n 1)
    xfed_acc=$(grep "event=task_trained job=1 round=$r attempt=$a " "$work/logs/s3.log" |
      sed -n 's/.*test_accuracy=\([0-9.]*\).*/\1/p' | tail -n 1)
    [[ -n $torch_acc && -n $xfed_acc ]] &&
      awk -v a="$torch_acc" -v b="$xfed_acc" -v n="$n_test" \
        'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 2 / n + 0.0001) }' ||
      fail "round $r: PyTorch says the received model's test accuracy is '$torch_acc', xfed-site '$xfed_acc' (more than 2 of $n_test records apart)"
  done
  acc=$(job_field 1 test_accuracy)
  awk -v a="$acc" 'BEGIN { exit !(a > 0.5) }' || fail "test accuracy '$acc' is not above 0.5"
  # Record-level privacy with the PyTorch trainer doing DP-SGD itself:
  # declared, it takes part and s3's ledger charges what it reported.
  "$site_bin" dataset rm --dir "$work/sites/s3" --name fmnist >/dev/null
  "$site_bin" dataset add --dir "$work/sites/s3" --name fmnist --path "$work/shards/site-3" \
    --tag fmnist --trainer "$src/deploy/trainers/torch_trainer.py" --trainer-timeout 900 \
    --trainer-dp declared >/dev/null
  kill -HUP "${site_pid[s3]}"
  sed 's/"rounds": 3/"rounds": 2/; s/"seed": 11}/"seed": 11, "privacy": {"unit": "record", "mode": "local", "clip": 1.0, "target_epsilon": 4, "delta": 1e-5}}/' \
    "$work/job.json" >"$work/record.json"
  cli job submit "$work/record.json" >/dev/null
  wait_done 2 1500
  grep -q 'event=privacy_charged .*dataset=fmnist' "$work/logs/s3.log" || fail "s3 charged no ledger"
  spent=$("$site_bin" ledger --dir "$work/sites/s3" --name fmnist --json | json_field epsilon)
  awk -v e="$spent" 'BEGIN { exit !(e > 0 && e <= 4) }' || fail "s3's ledger says '$spent', not in (0, 4]"
  echo "torch: lenet5 over 2 native sites and a PyTorch site, 3 rounds, test accuracy $acc; with DP-SGD in PyTorch (declared), s3's ledger epsilon $spent"
fi
finish
