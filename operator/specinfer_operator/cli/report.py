"""What `validate` and `render` report: a line or a JSON entry per problem, naming the object and the file to fix,
and the tally the summary line and the exit code come from; and validate's check of the Helm values a repository
gives the specinfer charts (helm_values.py)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from specinfer_operator.cli.helm_values import Install, installs, oci_charts
from specinfer_operator.cli.helm_values import check as check_values
from specinfer_operator.cli.manifests import Deployer, Document, Item, LoadFailure, Skipped
from specinfer_operator.cli.output import say
from specinfer_operator.cli.yaml_documents import ManifestError
from specinfer_runtime.validation import Problem

EXIT_OK, EXIT_INVALID, EXIT_UNREADABLE = 0, 1, 2


def problem_dict(doc: Document, problem: Problem) -> dict[str, str]:
    found = {"path": problem.path, "message": problem.message, "rule": problem.rule}
    where = doc.where(problem)
    return found | {"source": where[1]} if where else found


def problem_line(doc: Document, problem: Problem, kind: str = "") -> str:
    """`LABEL: field.path: message`, and for a built object the file to fix: `(set in overlays/prod/k.yaml)`."""
    where = doc.where(problem)
    return f"{doc.label}: {kind}{problem}" + (f" ({' '.join(where)})" if where else "")


def object_name(doc: Document) -> str | None:
    meta = doc.data.get("metadata") if isinstance(doc.data, dict) else None
    return meta.get("name") if isinstance(meta, dict) else None


@dataclass
class Tally:
    """What a run went through: the summary line and the exit code come from it."""

    checked: int = 0
    invalid: int = 0
    failed: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    values_checked: int = 0  # installs of a specinfer chart whose values were checked
    values_invalid: int = 0

    def summary(self) -> str:
        parts = [f"{len(self.skipped)} skipped (-v says why)"] if self.skipped else []
        if self.failed:
            parts.insert(0, f"{self.failed} unreadable")
        if self.values_checked:
            valid = self.values_checked - self.values_invalid
            parts.insert(0, f"{self.values_checked} chart values checked: {valid} valid, {self.values_invalid} invalid")
        if self.checked:
            valid = self.checked - self.invalid
            head = f"{self.checked} SpeculativeInference checked: {valid} valid, {self.invalid} invalid"
        elif self.failed:
            head = "no SpeculativeInference checked"
        elif self.values_checked:
            head = "no SpeculativeInference found"
        else:
            head = "nothing to check: no SpeculativeInference nor specinfer chart values"
        return "; ".join([head, *parts])

    def code(self) -> int:
        return EXIT_UNREADABLE if self.failed else EXIT_INVALID if self.invalid or self.values_invalid else EXIT_OK


def count(item: Item, tally: Tally, err: TextIO, verbose: bool) -> Document | None:
    """Count a failure or a skip (and say so); hand documents on."""
    if isinstance(item, Deployer):
        item = item.skipped()
    if isinstance(item, LoadFailure):
        tally.failed += 1
        say(str(item), err)
        return None
    if isinstance(item, Skipped):
        tally.skipped.append(item)
        if verbose:
            say(str(item), err)
        return None
    tally.checked += 1
    return item


def _chart_installs(deployers: list[Deployer]) -> Iterator[Skipped | LoadFailure | tuple[Document, Install]]:
    """Each install of a specinfer chart the Applications and HelmReleases declare; the other objects skipped.
    A HelmRelease's chartRef is looked up among the OCIRepositories of every path given."""
    oci = {name: chart for d in deployers for name, chart in oci_charts(d.document.data).items()}
    for deployer in deployers:
        doc = deployer.document
        try:
            found = installs(doc.data, oci)
        except ManifestError as error:  # helm.values that is not YAML within the limits: as any file that is not
            yield LoadFailure(doc.label, str(error))
            continue
        if isinstance(found, str):
            yield Skipped(doc.label, f"values not checked: {found}")
        elif not found:
            yield Skipped(doc.label, f"{deployer.reason}, installing no specinfer chart")
        else:
            yield from ((doc, install) for install in found)


def validate_values(
    deployers: list[Deployer], tally: Tally, args: argparse.Namespace, out: TextIO, err: TextIO
) -> list[dict[str, Any]]:
    """The Helm values given the specinfer charts, against their schemas; the results -o json lists."""
    results: list[dict[str, Any]] = []
    for found in _chart_installs(deployers):
        if isinstance(found, Skipped | LoadFailure):
            failed = isinstance(found, LoadFailure)
            results.append({"file": found.source, "error" if failed else "skipped": found.reason})
            count(found, tally, err, args.verbose)
            continue
        doc, install = found
        problems = check_values(install)
        tally.values_checked += 1
        tally.values_invalid += bool(problems)
        results.append(
            {
                "file": doc.source,
                "document": doc.index,
                "name": object_name(doc),
                "kind": doc.data.get("kind"),
                "chart": install.chart,
                "valid": not problems,
                "errors": [problem_dict(doc, p) for p in problems],
            }
        )
        if args.output == "text":
            for problem in problems:
                say(problem_line(doc, problem), out)
    return results
