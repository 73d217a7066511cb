"""Processes tests start or look for: a worker's pool children, and a PgBouncer to put in front."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CHILD_MODULE = "django_strait.worker.process.child"


def strait_children(worker_pid: int) -> list[int]:
    """Return the pids of live pool children started by ``worker_pid``, even once re-parented.

    A child's command line is ``python -m django_strait.worker.process.child <worker pid> ...``.
    """
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state == b"Z":
            continue  # exited; only its parent's wait() is missing
        if CHILD_MODULE.encode() in argv:
            i = argv.index(CHILD_MODULE.encode())
            if argv[i + 1 : i + 2] == [str(worker_pid).encode()]:
                found.append(int(entry))
    return found


# -- PgBouncer --------------------------------------------------------------------------

#: The Debian package's binary (``apt-get install pgbouncer``; .ci/run installs it).
PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
#: PgBouncer refuses to run as root; started by root, it runs as this user.
PGBOUNCER_USER = "postgres"


@dataclass
class PgBouncer:
    """A PgBouncer process started by a test, on 127.0.0.1, in front of one PostgreSQL."""

    proc: subprocess.Popen
    port: int
    directory: Path

    def url(self, database: str, user: str = "postgres") -> str:
        """A ``DATABASE_URL`` that connects to ``database`` through this pooler."""
        return f"postgres://{user}@127.0.0.1:{self.port}/{database}"

    def output(self) -> str:
        """What PgBouncer logged so far."""
        return (self.directory / "pgbouncer.log").read_text(errors="replace")

    def stop(self) -> None:
        """Kill it by its pid and remove its files (idempotent)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        shutil.rmtree(self.directory, ignore_errors=True)


def start_pgbouncer(
    server_host: str, server_port: int, *, pool_mode: str = "transaction", pool_size: int = 20
) -> PgBouncer:
    """Start PgBouncer on a free port of 127.0.0.1 with an ini and auth file of its own.

    Every database name is passed on to ``server_host:server_port`` (trust auth,
    as the local PostgreSQL has). The caller stops it (``stop()``), also on failure.
    """
    # Not under pytest's tmp_path: PgBouncer, running as another user, must read it.
    directory = Path(tempfile.mkdtemp(prefix="strait-pgbouncer-"))
    directory.chmod(0o755)
    port = free_port()
    users = directory / "users.txt"
    users.write_text('"postgres" ""\n')
    ini = directory / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"* = host={server_host} port={server_port}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {users}\n"
        f"pool_mode = {pool_mode}\ndefault_pool_size = {pool_size}\nmax_client_conn = 500\n"
    )
    for path in (users, ini):
        path.chmod(0o644)
    as_user = ["-u", PGBOUNCER_USER] if os.geteuid() == 0 else []
    with open(directory / "pgbouncer.log", "wb") as log:
        proc = subprocess.Popen(
            [PGBOUNCER, *as_user, str(ini)], stdout=log, stderr=subprocess.STDOUT
        )
    bouncer = PgBouncer(proc, port, directory)
    try:
        _wait_for_port(port, proc, bouncer.output)
    except BaseException:
        bouncer.stop()
        raise
    return bouncer


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, output: Callable[[], str]) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"pgbouncer exited with {proc.returncode}:\n{output()}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"pgbouncer did not listen on 127.0.0.1:{port} within 15 s:\n{output()}")
