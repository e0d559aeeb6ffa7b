"""contrib/grafana/vramd.json: valid JSON, a dashboard Grafana imports (panels, the host
variable for one host or the fleet), every query valid PromQL (promtool check rules) and
naming only families a running vramd serves (so a renamed metric breaks this test, not the
dashboard in production)."""
import json
import re
import shutil
import subprocess

import pytest

from vramdkit.paths import REPO_ROOT

DASHBOARD = REPO_ROOT / "contrib" / "grafana" / "vramd.json"


def queries(dash):
    for p in dash["panels"]:
        for t in p.get("targets", []):
            yield p["title"], t["expr"]


def test_dashboard_is_valid_and_names_real_metrics(sched, tmp_path):
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 30
    names = {v["name"]: v for v in dash["templating"]["list"]}
    assert names["host"]["includeAll"] and names["host"]["multi"], "one host or the whole fleet"
    titles = " ".join(p["title"] for p in dash["panels"]).lower()
    for topic in ("gpu memory by owner", "queued", "outcomes", "evictions", "jobs"):
        assert topic in titles, topic
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    exprs = list(queries(dash))
    assert len(exprs) >= 20
    for title, e in exprs:
        assert 'host=~"$host"' in e, (title, e)  # every query follows the host variable

    # valid PromQL: as recording rules, with Grafana's variables replaced by what they expand to
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:q{i}", "expr": e.replace("$__rate_interval", "1m").replace("$host", ".*")
         .replace("$job", "vramd")} for i, (_, e) in enumerate(exprs)]}]}
    if not shutil.which("promtool"):
        pytest.skip("promtool not installed (Debian's prometheus package)")
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps(rules))
    p = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr

    # every vramd family it names is served by a running vramd (histograms by their _bucket)
    vd = sched.start_vramd(sched.gpu_set("24GiB"), {"m": sched.model("m", [], "1GiB", "1GiB")})
    text = vd.get("/metrics").body.decode()
    served = set(re.findall(r"^# TYPE (\S+) (\S+)", text, re.M))
    families = {n for n, _ in served} | {n + "_bucket" for n, t in served if t == "histogram"}
    used = {w for _, e in exprs for w in re.findall(r"\b(vramd_[a-z_]+)", e)}
    missing = sorted(used - families)
    assert not missing, f"the dashboard names families vramd does not serve: {missing}"
    sched.finish()
