"""e2e: proxying to a supervised worker: method, headers and body forwarded, route prefix
stripped, request ids, routing by JSON "model" (name and alias), /v1/models, worker
environment, worker output in vramd's log and pid files."""
import json
import os

from vramdkit import wait_for


def two_models(vramd):
    return {
        "alpha": vramd.worker("alpha", route="/alpha/", aliases=["alpha-1", "a1"]),
        "beta": vramd.worker("beta", route="/beta/", aliases=["beta-1"],
                             env={"TESTWORKER_ENV": "from-config"}),
    }


def test_forwards_method_headers_body_and_strips_prefix(vramd):
    """POST/PUT/DELETE reach the worker unchanged (method, headers, body, query) with the
    route prefix removed; vramd adds X-Request-Id, X-Vramd-Queue-Ms and X-Vramd-Run-Ms."""
    vd = vramd.start(models=two_models(vramd))
    r = vd.post("/alpha/gen/x?q=1&b=two", body=b"hello \x00 body",
                headers={"X-Custom": "abc def", "Content-Type": "application/octet-stream"})
    assert r.status == 200, r
    e = r.json()
    assert e["name"].startswith("alpha@")
    assert e["method"] == "POST"
    assert e["path"] == "/gen/x?q=1&b=two"
    assert e["body"] == "hello \x00 body"
    assert e["headers"]["x-custom"] == "abc def"
    assert e["headers"]["content-type"] == "application/octet-stream"
    rid = r.headers.get("x-request-id")
    assert rid, r.headers
    assert e["headers"].get("x-request-id") == rid
    for h in ("x-vramd-queue-ms", "x-vramd-run-ms"):
        assert h in r.headers, (h, r.headers)
        assert int(r.headers[h]) >= 0
    assert r.headers.get("x-vramd-attempts") == "1", r.headers
    for method in ("PUT", "DELETE", "PATCH"):
        r = vd.request(method, "/alpha/item/7", body=b"{}" if method != "DELETE" else None)
        assert r.status == 200, (method, r)
        assert r.json()["method"] == method
        assert r.json()["path"] == "/item/7"
    # a route without a trailing path reaches the worker's root
    r = vd.get("/beta/")
    assert r.status == 200 and r.json()["path"] == "/" and r.json()["name"].startswith("beta@")


def test_request_ids_made_up_unique_and_custom_kept(vramd):
    """A missing X-Request-Id is made up (distinct per request); a client's own id is kept,
    forwarded and echoed."""
    vd = vramd.start(models=two_models(vramd))
    ids = set()
    for _ in range(3):
        r = vd.get("/alpha/echo")
        assert r.status == 200
        ids.add(r.headers["x-request-id"])
        assert r.json()["headers"]["x-request-id"] == r.headers["x-request-id"]
    assert len(ids) == 3
    r = vd.get("/alpha/echo", headers={"X-Request-Id": "client-id-42"})
    assert r.status == 200
    assert r.headers["x-request-id"] == "client-id-42"
    assert r.json()["headers"]["x-request-id"] == "client-id-42"
    # exactly one X-Request-Id upstream (not the client's plus a made-up one)
    names = [k.lower() for k, _ in r.json()["header_list"]]
    assert names.count("x-request-id") == 1


def test_route_by_json_model_name_and_alias(vramd):
    """POST /v1/... with a JSON body {"model": NAME|ALIAS} goes to that model, path and body
    unchanged."""
    vd = vramd.start(models=two_models(vramd))
    for model, expect in (("alpha", "alpha@"), ("a1", "alpha@"), ("beta-1", "beta@"),
                          ("beta", "beta@")):
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
        r = vd.post("/v1/chat/completions", body=body,
                    headers={"Content-Type": "application/json"})
        assert r.status == 200, (model, r)
        e = r.json()
        assert e["name"].startswith(expect), (model, e["name"])
        assert e["path"] == "/v1/chat/completions"
        assert e["body"] == body


def test_unknown_model_and_bad_json(vramd):
    """An unknown model name -> 404 unknown_model (JSON error shape); an unrouted path ->
    404; a /v1 POST whose body is not JSON -> 400 bad_request."""
    vd = vramd.start(models=two_models(vramd))
    r = vd.post("/v1/chat/completions", body=json.dumps({"model": "nope"}),
                headers={"Content-Type": "application/json"})
    assert r.status == 404, r
    err = r.json()["error"]
    assert err["code"] == "unknown_model"
    assert isinstance(err.get("message"), str) and err["message"]
    r = vd.get("/gamma/echo")
    assert r.status == 404
    assert r.error_code() in ("unknown_model", "not_found")
    r = vd.post("/v1/chat/completions", body=b"{not json",
                headers={"Content-Type": "application/json"})
    assert r.status == 400, r
    assert r.error_code() == "bad_request"
    # none of these started a worker
    st = vd.status()
    assert all(m["state"] == "stopped" for m in st["models"]), st["models"]


def test_v1_models_lists_models_and_aliases(vramd):
    """GET /v1/models is OpenAI's list with every model and alias."""
    vd = vramd.start(models=two_models(vramd))
    r = vd.get("/v1/models")
    assert r.status == 200
    doc = r.json()
    assert doc["object"] == "list"
    ids = {d["id"] for d in doc["data"]}
    assert ids == {"alpha", "alpha-1", "a1", "beta", "beta-1"}
    assert all(d["object"] == "model" for d in doc["data"])


def test_worker_env_output_log_and_pidfile(vramd):
    """A supervised worker gets PORT (the {port} it listens on), VRAMD_MODEL and env:; its
    stderr lines are logged as worker_output events; its pid file is in state_dir/pids."""
    vd = vramd.start(models=two_models(vramd))
    r = vd.get("/beta/echo?mark=envtest")
    assert r.status == 200, r
    e = r.json()
    assert e["env"]["VRAMD_MODEL"] == "beta"
    assert e["env"]["TESTWORKER_ENV"] == "from-config"
    assert int(e["env"]["PORT"]) == vd.worker_port("beta")
    pid = e["pid"]
    assert pid in vd.worker_pids("beta")
    vd.wait_event("worker_output", model="beta", pid=pid,
                  timeout=10)
    wait_for(lambda: any("GET /echo?mark=envtest" in (ev.get("line") or "")
                         for ev in vd.events("worker_output", model="beta")),
             timeout=10, what="the worker's request line in the log")
    ev = vd.events("worker_output", model="beta", pid=pid)[0]
    assert ev["stream"] in ("stdout", "stderr")
    pid_dir = vramd.tmp / "var" / "pids"
    assert pid_dir.is_dir()

    def pidfile_names_worker():
        for f in os.listdir(pid_dir):
            if (pid_dir / f).read_text().split()[:1] == [str(pid)]:
                return True
        return False
    assert pidfile_names_worker(), os.listdir(pid_dir)
