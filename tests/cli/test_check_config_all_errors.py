"""cli: `vramd --check-config` reports every error of a file, not only the first (issue 36,
item 10's last part), and the daemon's start and reload refuse such a file naming them.

A file with independent errors in the top-level keys, in a section, in two models and in a
list entry: each is one "FILE:LINE:COL: key.path: message" line, in the file's order, exit 1.
A model whose keys are in error is not judged across its keys (its cross-key checks would
judge defaults standing in for the bad values); the checks across keys and models (names and
routes, the admin token, ...) run once every key parsed. A YAML syntax error ends the check
(libyaml builds no document past it): it is the only line. Past 50 errors: the first 50 lines,
then "FILE: and N more errors (the first 50 are shown)".
Failed before: only the first line, the others never shown.
"""
import json
import re
import subprocess

from vramdkit import vramd_binary

LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<path>[^:]+): (?P<msg>.+)$")

SEVERAL = """listen: 127.0.0.1:18801
state_dirr: /tmp/x
limits:
  max_body: 12 gigs
  queue_max: 0
models:
  a:
    url: http://127.0.0.1:9
    concurency: 2
  b:
    url: http://127.0.0.1:9
    memory: { resident: lots }
    aliases: [ok, 7x y]
  c:
    url: http://127.0.0.1:9
"""


def check(path, *args):
    return subprocess.run([str(vramd_binary()), "--check-config", str(path), *args], capture_output=True,
                          text=True, timeout=30)


def lines(p):
    return [l for l in p.stderr.splitlines() if l.strip()]


def test_every_independent_error_is_reported(tmp_path):
    path = tmp_path / "several.yaml"
    path.write_text(SEVERAL)
    p = check(path)
    assert p.returncode == 1, (p.stdout, p.stderr)
    got = lines(p)
    parsed = [LINE.match(l) for l in got]
    assert all(parsed), got
    where = [(int(m["line"]), m["path"]) for m in parsed]
    assert where == [
        (2, "state_dirr"),
        (4, "limits.max_body"),
        (5, "limits.queue_max"),
        (9, "models.a.concurency"),
        (12, "models.b.memory.resident"),
        (13, "models.b.aliases[1]"),
    ], got
    assert all(m["file"] == str(path) for m in parsed), got
    assert 'did you mean "state_dir"' in got[0] and 'did you mean "concurrency"' in got[3], got
    assert "12 gigs" in got[1], got
    assert p.stdout == "", p.stdout


def test_one_error_reads_as_before(tmp_path):
    path = tmp_path / "one.yaml"
    path.write_text("models:\n  a:\n    url: http://127.0.0.1:9\n    concurency: 2\n")
    p = check(path)
    assert p.returncode == 1
    assert lines(p) == [f'{path}:4:5: models.a.concurency: unknown key "concurency" (did you mean "concurrency"?)'], p.stderr


def test_a_syntax_error_is_the_only_one(tmp_path):
    path = tmp_path / "syntax.yaml"
    path.write_text("listen: 127.0.0.1:1\nstate_dirr: x\nmodels:\n  a: {url: [\n")
    p = check(path)
    assert p.returncode == 1
    got = lines(p)
    assert len(got) == 1 and "YAML syntax error" in got[0], got


def test_cross_key_checks_wait_for_whole_keys(tmp_path):
    """Two models with the same route are an error across models: not reported while a key is
    in error (it could be the cause), reported alone once the keys are right."""
    text = ("models:\n  a:\n    url: http://127.0.0.1:9\n    route: /x/\n"
            "  b:\n    url: http://127.0.0.1:9\n    route: /x/\n    timeoutt: 1s\n")
    path = tmp_path / "cross.yaml"
    path.write_text(text)
    got = lines(check(path))
    assert len(got) == 1 and "models.b.timeoutt" in got[0], got
    path.write_text(text.replace("    timeoutt: 1s\n", ""))
    got = lines(check(path))
    assert len(got) == 1 and "/x/" in got[0], got


def test_the_count_is_bounded(tmp_path):
    models = "".join(f"  m{i}:\n    url: http://127.0.0.1:9\n    bogus: {i}\n" for i in range(60))
    path = tmp_path / "many.yaml"
    path.write_text("models:\n" + models)
    p = check(path)
    assert p.returncode == 1
    got = lines(p)
    assert len(got) == 51, len(got)
    assert all(LINE.match(l) and "bogus" in l for l in got[:50]), got[:3]
    assert got[50] == f"{path}: and 10 more errors (the first 50 are shown)", got[50]


def test_vramctl_check_config_json_carries_every_line(tmp_path):
    from vramdkit import binary
    path = tmp_path / "several.yaml"
    path.write_text(SEVERAL)
    p = subprocess.run([str(binary("vramctl")), "--json", "check-config", str(path)], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 1, (p.stdout, p.stderr)
    out = json.loads(p.stdout)
    assert out["ok"] is False and len(out["error"].splitlines()) == 6, out


def test_start_and_reload_refuse_naming_every_error(vramd):
    vd = vramd.start(models={"a": vramd.worker("a")})
    good = dict(vd.config)
    bad = dict(good, state_dirr="/tmp/x", models={"a": dict(good["models"]["a"], concurency=2)})
    vd.write_config(bad)
    r = vd.post("/v1/admin/reload")
    assert r.status == 400 and r.error_code() == "bad_config", r
    errors = r.error_body()["errors"]
    assert len(errors) == 2 and "state_dirr" in errors[0] and "models.a.concurency" in errors[1], errors
    assert "and more" in r.error_body()["message"], r.error_body()
    vd.stop()
    vd.write_config(bad)
    vd.start(wait=False)
    assert vd.wait_exit(20) == 1
    failed = vd.events("vramd_start_failed")[-1]["error"]
    assert "state_dirr" in failed and "models.a.concurency" in failed, failed
