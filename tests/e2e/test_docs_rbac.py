"""The RBAC table of docs/security.md is what the chart grants: one row per resource, its verbs exactly."""

from __future__ import annotations

import re
from pathlib import Path

from hack.kubeclient import Cluster
from tests.e2e.test_chart import render

PAGE = Path(__file__).resolve().parents[2] / "docs" / "security.md"
ROW = re.compile(r"^\| `([a-z/]+)`[^|]* \| ([a-z, ]+) \|", re.M)


def documented() -> dict[str, set[str]]:
    section = PAGE.read_text().split("## The RBAC the chart grants", 1)[1].split("\n## ", 1)[0]
    return {resource: set(verbs.split(", ")) for resource, verbs in ROW.findall(section)}


def test_the_security_page_lists_every_rule_the_chart_grants(cluster: Cluster, namespace: str) -> None:
    granted: dict[str, set[str]] = {}
    every = "leaderWorkerSet.enabled=true,leaderElection.enabled=true,keda.prometheusAddress=http://prometheus:9090"
    documents = render(cluster, namespace, ["--set", every])
    for role in (d for d in documents if d["kind"] in ("ClusterRole", "Role")):
        for rule in role["rules"]:
            for resource in rule.get("resources", []):  # the metrics reader's role names a URL, no resource
                granted.setdefault(resource, set()).update(rule["verbs"])
    assert documented() == granted
