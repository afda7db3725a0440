# SPDX-License-Identifier: Apache-2.0
"""The service manager's end of the notify protocol, for tests: binds a unix
datagram socket at argv[1] (what NOTIFY_SOCKET names) and appends every
message to argv[2] as one line, "pid=PID FIELD|FIELD|...", the sender's pid
taken from its credentials as systemd takes it. Runs until killed."""
import os
import socket
import struct
import sys

path, out = sys.argv[1], sys.argv[2]
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
sock.bind(path)
creds_size = struct.calcsize("3i")
with open(out, "a", buffering=1) as f:
    print("listening", file=f)
    while True:
        data, anc, _, _ = sock.recvmsg(4096, socket.CMSG_SPACE(creds_size))
        pid = 0
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = struct.unpack("3i", payload[:creds_size])[0]
        text = data.decode("utf-8", "replace").strip("\n").replace("\n", "|")
        print(f"pid={pid} {text}", file=f)
        os.fsync(f.fileno())
