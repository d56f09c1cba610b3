"""Where the control plane's files live and which versions run: the one module that reads the environment
(SPECINFER_CACHE, SPECINFER_CLUSTER_DIR) and hack/versions.env, so every other module takes its paths
from a StateDir instead of globals of its own.
"""

import os
import subprocess
import time
from dataclasses import dataclass

from .console import die, log

HACK_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
CACHE = os.environ.get("SPECINFER_CACHE") or os.path.expanduser("~/.cache/specinfer")
BIN = os.path.join(CACHE, "bin")

# The Service network; the API server's serving certificate names its first address.
SERVICE_CIDR = "10.96.0.0/12"
SERVICE_IP = "10.96.0.1"


@dataclass(frozen=True)
class StateDir:
    """A state dir: pidfiles (run/), logs (logs/) and whatever the processes started from it need."""

    root: str

    def path(self, name: str) -> str:
        return os.path.join(self.root, name)

    @property
    def pki(self) -> str:
        return self.path("pki")

    @property
    def logs(self) -> str:
        return self.path("logs")

    @property
    def run(self) -> str:
        return self.path("run")

    @property
    def conf(self) -> str:
        """cluster.json: the ports, versions and node counts the cluster was created with."""
        return self.path("cluster.json")

    @property
    def kubeconfig(self) -> str:
        """The admin kubeconfig (`hack/cluster kubeconfig`)."""
        return self.path("kubeconfig")

    def kubeconfig_for(self, comp: str) -> str:
        return self.kubeconfig if comp == "admin" else self.path(f"{comp}.kubeconfig")


# The local cluster's state dir.
STATE = StateDir(os.environ.get("SPECINFER_CLUSTER_DIR") or os.path.join(CACHE, "cluster"))
# `fake-nodes`: the kwok run against another cluster (only run/ and logs/ are used).
FAKE_NODES_STATE = StateDir(os.path.join(CACHE, "fake-nodes"))


def read_versions() -> dict[str, str]:
    v = {}
    with open(os.path.join(HACK_DIR, "versions.env")) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, val = line.split("=", 1)
                v[k.strip()] = val.strip().strip('"').strip("'")
    return v


VERSIONS = read_versions()
BIN_VERSION = {
    "etcd": VERSIONS["ETCD_VERSION"],
    "kube-apiserver": VERSIONS["KUBERNETES_VERSION"],
    "kube-controller-manager": VERSIONS["KUBERNETES_VERSION"],
    "kube-scheduler": VERSIONS["KUBERNETES_VERSION"],
    "kubectl": VERSIONS["KUBERNETES_VERSION"],
    "kwok": VERSIONS["KWOK_VERSION"],
    "helm": VERSIONS["HELM_VERSION"],
    "lws": VERSIONS["LWS_VERSION"],
}


def binpath(name: str) -> str:
    return os.path.join(BIN, f"{name}-{BIN_VERSION[name]}")


def ensure_binaries() -> None:
    missing = [n for n in BIN_VERSION if not os.access(binpath(n), os.X_OK)]
    if not missing:
        return
    log(f"binaries missing ({', '.join(missing)}); running hack/build-binaries.sh (first build takes a while)")
    t0 = time.time()
    r = subprocess.run([os.path.join(HACK_DIR, "build-binaries.sh")])
    if r.returncode != 0:
        die("hack/build-binaries.sh failed")
    log(f"build finished in {time.time() - t0:.1f}s")
