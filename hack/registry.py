"""A real OCI registry on 127.0.0.1 for the release tests: go-containerregistry's `crane registry serve`, built from
Go modules by hack/build-binaries.sh, so that podman, helm and cosign push to and pull from what a registry serves
(manifests, blobs, referrers) instead of a stand-in.

    python -m hack.registry start   # prints REGISTRY=127.0.0.1:PORT (a free port; a no-op when one runs)
    python -m hack.registry stop
    python -m hack.registry address # prints 127.0.0.1:PORT of the running one, fails when none runs

State (pid, port, log, blobs) lives in ${SPECINFER_REGISTRY_DIR:-$SPECINFER_CACHE/registry}. Manifests are held in
the server's memory, blobs on disk: a restart starts an empty registry. An upload is buffered in memory until it
completes (pushing the 6.9 GB runtime image took the server to 8.4 GB of RSS). Tests use `running(dir)`.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

HACK = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("SPECINFER_CACHE") or Path.home() / ".cache" / "specinfer")
DEFAULT_DIR = Path(os.environ.get("SPECINFER_REGISTRY_DIR") or CACHE / "registry")
START_TIMEOUT = 20.0


@dataclass(frozen=True)
class Registry:
    """A registry process serving on 127.0.0.1:port, started from the state dir `root`."""

    root: Path
    pid: int
    port: int

    @property
    def address(self) -> str:
        """host:port, as image references and `oci://` chart references name it."""
        return f"127.0.0.1:{self.port}"


def crane() -> Path:
    """The pinned crane binary, built on first use (a no-op taking a second when it is there)."""
    subprocess.run([str(HACK / "build-binaries.sh"), "crane"], check=True, stdout=sys.stderr)
    return CACHE / "bin" / "crane"


def _state(root: Path) -> Path:
    return root / "registry.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _answers(port: int) -> bool:
    """The distribution API's version check (GET /v2/ answers 200 on a registry without auth)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def current(root: Path = DEFAULT_DIR) -> Registry | None:
    """The registry started from `root` when it still runs and answers, else None."""
    try:
        state = json.loads(_state(root).read_text())
    except (OSError, ValueError):
        return None
    registry = Registry(root, int(state["pid"]), int(state["port"]))
    return registry if _alive(registry.pid) and _answers(registry.port) else None


def start(root: Path = DEFAULT_DIR) -> Registry:
    """Starts a registry on a free loopback port (the kernel picks it: no race with other listeners), or returns
    the one already running from `root`."""
    if (running_one := current(root)) is not None:
        return running_one
    blobs = root / "blobs"
    shutil.rmtree(blobs, ignore_errors=True)  # the manifests that named them died with the last server
    blobs.mkdir(parents=True)
    log = root / "registry.log"
    argv = [str(crane()), "registry", "serve", "--address", "127.0.0.1:0", "--disk", str(blobs)]
    with log.open("w") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"crane registry serve exited with {process.returncode}: {log.read_text()}")
        port = _port(log.read_text())
        if port is not None and _answers(port):
            registry = Registry(root, process.pid, port)
            _state(root).write_text(json.dumps({"pid": process.pid, "port": port}))
            return registry
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"crane registry serve did not answer within {START_TIMEOUT:.0f} s: {log.read_text()}")


def _port(log: str) -> int | None:
    """The port from crane's `serving on port N` line."""
    for line in log.splitlines():
        if "serving on port " in line:
            return int(line.rsplit(" ", 1)[1])
    return None


def stop(root: Path = DEFAULT_DIR) -> None:
    """Stops the registry started from `root` (its own pid only), if it runs."""
    try:
        pid = int(json.loads(_state(root).read_text())["pid"])
    except (OSError, ValueError):
        return
    if _alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            with suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # reaps it when this process started it
            time.sleep(0.05)
    _state(root).unlink(missing_ok=True)


@contextmanager
def running(root: Path) -> Iterator[Registry]:
    """A registry for the block (a test's fixture), stopped afterwards."""
    root.mkdir(parents=True, exist_ok=True)
    registry = start(root)
    try:
        yield registry
    finally:
        stop(root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.registry", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["start", "stop", "address"])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"state dir (default {DEFAULT_DIR})")
    args = parser.parse_args(argv)
    if args.command == "start":
        args.dir.mkdir(parents=True, exist_ok=True)
        print(f"REGISTRY={start(args.dir).address}")
    elif args.command == "stop":
        stop(args.dir)
    elif (registry := current(args.dir)) is not None:
        print(registry.address)
    else:
        print(f"no registry runs from {args.dir} (python -m hack.registry start)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
