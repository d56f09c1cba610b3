"""A real training run behind a simulated training pod (spec.learning).

kwok leaves spec.learning's training pods Running (hack/kwok-stages.yaml); this harness runs what their
container would: `specinfer-train` with the pod's own run, the claim's directory where the pod mounts the claim
(the directory the engines behind the resource's pods record into: hack/podengine.py), after its init container's
retention step (`--prune`, with this repository's runtime). When images/build has
built the trainer image (SPECINFER_BUILT_TRAINER_IMAGE) the run is the image's, as the pod's container; else the
engine venv's Python with this repository's runtime. Then it writes how the run ended into the pod's status, as
the kubelet would (its phase, the container's exit code and termination message), and the Job controller
completes or fails the Job.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hack.claims import claim_directory, claim_of
from hack.container import Container, same_path
from hack.engine import engine_variables
from hack.kubeclient import Cluster
from specinfer_operator.render.children import label_selector
from specinfer_operator.render.learning import LEARNING_PATH, LEARNING_VOLUME
from specinfer_operator.render.training import pod_labels

RUNTIME = Path(__file__).resolve().parents[1] / "runtime"
TRAINERS = label_selector({"app.kubernetes.io/name": pod_labels("")["app.kubernetes.io/name"]})
TIMEOUT = 1800.0
TRAINER_IMAGE = "SPECINFER_BUILT_TRAINER_IMAGE"  # images/build's; without it the run is the engine venv's


def local_run(pod: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """The pod's run, with the claim's directory in place of its mount path."""
    container = pod["spec"]["containers"][0]
    command = container["command"]
    run: dict[str, Any] = json.loads(command[command.index("--config") + 1])
    claim = claim_of(pod, LEARNING_VOLUME)
    assert claim is not None, f"pod {pod['metadata']['name']} mounts no learning claim"
    root = str(claim_directory(workdir, claim))
    return {k: v.replace(LEARNING_PATH, root, 1) if isinstance(v, str) else v for k, v in run.items()}


def _pod_env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0].get("env", []) if "value" in e}


@dataclass
class Trainers:
    """A real run behind every training pod of a namespace that kwok left running."""

    cluster: Cluster
    namespace: str
    env: dict[str, str]  # the engine venv's environment (hack/engine.py environment)
    workdir: Path
    runs: dict[str, int] = field(default_factory=dict)  # pod: exit code, once its run ended

    def pending(self) -> list[dict[str, Any]]:
        found = self.cluster.get("pods", "-n", self.namespace, "-l", TRAINERS)["items"]
        return [p for p in found if p["status"].get("phase") == "Running" and p["metadata"]["name"] not in self.runs]

    def train(self, pod: dict[str, Any]) -> int:
        """Run the pod's training and write how it ended into its status; the exit code."""
        name = pod["metadata"]["name"]
        self.runs[name] = -1
        termination = self.workdir / f"{name}.termination-log"
        termination.touch()
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        container = None
        command, env = self.command(pod, termination)
        with (self.workdir / f"{name}.log").open("ab") as log:  # the init container: retention, on the whole claim
            subprocess.run([*command, "--prune"], env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
        if TRAINER_IMAGE in os.environ:  # the trainer image, as the pod's container: the claim where the pod mounts it
            claim = claim_of(pod, LEARNING_VOLUME)
            assert claim is not None
            state = Path(self.env["VLLM_CACHE_ROOT"]).parent
            # What the node provides wins over the pod's: the tests' model cache at HF_HOME, the termination log
            # at the pod's path.
            variables = {k: v for k, v in engine_variables(self.env).items() if k != "SPECINFER_TERMINATION_LOG"}
            container = Container(
                os.environ[TRAINER_IMAGE],
                {**_pod_env(pod), **variables, "HF_HOME": self.env["HF_HOME"]},
                {
                    **same_path(Path(self.env["HF_HOME"]), state),
                    claim_directory(self.workdir, claim): LEARNING_PATH,
                    termination: "/dev/termination-log",
                },
            )
            command, env = container.argv(*pod["spec"]["containers"][0]["command"][1:]), self.env
        try:
            with (self.workdir / f"{name}.log").open("ab") as log:
                done = subprocess.run(
                    command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=TIMEOUT, check=False
                )
        finally:
            if container is not None:
                container.remove()
        message = termination.read_text()
        finished = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        terminated = {
            "exitCode": done.returncode,
            "reason": "Completed" if done.returncode == 0 else "Error",
            "message": message,
            "startedAt": started,
            "finishedAt": finished,
        }
        container = pod["spec"]["containers"][0]
        status = {
            "phase": "Succeeded" if done.returncode == 0 else "Failed",
            "containerStatuses": [
                {
                    "name": container["name"],
                    "image": container["image"],
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "state": {"terminated": terminated},
                }
            ],
        }
        patch = json.dumps({"status": status})
        self.cluster.kubectl(
            "patch", "pod", name, "-n", self.namespace, "--subresource=status", "--type=merge", "-p", patch
        )
        self.runs[name] = done.returncode
        return done.returncode

    def command(self, pod: dict[str, Any], termination: Path) -> tuple[list[str], dict[str, str]]:
        """The pod's training run with the engine venv's Python and this repository's runtime, on the claim's
        directory; and its environment."""
        env = {**self.env, **_pod_env(pod), "PYTHONPATH": str(RUNTIME), "HF_HOME": self.env["HF_HOME"]}
        run = json.dumps(local_run(pod, self.workdir))
        job = ["python", "-m", "specinfer_runtime.training.job"]
        return [*job, "--config", run, "--termination-log", str(termination)], env

    def follow(self, interval: float = 1.0) -> Callable[[], None]:
        """Train behind each training pod as it starts running, one at a time (the operator starts no more);
        gives the function that stops following (and waits for a run in progress)."""
        done = threading.Event()

        def watch() -> None:
            while not done.wait(interval):
                for pod in self.pending():
                    self.train(pod)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()

        def stop_following() -> None:
            done.set()
            watcher.join()

        return stop_following

    def tail(self, pod: str, lines: int = 40) -> str:
        log = self.workdir / f"{pod}.log"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""
