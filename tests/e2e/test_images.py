"""The operator image (Dockerfile, built by images/build) run as the chart runs it: its own non-root user, no
capabilities, a read-only root filesystem, /tmp an emptyDir. It must reconcile an example on the test cluster like the
operator process the rest of the suite runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hack.container import Container, podman, runtime_image
from hack.kubeclient import Cluster, pods, wait_until
from tests.e2e.conftest import free_port, local_get
from tests.e2e.test_operator import wait_ready

OPERATOR_IMAGE_VARIABLE = "SPECINFER_BUILT_OPERATOR_IMAGE"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ngram.yaml"
USER = "65532:65532"  # the chart's runAsUser

pytestmark = pytest.mark.skipif(
    not os.environ.get(OPERATOR_IMAGE_VARIABLE),
    reason=f"{OPERATOR_IMAGE_VARIABLE} is not set: build the images with images/build (make images)",
)


@pytest.mark.usefixtures("no_shared_operator")
def test_the_operator_image_reconciles_an_example(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    image = os.environ[OPERATOR_IMAGE_VARIABLE]
    assert podman("image", "inspect", "--format", "{{.Config.User}}", image).stdout.strip() == USER
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(Path(cluster.kubeconfig).read_text())
    kubeconfig.chmod(0o644)  # as a mounted Secret: readable by the image's user
    metrics, health = free_port(), free_port()
    runtime = runtime_image() or "registry.example.com/specinfer-runtime:test"
    container = Container(
        image,
        {"KUBECONFIG": "/etc/specinfer/kubeconfig"},
        {kubeconfig: "/etc/specinfer/kubeconfig:ro"},
        # The chart's securityContext: no privilege escalation, every capability dropped, a read-only root
        # filesystem; /tmp is an emptyDir.
        options=[
            *("--security-opt", "no-new-privileges", "--cap-drop", "ALL"),
            *("--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp"),
        ],
    )
    argv = container.argv(
        *("--namespace", namespace, "--health-port", str(health)),
        *("--metrics-bind-address", f"127.0.0.1:{metrics}", "--metrics-secure=false"),
        *("--runtime-image", runtime),
    )
    log = (tmp_path / "operator.log").open("wb")
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until("the operator image's health endpoint", lambda: local_get(health, "/healthz"), timeout=60)
        assert podman("exec", container.name, "id", "-u").stdout.strip() == USER.split(":")[0]
        written = podman("exec", "--user", "0", container.name, "touch", "/written")  # even root may not write
        assert "Read-only file system" in written.stderr, written
        cluster.kubectl("apply", "-n", namespace, "-f", str(EXAMPLE))
        obj = wait_ready(cluster, namespace, "llama3-ngram")
        assert obj["status"]["ready"] == "1/1"
        (pod,) = pods(cluster, namespace, "llama3-ngram")
        assert pod["spec"]["containers"][0]["image"] == runtime
        assert "specinfer_reconciles_total" in local_get(metrics, "/metrics")
    finally:
        process.terminate()
        process.wait(timeout=30)
        container.remove()
        log.close()
    output = (tmp_path / "operator.log").read_text(errors="replace")
    assert "Traceback" not in output, output[-4000:]
