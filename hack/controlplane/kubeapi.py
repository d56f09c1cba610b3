"""HTTP(S) on loopback with urllib: the health endpoints of the components and a minimal JSON client of the
API server (admin client certificate), so that hack/cluster needs neither kubectl nor a Kubernetes client
library to bring the cluster up.
"""

import json
import os
import ssl
import urllib.error
import urllib.request
from typing import Any, TypeAlias

# A decoded JSON object (API objects, lists, Status): the shapes come from the API server, not from here.
JsonObject: TypeAlias = dict[str, Any]


def tls_context(pki: str) -> ssl.SSLContext:
    """Verifies servers against the cluster CA in the pki dir and presents the admin client certificate."""
    c = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
    c.load_cert_chain(os.path.join(pki, "admin.crt"), os.path.join(pki, "admin.key"))
    return c


def insecure_context() -> ssl.SSLContext:
    """For health endpoints served with self-signed certificates (controller-manager, scheduler)."""
    c = ssl.create_default_context()
    c.check_hostname = False
    c.verify_mode = ssl.CERT_NONE
    return c


def http_get(url: str, ctx: ssl.SSLContext | None = None, timeout: float = 3) -> tuple[int | None, str]:
    """(status, body); status None when nothing answered."""
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (OSError, ssl.SSLError) as e:
        return None, str(e)


class Api:
    """The API server on 127.0.0.1:port, as the admin user."""

    def __init__(self, port: int, pki: str) -> None:
        self.base = f"https://127.0.0.1:{port}"
        self.ctx = tls_context(pki)

    def req(
        self, method: str, path: str, body: JsonObject | None = None, ctype: str = "application/json"
    ) -> tuple[int | None, JsonObject]:
        """(status, decoded body); status None (and {"error": ...}) when the API server did not answer."""
        data = json.dumps(body).encode() if body is not None else None
        r = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            r.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(r, context=self.ctx, timeout=10) as resp:
                loaded: JsonObject = json.loads(resp.read() or b"{}")
                return resp.status, loaded
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                loaded = json.loads(raw)
                return e.code, loaded
            except ValueError:
                return e.code, {"raw": raw.decode(errors="replace")}
        except (OSError, ssl.SSLError) as e:
            return None, {"error": str(e)}
