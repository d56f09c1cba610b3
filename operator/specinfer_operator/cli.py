"""The `specinfer` command: validate and render manifests, print the CRD or an editor schema."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import yaml

from specinfer_operator import __version__
from specinfer_operator.children import DEFAULT_NPU_RESOURCE, DEFAULT_RUNTIME_IMAGE, RenderDefaults, render
from specinfer_operator.crd import crd_yaml, editor_schema
from specinfer_operator.manifests import Document, LoadFailure, check, is_ours, load
from specinfer_runtime.validation import Problem

EXIT_OK, EXIT_INVALID, EXIT_UNREADABLE = 0, 1, 2


def _problem_dict(problem: Problem) -> dict[str, str]:
    return {"path": problem.path, "message": problem.message, "rule": problem.rule}


def _name(doc: Document) -> str | None:
    meta = doc.data.get("metadata") if isinstance(doc.data, dict) else None
    return meta.get("name") if isinstance(meta, dict) else None


def cmd_validate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    results: list[dict[str, Any]] = []
    failures = checked = invalid = 0
    for item in load(args.paths):
        if isinstance(item, LoadFailure):
            failures += 1
            results.append({"file": item.source, "error": item.reason})
            if args.output == "text":
                print(str(item), file=err)
            continue
        if not is_ours(item.data):
            continue
        checked += 1
        report = check(item.data)
        invalid += not report.ok
        results.append(
            {
                "file": item.source,
                "document": item.index,
                "name": _name(item),
                "valid": report.ok,
                "errors": [_problem_dict(p) for p in report.errors],
                "warnings": [_problem_dict(p) for p in report.warnings],
            }
        )
        if args.output == "text":
            for problem in report.errors:
                print(f"{item.label}: {problem}", file=out)
            for problem in report.warnings:
                print(f"{item.label}: warning: {problem}", file=err)
    if args.output == "json":
        json.dump(results, out, indent=2)
        out.write("\n")
    elif not args.quiet:
        print(f"{checked} SpeculativeInference checked: {checked - invalid} valid, {invalid} invalid", file=err)
    if failures:
        return EXIT_UNREADABLE
    return EXIT_INVALID if invalid else EXIT_OK


def cmd_render(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    defaults = RenderDefaults(runtime_image=args.runtime_image, npu_resource_name=args.npu_resource_name)
    objects: list[dict[str, Any]] = []
    status = EXIT_OK
    for item in load(args.paths):
        if isinstance(item, LoadFailure):
            print(str(item), file=err)
            status = EXIT_UNREADABLE
            continue
        if not is_ours(item.data):
            continue
        report = check(item.data)
        for problem in report.errors:
            print(f"{item.label}: {problem}", file=err)
        if report.value is None:
            status = max(status, EXIT_INVALID)
            continue
        objects += render(report.value, defaults)
    if status == EXIT_OK:
        yaml.safe_dump_all(objects, out, sort_keys=False, width=1000)
    return status


def cmd_crd(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    out.write(crd_yaml())
    return EXIT_OK


def cmd_schema(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    json.dump(editor_schema(), out, indent=2)
    out.write("\n")
    return EXIT_OK


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="specinfer",
        description="Validate and render SpeculativeInference resources (vLLM-Ascend speculative decoding).",
    )
    top.add_argument("--version", action="version", version=f"specinfer {__version__}")
    sub = top.add_subparsers(dest="command", required=True)

    v = sub.add_parser(
        "validate",
        help="check manifests the way the API server and the operator will",
        description="Exit 0 when every SpeculativeInference is valid, 1 when any is invalid, 2 when a path "
        "cannot be read or is not YAML. Other kinds of objects are skipped.",
    )
    v.add_argument("paths", nargs="+", metavar="PATH", help="file, directory, or - for standard input")
    v.add_argument("-o", "--output", choices=("text", "json"), default="text")
    v.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    v.set_defaults(func=cmd_validate)

    r = sub.add_parser("render", help="print the child objects (ConfigMap, Deployment, Service) as YAML")
    r.add_argument("paths", nargs="+", metavar="PATH", help="file, directory, or - for standard input")
    r.add_argument("--runtime-image", default=DEFAULT_RUNTIME_IMAGE, help="image when spec.runtime.image is unset")
    r.add_argument(
        "--npu-resource-name",
        default=DEFAULT_NPU_RESOURCE,
        help="extended resource when spec.resources.npuResourceName is unset",
    )
    r.set_defaults(func=cmd_render)

    c = sub.add_parser("crd", help="print the CustomResourceDefinition generated from the API models")
    c.set_defaults(func=cmd_crd)

    s = sub.add_parser(
        "schema",
        help="print a JSON Schema of the manifest for editors (yaml-language-server)",
        description="Save it next to your manifests and start them with "
        "`# yaml-language-server: $schema=speculativeinference.schema.json`. Editors then check fields, types, "
        "enums and ranges as you type; cross-field rules are checked by `specinfer validate`.",
    )
    s.set_defaults(func=cmd_schema)
    return top


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    args = parser().parse_args(argv)
    code: int = args.func(args, out, err)
    return code


if __name__ == "__main__":
    sys.exit(main())
