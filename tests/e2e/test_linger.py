"""e2e: the lingering close sees a client that left while vramd had stopped reading it.

A client sends a request with `Connection: close` to a slow worker and, while it runs,
pipelines more than `limits.max_header` bytes, so vramd stops reading that connection (the
bytes wait for after the answer). After the answer vramd shuts its side down and lingers,
reading and discarding until the client closes (so unread bytes do not turn the FIN into a
reset). The client closes at once: vramd must see that and free the connection, not wait
out its whole lingering time (2 s) because reading was still paused (docs/reliability.md,
defect 3).
"""
import time

from vramdkit.net import RawConn
from vramdkit.waits import wait_for


def test_client_gone_after_a_paused_read_is_closed_at_once(vramd):
    vd = vramd.start(models={"w": vramd.worker("w")})
    c = RawConn(vd.port)
    c.send(b"GET /w/slow?ms=400 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    time.sleep(0.1)  # the request is running; what follows is pipelined past max_header (8 KiB)
    c.send(b"GET /w/echo HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 12000 + b"\r\n\r\n")
    wait_for(lambda: vd.status()["connections"]["open"] == 2, timeout=5, what="the client's connection and the status one")
    status = c.read_response()
    assert status.status == 200, status
    c.close()
    t0 = time.monotonic()
    wait_for(lambda: vd.status()["connections"]["open"] == 1, timeout=5,
             what="the connection freed after the client closed")
    # well under the 2 s lingering time (polling /v1/status takes a few ms each)
    assert time.monotonic() - t0 < 1.0, time.monotonic() - t0
