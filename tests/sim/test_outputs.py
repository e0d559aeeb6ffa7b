"""test_outputs: simworker's output files are valid (and their corrupt variants are not).

  - GLB: Khronos' gltf-validator (npm devDependency in tests/sim/package.json, installed here
    with `npm ci` when node_modules is missing; the GLB tests skip, saying why, only when npm
    cannot install it) reports no errors, and a structural check written here agrees;
  - PNG: signature, IHDR first, IEND last, every chunk's CRC (zlib.crc32), and the IDAT
    stream inflates to exactly height x (1 + 3 x width) bytes;
  - PLY: header, vertex count x property size == body length, X-Gaussian-Count;
  - JSON: parses, success true;
  - sizes grow with the request's parameters (--mem-scale);
  - --corrupt-every N breaks exactly every Nth output, each variant caught by the checks.
"""
import json
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from .workerkit import TIMESCALE, workers  # noqa: F401

HERE = Path(__file__).resolve().parent
NPM_TIMEOUT = 300


# --- structural checkers (each returns a list of problems; empty = valid) --------------------

GLB_COMPONENT_SIZE = {5120: 1, 5121: 1, 5122: 2, 5123: 2, 5125: 4, 5126: 4}
GLB_TYPE_COUNT = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4, "MAT4": 16}


def check_glb(data):
    if len(data) < 20:
        return ["too short"]
    magic, version, length = struct.unpack_from("<4sII", data)
    problems = []
    if magic != b"glTF":
        problems.append(f"magic {magic!r}")
    if version != 2:
        problems.append(f"version {version}")
    if length != len(data):
        return problems + [f"header length {length} != {len(data)}"]
    jlen, jtype = struct.unpack_from("<I4s", data, 12)
    if jtype != b"JSON" or jlen % 4 or 20 + jlen > len(data):
        return problems + ["bad JSON chunk header"]
    try:
        doc = json.loads(data[20:20 + jlen])
    except ValueError as e:
        return problems + [f"JSON chunk: {e}"]
    off = 20 + jlen
    if off + 8 > len(data):
        return problems + ["no BIN chunk"]
    blen, btype = struct.unpack_from("<I4s", data, off)
    if btype != b"BIN\0" or off + 8 + blen != len(data) or blen % 4:
        return problems + ["bad BIN chunk"]
    bin_data = data[off + 8:off + 8 + blen]
    if doc["buffers"][0]["byteLength"] > blen:
        problems.append("buffer larger than BIN chunk")
    for bv in doc["bufferViews"]:
        if bv.get("byteOffset", 0) + bv["byteLength"] > doc["buffers"][bv["buffer"]]["byteLength"]:
            problems.append("bufferView outside buffer")
    for acc in doc["accessors"]:
        bv = doc["bufferViews"][acc["bufferView"]]
        size = GLB_COMPONENT_SIZE[acc["componentType"]] * GLB_TYPE_COUNT[acc["type"]]
        if acc.get("byteOffset", 0) + size * acc["count"] > bv["byteLength"]:
            problems.append("accessor outside its bufferView")
            continue
        if "min" in acc:  # positions: min/max must be the data's
            start = bv.get("byteOffset", 0)
            floats = struct.unpack_from(f"<{3 * acc['count']}f", bin_data, start)
            for k in range(3):
                col = floats[k::3]
                if struct.pack("<f", min(col)) != struct.pack("<f", acc["min"][k]) or \
                        struct.pack("<f", max(col)) != struct.pack("<f", acc["max"][k]):
                    problems.append("accessor min/max differ from the data")
                    break
    return problems


def png_chunks(data):
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("bad signature")
    off = 8
    while off < len(data):
        if off + 12 > len(data):
            raise ValueError("truncated chunk")
        (n,) = struct.unpack_from(">I", data, off)
        ctype = data[off + 4:off + 8]
        body = data[off + 8:off + 8 + n]
        if len(body) != n or off + 12 + n > len(data):
            raise ValueError("truncated chunk")
        (crc,) = struct.unpack_from(">I", data, off + 8 + n)
        if crc != zlib.crc32(ctype + body) & 0xffffffff:
            raise ValueError(f"bad CRC in {ctype!r}")
        yield ctype, body
        off += 12 + n


def check_png(data):
    try:
        chunks = list(png_chunks(data))
    except ValueError as e:
        return [str(e)]
    if not chunks or chunks[0][0] != b"IHDR" or chunks[-1][0] != b"IEND":
        return ["IHDR/IEND missing"]
    w, h, depth, color = struct.unpack_from(">IIBB", chunks[0][1])
    if (depth, color) != (8, 2):
        return [f"unexpected depth/colour {depth}/{color}"]
    raw = zlib.decompress(b"".join(body for t, body in chunks if t == b"IDAT"))
    if len(raw) != h * (1 + 3 * w):
        return [f"IDAT inflates to {len(raw)} bytes, expected {h * (1 + 3 * w)}"]
    return []


def check_ply(data, gaussian_count=None):
    end = data.find(b"end_header\n")
    if end < 0:
        return ["no end_header"]
    header = data[:end].decode("ascii", "replace").split("\n")
    body = data[end + len(b"end_header\n"):]
    if header[0] != "ply" or header[1] != "format binary_little_endian 1.0":
        return [f"bad header start {header[:2]}"]
    counts = [int(line.split()[2]) for line in header if line.startswith("element vertex ")]
    props = [line for line in header if line.startswith("property float ")]
    if len(counts) != 1 or not props:
        return ["no vertex element"]
    if counts[0] * 4 * len(props) != len(body):
        return [f"{counts[0]} vertices x {4 * len(props)} bytes != body {len(body)}"]
    if gaussian_count is not None and int(gaussian_count) != counts[0]:
        return ["X-Gaussian-Count differs from the header"]
    return []


def check_json(data):
    try:
        doc = json.loads(data)
    except ValueError as e:
        return [str(e)]
    return [] if doc.get("success") is True else ["success is not true"]


CHECKERS = {"glb": check_glb, "png": check_png, "ply": check_ply, "json": check_json}
CONTENT_TYPES = {"glb": "model/gltf-binary", "png": "image/png", "ply": "application/octet-stream",
                 "json": "application/json"}
VARIANTS = {"glb": 6, "ply": 4, "png": 4, "json": 3}  # corrupt variants simworker cycles through


# --- gltf-validator ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gltf_validator():
    """A function bytes-list -> list of error counts (-1: the validator rejected the file)."""
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.skip("node/npm not installed: cannot run Khronos' gltf-validator")
    if not (HERE / "node_modules" / "gltf-validator").is_dir():
        cmd = ["npm", "ci", "--no-audit", "--no-fund"] if (HERE / "package-lock.json").exists() \
            else ["npm", "install", "--no-audit", "--no-fund"]
        try:
            res = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True, timeout=NPM_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.skip("npm registry unreachable (npm ci timed out): cannot install gltf-validator")
        if res.returncode != 0:
            pytest.skip(f"npm could not install gltf-validator (registry unreachable?):\n{res.stderr[-2000:]}")
    script = (
        "const v = require('gltf-validator'); const fs = require('fs');"
        "(async () => { const out = [];"
        " for (const f of process.argv.slice(1)) {"
        "  try { const r = await v.validateBytes(new Uint8Array(fs.readFileSync(f)));"
        "        out.push(r.issues.numErrors); } catch (e) { out.push(-1); } }"
        " console.log(JSON.stringify(out)); })();")

    def validate(tmp_path, blobs):
        files = []
        for i, b in enumerate(blobs):
            p = tmp_path / f"v{i}.glb"
            p.write_bytes(b)
            files.append(str(p))
        res = subprocess.run(["node", "-e", script, *files], cwd=HERE, capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)
    return validate


# --- tests ---------------------------------------------------------------------------------

def start_output_worker(sim, workers, kind, *extra):
    gpu = sim.create(memory="24GiB", timescale=TIMESCALE)
    return workers.start(gpu, "--output", kind, "--output-size", "200KiB", "--run-time", "100ms",
                         "--mem-scale", "resolution:1024:2", *extra)


@pytest.mark.parametrize("kind", ["glb", "png", "ply", "json"])
def test_outputs_are_valid_and_scale_with_parameters(sim, workers, kind):
    w = start_output_worker(sim, workers, kind)
    sizes = []
    for res in (512, 1024, 1536):
        r = w.post("/generate", json={"resolution": res, "seed": 7})
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == CONTENT_TYPES[kind]
        assert float(r.headers["x-generation-time"]) > 0
        problems = (check_ply(r.content, r.headers.get("x-gaussian-count")) if kind == "ply"
                    else CHECKERS[kind](r.content))
        assert problems == [], problems
        sizes.append(len(r.content))
    if kind != "json":
        assert sizes[0] < sizes[1] < sizes[2], sizes
        assert 150_000 < sizes[1] < 260_000, sizes  # about --output-size at factor 1


def test_glb_accepted_by_gltf_validator(sim, workers, gltf_validator, tmp_path):
    w = start_output_worker(sim, workers, "glb")
    blobs = [w.post("/generate", json={"resolution": r}).content for r in (128, 1024, 2048)]
    assert all(check_glb(b) == [] for b in blobs)
    assert gltf_validator(tmp_path, blobs) == [0, 0, 0]


@pytest.mark.parametrize("kind", ["glb", "png", "ply", "json"])
def test_corrupt_every_breaks_exactly_every_nth_output(sim, workers, kind):
    w = start_output_worker(sim, workers, kind, "--corrupt-every", "2")
    n = 2 * VARIANTS[kind]
    broken = []
    for i in range(n):
        r = w.post("/generate", json={"resolution": 512})
        assert r.status_code == 200
        problems = (check_ply(r.content, r.headers.get("x-gaussian-count")) if kind == "ply"
                    else CHECKERS[kind](r.content))
        broken.append(bool(problems))
    assert broken == [i % 2 == 1 for i in range(n)], broken


def test_corrupt_glbs_rejected_by_gltf_validator(sim, workers, gltf_validator, tmp_path):
    w = start_output_worker(sim, workers, "glb", "--corrupt-every", "1")
    blobs = [w.post("/generate", json={}).content for _ in range(VARIANTS["glb"])]
    assert all(check_glb(b) for b in blobs)
    counts = gltf_validator(tmp_path, blobs)
    assert all(c != 0 for c in counts), counts


def test_png_has_real_pixels(sim, workers):
    w = start_output_worker(sim, workers, "png")
    data = w.post("/generate", json={"resolution": 256, "seed": 3}).content
    chunks = dict(png_chunks(data))
    width, height = struct.unpack_from(">II", chunks[b"IHDR"])
    raw = zlib.decompress(chunks[b"IDAT"])
    rows = [raw[y * (1 + 3 * width):(y + 1) * (1 + 3 * width)] for y in range(height)]
    assert all(row[0] == 0 for row in rows)  # filter type None
    assert rows[0][1:] != rows[-1][1:]       # not a flat image


def test_ply_floats_are_finite(sim, workers):
    w = start_output_worker(sim, workers, "ply")
    data = w.post("/generate", json={"resolution": 256}).content
    body = data[data.find(b"end_header\n") + len(b"end_header\n"):]
    values = struct.unpack(f"<{len(body) // 4}f", body)
    assert values and all(v == v and abs(v) < 1e6 for v in values)
