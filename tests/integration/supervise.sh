#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The daemons under a service manager, as systemd runs them with Type=notify
# and WatchdogSec=: a coordinator and two sites started with NOTIFY_SOCKET
# naming a datagram socket this test reads (tests/integration/
# notify_listener.py) and WATCHDOG_USEC=2 s. Each says READY=1 once it
# serves; the coordinator keeps the watchdog fed from its loop. Then s2 is
# revoked and the coordinator gets SIGHUP (what `systemctl reload` sends):
# RELOADING=1, then READY=1; both open sessions stay, and s2's next
# connection is refused as revoked while s1's is taken. A site reloads on
# SIGHUP too. A CRL that no longer parses fails the next reload: the
# coordinator says so, keeps the CRL it had (s2 still refused, a researcher
# still served). SIGTERM says STOPPING=1.
# usage: supervise.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: supervise.sh BUILD_DIR}" && pwd)
label=supervise
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || { echo "FAIL: python3 is missing (deploy/install-deps.sh build installs it)" >&2; exit 1; }
setup_work xfed-supervise
coord_flags=(--residency-policy off)

msgs=$work/notify.log
python3 "$src/tests/integration/notify_listener.py" "$work/notify.sock" "$msgs" &
pids+=($!)
for ((i = 0; i < 300; i++)); do grep -q '^listening' "$msgs" 2>/dev/null && break; sleep 0.1; done
grep -q '^listening' "$msgs" || fail "the notify listener did not start"

# wait_msg PID REGEX [AFTER_LINE]: a message from PID matching REGEX, on a
# line after AFTER_LINE (0 unless given), within 60 s.
wait_msg() {
  local i
  for ((i = 0; i < 600; i++)); do
    tail -n "+$((${3:-0} + 1))" "$msgs" | grep -q -E "^pid=$1 (|.*[ |])$2" && return 0
    sleep 0.1
  done
  fail "no notify message from pid $1 matching '$2'; last ones: $(tail -n 15 "$msgs")"
}
mark() { wc -l <"$msgs"; }
wait_log() { # wait_log FILE REGEX [AFTER_LINE]: within 60 s
  local i
  for ((i = 0; i < 600; i++)); do
    tail -n "+$((${3:-0} + 1))" "$1" | grep -q -E "$2" && return 0
    sleep 0.1
  done
  fail "no '$2' in $1"
}
lines() { wc -l <"$1"; }

export NOTIFY_SOCKET=$work/notify.sock WATCHDOG_USEC=2000000
federation s1:us:direct s2:us:direct
unset NOTIFY_SOCKET WATCHDOG_USEC
s1_pid=${pids[2]} s2_pid=${pids[3]}
clog=$work/logs/coord.log

# Ready once serving, with a status naming the port; the watchdog is fed.
wait_msg "$coord_pid" "READY=1\|STATUS=coordinator coord serving on 127.0.0.1:$port"
wait_msg "$s1_pid" "READY=1\|STATUS=site s1: dialing"
wait_msg "$s2_pid" "READY=1"
wait_log "$clog" "event=watchdog_started interval_ms=2000 keepalive_ms=1000"
m=$(mark)
wait_msg "$coord_pid" "WATCHDOG=1$" "$m"
m=$(mark)
wait_msg "$coord_pid" "WATCHDOG=1$" "$m"
echo "ok ready and watchdog"

# Revoke s2 and reload the coordinator's CRL.
XF_LOG_LEVEL=warn "$xfed" pki revoke --dir "$fed" --name s2 >/dev/null
m=$(mark) c=$(lines "$clog") l2=$(lines "$work/logs/s2.log")
kill -HUP "$coord_pid"
wait_log "$clog" "event=tls_crl_reloaded .*revoked=1 crl_number=" "$c"
wait_msg "$coord_pid" "RELOADING=1\|MONOTONIC_USEC=[0-9]+" "$m"
wait_msg "$coord_pid" "READY=1\|STATUS=serving on port $port; CRL reloaded" "$m"
# The open sessions stay: a researcher's request still sees both sites.
cli job list >/dev/null || fail "the coordinator does not answer after the reload"
tail -n "+$((l2 + 1))" "$work/logs/s2.log" | grep -q "event=session_closed" &&
  fail "s2's open session was closed by the reload: $(tail -n 3 "$work/logs/s2.log")"
# s2's next connection is refused as revoked; s1's next one is taken.
c=$(lines "$clog")
kill -TERM "$s2_pid" "$s1_pid"
wait "$s2_pid" "$s1_pid" || true
"$site_bin" run --dir "$work/sites/s2" 2>>"$work/logs/s2.log" &
pids+=($!)
"$site_bin" run --dir "$work/sites/s1" 2>>"$work/logs/s1.log" &
pids+=($!)
s1_pid=$!
wait_log "$clog" "event=peer_refused .*verdict=revoked" "$c"
wait_log "$clog" "event=site_announced site=s1 " "$c"
tail -n "+$((c + 1))" "$clog" | grep -q "event=site_announced site=s2 " &&
  fail "revoked s2 was taken again after the reload"
echo "ok reload: s2 refused, s1 taken"

# A site reloads on SIGHUP as well.
l1=$(lines "$work/logs/s1.log")
kill -HUP "$s1_pid"
wait_log "$work/logs/s1.log" "event=crl_reloaded" "$l1"

# A CRL that does not parse: the reload fails, the old CRL stays in force.
cp "$fed/crl.pem" "$work/crl.good"
echo "not a CRL" >"$fed/crl.pem"
m=$(mark) c=$(lines "$clog")
kill -HUP "$coord_pid"
wait_log "$clog" "event=crl_reload_failed .*kept=\"the CRL loaded before\"" "$c"
wait_msg "$coord_pid" "READY=1\|STATUS=serving on port $port; the CRL reload failed" "$m"
cp "$work/crl.good" "$fed/crl.pem" # the clients' own trust needs a CRL that loads
cli job list >/dev/null || fail "the coordinator does not serve after a failed reload"
c=$(lines "$clog")
wait_log "$clog" "event=peer_refused .*verdict=revoked" "$c" # s2 dials again, still refused
echo "ok failed reload keeps the old CRL"

m=$(mark)
kill -TERM "$coord_pid"
wait_msg "$coord_pid" "STOPPING=1$" "$m"
wait "$coord_pid" || fail "the coordinator exited with $? on SIGTERM"
check_sanitizers
echo "supervise: ok"
