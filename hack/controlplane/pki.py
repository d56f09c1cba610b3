"""The cluster's PKI, made with the openssl command line (the standard library cannot sign certificates):
a CA and a front-proxy CA, the API server's and the LWS webhook's serving certificates, a client
certificate per component, the service-account key pair, and the kubeconfigs that carry them.
"""

import base64
import os
import secrets
import shutil
import subprocess
import tempfile

from .console import die, log
from .layout import SERVICE_IP, StateDir

# Client certificates: name -> subject (admin, kwok and lws get cluster-admin via system:masters).
CLIENTS = {
    "admin": "/O=system:masters/CN=kubernetes-admin",
    "kube-controller-manager": "/CN=system:kube-controller-manager",
    "kube-scheduler": "/CN=system:kube-scheduler",
    "kwok": "/O=system:masters/CN=kwok-controller",
    "lws": "/O=system:masters/CN=lws-controller",
}
APISERVER_SANS = [
    "DNS:localhost",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local",
    "IP:127.0.0.1",
    f"IP:{SERVICE_IP}",
]


def ensure_openssl() -> None:
    if shutil.which("openssl"):
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        log("openssl not found; installing it with apt-get")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "openssl"], check=True, env=env)
    if not shutil.which("openssl"):
        die("openssl is required (apt-get install openssl)")


def openssl(*args: str) -> str:
    r = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if r.returncode != 0:
        die(f"openssl {' '.join(args)} failed:\n{r.stderr}")
    return r.stdout


def gen_key(path: str) -> None:
    openssl("genrsa", "-out", path, "2048")
    os.chmod(path, 0o600)


def gen_ca(pki: str, name: str, cn: str) -> None:
    key, crt = os.path.join(pki, f"{name}.key"), os.path.join(pki, f"{name}.crt")
    gen_key(key)
    with tempfile.NamedTemporaryFile("w", suffix=".cnf", delete=False) as f:
        f.write(
            f"[req]\ndistinguished_name=dn\nprompt=no\nx509_extensions=v3\n[dn]\nCN={cn}\n"
            "[v3]\nbasicConstraints=critical,CA:TRUE\nkeyUsage=critical,digitalSignature,keyEncipherment,keyCertSign\n"
            "subjectKeyIdentifier=hash\n"
        )
        cnf = f.name
    try:
        openssl("req", "-x509", "-new", "-nodes", "-key", key, "-sha256", "-days", "3650", "-config", cnf, "-out", crt)
    finally:
        os.unlink(cnf)


def gen_cert(pki: str, name: str, subject: str, usage: str, sans: list[str] | None = None, ca: str = "ca") -> None:
    """Leaf cert signed by a local CA. subject like '/O=system:masters/CN=admin'."""
    key, csr, crt = (os.path.join(pki, f"{name}.{e}") for e in ("key", "csr", "crt"))
    gen_key(key)
    with tempfile.NamedTemporaryFile("w", suffix=".cnf", delete=False) as f:
        f.write(
            "[req]\ndistinguished_name=dn\n[dn]\n[ext]\nbasicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            f"extendedKeyUsage={usage}\nauthorityKeyIdentifier=keyid,issuer\n"
        )
        if sans:
            f.write(f"subjectAltName={','.join(sans)}\n")
        cnf = f.name
    try:
        openssl("req", "-new", "-key", key, "-subj", subject, "-config", cnf, "-out", csr)
        ca_crt, ca_key, serial = os.path.join(pki, f"{ca}.crt"), os.path.join(pki, f"{ca}.key"), secrets.token_hex(12)
        openssl(
            *("x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-set_serial", "0x" + serial),
            *("-days", "3650", "-sha256", "-extfile", cnf, "-extensions", "ext", "-out", crt),
        )
    finally:
        os.unlink(cnf)
        os.unlink(csr)


def ensure_pki(state: StateDir) -> None:
    """Create whatever PKI material is missing (idempotent)."""
    pki = state.pki
    os.makedirs(pki, exist_ok=True)
    os.chmod(pki, 0o700)

    def have(name: str) -> bool:
        return os.path.exists(os.path.join(pki, name))

    if not have("ca.crt"):
        log("generating PKI (CA, front-proxy CA, apiserver serving cert, client certs, service-account keys)")
        gen_ca(pki, "ca", "specinfer-local-ca")
    if not have("front-proxy-ca.crt"):
        gen_ca(pki, "front-proxy-ca", "specinfer-front-proxy-ca")
    if not have("apiserver.crt"):
        gen_cert(pki, "apiserver", "/CN=kube-apiserver", "serverAuth", APISERVER_SANS)
    for name, subj in CLIENTS.items():
        if not have(f"{name}.crt"):
            gen_cert(pki, name, subj, "clientAuth")
    if not have("lws-webhook.crt"):
        gen_cert(pki, "lws-webhook", "/CN=lws-webhook", "serverAuth", ["IP:127.0.0.1"])
    if not have("front-proxy-client.crt"):
        gen_cert(pki, "front-proxy-client", "/CN=front-proxy-client", "clientAuth", ca="front-proxy-ca")
    if not have("sa.pub"):
        gen_key(os.path.join(pki, "sa.key"))
        openssl("rsa", "-in", os.path.join(pki, "sa.key"), "-pubout", "-out", os.path.join(pki, "sa.pub"))


def b64file(path: str) -> str:
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def write_kubeconfig(state: StateDir, path: str, user: str, api_port: int) -> None:
    """A kubeconfig for user (a CLIENTS name) with its certificate embedded; written atomically, mode 0600."""
    server = f"https://127.0.0.1:{api_port}"
    content = f"""apiVersion: v1
kind: Config
clusters:
- name: specinfer
  cluster:
    server: {server}
    certificate-authority-data: {b64file(os.path.join(state.pki, "ca.crt"))}
users:
- name: {user}
  user:
    client-certificate-data: {b64file(os.path.join(state.pki, user + ".crt"))}
    client-key-data: {b64file(os.path.join(state.pki, user + ".key"))}
contexts:
- name: specinfer
  context:
    cluster: specinfer
    user: {user}
current-context: specinfer
"""
    tmp = path + ".tmp"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(content)
    os.replace(tmp, path)


def write_kubeconfigs(state: StateDir, api_port: int) -> None:
    """The admin kubeconfig and one for each component that talks to the API server."""
    write_kubeconfig(state, state.kubeconfig, "admin", api_port)
    for c in ("kube-controller-manager", "kube-scheduler", "kwok", "lws"):
        write_kubeconfig(state, state.kubeconfig_for(c), c, api_port)
