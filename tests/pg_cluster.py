"""PostgreSQL servers a test starts itself: a primary and a streaming standby on loopback ports,
or independent servers.

For tests/e2e/test_failover_standby.py (:class:`Pair`) and
tests/e2e/test_several_databases.py (:class:`Servers`). The servers are PostgreSQL's own binaries
(``pg_config --bindir``) run as the ``postgres`` user (``runuser`` when the tests
run as root), each in a temporary directory, on a free port of 127.0.0.1. A
test stops every server it started by the pid in its ``postmaster.pid``, also
when it fails (:meth:`Server.stop`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.process_helpers import free_port

#: The user the servers run as (initdb refuses root).
SERVER_USER = "postgres"
#: The application name the standby streams under: what the primary's
#: ``synchronous_standby_names`` waits for.
STANDBY_NAME = "standby"


def bindir() -> Path | None:
    """Where ``pg_config`` says PostgreSQL's binaries are, or None when it is not installed."""
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        return None
    found = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
    path = Path(found.stdout.strip())
    return path if found.returncode == 0 and (path / "initdb").exists() else None


def why_not() -> str:
    """Why servers cannot be started here ("" when they can)."""
    if bindir() is None:
        return "no PostgreSQL server binaries: pg_config --bindir names no initdb"
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            return "running as root without runuser to start the servers as postgres"
        if subprocess.run(["id", "-u", SERVER_USER], capture_output=True).returncode != 0:
            return f"no {SERVER_USER!r} user to run the servers as"
        return ""
    import pwd

    if pwd.getpwuid(os.geteuid()).pw_name != SERVER_USER:
        return f"starting PostgreSQL servers needs root (runuser) or the {SERVER_USER!r} user"
    return ""


def as_server_user(*argv: str) -> list[str]:
    """``argv`` run as the servers' user."""
    return ["runuser", "-u", SERVER_USER, "--", *argv] if os.geteuid() == 0 else list(argv)


@dataclass
class Server:
    """One PostgreSQL server (a data directory, a port) started by a test."""

    name: str
    data: Path
    port: int

    def tool(self, name: str, *args: str, timeout: float = 60) -> str:
        """Run PostgreSQL's tool ``name`` as the servers' user; its output, failing loudly."""
        done = subprocess.run(
            as_server_user(str(bindir() / name), *args),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{name} {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
                f"\n--- {self.name} log\n{self.log()}"
            )
        return done.stdout

    def configure(self, **settings: str | int) -> None:
        """Append ``settings`` to postgresql.auto.conf (read at the next start or reload)."""
        lines = "".join(f"{key} = '{value}'\n" for key, value in settings.items())
        auto = self.data / "postgresql.auto.conf"
        subprocess.run(
            as_server_user("sh", "-c", f"cat >> {auto}"), input=lines, text=True, check=True
        )

    def start(self) -> None:
        self.tool("pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-w", "start")

    def promote(self) -> None:
        """Promote this standby to a primary, as an orchestrator does, waiting until it is one."""
        self.tool("pg_ctl", "-D", str(self.data), "-w", "-t", "30", "promote")

    @property
    def logfile(self) -> Path:
        return self.data.parent / f"{self.name}.log"

    def log(self) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def pid(self) -> int | None:
        """The postmaster's pid, from its ``postmaster.pid`` (None: not running)."""
        try:
            first = (self.data / "postmaster.pid").read_text().split("\n", 1)[0]
        except OSError:
            return None
        return int(first) if first.strip().isdigit() else None

    def processes(self) -> list[int]:
        """The postmaster's pid and its children's (backends, walsender, checkpointer...)."""
        pid = self.pid()
        if pid is None or not _alive(pid):
            return []
        return [pid, *_children(pid)]

    def kill(self) -> list[int]:
        """kill -9 the postmaster and every process of it at once, as a lost host; return them."""
        postmaster = self.pid()
        if postmaster is None:
            return []
        _signal(postmaster, signal.SIGSTOP)  # it forks no backend while its children are listed
        pids = [postmaster, *_children(postmaster)]
        for pid in pids:
            _signal(pid, signal.SIGKILL)
        for pid in pids:
            _wait_gone(pid, 10)
        return pids

    def stop(self) -> None:
        """Stop the server by its pid (immediate shutdown, then SIGKILL); idempotent."""
        pids = self.processes()
        if not pids:
            return
        _signal(pids[0], signal.SIGQUIT)
        if not _wait_gone(pids[0], 10):
            pids = self.processes() or pids
            for pid in pids:
                _signal(pid, signal.SIGKILL)
        for pid in pids:
            _wait_gone(pid, 10)

    def conninfo(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"


def _initdb(server: Server, sockets: Path, **settings: str | int) -> None:
    server.tool(
        "initdb", "-D", str(server.data), "-U", "postgres", "--auth=trust",
        "-E", "UTF8", "--no-sync", "--no-instructions",
    )  # fmt: skip
    server.configure(
        listen_addresses="127.0.0.1",
        port=server.port,
        unix_socket_directories=str(sockets),
        max_connections=100,
        fsync="on",
        **settings,
    )


def _own_root(prefix: str) -> Path:
    # Not under pytest's tmp_path: the servers, running as another user, must own it.
    root = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        shutil.chown(root, SERVER_USER)
    root.chmod(0o755)
    return root


class Servers:
    """Independent PostgreSQL servers, each on its own port, in one temporary directory."""

    def __init__(self, count: int) -> None:
        self.root = _own_root("strait-servers-")
        self.servers = [
            Server(f"server{n}", self.root / f"server{n}", free_port()) for n in range(count)
        ]

    def start(self) -> None:
        """initdb and start each server."""
        for server in self.servers:
            _initdb(server, self.root)
            server.start()

    def stop(self) -> None:
        """Stop every server by its pid and remove their files (idempotent)."""
        try:
            for server in self.servers:
                server.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


class Pair:
    """A primary and a standby streaming from it, synchronously, in one temporary directory."""

    def __init__(self) -> None:
        self.root = _own_root("strait-failover-")
        self.primary = Server("primary", self.root / "primary", free_port())
        self.standby = Server("standby", self.root / "standby", free_port())

    @property
    def servers(self) -> tuple[Server, Server]:
        return (self.primary, self.standby)

    def start(self) -> None:
        """initdb and start the primary, clone the standby from it and start it, then make
        the primary's commits wait for the standby (synchronous replication)."""
        primary, standby = self.primary, self.standby
        _initdb(
            primary,
            self.root,
            wal_level="replica",
            max_wal_senders=5,
            synchronous_commit="on",
            # When each transaction committed: the test times completions by it.
            track_commit_timestamp="on",
        )
        primary.start()
        standby.tool(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
            "-D", str(standby.data), "-R", "-X", "stream", "--checkpoint=fast", "--no-sync",
        )  # fmt: skip
        # Promoted, the standby must not wait for a standby of its own: an orchestrator
        # turns synchronous replication off on a lone primary, and so do we.
        standby.configure(
            port=standby.port, cluster_name=STANDBY_NAME, synchronous_standby_names=""
        )
        standby.start()
        self._wait_streaming()
        primary.tool(
            "psql", "-X", "-q", "-d", primary.conninfo(), "-c",
            f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'",
            "-c", "SELECT pg_reload_conf()",
        )  # fmt: skip
        self._wait_streaming(state="sync")

    def _wait_streaming(self, state: str = "") -> None:
        """Wait until the primary streams to the standby (in ``state``: "sync", when given)."""
        deadline = time.monotonic() + 30
        query = (
            "SELECT sync_state FROM pg_stat_replication"
            f" WHERE application_name = '{STANDBY_NAME}' AND state = 'streaming'"
        )
        while time.monotonic() < deadline:
            out = self.primary.tool("psql", "-X", "-At", "-d", self.primary.conninfo(), "-c", query)
            if out.strip() and (not state or out.strip() == state):
                return
            time.sleep(0.2)
        raise RuntimeError(f"the standby is not streaming{' ' + state if state else ''}")

    def stop(self) -> None:
        """Stop both servers by their pids and remove their files (idempotent)."""
        try:
            for server in self.servers:
                server.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
