#!/bin/sh
# Installs the Debian packages vramd needs to build, test and benchmark, when missing.
# Quiet when everything is already there. Runs apt-get as root (or through sudo).
set -eu
PKGS="build-essential pkg-config clang libclang-rt-14-dev libuv1-dev libcjson-dev libyaml-dev \
libcmocka-dev libsqlite3-dev libsystemd-dev cppcheck universal-ctags python3 python3-pytest python3-pytest-xdist python3-requests python3-yaml \
curl wget nginx-light haproxy iproute2 wrk procps chromium prometheus libpq-dev postgresql \
podman runc busybox-static python3-websockets"
# python3-websockets: a real WebSocket client for the upgrade tests (tests/e2e/test_websocket_upgrade.py).
# podman runc busybox-static: the container tests (tests/lib/vramdkit/containers.py) run
# workers with Podman over runc (crun refuses hosts with cgroup v1 hierarchies and cgroup2
# at /sys/fs/cgroup/unified) in an image built from build/bin/simworker, with busybox for a shell.
missing=""
for p in $PKGS; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing="$missing $p"
  fi
done
if [ -n "$missing" ]; then
echo "deps: installing:$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# npm packages for the JavaScript tests (real clients: playwright-core driving chromium,
# the openai package; Khronos' glTF validator), installed from their lock files when missing.
if command -v npm >/dev/null 2>&1; then
  for dir in tests/js tests/sim; do
    if [ -f "$dir/package-lock.json" ] && [ ! -d "$dir/node_modules" ]; then
      echo "deps: npm ci in $dir"
      (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || echo "deps: npm ci in $dir failed; tests that need it will say so"
    fi
  done
fi
