# SPDX-License-Identifier: Apache-2.0
"""The soak's sampler (bench/soak.sh): follows the coordinator's log and, at
every committed round, records each process's VmRSS and the journal's and
the blob store's size; every RESTART_EVERY rounds it kills one site with
SIGKILL and starts it again. A round lasts well under a second at 50 sites,
faster than a shell loop can read 50 /proc files, hence Python.

usage: soak_sample.py CONFIG.json
CONFIG: {"coord_log", "coord_state", "out", "rounds", "restart_every",
         "procs": {NAME: PID}, "sites": {NAME: {"argv": [...], "log": FILE}},
         "spawned": FILE (the pids of the sites it starts, one a line),
         "later": FILE (NAME PID lines of processes started after it, read
                        until the first is there)}
It is started before the job is submitted, so that it sees the first round.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

cfg = json.load(open(sys.argv[1]))
rounds, every = cfg["rounds"], cfg["restart_every"]
procs = dict(cfg["procs"])
site_names = sorted(cfg["sites"])
state, out = cfg["coord_state"], cfg["out"]
committed = re.compile(r"event=round_committed job=\d+ round=(\d+) ")

rss = open(f"{out}/rss.csv", "w")
rss.write("round,seconds,process,pid,rss_kib\n")
storage = open(f"{out}/storage.csv", "w")
storage.write("round,seconds,journal_bytes,wal_bytes,blob_bytes,blob_files\n")
restarts = open(f"{out}/restarts.csv", "w")
restarts.write("round,site,old_pid,new_pid\n")
spawned = open(cfg["spawned"], "a")


def vmrss(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def size(path):
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def blob_store():
    total = files = 0
    root = f"{state}/blobs"
    for d in os.listdir(root) if os.path.isdir(root) else []:
        if d == "tmp":
            continue
        for name in os.listdir(f"{root}/{d}"):
            total += size(f"{root}/{d}/{name}")
            files += 1
    return total, files


def gone(pid):
    """True once pid is dead (a zombie counts: it holds no memory)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def read_later():
    """Processes started after the sampler (the CLI client), once written."""
    try:
        with open(cfg["later"]) as f:
            lines = [l.split() for l in f if l.strip()]
    except OSError:
        return False
    for name, pid in lines:
        procs[name] = int(pid)
    return bool(lines)


def restart(site, at):
    old = procs[site]
    os.kill(old, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while not gone(old) and time.monotonic() < deadline:
        time.sleep(0.01)
    spec = cfg["sites"][site]
    log = open(spec["log"], "a")
    env = dict(os.environ, XF_LOG_LEVEL="warn")
    p = subprocess.Popen(spec["argv"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=log, env=env)
    log.close()
    procs[site] = p.pid
    spawned.write(f"{p.pid}\n")
    spawned.flush()
    restarts.write(f"{at},{site},{old},{p.pid}\n")
    restarts.flush()


t0 = time.monotonic()
last = 0
n_restarts = 0
log = open(cfg["coord_log"])
pending = ""
have_later = False
while last < rounds:
    chunk = log.readline()
    if not chunk:
        time.sleep(0.005)
        continue
    pending += chunk
    if not pending.endswith("\n"):
        continue
    line, pending = pending, ""
    m = committed.search(line)
    if not m:
        continue
    r = int(m.group(1))
    if r <= last:
        continue
    last = r
    now = time.monotonic() - t0
    have_later = have_later or read_later()
    for name in sorted(procs):
        v = vmrss(procs[name])
        if v is not None:
            rss.write(f"{r},{now:.3f},{name},{procs[name]},{v}\n")
    blobs, files = blob_store()
    wal = size(f"{state}/coord.db-wal") + size(f"{state}/coord.db-shm")
    storage.write(f"{r},{now:.3f},{size(state + '/coord.db')},{wal},{blobs},{files}\n")
    # Between commits: the round that has just opened loses the site, closes
    # short of min_sites and is tried again once the site is back.
    if every and r < rounds and r // every > n_restarts:
        n_restarts = r // every
        restart(site_names[(n_restarts - 1) % len(site_names)], r)
for f in (rss, storage, restarts, spawned):
    f.close()
