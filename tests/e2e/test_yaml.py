"""specinfer reads YAML as kubectl does: YAML 1.1's surprises compared with kubectl's own reading."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hack.kubeclient import Cluster
from specinfer_operator.cli.yaml_documents import ManifestError, documents

# Values as written in a manifest, plain unless quoted or tagged.
VALUES = [
    "yes", "Yes", "YES", "on", "off", "y", "n", "true", "False", "~", "null", "",
    "2024-01-01", "2001-12-14t21:59:43.10-05:00", "1:30", "12:30:45", "1.2.3",
    "0755", "0x1F", "0o17", "0b101", "-0b11", "1_000", "+12", "-7",
    "1e3", ".5", "1.", "1.0", "1.5e-7", "0.1", "1e20", "1e21",
    "9223372036854775807", "9223372036854775808", "18446744073709551616", "012345678901234567890",
    "'quoted'", '"0755"', "!!str 12", "!!int '42'", "!!float 3", "!!binary aGVsbG8=", "!Ref name", "!!bool yes",
]  # fmt: skip
# Keys that are not strings: kubectl makes them strings.
KEYS = ["y", "n", "1", "true", "on", "1.5"]


def manifest() -> str:
    lines = ["apiVersion: v1", "kind: ConfigMap", "metadata: {name: yaml11}", "data:"]
    lines += [f"  v{i}: {value}" for i, value in enumerate(VALUES)]
    lines += [f"  k{i}: {{{key}: key{i}}}" for i, key in enumerate(KEYS)]  # one map each: y, true, on collide
    return "\n".join(lines) + "\n"


def same(kubectl: Any, ours: Any) -> bool:
    """Equal as JSON: numbers compare by value, whichever side Go or Python printed as int or float."""
    if isinstance(kubectl, dict) and isinstance(ours, dict):
        return kubectl.keys() == ours.keys() and all(same(kubectl[k], ours[k]) for k in kubectl)
    numbers = (int, float)
    if isinstance(kubectl, numbers) and isinstance(ours, numbers) and not isinstance(kubectl, bool):
        return not isinstance(ours, bool) and float(kubectl) == float(ours)
    return bool(kubectl == ours)


def kubectl_reads(cluster: Cluster, path: Path) -> dict[str, Any]:
    result = cluster.kubectl("create", "--dry-run=client", "--validate=false", "-o", "json", "-f", str(path))
    loaded: dict[str, Any] = json.loads(result.stdout)
    return loaded


def test_values_read_as_kubectl_reads_them(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "yaml11.yaml"
    path.write_text(manifest())
    theirs = kubectl_reads(cluster, path)["data"]
    (ours,) = documents(path.read_text())
    mine = json.loads(json.dumps(ours.data["data"]))
    differ = {
        k: (theirs.get(k), mine.get(k)) for k in theirs.keys() | mine.keys() if not same(theirs.get(k), mine.get(k))
    }
    assert not differ, differ
    with capsys.disabled():
        print(f"\nyaml: {len(VALUES)} values and {len(KEYS)} keys read as kubectl reads them")


def test_what_kubectl_cannot_read_is_refused(cluster: Cluster, tmp_path: Path) -> None:
    for entry in ("a: .nan", "a: .inf", "a: -.Inf", "~: x", "[a, b]: x"):
        path = tmp_path / "special.yaml"
        path.write_text(f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x}}\ndata:\n  {entry}\n")
        assert cluster.kubectl("create", "--dry-run=client", "-o", "json", "-f", str(path), check=False).returncode != 0
        with pytest.raises(ManifestError, match="JSON"):
            list(documents(path.read_text()))


def test_a_repeated_key_kubectl_takes_silently_is_refused(cluster: Cluster, tmp_path: Path) -> None:
    """Stricter than kubectl on purpose: kubectl 1.35 keeps the last value, which hides `K: 4` then `K: 20`."""
    path = tmp_path / "dup.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n  a: '4'\n  a: '20'\n")
    assert kubectl_reads(cluster, path)["data"] == {"a": "20"}
    with pytest.raises(ManifestError, match='key "a" already set'):
        list(documents(path.read_text()))
