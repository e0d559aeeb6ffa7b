#!/usr/bin/python3
"""port_thief: a worker command whose port another process takes first (for
tests/e2e/test_port_taken.py).

usage: port_thief.py MARKER CMD... (CMD holds "--port P")

The first time (MARKER does not exist) it forks a decoy that leaves the worker's process group
(setsid) and its cgroup (moved to the hierarchies' roots: vramd's cgroup per instance would
count a helper the worker started as the worker's own, so a stranger must be outside it), listens on P and answers every request 200 {"decoy": true} for at most 20 s, writes
the decoy's pid to MARKER, then tries to listen on P itself, fails ("address already in use")
and exits 1, as a server does when its port was taken between vramd choosing it and the server
binding it. Any later time it execs CMD: the real worker.
"""
import http.server
import os
import socket
import sys
import time


def leave_cgroups():
    """A stranger is another service's process: not in the worker's cgroup either. Move this
    process to the root of each cgroup hierarchy it is in under a vramd subtree (as root;
    where it cannot, it stays, and the test says so through the decoy's answer)."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f]
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return
    for _, controllers, path in lines:
        if "/vramd-" not in path:
            continue
        for m in mounts:
            fstype = m[m.index("-") + 1]
            opts = m[-1].split(",")
            if (controllers == "" and fstype == "cgroup2") or (
                    fstype == "cgroup" and controllers and set(controllers.split(",")) <= set(opts)):
                try:
                    with open(os.path.join(m[4], "cgroup.procs"), "w") as f:
                        f.write("0")
                except OSError:
                    pass


def decoy(port, ready_w):
    os.setsid()
    leave_cgroups()

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'{"decoy": true}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        do_POST = do_GET

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", port), H)
    srv.timeout = 0.2
    os.write(ready_w, b"x")
    os.close(ready_w)
    end = time.monotonic() + 20
    while time.monotonic() < end:
        srv.handle_request()
    os._exit(0)


def main():
    marker, cmd = sys.argv[1], sys.argv[2:]
    if os.path.exists(marker):
        os.execv(cmd[0], cmd)
    port = int(cmd[cmd.index("--port") + 1])
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        decoy(port, w)
    os.close(w)
    os.read(r, 1)
    with open(marker, "w") as f:
        f.write(str(pid))
    time.sleep(0.5)  # vramd's health check reaches the decoy meanwhile
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError as e:
        print(f"port_thief: cannot listen on 127.0.0.1:{port}: {e.strerror}", file=sys.stderr, flush=True)
        sys.exit(1)
    sys.exit(2)  # the decoy did not hold it: the test is broken


if __name__ == "__main__":
    main()
