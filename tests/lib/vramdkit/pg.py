"""pg: a throw-away PostgreSQL 15 cluster for tests and benchmarks (Debian's binaries).

PgCluster() makes a cluster in a fresh temporary directory owned by the `postgres` user
(PostgreSQL refuses to run as root: every command runs through `runuser -u postgres --`
when the test runs as root), listening on 127.0.0.1 and a free port, its unix socket in
that directory. listen=(addresses) adds addresses to listen on (they must exist when it
starts: tests/fleet gives its hosts' veth peers) and hba=(networks) lets password
connections in from those networks (pg_hba.conf, scram-sha-256). Host connections need a
password (scram-sha-256) so tests can check that vramd never logs it. fsync is off (the
tests kill processes, never the machine) unless durable=True (benchmarks: a commit then
costs an fsync, as SQLite's).

  pg = PgCluster(); pg.start()
  pg.url            libpq connection string with the password (127.0.0.1)
  pg.url_for(addr, db="postgres")   the same for one of the listen addresses and a database
  pg.password
  pg.sql("SELECT 1", db="postgres")  -> stdout of psql (unaligned, tuples only)
  pg.restart(mode="fast"|"immediate"), pg.stop(), pg.cleanup()

Every command is bounded in time; cleanup() stops the server (immediate) and removes the
directory, whatever state it is in. A context manager too.
"""
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile

from .net import free_port

PG_BIN = "/usr/lib/postgresql/15/bin"


def available():
    return os.path.exists(f"{PG_BIN}/initdb") and os.path.exists("/usr/bin/psql")


class PgCluster:
    def __init__(self, timeout=30, durable=False, listen=(), hba=()):
        self.timeout = timeout
        self.durable = durable
        self.listen = ("127.0.0.1",) + tuple(listen)
        self.hba = tuple(hba)
        self.dir = tempfile.mkdtemp(prefix="vramd-pg-")
        self.data = os.path.join(self.dir, "data")
        self.port = free_port()
        self.password = "pw-" + secrets.token_hex(8)
        self.running = False
        self._as_root = os.geteuid() == 0
        if self._as_root:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        os.chmod(self.dir, 0o700)
        self.url = self.url_for("127.0.0.1")

    def url_for(self, addr, db="postgres"):
        return (f"host={addr} port={self.port} dbname={db} user=postgres "
                f"password={self.password} connect_timeout=5")

    def _run(self, argv, check=True, timeout=None, input_text=None):
        if self._as_root:
            argv = ["runuser", "-u", "postgres", "--"] + argv
        return subprocess.run(argv, check=check, timeout=timeout or self.timeout, capture_output=True,
                              text=True, input=input_text, cwd=self.dir)

    def start(self):
        if not os.path.exists(self.data):
            pwfile = os.path.join(self.dir, "pw")
            with open(pwfile, "w") as f:
                f.write(self.password + "\n")
            if self._as_root:
                pw = pwd.getpwnam("postgres")
                os.chown(pwfile, pw.pw_uid, pw.pw_gid)
            self._run([f"{PG_BIN}/initdb", "-D", self.data, "-U", "postgres", "--pwfile", pwfile,
                       "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync"])
            os.unlink(pwfile)
            if self.hba:
                with open(os.path.join(self.data, "pg_hba.conf"), "a") as f:
                    for net in self.hba:
                        f.write(f"host all all {net} scram-sha-256\n")
        self._ctl("start")
        self.running = True
        return self

    def _ctl(self, what, mode=None):
        safety = "" if self.durable else "-c fsync=off -c full_page_writes=off "
        opts = (f"-c listen_addresses={','.join(self.listen)} -c port={self.port} "
                f"-c unix_socket_directories={self.dir} "
                f"{safety}-c max_connections=50 -c shared_buffers=32MB")
        argv = [f"{PG_BIN}/pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "server.log"), "-w",
                "-t", str(self.timeout), "-o", opts]
        if mode:
            argv += ["-m", mode]
        self._run(argv + [what])

    def restart(self, mode="fast"):
        self._ctl("restart", mode=mode)
        self.running = True

    def stop(self, mode="fast"):
        if self.running:
            self._run([f"{PG_BIN}/pg_ctl", "-D", self.data, "-w", "-t", str(self.timeout), "-m", mode, "stop"],
                      check=False)
            self.running = False

    def sql(self, query, db="postgres"):
        r = self._run(["/usr/bin/psql", "-h", self.dir, "-p", str(self.port), "-U", "postgres", "-d", db,
                       "-AtX", "-v", "ON_ERROR_STOP=1", "-c", query])
        return r.stdout.strip()

    def server_log(self):
        try:
            with open(os.path.join(self.dir, "server.log")) as f:
                return f.read()
        except OSError:
            return ""

    def cleanup(self):
        try:
            self.stop(mode="immediate")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.cleanup()
