"""descriptors: vramd's descriptor table filled from outside (a lowered RLIMIT_NOFILE and
idle client connections), for the tests of what vramd does when it runs short itself."""
import resource
import socket

from .proc import fd_count
from .waits import wait_for


def fill_descriptors(vd, limit=64, n=80):
    """Lower vramd's descriptor limit (the soft one: the hard one stays, so release can raise
    it again) and open idle connections until its table is full.

    Topped up until full: when an accept meets EMFILE because a short-lived descriptor of
    vramd's own (a /proc read, a health check) held the last slot for a moment, libuv's
    EMFILE trick accepts and closes every connection still pending, so one round of n
    connections can leave the table a slot or two short once that descriptor is closed."""
    soft, hard = resource.prlimit(vd.proc.pid, resource.RLIMIT_NOFILE)
    vd.nofile = soft
    resource.prlimit(vd.proc.pid, resource.RLIMIT_NOFILE, (limit, hard))
    socks = []

    def connect(count):
        for _ in range(count):
            s = socket.socket()
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", vd.port))
            except OSError:
                s.close()
                continue
            socks.append(s)

    connect(n)

    def full():
        if fd_count(vd.proc.pid) >= limit:
            return True
        connect(2)  # vramd accepts them until its table is full (the rest it closes: EMFILE)
        return False
    wait_for(full, timeout=10, interval=0.1, what="vramd's descriptor table full")
    return socks


def release_descriptors(vd, socks):
    """Close the connections and give vramd its descriptor limit back."""
    for s in socks:
        s.close()
    hard = resource.prlimit(vd.proc.pid, resource.RLIMIT_NOFILE)[1]
    resource.prlimit(vd.proc.pid, resource.RLIMIT_NOFILE, (vd.nofile, hard))
