"""vramctl jobs submit|get|wait|result|cancel|list against a running vramd (the module's
simulated-GPU daemon, model `gen`: its run time scales with the body's "steps", 50 ms per
step at this time scale), with --json output parsed here.

Exit codes under test: 0 succeeded, 1 vramd answered an error (409 not_done, 404, 401),
4 the job ended failed or cancelled, 5 still not done after jobs wait --timeout.
"""
import json
import re

import pytest

from .conftest import TOKEN, vramctl

ID = re.compile(r"^[0-9a-f]{32}$")


@pytest.fixture(scope="module")
def jobs_url(gpu_vramd):
    """The daemon's URL; skips the module only when this vramd has no job routes (POST
    /v1/jobs for a configured model answers 404)."""
    r = gpu_vramd.request("POST", "/v1/jobs", body={"model": "gen", "path": "/generate"})
    if r.status == 404:
        pytest.skip(f"POST /v1/jobs is not served by this vramd: {r}")
    assert r.status == 202, r
    return gpu_vramd.url


def submit(url, *args):
    p = vramctl("jobs", "submit", "gen", "--path", "/generate", *args, url=url)
    assert p.returncode == 0, p
    job_id = p.stdout.strip()
    assert ID.match(job_id), p.stdout
    return job_id


def test_submit_wait_get_result_list(jobs_url, tmp_path):
    """The whole life of a job from the command line."""
    url = jobs_url
    job_id = submit(url, "--json-body", '{"steps": 3}')
    p = vramctl("jobs", "wait", job_id, url=url)
    assert p.returncode == 0, p
    assert p.stdout.strip() == f"{job_id} succeeded (http 200)", p.stdout

    p = vramctl("jobs", "get", job_id, "--json", url=url)
    assert p.returncode == 0, p
    job = json.loads(p.stdout)
    assert job["id"] == job_id and job["model"] == "gen" and job["state"] == "succeeded", job
    assert job["attempts"] == 1 and job["http_status"] == 200 and job["error"] is None, job

    p = vramctl("jobs", "get", job_id, url=url)
    assert p.returncode == 0, p
    assert re.search(r"^state\s+succeeded$", p.stdout, re.M), p.stdout
    assert "application/json" in p.stdout

    p = vramctl("jobs", "result", job_id, url=url)
    assert p.returncode == 0, p
    out = json.loads(p.stdout)
    assert out["success"] is True and str(out["params"]["steps"]) == "3", out
    assert len(p.stdout.encode()) == job["result"]["bytes"]

    saved = tmp_path / "result.json"
    p = vramctl("jobs", "result", job_id, "-o", saved, url=url)
    assert p.returncode == 0 and p.stdout == "", p
    assert json.loads(saved.read_text()) == out

    p = vramctl("jobs", "list", "--json", "--token", TOKEN, url=url)
    assert p.returncode == 0, p
    listed = json.loads(p.stdout)
    assert job_id in [j["id"] for j in listed["jobs"]], listed
    assert "next_cursor" in listed

    p = vramctl("jobs", "list", "--state", "succeeded", "--model", "gen", "--limit", "50",
                "--token", TOKEN, url=url)
    assert p.returncode == 0, p
    assert p.stdout.splitlines()[0].split()[:3] == ["ID", "MODEL", "STATE"], p.stdout
    assert any(line.startswith(job_id) and " succeeded " in line for line in p.stdout.splitlines())

    p = vramctl("jobs", "list", "--limit", "1", "--json", "--token", TOKEN, url=url)
    assert p.returncode == 0 and len(json.loads(p.stdout)["jobs"]) == 1, p

    # listing reveals ids: it needs the admin token
    p = vramctl("jobs", "list", url=url)
    assert p.returncode == 1 and "401 unauthorized" in p.stderr, p


def test_submit_wait_json_and_output_file(jobs_url, tmp_path):
    """submit --wait --json prints the finished job; -o saves its result."""
    saved = tmp_path / "out.json"
    p = vramctl("jobs", "submit", "gen", "--path", "/generate", "--json-body", '{"steps": 2}',
                "--wait", "--json", "-o", saved, url=jobs_url)
    assert p.returncode == 0, p
    job = json.loads(p.stdout)
    assert job["state"] == "succeeded" and job["result"]["bytes"] == saved.stat().st_size, job
    assert json.loads(saved.read_text())["success"] is True


def test_submit_body_file_headers_priority_deadline(jobs_url, tmp_path):
    """--body FILE sends the file's bytes as they are (and - reads stdin); --header, --priority
    and --deadline reach the job."""
    body = tmp_path / "body.json"
    body.write_bytes(b'{"steps": 4, "note": "caf\xc3\xa9"}')
    job_id = submit(jobs_url, "--body", body, "--header", "Content-Type: application/json",
                    "--priority", "7", "--deadline", "10m")
    p = vramctl("jobs", "wait", job_id, "--json", url=jobs_url)
    assert p.returncode == 0, p
    job = json.loads(p.stdout)
    assert job["priority"] == 7 and job["deadline_at"], job
    out = json.loads(vramctl("jobs", "result", job_id, url=jobs_url).stdout)
    assert str(out["params"]["steps"]) == "4", out

    p = vramctl("jobs", "submit", "gen", "--path", "/generate", "--body", "-",
                "-H", "Content-Type: application/json", "--wait", url=jobs_url,
                input='{"steps": 1}')
    assert p.returncode == 0, p
    assert p.stdout.strip().endswith("succeeded (http 200)"), p.stdout


def test_long_job_wait_timeout_result_not_done_cancel(jobs_url):
    """A long job: wait --timeout gives up with exit 5; its result is 409 not_done (exit 1);
    cancel answers (exit 0); wait then reports cancelled with exit 4; a second cancel is
    refused (exit 1)."""
    url = jobs_url
    job_id = submit(url, "--json-body", '{"steps": 2000}')
    p = vramctl("jobs", "wait", job_id, "--timeout", "300ms", url=url)
    assert p.returncode == 5, p
    assert "not done after 300ms" in p.stderr, p.stderr

    p = vramctl("jobs", "result", job_id, url=url)
    assert p.returncode == 1, p
    assert "409 not_done" in p.stderr and p.stdout == "", p

    p = vramctl("jobs", "cancel", job_id, url=url)
    assert p.returncode == 0, p
    assert p.stdout.startswith(f"{job_id} cancelled"), p.stdout

    p = vramctl("jobs", "wait", job_id, "--json", url=url)
    assert p.returncode == 4, p
    assert json.loads(p.stdout)["state"] == "cancelled"

    p = vramctl("jobs", "result", job_id, url=url)
    assert p.returncode == 1 and "job_cancelled" in p.stderr, p

    p = vramctl("jobs", "cancel", job_id, "--json", url=url)
    assert p.returncode == 1, p
    assert json.loads(p.stdout)["error"]["code"] == "already_finished", p.stdout


def test_failed_job_exits_4(jobs_url):
    """A job the worker refuses (404 on an unknown path) ends failed: exit 4 with the code
    and message; get --json shows the error."""
    p = vramctl("jobs", "submit", "gen", "--path", "/nonexistent", "--wait", url=jobs_url)
    assert p.returncode == 4, p
    job_id, state = p.stdout.split()[:2]
    assert state == "failed", p.stdout
    p = vramctl("jobs", "get", job_id, "--json", url=jobs_url)
    job = json.loads(p.stdout)
    assert job["state"] == "failed" and job["error"]["code"], job


def test_job_errors(jobs_url):
    """Unknown job: 404 not_found (exit 1, error JSON with --json); unknown model: exit 1."""
    missing = "0" * 32
    p = vramctl("jobs", "get", missing, url=jobs_url)
    assert p.returncode == 1 and "404 not_found" in p.stderr, p
    p = vramctl("jobs", "get", missing, "--json", url=jobs_url)
    assert p.returncode == 1 and json.loads(p.stdout)["error"]["code"] == "not_found", p
    p = vramctl("jobs", "submit", "nope", "--path", "/generate", url=jobs_url)
    assert p.returncode == 1 and "unknown_model" in p.stderr, p
