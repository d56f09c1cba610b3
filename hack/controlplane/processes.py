"""The components run as plain background processes, one each, in their own session: a pidfile in run/ and
a log in logs/ of a state dir are all that remembers them between hack/cluster invocations. This module
starts and stops them, tells whether a pidfile's process is still the component (pids get reused), and
waits for a condition while watching that the component does not die meanwhile.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from .console import die, log
from .layout import StateDir, binpath


def pidfile(state: StateDir, comp: str) -> str:
    return os.path.join(state.run, f"{comp}.pid")


def logfile(state: StateDir, comp: str) -> str:
    return os.path.join(state.logs, f"{comp}.log")


def read_pid(state: StateDir, comp: str) -> int | None:
    try:
        with open(pidfile(state, comp)) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def pid_alive(pid: int | None, exe: str | None = None) -> bool:
    """Whether pid runs (not a zombie) and, with exe, runs that binary (whatever its version suffix)."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return False
        if exe:
            # /proc/<pid>/exe is set early in execve (cmdline can briefly be empty right after
            # Popen returns); compare the binary name without its version suffix.
            try:
                path = os.readlink(f"/proc/{pid}/exe")
            except OSError:
                with open(f"/proc/{pid}/cmdline", "rb") as fb:
                    path = fb.read().split(b"\0")[0].decode(errors="replace")
            if not path:
                return True
            name = os.path.basename(path.replace(" (deleted)", ""))
            if name.split("-v")[0] != os.path.basename(exe).split("-v")[0]:
                return False  # pid reused by something else
        return True
    except (OSError, IndexError):
        return False


def comp_alive(state: StateDir, comp: str) -> bool:
    return pid_alive(read_pid(state, comp), binpath(comp))


def tail(path: str, n: int = 40) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = f.readlines()[-n:]
        return "".join(lines)
    except OSError:
        return "(no log)"


def start(state: StateDir, comp: str, argv: list[str]) -> subprocess.Popen[bytes]:
    """Start comp detached (own session, cwd the state dir), its output appended to its log."""
    os.makedirs(state.logs, exist_ok=True)
    os.makedirs(state.run, exist_ok=True)
    with open(logfile(state, comp), "ab") as lf:
        lf.write(f"\n===== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(argv)}\n".encode())
        lf.flush()
        p = subprocess.Popen(
            argv,
            stdout=lf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=state.root,
            start_new_session=True,
            close_fds=True,
        )
    with open(pidfile(state, comp), "w") as f:
        f.write(str(p.pid))
    return p


def stop(state: StateDir, comp: str, timeout: float = 15) -> None:
    """SIGTERM, then SIGKILL after timeout; removes the pidfile either way."""
    pid = read_pid(state, comp)
    if pid and pid_alive(pid, binpath(comp)):
        log(f"stopping {comp} (pid {pid})")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.time() + timeout
        while time.time() < deadline and pid_alive(pid):
            time.sleep(0.1)
        if pid_alive(pid):
            log(f"{comp} did not exit after SIGTERM; sending SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            for _ in range(50):
                if not pid_alive(pid):
                    break
                time.sleep(0.1)
    with contextlib.suppress(OSError):
        os.unlink(pidfile(state, comp))


def print_log_tail(state: StateDir, comp: str) -> None:
    print(f"\n----- tail of {logfile(state, comp)} -----\n{tail(logfile(state, comp))}", file=sys.stderr)


def wait_for(state: StateDir, what: str, fn: Callable[[], bool], timeout: float, comp: str | None = None) -> None:
    """Poll fn until it is true; die after timeout, or as soon as comp (whose log tail is shown) exits."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if fn():
            return
        if comp and not comp_alive(state, comp):
            print_log_tail(state, comp)
            die(f"{comp} exited while waiting for {what}")
        time.sleep(0.25)
    if comp:
        print_log_tail(state, comp)
    die(f"timed out after {timeout}s waiting for {what}")
