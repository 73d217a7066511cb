"""A process and every process below it, found through /proc, stopped, then killed (Linux).

A process group is not enough: a handler's process that calls ``setsid`` (or is
started with ``start_new_session``) leaves the child's group, and ``killpg``
misses it. The parent links in /proc do not miss it: a pool child is a child
subreaper (``PR_SET_CHILD_SUBREAPER``), so a process whose parent exits (a
double-forked daemon) is adopted by the child, not by init, and stays below it.

Each process found is stopped (SIGSTOP) before the next look, and a stopped
process starts nothing, so the look that finds nothing new has found them all;
then each gets SIGKILL. While its parent is stopped, a process that exits stays
a zombie and its pid is not reused, so no signal reaches a stranger.
Where there is no /proc, nothing is found, and the caller's ``killpg`` is all.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Mapping

#: prctl(2) option: orphaned descendants are re-parented to this process, not to init.
PR_SET_CHILD_SUBREAPER = 36
#: Looks for new processes at most, while stopping: a fork bomb must not hold the kill.
MAX_LOOKS = 100


def parents() -> dict[int, int]:
    """Return every process's parent pid, read from /proc (empty where there is none)."""
    found: dict[int, int] = {}
    try:
        entries = os.scandir("/proc")
    except OSError:
        return found
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
                    found[int(entry.name)] = int(stat.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # it exited meanwhile
    return found


def descendants(root: int, parent_of: Mapping[int, int]) -> set[int]:
    """Return the pids below ``root`` in ``parent_of`` (pid -> parent pid)."""
    children: dict[int, list[int]] = {}
    for pid, parent in parent_of.items():
        children.setdefault(parent, []).append(pid)
    below: set[int] = set()
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid not in below and pid != root:
            below.add(pid)
            todo.extend(children.get(pid, ()))
    return below


def kill_descendants(root: int) -> set[int]:
    """Stop every process below ``root`` until a look finds no new one, then SIGKILL
    them all; return their pids. ``root`` itself is left as it is."""
    stopped: set[int] = set()
    for _ in range(MAX_LOOKS):
        found = descendants(root, parents()) - stopped
        if not found:
            break
        for pid in found:
            _signal(pid, signal.SIGSTOP)
        stopped |= found
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    return stopped


def kill_tree(root: int) -> set[int]:
    """SIGKILL ``root`` and every process below it; return the pids below it killed.

    ``root`` is stopped first, so it starts nothing while the others are found.
    """
    _signal(root, signal.SIGSTOP)
    killed = kill_descendants(root)
    _signal(root, signal.SIGKILL)
    return killed


def become_subreaper() -> bool:
    """Adopt this process's orphaned descendants (Linux); return whether it took."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _signal(pid: int, signum: int) -> None:
    # Gone already, or not ours to signal (another user's): nothing more can be done here.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)
