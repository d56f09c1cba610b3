"""What an engine pod asks of its node (pure): a share of an Ascend NPU node for each NPU it requests, every
figure overridable in spec.resources (docs/pod-template.md#sizing says why these).

An Atlas 800 A2 server has 8 NPUs of 64 GB, 192 cores and 1 to 2 TiB of memory. Per NPU a pod requests:

- 16 CPUs, of the 24 an even share would be, leaving the rest to the node's daemons (the device plugin, the
  kubelet, the network).
- 64 GiB of memory, the NPU's own: the weights a rank loads pass through host memory on their way to the
  NPU, and fit it; and the pod's sharedMemory once, as /dev/shm is memory counted against its limit.

Limits equal requests, in whole CPUs: a Guaranteed pod, the QoS class evicted last and the only one to which
the kubelet's static CPU manager gives cores of its own, aligned with its NPUs by the Topology Manager, within
which vLLM-Ascend binds its workers. Download directories (emptyDirs) are limited to what the weights can take
(download_limit), and the pod requests that node disk as ephemeral-storage.
"""

from __future__ import annotations

import math
from typing import Any

from specinfer_operator.api.container import ResourceSettings
from specinfer_operator.api.overlay import Container
from specinfer_operator.api.resource import SpeculativeInferenceSpec
from specinfer_runtime.celrules import KUBERNETES_FUNCTIONS
from specinfer_runtime.parallelism import Parallelism
from specinfer_runtime.validation import Problem

CPU_PER_NPU = 16
NPU_MEMORY = 64 * 1024**3  # bytes: the memory of a 910B NPU, or of an A3 die
UNITS = {"Ti": 1024**2, "Gi": 1024, "Mi": 1}  # in MiB


def amount(value: int | str) -> float:
    """A quantity's value, as the CEL rules' quantity() reads it; an integer is a plain number of units."""
    return float(KUBERNETES_FUNCTIONS["quantity"](str(value)))


def weight_npus(parallelism: Parallelism) -> int:
    """NPUs that hold one copy of the weights: data parallelism copies them, but expert parallelism shards
    the experts over every rank."""
    return parallelism.npus() // (1 if parallelism.expert else parallelism.data)


def size(total: float) -> str:
    """Bytes as a quantity, rounded up to a whole MiB, in the largest unit that keeps it whole."""
    mib = math.ceil(total / 2**20)
    unit = next(u for u in ("Ti", "Gi", "Mi") if mib % UNITS[u] == 0)
    return f"{mib // UNITS[unit]}{unit}"


def download_limit(resources: ResourceSettings, parallelism: Parallelism) -> str:
    """The size limit of a download directory: resources.modelCache, or the memory of the NPUs that hold one
    copy of the weights, which the weights (and a draft beside them) fit; each pod of a group downloads all."""
    return resources.model_cache or size(NPU_MEMORY * weight_npus(parallelism))


def engine_resources(spec: SpeculativeInferenceSpec, npu: str, downloads: list[dict[str, Any]]) -> dict[str, Any]:
    """Requests and limits of the engine container; `downloads` are the pod's download emptyDirs. An unset
    request is the limit when one is set, as Kubernetes takes it, else the per-NPU share."""
    res, npus = spec.resources, spec.npus_per_pod()
    cpu = res.cpu or res.cpu_limit or str(CPU_PER_NPU * npus)
    memory = res.memory or res.memory_limit or size(NPU_MEMORY * npus + amount(res.shared_memory))
    requests = {npu: str(npus), "cpu": cpu, "memory": memory}
    limits = {npu: str(npus), "cpu": res.cpu_limit or cpu, "memory": res.memory_limit or memory}
    if downloads:
        requests["ephemeral-storage"] = size(sum(amount(v["emptyDir"]["sizeLimit"]) for v in downloads))
    return {"requests": requests, "limits": limits}


def guaranteed(requests: dict[str, Any], limits: dict[str, Any]) -> bool:
    """Whether a container counts towards a Guaranteed pod: cpu and memory limits, requests equal to them
    (an unset request is the limit)."""
    return all(r in limits and amount(requests.get(r, limits[r])) == amount(limits[r]) for r in ("cpu", "memory"))


def _sidecar(container: Container) -> bool:
    res = container.resources
    limits = res.limits.dump() if res and res.limits else {}
    return guaranteed(res.requests.dump() if res and res.requests else {}, limits)


def qos_warnings(spec: SpeculativeInferenceSpec) -> list[Problem]:
    """Sidecars that make Burstable a pod whose engine is sized Guaranteed: Kubernetes counts every container,
    init containers included."""
    engine = engine_resources(spec, "npu", [])
    overlay = spec.pod_template.spec if spec.pod_template else None
    if overlay is None or not guaranteed(engine["requests"], engine["limits"]):
        return []
    return [
        Problem(
            f"spec.podTemplate.spec.{kind}[{i}].resources",
            f"{container.name} has no cpu and memory limits equal to its requests, so the engine pods are Burstable, "
            "not Guaranteed as the engine is sized: evicted before Guaranteed pods, and given no cores of their own "
            "by the kubelet's static CPU manager: set its cpu and memory limits (requests default to them)",
            "pod",
        )
        for kind, containers in (("containers", overlay.containers), ("initContainers", overlay.init_containers))
        for i, container in enumerate(containers or [])
        if not _sidecar(container)
    ]
