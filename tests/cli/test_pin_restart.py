"""vramctl pin, unpin and restart against a vramd on a simulated GPU (conftest's gpu_vramd:
`gen` pinned by its config, `val` loaded on demand, an admin token).

Expected: `pin val` prints "val: ready (1 instance), pinned by admin" and exit 0, and
`vramctl ps` then shows val "pinned"; `unpin gen` is refused 409 pinned_by_config (exit 1,
the message on stderr); `unpin val` prints "not pinned" and ps shows its keep-alive
counting down again; `restart val` prints "restarted" once a new instance (new pid) is
ready; `--json` prints vramd's answer with `pinned`/`pinned_by`; an unknown model is 404
(exit 1), no token is 401 (exit 1), no model name is a usage error (exit 2).
"""
import json

from .conftest import TOKEN, vramctl


def ps_row(url, model):
    p = vramctl("ps", url=url)
    assert p.returncode == 0, p
    rows = [line.split() for line in p.stdout.splitlines()[1:]]
    return next(r for r in rows if r[0] == model)


def test_pin_unpin_restart(gpu_vramd):
    url = gpu_vramd.url
    p = vramctl("pin", "val", "--token", TOKEN, url=url)
    assert p.returncode == 0 and p.stdout == "val: ready (1 instance), pinned by admin\n", p
    assert ps_row(url, "val")[7] == "pinned"
    assert gpu_vramd.model("val")["pinned_by"] == "admin"

    p = vramctl("unpin", "gen", "--token", TOKEN, url=url)
    assert p.returncode == 1 and "409 pinned_by_config" in p.stderr and p.stdout == "", p
    p = vramctl("pin", "gen", "--token", TOKEN, url=url)
    assert p.returncode == 0 and p.stdout.endswith(", pinned by config\n"), p

    p = vramctl("unpin", "val", "--token", TOKEN, "--json", url=url)
    assert p.returncode == 0, p
    doc = json.loads(p.stdout)
    assert doc["model"] == "val" and doc["pinned"] is False and doc["pinned_by"] is None, doc
    assert ps_row(url, "val")[7] == "in"  # "in 9m59s": counting down again

    old_pid = gpu_vramd.instances("val")[0]["pid"]
    p = vramctl("restart", "val", "--token", TOKEN, url=url)
    assert p.returncode == 0 and p.stdout == "val: ready (1 instance), restarted\n", p
    new = gpu_vramd.instances("val")
    assert len(new) == 1 and new[0]["pid"] != old_pid and new[0]["state"] == "ready", new

    p = vramctl("restart", "nope", "--token", TOKEN, url=url)
    assert p.returncode == 1 and "404 unknown_model" in p.stderr, p
    p = vramctl("pin", "val", url=url)
    assert p.returncode == 1 and "401 unauthorized" in p.stderr, p
    p = vramctl("restart", url=url)
    assert p.returncode == 2 and "which model" in p.stderr, p
