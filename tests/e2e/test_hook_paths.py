"""test_hook_paths: a model's memory levers are vramd's, never a client's.

A client that calls a model's sleep, wake, unload or reload hook through vramd's route (or a
path its preset names: vLLM's dev-mode /collective_rpc, SGLang's memory release) would change
the GPU memory behind vramd's book: put a model vramd counts resident to sleep, or wake one
it counts parked. Expected: 403 `hook_path` naming the model, before any body is read, for
the path as the worker would see it (route prefix stripped), also with a trailing slash, a
query, or percent-encoded letters ("/sl%65ep"); the worker never sees it (the instance stays
ready, not asleep); clear_cache and every other path are forwarded as before; a model
routed by the body's "model" field is covered too.
"""
from e2ekit import gpu_section, sim_model, simgpu, wait_nvml  # noqa: F401  (simgpu: a fixture)
from vramdkit import http_request


def test_hook_paths_are_refused(vramd, simgpu):
    models = {
        "m": sim_model(vramd, "m", sleep={"path": "/sleep"}, wake={"path": "/wake_up"},
                       unload={"path": "/unload_models/"},
                       clear_cache={"method": "POST", "path": "/clear_cache/"}),
        # an external vLLM: nothing listens there, so only vramd's own refusal can answer 403
        "v": {"url": "http://127.0.0.1:9", "preset": "vllm", "route": "/v/",
              "memory": {"resident": "1GiB"}},
        # no route: routed by the body's "model" field, the worker sees the path as sent
        "b": {"url": "http://127.0.0.1:9", "memory": {"resident": "1GiB"},
              "unload": {"path": "/v1/unload"}},
    }
    vd = vramd.start(models=models, gpu=gpu_section())
    wait_nvml(vd)
    assert vd.post("/m/generate", body={"prompt": "x"},
                   headers={"Content-Type": "application/json"}).status == 200
    for path in ("/m/sleep", "/m/sleep/", "/m/sleep?level=1", "/m/sl%65ep", "/m/wake_up",
                 "/m/unload_models", "/m/unload_models/"):
        r = http_request(vd.port, "POST", path, body=b"{}", headers={"Content-Type": "application/json"})
        assert r.status == 403 and r.error_code() == "hook_path", (path, r)
        assert r.error_body().get("model") == "m", r
    for path in ("/v/collective_rpc", "/v/sleep", "/v/reset_prefix_cache"):
        r = http_request(vd.port, "POST", path, body=b"{}")
        assert r.status == 403 and r.error_code() == "hook_path", (path, r)
    # the body names the model: the path is the worker's own
    r = http_request(vd.port, "POST", "/v1/unload", body=b'{"model": "b"}',
                     headers={"Content-Type": "application/json"})
    assert r.status == 403 and r.error_code() == "hook_path", r
    assert r.error_body().get("model") == "b", r
    # not levers: clear_cache, look-alikes
    assert http_request(vd.port, "POST", "/m/clear_cache/").status == 200
    assert http_request(vd.port, "POST", "/m/sleeping").status != 403
    assert http_request(vd.port, "GET", "/v/is_sleeping").status != 403
    inst = vd.model("m")["instances"][0]
    assert inst["state"] == "ready", inst
