#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Training-throughput benchmark: xfed's kernels against PyTorch on the CPU
# (Debian's python3-torch, same models, batch sizes and threads), interleaved
# run by run so both see the same machine, REPEATS times; prints medians, the
# ratios, the share of step time in GEMM, and the SGEMM rate of the backend.
# With a GPU (XF_BACKEND=cuda works), the CUDA rows and cuBLAS's SGEMM rate
# are added.
#
# usage: bench/train.sh [REPEATS] [THREADS]   (defaults: 5, all cores)
# The raw JSON lines go to build/bench-train.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-5}
threads=${2:-$(nproc)}
py=/usr/bin/python3

bash deploy/install-deps.sh build run bench >/dev/null
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target xfed-bench-train >/dev/null
bin=build/bench/xfed-bench-train
out=build/bench-train.jsonl
: >"$out"

for ((r = 1; r <= repeats; r++)); do
  for model in mlp lenet5; do
    for batch in 10 64; do
      steps=$((batch == 10 ? 1500 : 400))
      XF_BACKEND=cpu "$bin" --model "$model" --batch "$batch" --steps "$steps" \
        --threads "$threads" >>"$out"
      "$py" bench/torch_train.py --model "$model" --batch "$batch" --steps "$steps" \
        --threads "$threads" >>"$out"
    done
  done
  echo "repeat $r/$repeats done" >&2
done
XF_BACKEND=cpu "$bin" --model mlp --batch 64 --steps 10 --threads "$threads" --sgemm 2048 \
  | sed 's/"impl": "xfed"/"impl": "sgemm"/' >>"$out"

if XF_BACKEND=cuda "$bin" --model mlp --batch 10 --steps 10 >/dev/null 2>&1; then
  for ((r = 1; r <= repeats; r++)); do
    for model in mlp lenet5 fedavg-cnn; do
      for batch in 10 64; do
        XF_BACKEND=cuda "$bin" --model "$model" --batch "$batch" --steps 2000 >>"$out"
      done
    done
  done
  XF_BACKEND=cuda "$bin" --model mlp --batch 64 --steps 10 --sgemm 8192 \
    | sed 's/"impl": "xfed"/"impl": "sgemm"/' >>"$out"
fi

"$py" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(impl, model, batch, backend=None, key="samples_per_s"):
    v = [r[key] for r in rows if r["impl"] == impl and r["model"] == model and r["batch"] == batch
         and (backend is None or r.get("backend") == backend)]
    return statistics.median(v) if v else None
cpu = next(r for r in rows if r["impl"] == "xfed" and r["backend"] == "cpu")
print(f"machine: {cpu['device']}")
print("| model | batch | xfed cpu samples/s | PyTorch samples/s | ratio | GEMM share of step |")
print("|---|---|---|---|---|---|")
for model in ("mlp", "lenet5"):
    for batch in (10, 64):
        x, t = med("xfed", model, batch, "cpu"), med("pytorch", model, batch)
        g = med("xfed", model, batch, "cpu", "gemm_share")
        print(f"| {model} | {batch} | {x:,.0f} | {t:,.0f} | {x / t:.2f}x | {g:.0%} |")
for r in rows:
    if r["impl"] == "sgemm":
        print(f"\n{r['backend']} SGEMM {r['sgemm_n']}^3: {r['sgemm_gflops']:.1f} GFLOP/s ({r['device']})")
gpu = [r for r in rows if r["impl"] == "xfed" and r["backend"] == "cuda"]
if gpu:
    print(f"\nGPU: {gpu[0]['device']}")
    print("| model | batch | xfed cuda samples/s | GEMM share of step |")
    print("|---|---|---|---|")
    for model in ("mlp", "lenet5", "fedavg-cnn"):
        for batch in (10, 64):
            x = med("xfed", model, batch, "cuda")
            g = med("xfed", model, batch, "cuda", "gemm_share")
            if x:
                print(f"| {model} | {batch} | {x:,.0f} | {g:.0%} |")
print(f"\n(medians of {len([r for r in rows if r['impl']=='pytorch']) // 4} runs each)")
PY
