"""ops: vramd speaks systemd's notification protocol (sd_notify) when NOTIFY_SOCKET is set:
READY=1 once its listener accepts connections, WATCHDOG=1 at half of WATCHDOG_USEC from its
event loop (and not while the loop is stopped), RELOADING=1 then READY=1 around a reload
(applied or refused), STOPPING=1 when a drain starts, STATUS= summaries; without
NOTIFY_SOCKET (or with a dead one) it runs as before."""
import signal
import time

import pytest

from vramdkit import http_request, wait_for

WATCHDOG_USEC = 400000  # pings expected every 200 ms


def proc_state(pid):
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[0].decode()


def proc_environ(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)


@pytest.fixture
def notify_env(monkeypatch, notify_socket):
    monkeypatch.setenv("NOTIFY_SOCKET", notify_socket.path)
    monkeypatch.setenv("WATCHDOG_USEC", str(WATCHDOG_USEC))
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    return notify_socket


def test_ready_watchdog_reload_stopping(vramd, notify_env):
    notify = notify_env
    vd = vramd.start(models={"echo": vramd.worker("echo")}, wait=False)

    ready = notify.wait("READY", "1", timeout=20)
    # READY=1 comes after the listener is bound and listening: the first connection made
    # after it is accepted (one try, no retry)
    r = http_request(vd.port, "GET", "/healthz", timeout=15)
    assert r.status == 200, r
    assert ready.fields.get("MAINPID") == str(vd.proc.pid), ready
    assert "0/1 models ready" in ready.fields.get("STATUS", ""), ready
    ev = vd.wait_event("systemd_notify", timeout=15.0)[0]
    assert ev["watchdog_ms"] == WATCHDOG_USEC // 1000 and ev["ping_ms"] == WATCHDOG_USEC // 2000, ev

    # watchdog pings from the loop's timer, every half interval. Not faster than that: six
    # timer pings span at least 5 x 200 ms when sent; the bound is loose because receive
    # times jitter on a loaded machine (the first ping, sent with READY, is left out)
    first = notify.wait("WATCHDOG", "1", after=ready)
    notify.wait("WATCHDOG", "1", after=first, count=6, timeout=20)
    pings = notify.find("WATCHDOG", "1", after=first)[:6]
    spread = pings[-1].received - pings[0].received
    assert spread >= 0.4, f"6 watchdog pings within {spread:.3f}s: faster than every 200 ms"

    # the workers vramd starts do not inherit the watchdog variables
    r = vd.post("/echo/echo", body={"hello": 1})
    assert r.status == 200, r
    pid = vd.worker_pids("echo")[0]
    env = proc_environ(pid)
    assert b"WATCHDOG_USEC" not in env and b"WATCHDOG_PID" not in env, sorted(env)

    # STATUS follows what matters (here: the model became ready), without a state change
    # message of its own
    st = notify.wait("STATUS", "1/1 models ready, 0 queued, 0 in flight", after=ready)
    assert not st.has("READY") and not st.has("STOPPING"), st

    # reload: RELOADING=1 with MONOTONIC_USEC (CLOCK_MONOTONIC, as systemd 253+ wants), then READY=1
    mark = notify.snapshot()[-1]
    vd.signal(signal.SIGHUP)
    reloading = notify.wait("RELOADING", "1", after=mark)
    now_usec = time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6
    assert abs(int(reloading.fields["MONOTONIC_USEC"]) - now_usec) < 60e6, reloading
    done = notify.wait("READY", "1", after=reloading)
    assert "refused" not in done.fields.get("STATUS", ""), done
    vd.wait_event("config_reloaded", timeout=15.0)

    # a refused reload ends with READY=1 too: the old config keeps running
    good_config = vd.config_path.read_text()
    vd.config_path.write_text(good_config + "bogus_key: 1\n")
    mark = notify.snapshot()[-1]
    vd.signal(signal.SIGHUP)
    reloading = notify.wait("RELOADING", "1", after=mark)
    done = notify.wait("READY", "1", after=reloading)
    assert "reload refused" in done.fields.get("STATUS", ""), done
    vd.config_path.write_text(good_config)
    assert vd.get("/healthz").status == 200

    # SIGTERM: STOPPING=1 when the drain starts, then exit 0; no ping after the exit
    mark = notify.snapshot()[-1]
    vd.signal(signal.SIGTERM)
    stopping = notify.wait("STOPPING", "1", after=mark)
    assert stopping.fields.get("STATUS", "").startswith("draining"), stopping
    assert vd.wait_exit() == 0, vd.log_tail()
    last = notify.snapshot()[-1]
    time.sleep(0.5)  # pings would come every 200 ms
    assert not notify.find("WATCHDOG", after=last), "watchdog pings after vramd exited"
    assert not notify.find("READY", after=stopping), "READY=1 after STOPPING=1"


def test_watchdog_stops_while_the_loop_is_stuck(vramd, notify_env):
    notify = notify_env
    vd = vramd.start(models={"echo": vramd.worker("echo")})
    ready = notify.wait("READY", "1")
    notify.wait("WATCHDOG", "1", after=ready, count=3)
    pid = vd.proc.pid
    vd.signal(signal.SIGSTOP)
    try:
        wait_for(lambda: proc_state(pid) == "T", timeout=10, what="vramd stopped")
        time.sleep(0.1)  # a ping sent just before the stop may still be on its way
        mark = notify.snapshot()[-1]
        time.sleep(1.0)  # five ping periods
        assert not notify.find("WATCHDOG", after=mark), "watchdog pings while vramd was stopped"
    finally:
        vd.signal(signal.SIGCONT)
    notify.wait("WATCHDOG", "1", after=mark, count=2)
    assert vd.get("/healthz").status == 200
    assert vd.stop() == 0


def test_without_notify_socket_nothing_changes(vramd, monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.setenv("WATCHDOG_USEC", str(WATCHDOG_USEC))  # no socket: nothing to ping
    vd = vramd.start(models={"echo": vramd.worker("echo")})
    vd.signal(signal.SIGHUP)
    vd.wait_event("config_reloaded", timeout=15.0)
    assert vd.get("/healthz").status == 200
    assert vd.stop() == 0
    assert not vd.events("systemd_notify") and not vd.events("systemd_notify_failed")


def test_dead_notify_socket_is_logged_once(vramd, monkeypatch, tmp_path):
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens.sock"))
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    vd = vramd.start(models={"echo": vramd.worker("echo")})
    vd.wait_event("systemd_notify_failed", timeout=15.0)
    vd.signal(signal.SIGHUP)
    vd.wait_event("config_reloaded", timeout=15.0)
    assert vd.get("/healthz").status == 200
    assert vd.stop() == 0
    assert len(vd.events("systemd_notify_failed")) == 1, vd.events("systemd_notify_failed")


def test_watchdog_pid_of_another_process_disables_the_watchdog(vramd, notify_env, monkeypatch):
    """sd_watchdog_enabled() honours WATCHDOG_PID: the pings are for that process only."""
    monkeypatch.setenv("WATCHDOG_PID", "1")
    notify = notify_env
    vd = vramd.start(models={"echo": vramd.worker("echo")})
    ready = notify.wait("READY", "1")
    ev = vd.wait_event("systemd_notify", timeout=15.0)[0]
    assert ev["watchdog_ms"] == 0, ev
    time.sleep(0.6)  # three ping periods
    assert not notify.find("WATCHDOG"), notify.snapshot()
    assert vd.stop() == 0
