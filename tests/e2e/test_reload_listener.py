"""e2e: a reload never opens the admin routes: it cannot move `listen` or drop the admin
token, and a reload to a busy port is refused. Bounded well under 20 s each."""
import socket

from vramdkit import free_port


# --- a reload never opens the admin routes -------------------------------------------------

def test_reload_cannot_move_listen_or_drop_the_token(vramd):
    """Started on 0.0.0.0:P with a token. A reload to 127.0.0.1:P without a token is refused
    (400 bad_config naming listen): admin routes still need the token. A reload that keeps
    0.0.0.0:P and drops the token is refused (naming admin_token_file). A reload to a busy
    port is refused (naming listen)."""
    token = vramd.tmp / "token"
    token.write_text("s3cret\n")
    port = free_port()
    vd = vramd.start(models={"a": vramd.worker("a")}, listen=f"0.0.0.0:{port}",
                     admin_token_file=str(token))
    auth = {"Authorization": "Bearer s3cret"}
    good = dict(vd.config)

    open_cfg = dict(good, listen=f"127.0.0.1:{port}")
    del open_cfg["admin_token_file"]
    vd.write_config(open_cfg)
    r = vd.post("/v1/admin/reload", headers=auth)
    assert r.status == 400 and r.error_code() == "bad_config", r
    assert "listen" in r.json()["error"]["message"], r
    assert vd.post("/v1/admin/drain").status == 401
    assert vd.post("/v1/models/a/unload").status == 401

    no_token = dict(good)
    del no_token["admin_token_file"]
    vd.write_config(no_token)
    r = vd.post("/v1/admin/reload", headers=auth)
    assert r.status == 400 and r.error_code() == "bad_config", r
    assert "admin_token_file" in r.json()["error"]["message"], r

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        vd.write_config(dict(good, listen=f"0.0.0.0:{busy.getsockname()[1]}"))
        r = vd.post("/v1/admin/reload", headers=auth)
        assert r.status == 400 and "listen" in r.json()["error"]["message"], r
    finally:
        busy.close()
    vd.write_config(good)
    assert vd.post("/v1/admin/reload", headers=auth).status == 200
    assert vd.post("/v1/admin/drain").status == 401


def test_reload_to_a_busy_port_is_refused(vramd):
    vd = vramd.start(models={"a": vramd.worker("a")})
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        vd.write_config(dict(vd.config, listen=f"127.0.0.1:{busy.getsockname()[1]}"))
        r = vd.post("/v1/admin/reload")
        assert r.status == 400 and r.error_code() == "bad_config", r
        assert "listen" in r.json()["error"]["message"], r
        assert vd.first("config_reload_failed"), vd.log_tail()
    finally:
        busy.close()
