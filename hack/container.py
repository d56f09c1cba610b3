"""The runtime image (images/runtime/Dockerfile, built by images/build) run as a pod's container would run it.

podman runs it on the host's network, so the engine answers where a process of the engine venv would. What
the node would give the container comes in as bind mounts at the same paths as outside (the model cache,
the engine config, a writable state directory, the termination log), so that a command line and the files it
names mean the same inside and out. SPECINFER_BUILT_RUNTIME_IMAGE names the image; without it the tests that need
it are skipped, and a real engine runs from the engine venv instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PODMAN = REPO / "images" / "podman"
IMAGE_VARIABLE = "SPECINFER_BUILT_RUNTIME_IMAGE"
SHARED_MEMORY = "1g"  # the preflight refuses less than vLLM needs; podman's default is 64m
IMAGE_SKIP_REASON = f"{IMAGE_VARIABLE} is not set: build the images with images/build (make images)"


def runtime_image() -> str | None:
    return os.environ.get(IMAGE_VARIABLE) or None


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PODMAN), *args], capture_output=True, text=True, timeout=timeout, check=False)


@dataclass
class Container:
    """One run of an image: its `podman run` command line, and its removal whatever became of it."""

    image: str
    env: Mapping[str, str]
    mounts: Mapping[Path, str] = field(default_factory=dict)  # host path: container path (":ro" suffix allowed)
    entrypoint: Sequence[str] | None = None
    options: Sequence[str] = ()  # more `podman run` flags
    name: str = field(default_factory=lambda: f"specinfer-test-{uuid.uuid4().hex[:10]}")

    def argv(self, *args: str) -> list[str]:
        command = [str(PODMAN), "run", "--rm", "--name", self.name, "--network", "host", "--pull", "never"]
        command += ["--shm-size", SHARED_MEMORY]  # a pod's /dev/shm is an emptyDir of spec.resources.sharedMemory
        for key, value in self.env.items():
            command += ["--env", f"{key}={value}"]
        for host, inside in self.mounts.items():
            command += ["--volume", f"{host}:{inside}"]
        command += self.options
        if self.entrypoint is not None:
            command += ["--entrypoint", json.dumps(list(self.entrypoint))]
        return [*command, self.image, *args]

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run it to the end; removed afterwards whatever became of it."""
        try:
            return podman(*self.argv(*args)[1:], timeout=timeout)
        finally:
            self.remove()

    def remove(self) -> None:
        """`podman run --rm` removes a container that stops; this one that the test's stop did not reach."""
        podman("rm", "--force", "--time", "5", self.name, timeout=60)


def same_path(*paths: Path) -> dict[Path, str]:
    """Bind mounts of `paths` at their own paths."""
    return {p: str(p) for p in paths}
