#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU checks of the cuda backend, in one run on a bare GPU machine that has
# the CUDA toolkit, CMake and PyTorch but none of xfed's libraries and no
# package registry. bench/gpu/fetch.sh, run beforehand where Debian's registry
# is reachable, leaves the packages in .gpu/debs; this script
#   1. unpacks them into a private prefix (dpkg -x, never over /),
#   2. configures against that prefix and builds what the checks need, with
#      nvcc for the card's architecture, and without the features whose
#      libraries fetch.sh does not carry (-DXF_HTTP=OFF: /metrics and the
#      dashboard, libmicrohttpd; -DXF_REPORT=OFF: `xfed job report`, cairo
#      and the 18 X11, font and GLib -dev packages its pkg-config files
#      require; -DXF_SYSTEMD=OFF), none of which the checks below use,
#   3. runs `ctest -L gpu` (every cuda op against the cpu reference), then
#      the same tests under compute-sanitizer's memcheck,
#   4. trains Fashion-MNIST with `xfed train` on the cuda backend (mlp, lenet5,
#      DP-SGD), for comparison with the cpu backend's figures,
#   5. measures training throughput against PyTorch on the same card (same
#      models, batches and optimizer), DP-SGD's step against the plain one,
#      and cuBLAS's SGEMM rate as the limit,
#   6. profiles a short run per model with Nsight Compute (each kernel's
#      device time against the step's wall-clock time),
#   7. runs the quickstart federation with every site on the GPU.
# Every result goes to $OUT (default ./out-gpu): summary.txt (the machine and
# the tables, read first), build.log, gputest.log, train.jsonl, bench.jsonl,
# stderr.log (the programs' own messages), fed.log and logs.tgz (the
# federation's daemon logs).
#
# usage: bench/gpu/run.sh [PHASE ...]   phases: build test memcheck train bench profile fed
#                                       (default: all, in that order)
# Environment: XF_GPU_PREFIX (default /tmp/xfed-deps), XF_GPU_BUILD (default
# build-gpu), XF_GPU_ARCH (default native: the card's), XF_GPU_REPEATS
# (throughput repeats, default 3), XF_GPU_BACKEND (default cuda),
# XF_GPU_STEP_DIVISOR (default 1), XF_GPU_FED_TIMEOUT (default 420 s),
# XF_GPU_RESNET_EPOCHS (default 3), XF_GPU_MEMCHECK_S (default 240 s),
# XF_GPU_MEMCHECK_FILTER (the tests memcheck runs, default all),
# XF_GPU_FED_DIR (the quickstart's directory, default /tmp/xfed-qs), OUT.
# Rehearsal on a machine with nvcc but no GPU (after fetch.sh; PyTorch's
# rows are missing where it has no torch):
#   XF_GPU_BACKEND=cpu XF_GPU_ARCH=90 XF_GPU_STEP_DIVISOR=20 bench/gpu/run.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
OUT=${OUT:-$root/out-gpu}
mkdir -p "$OUT"
P=${XF_GPU_PREFIX:-/tmp/xfed-deps}
B=${XF_GPU_BUILD:-build-gpu}
repeats=${XF_GPU_REPEATS:-3}
arch=${XF_GPU_ARCH:-native}
backend=${XF_GPU_BACKEND:-cuda} # cpu rehearses the script on a machine without a GPU
div=${XF_GPU_STEP_DIVISOR:-1}     # a rehearsal on the cpu divides every step count
phases=("$@")
((${#phases[@]})) || phases=(build test memcheck train bench profile fed)
summary=$OUT/summary.txt
say() { echo "$*" | tee -a "$summary"; }
want() { local p; for p in "${phases[@]}"; do [[ $p == "$1" ]] && return 0; done; return 1; }
t_start=$(date +%s)
stamp() { echo "[$(($(date +%s) - t_start)) s]"; }

# ---- the machine ------------------------------------------------------------
{
  date -u +%FT%TZ
  grep PRETTY_NAME /etc/os-release
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  nvcc --version | tail -1
  gcc --version | head -1
  cmake --version | head -1
  nproc
  env -u LD_LIBRARY_PATH python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
} 2>&1 | tee -a "$summary"
errlog=$OUT/stderr.log

# ---- the private prefix ------------------------------------------------------
L=$P/usr/lib/x86_64-linux-gnu
if [[ ! -x $P/usr/bin/pkgconf ]]; then
  ls .gpu/debs/*.deb >/dev/null 2>&1 || { say "FAIL: no packages in .gpu/debs: run bench/gpu/fetch.sh first"; exit 1; }
  mkdir -p "$P"
  unpack() { # dpkg -x, or ar and tar where the machine has no dpkg
    if command -v dpkg >/dev/null; then
      dpkg -x "$1" "$P"
    else
      local t
      t=$(mktemp -d) && (cd "$t" && ar x "$root/$1") && tar -xf "$t"/data.tar.* -C "$P" && rm -rf "$t"
    fi
  }
  for f in .gpu/debs/*.deb; do unpack "$f" || { say "FAIL: unpacking $f"; exit 1; }; done
  # What Debian's alternatives would link: OpenBLAS's pthread flavour.
  mkdir -p "$L/pkgconfig"
  ln -sf ../openblas-pthread/pkgconfig/openblas.pc "$L/pkgconfig/openblas.pc"
fi
export PATH=$P/usr/bin:$PATH
export PKG_CONFIG=$P/usr/bin/pkgconf
export PKG_CONFIG_LIBDIR=$L/pkgconfig:$P/usr/share/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=$P
export CPATH=$P/usr/include/x86_64-linux-gnu:$P/usr/include
export LIBRARY_PATH=$L:$L/openblas-pthread
export XF_DEPS_PREFIX=$P
# protoc-c finds its libraries in the prefix; the compilers keep the system's.
mkdir -p "$P/wrap"
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$L" "$P/usr/bin/protoc-c" >"$P/wrap/protoc-c"
chmod +x "$P/wrap/protoc-c"
export PATH=$P/wrap:$PATH
# The prefix's libraries only for xfed's own programs (PyTorch keeps its own).
xlibs=$L:$L/openblas-pthread
x() { LD_LIBRARY_PATH=$xlibs "$@"; }
data=$P/usr/share/datasets/fashion-mnist

# ---- build -------------------------------------------------------------------
if want build; then
  echo "$(stamp) build" >&2
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  if ! {
    cmake -S . -B "$B" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXF_WERROR=OFF \
      -DXF_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DPKG_CONFIG_EXECUTABLE="$PKG_CONFIG" \
      -DXF_HTTP=OFF -DXF_REPORT=OFF -DXF_SYSTEMD=OFF \
      -DXF_PROTOC_C="$P/wrap/protoc-c" -DXF_ONNX_PROTO="$P/usr/include/onnx/onnx.proto" \
      -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$L:$L/openblas-pthread" &&
      cmake --build "$B" -j "$(nproc)" --target test_kernels_gpu xfed-bench-train xfed \
        xfed-site xfed-coord
  } >"$OUT/build.log" 2>&1; then
    say "FAIL: build (tail of build.log:)"
    tail -n 30 "$OUT/build.log" | tee -a "$summary"
    exit 1
  fi
  say "$(stamp) build: ok, $(grep '^CMAKE_CUDA_ARCHITECTURES' "$B/CMakeCache.txt")"
fi

# ---- ctest -L gpu ------------------------------------------------------------
if want test; then
  echo "$(stamp) test" >&2
  x ctest --test-dir "$B" -L gpu --output-on-failure -V >"$OUT/gputest.log" 2>&1
  rc=$?
  ran=$(grep -c '\[ RUN      \]' "$OUT/gputest.log")
  ok=$(grep -c '\[       OK \]' "$OUT/gputest.log")
  say "$(stamp) ctest -L gpu: rc=$rc, $ran tests ran, $ok passed"
  grep -E '\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test|\[  FAILED  \] [a-z]|differ|mismatch|worst|apart' \
    "$OUT/gputest.log" | sort -u | head -20 | tee -a "$summary"
  grep -m1 'no GPU' "$OUT/gputest.log" | tee -a "$summary"
  # fedavg-cnn's step op by op (isolated and propagated differences per tensor).
  sed -n '/RUN.*fedavg_cnn_step_ops/,/\(OK\|FAILED\) \] fedavg_cnn_step_ops/p' "$OUT/gputest.log" |
    tee -a "$summary"
fi

# ---- compute-sanitizer -------------------------------------------------------
# The same tests under memcheck: out-of-bounds and misaligned device accesses
# (not API errors: a test asks for absurd sizes). XF_GPU_MEMCHECK_FILTER picks
# the tests (cmocka's pattern), XF_GPU_MEMCHECK_S bounds the time.
if want memcheck && [[ $backend == cuda ]] && command -v compute-sanitizer >/dev/null; then
  echo "$(stamp) memcheck" >&2
  x env XF_TEST_FILTER="${XF_GPU_MEMCHECK_FILTER:-}" timeout "${XF_GPU_MEMCHECK_S:-240}" \
    compute-sanitizer --tool memcheck --report-api-errors no \
    "$B/tests/test_kernels_gpu" >"$OUT/memcheck.log" 2>&1
  rc=$?
  say "$(stamp) memcheck: rc=$rc ($(grep -m1 'ERROR SUMMARY' "$OUT/memcheck.log")), $(grep -c '\[       OK \]' "$OUT/memcheck.log") tests passed under it"
fi

# ---- xfed train on Fashion-MNIST, cuda backend --------------------------------
if want train; then
  echo "$(stamp) train" >&2
  : >"$OUT/train.jsonl"
  trainrun() { # name, extra args...
    local name=$1 line
    shift
    local ep=()
    ((div > 1)) && ep=(--epochs 1)
    if line=$(XF_BACKEND=$backend x timeout 240 "$B/cli/xfed" train --data "$data" --json "$@" "${ep[@]}" \
      2>>"$errlog" | tr -d '\n'); then
      echo "{\"run\": \"$name\", \"result\": $line}" >>"$OUT/train.jsonl"
      say "$(stamp) train $name: $(echo "$line" | env -u LD_LIBRARY_PATH python3 -c 'import json,sys; r=json.load(sys.stdin); print("accuracy %.4f  %.1f s  %s  epsilon %s" % (r["test_accuracy"], r["train_seconds"], r["backend"], r.get("dp",{}).get("epsilon","-")))')"
    else
      say "FAIL: train $name (see stderr.log)"
    fi
  }
  trainrun mlp --spec deploy/jobs/fmnist-mlp.json
  trainrun lenet5 --spec deploy/jobs/fmnist-lenet5.json
  trainrun mlp-dp --spec deploy/jobs/fmnist-mlp.json --epochs 2 --dp-clip 1 \
    --dp-noise-multiplier 1.1
  # The declared residual CNN (groupnorm, add, dropout): every second-stage
  # layer kind trained end to end on the card.
  trainrun resnet --spec deploy/jobs/fmnist-resnet.json --epochs "${XF_GPU_RESNET_EPOCHS:-3}"
fi

# ---- throughput against PyTorch on the same card -------------------------------
if want bench; then
  echo "$(stamp) bench" >&2
  bj=$OUT/bench.jsonl
  : >"$bj"
  runs=(mlp:64:3000 mlp:1024:600 lenet5:64:2000 lenet5:1024:300 fedavg-cnn:64:1000)
  for ((r = 1; r <= repeats; r++)); do
    for spec in "${runs[@]}"; do
      IFS=: read -r m bsz steps <<<"$spec"
      steps=$((steps / div + 1))
      XF_BACKEND=$backend x "$B/bench/xfed-bench-train" --model "$m" --batch "$bsz" --steps "$steps" \
        >>"$bj" 2>>"$errlog"
    done
    for m in mlp lenet5; do
      XF_BACKEND=$backend x "$B/bench/xfed-bench-train" --model "$m" --batch 64 --steps $((500 / div + 1)) \
        --dp-clip 1 >>"$bj" 2>>"$errlog"
      XF_BACKEND=$backend x "$B/bench/xfed-bench-train" --model "$m" --batch 64 --steps $((300 / div + 1)) \
        --dp-clip 1 --dp-noise 1.1 >>"$bj" 2>>"$errlog"
    done
    env -u LD_LIBRARY_PATH python3 bench/torch_train.py --device cuda --threads 1 \
      --runs "$(
        IFS=,
        echo "${runs[*]}" | awk -v d="$div" -F: -v RS=, -v ORS=, '{printf "%s:%s:%d,", $1, $2, $3 / d + 1}' |
          sed 's/,*$//' 
      )" >>"$bj" 2>>"$errlog"
  done
  XF_BACKEND=$backend x "$B/bench/xfed-bench-train" --model mlp --batch 64 --steps 10 --sgemm 8192 |
    sed 's/"impl": "xfed"/"impl": "sgemm"/' >>"$bj" 2>>"$errlog"
  env -u LD_LIBRARY_PATH python3 bench/torch_train.py --device cuda --runs mlp:64:10 --sgemm 8192 \
    2>>"$errlog" | grep sgemm >>"$bj"
  env -u LD_LIBRARY_PATH python3 bench/gpu/table.py "$bj" | tee -a "$summary"
fi

# ---- where a step's time goes: Nsight Compute, one metric per kernel ------------
# Each launch's device time (gpu__time_duration.sum, clocks left as they are)
# for a short run per case, grouped by kernel against the step's wall-clock
# time from the bench phase (run it first): what is not kernel time is launch
# and host time.
if want profile; then
  echo "$(stamp) profile" >&2
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [[ -z $ncu ]]; then
    say "profile: no ncu on this machine"
  else
    for spec in mlp:1024 lenet5:64 lenet5:1024 fedavg-cnn:64; do
      IFS=: read -r m bsz <<<"$spec"
      csvf=$OUT/profile-$m-$bsz.csv
      XF_BACKEND=$backend x timeout 120 "$ncu" --clock-control none --metrics gpu__time_duration.sum \
        --csv --page raw --print-units base "$B/bench/xfed-bench-train" --model "$m" --batch "$bsz" \
        --steps 20 >"$csvf" 2>>"$errlog"
      # 20 timed steps run 3 warm-up and 11 GEMM-timing steps beside them.
      ms=$(env -u LD_LIBRARY_PATH python3 -c 'import json,sys,statistics
rows=[json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
v=[r["step_ms"] for r in rows if r.get("impl")=="xfed" and r["model"]==sys.argv[2] and r["batch"]==int(sys.argv[3]) and not r.get("dp_clip")]
print(statistics.median(v) if v else 0)' "$OUT/bench.jsonl" "$m" "$bsz" 2>/dev/null)
      say "profile $m batch $bsz:"
      env -u LD_LIBRARY_PATH python3 bench/gpu/profile.py "$csvf" 34 "${ms:-0}" 8 2>&1 | tee -a "$summary"
    done
  fi
fi

# ---- the quickstart federation with its sites on the GPU -----------------------
if want fed; then
  echo "$(stamp) fed" >&2
  qs=${XF_GPU_FED_DIR:-/tmp/xfed-qs}
  XF_BACKEND=$backend LD_LIBRARY_PATH=$xlibs timeout "${XF_GPU_FED_TIMEOUT:-420}" \
    bash deploy/quickstart.sh --data "$data" --build "$B" --dir "$qs" --keep \
    >"$OUT/fed.log" 2>&1
  rc=$?
  say "$(stamp) quickstart on cuda: rc=$rc; $(grep '^final accuracy' "$OUT/fed.log" || echo 'no final line')"
  grep -ho 'event=site_starting.*backend=[a-z]*' "$qs"/logs/*-1.log 2>/dev/null |
    sed 's/ coordinator=[^ ]*//' | tee -a "$summary"
  tar -czf "$OUT/logs.tgz" -C "$qs" logs 2>/dev/null
fi
say "$(stamp) done"
