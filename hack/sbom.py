"""The SPDX 2.3 SBOM of a built image, from what the image itself has installed: its Debian packages (dpkg's
database) and its Python distributions (the metadata of every distribution the image's `python` imports from).
make release writes one per image into dist/sbom/ and attaches it to the pushed image as a signed attestation.
"""

import json
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

# Run by the image's own `python` (no network, nothing written): the packages it holds, as JSON on stdout.
PROBE = r"""
import importlib.metadata, json, shutil, subprocess
python = sorted({
    (d.metadata["Name"], d.version, d.metadata.get("License-Expression") or "")
    for d in importlib.metadata.distributions() if d.metadata["Name"]
})
debian = []
if shutil.which("dpkg-query"):
    fields = "${Package}\t${Version}\t${Architecture}\t${source:Package}\n"
    out = subprocess.run(["dpkg-query", "-W", "-f", fields], capture_output=True, text=True, check=True).stdout
    debian = sorted(tuple(line.split("\t")) for line in out.splitlines() if line)
print(json.dumps({"python": python, "debian": debian}))
"""


@dataclass(frozen=True)
class Package:
    """One installed package: its ecosystem ("pypi" or "deb"), name, version and what purl names it."""

    ecosystem: str
    name: str
    version: str
    purl: str
    license: str = "NOASSERTION"


def probe(podman: Sequence[str], image: str) -> list[Package]:
    """The packages installed in `image`, read by running its `python` without a network."""
    argv = [*podman, "run", "--rm", "--network", "none", "--user", "0", "--entrypoint", "python", image, "-c", PROBE]
    found = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    return packages(found["python"], found["debian"])


def packages(python: list[list[str]], debian: list[list[str]]) -> list[Package]:
    """The probe's rows as packages: Python distributions under their normalized PyPI name (PEP 503), Debian
    packages with their architecture and, when it differs, their source package."""
    found = []
    for name, version, license_expression in python:
        normalized = re.sub(r"[-_.]+", "-", name).lower()
        purl = f"pkg:pypi/{normalized}@{version}"
        found.append(Package("pypi", normalized, version, purl, license_expression or "NOASSERTION"))
    for name, version, arch, source in debian:
        qualifiers = f"arch={arch}" + (f"&upstream={source}" if source and source != name else "")
        found.append(Package("deb", name, version, f"pkg:deb/debian/{name}@{version}?{qualifiers}"))
    return found


def _spdx_id(prefix: str, index: int, name: str) -> str:
    """An SPDX identifier (letters, digits, '.' and '-' only), unique through its index."""
    return f"SPDXRef-{prefix}-{index}-" + re.sub(r"[^A-Za-z0-9.-]", "-", name)


def document(
    image: str, digest: str, revision: str, created: str, source: str, found: list[Package]
) -> dict[str, object]:
    """An SPDX 2.3 document: the image `repository:version` pushed as `digest` DESCRIBED, CONTAINS each of its
    packages."""
    repository, version = image.rsplit(":", 1)
    name = repository.rsplit("/", 1)[-1]
    purl = f"pkg:oci/{name}@{digest.replace(':', '%3A')}?repository_url={repository}&tag={version}"
    root = "SPDXRef-image"
    rows: list[dict[str, object]] = [
        {
            "name": name,
            "SPDXID": root,
            "versionInfo": version,
            "downloadLocation": "NOASSERTION",
            "filesAnalyzed": False,
            "primaryPackagePurpose": "CONTAINER",
            "sourceInfo": f"built from {source} at revision {revision}",
            "externalRefs": [
                {
                    "referenceCategory": "PACKAGE-MANAGER",
                    "referenceType": "purl",
                    "referenceLocator": purl,
                }
            ],
        }
    ]
    relationships = [{"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES", "relatedSpdxElement": root}]
    for index, package in enumerate(found):
        spdx_id = _spdx_id(package.ecosystem, index, package.name)
        rows.append(
            {
                "name": package.name,
                "SPDXID": spdx_id,
                "versionInfo": package.version,
                "downloadLocation": "NOASSERTION",
                "filesAnalyzed": False,
                "licenseDeclared": package.license,
                "externalRefs": [
                    {"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl", "referenceLocator": package.purl}
                ],
            }
        )
        relationships.append({"spdxElementId": root, "relationshipType": "CONTAINS", "relatedSpdxElement": spdx_id})
    return {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": f"{name}-{version}",
        "documentNamespace": f"{source}/spdx/{name}-{version}-{revision}",
        "creationInfo": {"created": created, "creators": ["Tool: specinfer-release"]},
        "documentDescribes": [root],
        "packages": rows,
        "relationships": relationships,
    }
