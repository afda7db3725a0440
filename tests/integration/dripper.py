#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Holds N TCP connections to 127.0.0.1:PORT that never finish a TLS
# handshake: each sends the next byte of a ClientHello's first bytes every
# EVERY seconds, and one the server ends is opened again EVERY seconds
# later, so the pressure lasts. Writes READY once the first N have
# connected; on SIGTERM writes its counts to STATS ("opened= ended=
# most_open=") and exits. Used by tests/integration/admission.sh.
# usage: dripper.py PORT N EVERY READY STATS
import errno
import select
import signal
import socket
import sys
import time

port, n, every = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
ready_path, stats_path = sys.argv[4], sys.argv[5]
# A TLS record header and the start of a ClientHello (a 508-byte body).
hello = bytes.fromhex("16030101fc010001f80303") + bytes(range(32))
slots = [None] * n  # per slot: [socket, next send time, bytes sent] or None
reopen = [0.0] * n
opened = ended = most_open = 0
stop = False


def on_term(signum, frame):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)


def open_slot(i, now):
    global opened
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    s.bind(("127.0.0.1", 0))
    rc = s.connect_ex(("127.0.0.1", port))
    if rc not in (0, errno.EINPROGRESS):
        s.close()
        reopen[i] = now + every
        return
    slots[i] = [s, now + every, 0]
    opened += 1


def end_slot(i, now):
    global ended
    slots[i][0].close()
    slots[i] = None
    reopen[i] = now + every
    ended += 1


now = time.monotonic()
for i in range(n):
    open_slot(i, now)
with open(ready_path, "w") as f:
    f.write("ready\n")
while not stop:
    now = time.monotonic()
    poller = select.poll()
    where = {}
    for i in range(n):
        if slots[i] is None:
            if now >= reopen[i]:
                open_slot(i, now)
            continue
        s, nxt, sent = slots[i]
        if now >= nxt and sent < len(hello):
            try:
                if s.send(hello[sent:sent + 1]) == 1:
                    slots[i][2] += 1
            except BlockingIOError:
                pass  # not connected yet: the next turn tries again
            except OSError:
                end_slot(i, now)
                continue
            slots[i][1] = now + every
        poller.register(s.fileno(), select.POLLIN)
        where[s.fileno()] = i
    most_open = max(most_open, len(where))
    try:
        events = poller.poll(200)
    except InterruptedError:
        continue
    now = time.monotonic()
    for fd, ev in events:
        i = where[fd]
        try:
            data = slots[i][0].recv(4096)
        except BlockingIOError:
            continue
        except OSError:
            data = b""
        if not data:
            end_slot(i, now)
with open(stats_path, "w") as f:
    f.write(f"opened={opened} ended={ended} most_open={most_open}\n")
