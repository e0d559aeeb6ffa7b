#!/bin/sh
# Installs the Debian packages one purpose needs, when missing. Quiet when everything is there.
# Runs apt-get as root (or through sudo).
#
#   sh mk/deps.sh build    build and run vramd (`make`, `make install`)
#   sh mk/deps.sh demo     build + what `make demo` runs (Python with PyYAML and requests)
#   sh mk/deps.sh test     build + demo + every server, client and tool the tests start (`make test`)
#   sh mk/deps.sh bench    build + demo + what the benchmarks under bench/ run (`make deps DEPS=bench`)
#   sh mk/deps.sh --list SET   print the packages of SET, install nothing
#
# Packages that ship a system service (postgresql, nginx-light, haproxy, prometheus, podman's
# timers) are installed under a policy-rc.d that forbids starting services: the tests start
# their own instances on their own ports, and a host running `make test` keeps no PostgreSQL
# on :5432, nginx on :80 or Prometheus on :9090.
set -eu

# build: the compiler, pkg-config and the libraries the Makefile's PKGS names (libuv, cJSON,
# libyaml, SQLite, libsystemd, libpq); cmocka because `make` (all) builds the unit tests too.
BUILD_PKGS="build-essential pkg-config libuv1-dev libcjson-dev libyaml-dev libsqlite3-dev \
libsystemd-dev libpq-dev libcmocka-dev"
# demo: examples/demo.py and bench/player/ (Python 3 with PyYAML for the configs, requests
# for the traffic player); everything else the demo starts is built from this tree.
DEMO_PKGS="python3 python3-yaml python3-requests"
# test: the runner (pytest, xdist), `make lint` (cppcheck, universal-ctags), the fuzzers
# (clang + its sanitizer runtime), the real servers and clients the tests put in front of or
# behind vramd (nginx, HAProxy, Prometheus, PostgreSQL, Chromium for the status page, curl,
# wget, iproute2 for ss, procps); podman runc busybox-static: the container tests
# (tests/lib/vramdkit/containers.py) run workers with Podman over runc (crun refuses hosts
# with cgroup v1 hierarchies and cgroup2 at /sys/fs/cgroup/unified) in an image built from
# build/bin/simworker, with busybox for a shell; debhelper dpkg-dev fakeroot lintian: the
# Debian package test (tests/ops/test_debian_package.py) builds, checks and installs the .debs;
# nodejs for the JavaScript clients (tests/js, tests/sim, the browser test), with npm below;
# python3-websockets: a real WebSocket client for the upgrade tests (tests/e2e/test_websocket_upgrade.py);
# groff-base man-db zsh: the man pages render without warnings (tests/ops/test_man_pages.py) and
# the zsh completion is tried in a real zsh (tests/cli/test_completion.py).
TEST_PKGS="python3-websockets groff-base man-db zsh nodejs clang libclang-rt-14-dev cppcheck universal-ctags python3-pytest python3-pytest-xdist \
curl wget nginx-light haproxy iproute2 procps chromium prometheus postgresql \
podman runc busybox-static debhelper dpkg-dev fakeroot lintian"
# bench: wrk drives the proxy-overhead benchmark (nginx-light and HAProxy are measured
# beside vramd there and in the fleet and scheduling runs); postgresql for the jobs backends
# comparison; strace and linux-perf for the profile (bench/common/profile_vramd.py);
# procps for the CPU accounting; python3-pytest because the benchmarks use the tests' kit.
BENCH_PKGS="wrk procps curl nginx-light haproxy postgresql strace linux-perf python3-pytest"

usage() {
  echo "usage: sh mk/deps.sh [--list] build|demo|test|bench" >&2
  exit 2
}

LIST=0
if [ "${1:-}" = "--list" ]; then LIST=1; shift; fi
SET="${1:-test}"
case "$SET" in
  build) PKGS="$BUILD_PKGS" ;;
  demo) PKGS="$BUILD_PKGS $DEMO_PKGS" ;;
  test) PKGS="$BUILD_PKGS $DEMO_PKGS $TEST_PKGS" ;;
  bench) PKGS="$BUILD_PKGS $DEMO_PKGS $BENCH_PKGS" ;;
  *) usage ;;
esac
if [ "$LIST" = 1 ]; then
  echo "$PKGS" | tr ' ' '\n' | sort -u | tr '\n' ' ' | sed 's/ $/\n/'
  exit 0
fi

missing=""
for p in $PKGS; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    case " $missing " in *" $p "*) ;; *) missing="$missing $p" ;; esac
  fi
done
# npm: Debian's package, unless an npm is already there (NodeSource's nodejs ships its own
# and conflicts with Debian's npm)
if [ "$SET" = test ] && ! command -v npm >/dev/null 2>&1; then
  missing="$missing npm"
fi
if [ -n "$missing" ]; then
  echo "deps ($SET): installing:$missing"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  # invoke-rc.d / deb-systemd-invoke ask /usr/sbin/policy-rc.d before starting a service;
  # exit status 101 means "not allowed". Ours only while apt-get runs; one that was already
  # there (a container image's) is left as it is.
  POLICY=/usr/sbin/policy-rc.d
  OURS=0
  if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\n# written by vramd mk/deps.sh while it installs packages\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
    $SUDO chmod 0755 "$POLICY"
    OURS=1
    trap '$SUDO rm -f "$POLICY"' EXIT INT TERM
  fi
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
  if [ "$OURS" = 1 ]; then $SUDO rm -f "$POLICY"; trap - EXIT INT TERM; fi
fi

# npm packages for the JavaScript tests (real clients: playwright-core driving chromium,
# the openai package; Khronos' glTF validator), installed from their lock files when missing.
if [ "$SET" = test ] && command -v npm >/dev/null 2>&1; then
  for dir in tests/js tests/sim; do
    if [ -f "$dir/package-lock.json" ] && [ ! -d "$dir/node_modules" ]; then
      echo "deps: npm ci in $dir"
      (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || echo "deps: npm ci in $dir failed; tests that need it will say so"
    fi
  done
fi
