#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The figures of bench/peer/run.sh.

  collect.py job SPEC ROUNDS SITES SECAGG OUT   writes xfed's job (SPEC's
      model, local training and strategy, flat topology, every site each
      round) to OUT and prints the same job as Flower run config
  collect.py xfed|flower WORK MANIFEST MODE RUN  one JSON line for one job
  collect.py scale xfed|flower WORK N             one JSON line for a scale step
  collect.py table JSONL                         the Markdown tables

Per job: accuracy per round (each round's model evaluated by every site on
its test part, weighted by test records), job wall time (submission to the
final evaluation), round time (xfed: the coordinator's round_opened to
round_committed; Flower: the strategy's configure_fit to the end of
aggregate_evaluate) and the sites' local work in it (xfed: the longest
site's task_trained seconds, its evaluation and training; Flower: the
longest site's fit plus the longest site's evaluate, the two phases being
separate), bytes per round (the loopback interface's bytes during the job,
over the rounds: TLS records, TCP/IP headers and control, both directions),
and peak memory (VmHWM) of every process."""
import glob
import json
import re
import statistics
import sys
from datetime import datetime


def med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def make_job(spec_path, rounds, sites, secagg, out):
    spec = json.load(open(spec_path))
    if spec.get("strategy", {}).get("name") != "fedavg":
        sys.exit(f"collect.py: {spec_path}: the comparison needs strategy fedavg "
                 f"(Flower's FedAvg), not {spec.get('strategy')}")
    if spec["model"].get("arch") != "mlp":
        sys.exit(f"collect.py: {spec_path}: the Flower app builds model.arch mlp only")
    if spec.get("privacy", {}).get("mode", "none") != "none":
        sys.exit(f"collect.py: {spec_path}: the comparison runs without differential privacy")
    spec.pop("topology", None)
    spec["rounds"], spec["min_sites"], spec["sites_per_round"] = rounds, sites, 1.0
    spec["secure_aggregation"] = ({"enabled": True, "bits": 24, "threshold": 0.66} if secagg
                                  else {"enabled": False})
    if secagg:
        spec["privacy"] = {"unit": "site", "mode": "none", "clip": 10.0}
    json.dump(spec, open(out, "w"), indent=1)
    loc = spec["local"]
    hidden = ",".join(str(h) for h in spec["model"]["hidden"])
    print(f'num-rounds={rounds} sites={sites} hidden="{hidden}" epochs={loc["epochs"]} '
          f'batch-size={loc["batch_size"]} lr={float(loc["lr"])} '
          f'momentum={float(loc.get("momentum", 0))} '
          f'weight-decay={float(loc.get("weight_decay", 0))} seed={spec.get("seed", 1)} '
          f'secagg={"true" if secagg else "false"} secagg-shares=1.0 '
          f'secagg-threshold=0.66')


def ts(line):
    t = re.search(r"ts=(\S+)Z", line).group(1)
    return datetime.fromisoformat(t).timestamp()


def memory(work, impl):
    procs = json.load(open(f"{work}/peak.json"))
    by_pid = {p["pid"]: p for p in procs}

    def under(root):
        out = []
        for p in procs:
            q, seen = p, 0
            while q and seen < 16:
                if q["pid"] == root:
                    out.append(p)
                    break
                q, seen = by_pid.get(q["ppid"]), seen + 1
        return out

    def group(root):
        # Long-lived processes add up; the app processes Flower starts for
        # each message run one after another, so only the largest counts.
        members = under(root)
        apps = [p["peak_kib"] for p in members if p["label"] in ("flwr-clientapp",
                                                               "flwr-serverapp")]
        return sum(p["peak_kib"] for p in members
                   if p["label"] not in ("flwr-clientapp", "flwr-serverapp")) + max(apps, default=0)

    if impl == "xfed":
        server = [p for p in procs if p["label"] == "xfed-coord"]
        sites = [p["peak_kib"] for p in procs if p["label"] == "xfed-site"]
        server_kib = sum(p["peak_kib"] for p in server)
    else:
        link = [p for p in procs if p["label"] == "flower-superlink"]
        server_kib = sum(group(p["pid"]) for p in link)
        sites = [group(p["pid"]) for p in procs if p["label"] == "flower-supernode"]
    kinds = {}
    for p in procs:
        kinds.setdefault(p["label"], []).append(p["peak_kib"])
    return {"server_peak_kib": server_kib, "site_peak_kib": max(sites, default=None),
            "total_peak_kib": server_kib + sum(sites),
            "processes": {k: {"count": len(v), "max_kib": max(v), "sum_kib": sum(v)}
                          for k, v in sorted(kinds.items())}}


def test_records(manifest, sites):
    m = json.load(open(manifest))
    return {s["name"]: s["test_records"] for s in m["sites"][:sites]}


def xfed_job(work, manifest, mode, run):
    side = json.load(open(f"{work}/side.json"))
    coord = open(f"{work}/logs/coord.log").read().splitlines()
    opened, committed = {}, {}
    for line in coord:
        m = re.search(r"event=round_(opened|committed) job=\S+ round=(\d+)", line)
        if m:
            (opened if m.group(1) == "opened" else committed)[int(m.group(2))] = ts(line)
    sites = sorted({re.search(r"site-\d+", l).group(0)
                    for l in open(f"{work}/metrics.csv").read().splitlines()[1:] if l})
    local = {}
    for s in sites:
        for line in open(f"{work}/logs/{s}.log"):
            m = re.search(r"event=task_trained job=\S+ round=(\d+) .*seconds=([\d.]+)", line)
            if m and "samples=0 " not in line:
                r = int(m.group(1))
                local[r] = max(local.get(r, 0.0), float(m.group(2)))
    tests = test_records(manifest, len(sites))
    acc = {}
    for line in open(f"{work}/metrics.csv").read().splitlines()[1:]:
        f = line.split(",")
        if len(f) > 5 and f[5]:
            acc.setdefault(int(f[0]), []).append((tests[f[1]], float(f[5])))
    rounds = sorted(committed)
    final = open(f"{work}/job.out").read().splitlines()[-1]
    return {"impl": "xfed", "mode": mode, "run": run, "sites": len(sites), "rounds": len(rounds),
            "accuracy": [round(sum(n * a for n, a in acc[r]) / sum(n for n, _ in acc[r]), 4)
                         if r in acc else None for r in rounds],
            "final_line": final,
            "job_wall_s": round(side["finished"] - side["submitted"], 3),
            "round_s": [round(committed[r] - opened[r], 3) for r in rounds],
            "local_s": [round(local.get(r, 0.0), 3) for r in rounds],
            "bytes_per_round": side["lo_bytes"] // max(1, len(rounds)),
            **memory(work, "xfed")}


def flower_job(work, manifest, mode, run):
    side = json.load(open(f"{work}/side.json"))
    server = json.load(open(f"{work}/server.json"))
    fit, ev = {}, {}
    for path in glob.glob(f"{work}/node-*.jsonl"):
        for line in open(path):
            e = json.loads(line)
            d = fit if e["phase"] == "train" else ev
            d[e["round"]] = max(d.get(e["round"], 0.0), e["seconds"])
    rows = server["rounds"]
    sites = len(glob.glob(f"{work}/node-*.jsonl"))
    return {"impl": "flower", "mode": mode, "run": run, "sites": sites, "rounds": len(rows),
            "accuracy": [round(r["accuracy"], 4) if r.get("accuracy") is not None else None
                         for r in rows],
            "job_wall_s": round(side["finished"] - side["submitted"], 3),
            "round_s": [round(r["eval_end"] - r["fit_start"], 3) for r in rows],
            "local_s": [round(fit.get(r["round"], 0.0) + ev.get(r["round"], 0.0), 3)
                        for r in rows],
            "bytes_per_round": side["lo_bytes"] // max(1, len(rows)),
            **memory(work, "flower")}


def scale_step(impl, work, n):
    """How many of N sites finished the one round within the deadline."""
    side = {}
    try:
        side = json.load(open(f"{work}/side.json"))
    except OSError:
        pass
    finished, round_s = 0, None
    if impl == "xfed":
        opened = committed = None
        try:
            for line in open(f"{work}/logs/coord.log"):
                if "event=round_opened" in line and opened is None:
                    opened = ts(line)
                m = re.search(r"event=round_committed job=\S+ round=1 reports=(\d+)", line)
                if m:
                    committed, finished = ts(line), int(m.group(1))
        except OSError:
            pass
        if opened is not None and committed is not None:
            round_s = committed - opened
    else:
        try:
            row = json.load(open(f"{work}/server.json"))["rounds"][0]
            finished = min(row["fit_results"], row["eval_results"])
            round_s = row["eval_end"] - row["fit_start"]
        except (OSError, KeyError, IndexError):
            pass
    try:
        mem = memory(work, impl)["total_peak_kib"]
    except OSError:
        mem = 0
    return {"kind": "scale", "impl": impl, "sites": n, "finished": finished,
            "done": bool(side.get("done")) and finished == n, "registered": side.get("registered"),
            "round_s": None if round_s is None else round(round_s, 3), "total_peak_kib": mem}


def summarize(row):
    over = [r - l for r, l in zip(row["round_s"], row["local_s"])]
    row["round_median_s"] = round(med(row["round_s"]), 3)
    row["overhead_median_s"] = round(med(over), 3)
    row["final_accuracy"] = row["accuracy"][-1] if row["accuracy"] else None
    return row


def table(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    jobs = [r for r in rows if r.get("impl") in ("xfed", "flower") and "job_wall_s" in r]
    mib = lambda k: None if k is None else k / 1024
    for mode in ("plain", "secagg"):
        sel = [r for r in jobs if r["mode"] == mode]
        if not sel:
            continue
        x = [r for r in sel if r["impl"] == "xfed"]
        f = [r for r in sel if r["impl"] == "flower"]
        runs = sorted({r["run"] for r in sel})
        title = {"plain": "FedAvg", "secagg": "FedAvg with secure aggregation (xfed's masking "
                 "against Flower's SecAggPlusWorkflow)"}[mode]
        print(f"\n**{title}** — {x[0]['sites'] if x else '?'} sites, "
              f"{x[0]['rounds'] if x else '?'} rounds, medians of {len(runs)} interleaved runs\n")
        print("| | xfed | Flower | Flower / xfed (median of per-run ratios) |")
        print("|---|---|---|---|")

        def line(name, key, fmt, scale=lambda v: v):
            xv = med([scale(r[key]) for r in x])
            fv = med([scale(r[key]) for r in f])
            ratios = []
            for run in runs:
                a = [scale(r[key]) for r in x if r["run"] == run]
                b = [scale(r[key]) for r in f if r["run"] == run]
                if a and b and a[0]:
                    ratios.append(b[0] / a[0])
            rt = f"{med(ratios):.1f}x" if ratios else "-"
            print(f"| {name} | {fmt(xv)} | {fmt(fv)} | {rt} |")

        num = lambda d: (lambda v: "-" if v is None else f"{v:.{d}f}")
        line("job wall time (s)", "job_wall_s", num(1))
        line("round time (s, median round)", "round_median_s", num(2))
        line("round overhead without local work (s)", "overhead_median_s", num(3))
        line("bytes per round (MB)", "bytes_per_round", num(2), lambda v: v / 1e6)
        line("coordinator / SuperLink peak memory (MiB)", "server_peak_kib", num(1), mib)
        line("one site's peak memory (MiB, largest)", "site_peak_kib", num(1), mib)
        line("all processes' peak memory (MiB, sum)", "total_peak_kib", num(1), mib)
        print("| final accuracy | " + " | ".join(
            f"{med([r['final_accuracy'] for r in s]):.4f}" if s else "-" for s in (x, f)) + " | |")
        n = max((r["rounds"] for r in sel), default=0)
        if n > 1:
            print("\naccuracy per round (medians):\n")
            print("| round | " + " | ".join(str(i + 1) for i in range(n)) + " |")
            print("|---" * (n + 1) + "|")
            for name, s in (("xfed", x), ("Flower", f)):
                print(f"| {name} | " + " | ".join(
                    f"{med([r['accuracy'][i] for r in s if len(r['accuracy']) > i]):.3f}"
                    for i in range(n)) + " |")
    scale = [r for r in rows if r.get("kind") == "scale"]
    if scale:
        print("\n**Scale** — sites that finish one round on this machine\n")
        print("| sites asked | xfed sites finished | xfed round (s) | xfed peak, all (MiB) "
              "| Flower SuperNodes finished | Flower round (s) | Flower peak, all (MiB) |")
        print("|---|---|---|---|---|---|---|")
        for n in sorted({r["sites"] for r in scale}):
            cells = [str(n)]
            for impl in ("xfed", "flower"):
                r = next((r for r in scale if r["sites"] == n and r["impl"] == impl), None)
                if r is None:
                    cells += ["not run", "-", "-"]
                elif r.get("not_started"):
                    cells += [f"not started: {r['not_started']}", "-", "-"]
                else:
                    cells += [f"{r['finished']}" + ("" if r["done"] else " (deadline)"),
                              "-" if r["round_s"] is None else f"{r['round_s']:.1f}",
                              f"{r['total_peak_kib'] / 1024:.0f}"]
            print("| " + " | ".join(cells) + " |")


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "job":
        make_job(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "secagg",
                 sys.argv[6])
    elif cmd in ("xfed", "flower"):
        work, manifest, mode, run = sys.argv[2:6]
        row = (xfed_job if cmd == "xfed" else flower_job)(work, manifest, mode, int(run))
        print(json.dumps(summarize(row)))
    elif cmd == "scale":
        print(json.dumps(scale_step(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
    elif cmd == "table":
        table(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
