"""The `specinfer` command: validate and render manifests, print the CRD or an editor schema, recommend K."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn, TextIO

from specinfer_operator import __version__
from specinfer_operator.api.crd import crd_yaml, editor_schema
from specinfer_operator.api.engine import EngineVersions
from specinfer_operator.api.policy import DEFAULT_INSTALL_POLICY, TenantPolicySpec
from specinfer_operator.api.resource import SpeculativeInference
from specinfer_operator.cli import tune
from specinfer_operator.cli.builds import DEFAULT_TIMEOUT, BuildOptions
from specinfer_operator.cli.manifests import Deployer, Document, LoadFailure, Skipped, load, load_policy
from specinfer_operator.cli.matrix import support_matrix
from specinfer_operator.cli.output import line, say, write_json, write_yaml
from specinfer_operator.cli.remote import FLAG
from specinfer_operator.cli.report import (
    EXIT_OK,
    EXIT_UNREADABLE,
    Tally,
    count,
    object_name,
    problem_dict,
    problem_line,
    validate_values,
)
from specinfer_operator.cli.yaml_documents import ManifestError
from specinfer_operator.render import flags
from specinfer_operator.render.admission import check
from specinfer_operator.render.children import render
from specinfer_runtime.validation import Problem, Report
from specinfer_runtime.versions import RELEASE


def _build_options(args: argparse.Namespace) -> BuildOptions:
    """validate and render read repositories alike, so they build kustomizations and charts alike."""
    return BuildOptions(tuple(args.values or ()), args.build_timeout, args.allow_remote, not args.skip_charts)


def _warnings(doc: Document, report: Report[SpeculativeInference]) -> list[Problem]:
    tags = [Problem("", f"tag {t} ignored: kubectl reads the value as plain text", "yaml") for t in doc.custom_tags]
    return [*tags, *report.warnings]


def cmd_validate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    results: list[dict[str, Any]] = []
    tally = Tally()
    try:
        policy = load_policy(args.policy) if args.policy else DEFAULT_INSTALL_POLICY
    except ManifestError as error:
        say(f"specinfer validate: --policy {error}", err)
        return EXIT_UNREADABLE
    deployers: list[Deployer] = []
    for item in load(args.paths, _build_options(args)):
        if isinstance(item, Deployer):
            deployers.append(item)
            continue
        if isinstance(item, LoadFailure):
            results.append({"file": item.source, "error": item.reason})
        elif isinstance(item, Skipped):
            results.append({"file": item.source, "skipped": item.reason})
        doc = count(item, tally, err if args.output == "text" else io.StringIO(), args.verbose)
        if doc is None:
            continue
        report = check(doc.data, policy, _engine(args.engine_version))
        tally.invalid += not report.ok
        warnings = _warnings(doc, report)
        built = {"built_with": doc.origin.tool, "from": doc.origin.file} if doc.origin else {}
        results.append(
            {
                "file": doc.source,
                "document": doc.index,
                "name": object_name(doc),
                **built,
                "valid": report.ok,
                "errors": [problem_dict(doc, p) for p in report.errors],
                "warnings": [problem_dict(doc, p) for p in warnings],
            }
        )
        if args.output == "text":
            for problem in report.errors:
                say(problem_line(doc, problem), out)
            for warning in warnings:
                say(problem_line(doc, warning, "warning: "), err)
    results += validate_values(deployers, tally, args, out, err if args.output == "text" else io.StringIO())
    if args.output == "json":
        write_json(results, out)
    elif not args.quiet:
        say(tally.summary(), err)
    return tally.code()


ENGINES = {"vllm-ascend": "vllm_ascend", "vllm": "vllm"}


def engine_version(text: str) -> tuple[str, str]:
    """`vllm-ascend=0.23.0` or `vllm=0.32.0`, as --engine-version takes it."""
    name, _, release = text.partition("=")
    if name not in ENGINES or not re.match(RELEASE, release):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not ENGINE=RELEASE with ENGINE vllm-ascend or vllm and RELEASE as the package indexes "
            "write it, like 0.23.0, 0.25.1rc1 or 0.23.0.post1"
        )
    return ENGINES[name], release


def _releases(policy: TenantPolicySpec) -> str:
    """The default image's releases a policy states, as --engine-version takes them."""
    versions = policy.default_engine_versions
    stated = [f"{name}={getattr(versions, field)}" for name, field in ENGINES.items() if getattr(versions, field, None)]
    return " ".join(stated) or "none"


def _engine(given: list[tuple[str, str]] | None) -> EngineVersions | None:
    return EngineVersions.model_validate(dict(given)) if given else None


def cmd_render(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        defaults = flags.render_defaults(args)
    except ValueError as error:
        err.write(f"specinfer render: {error}\n")
        return 2
    objects: list[dict[str, Any]] = []
    tally = Tally()
    for item in load(args.paths, _build_options(args)):
        doc = count(item, tally, err, args.verbose)
        if doc is None:
            continue
        report = check(doc.data)
        for problem in report.errors:
            say(problem_line(doc, problem), err)
        for warning in _warnings(doc, report):
            say(problem_line(doc, warning, "warning: "), err)
        if report.value is None:
            tally.invalid += 1
            continue
        objects += render(report.value, defaults)
    if tally.code() == EXIT_OK:
        write_yaml(objects, out)
    if not tally.checked and not tally.failed:
        say(tally.summary(), err)
    return tally.code()


def cmd_crd(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    out.write(crd_yaml())
    return EXIT_OK


def cmd_support_matrix(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    out.write(support_matrix())
    return EXIT_OK


def cmd_schema(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    json.dump(editor_schema(), out, indent=2)
    out.write("\n")
    return EXIT_OK


class Parser(argparse.ArgumentParser):
    """Usage errors in one line, exit 2, as every other refusal of the command."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_UNREADABLE, line(f"{self.prog}: {message} (see {self.prog} --help)") + "\n")


def _build_arguments(command: argparse.ArgumentParser) -> None:
    """The options of _build_options."""
    command.add_argument(
        "-f",
        "--values",
        action="append",
        metavar="FILE",
        help="a Helm values file for every chart rendered (helm template --values; repeat it, the last wins)",
    )
    command.add_argument(
        "--build-timeout",
        type=tune.within(float, 1, 3600),
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"how long one kubectl kustomize or helm template may take (default {DEFAULT_TIMEOUT:g})",
    )
    command.add_argument(
        "--skip-charts",
        action="store_true",
        help="leave Helm charts (directories with a Chart.yaml) out: not rendered, helm not needed; -v names each "
        "one skipped. For a CI job without helm, or a repository holding upstream charts that need `helm dependency "
        "build` first",
    )
    command.add_argument(
        FLAG,
        action="store_true",
        help="let kustomize fetch what a kustomization names remotely (a git or HTTP(S) URL in resources, "
        "components, patches, generators...) and run kubectl and helm with this environment as it is. Without it "
        "nothing is fetched: such a kustomization is refused in one line naming the file, the field and the "
        "reference (exit 2), and the tools run with every network fetch blocked",
    )


def parser() -> argparse.ArgumentParser:
    top = Parser(
        prog="specinfer",
        description="Validate and render SpeculativeInference resources (vLLM-Ascend speculative decoding).",
    )
    top.add_argument("--version", action="version", version=f"specinfer {__version__}")
    sub = top.add_subparsers(dest="command", required=True)

    v = sub.add_parser(
        "validate",
        help="check manifests the way the API server and the operator will",
        description="Exit 0 when every SpeculativeInference is valid (or there is none), 1 when any is invalid, "
        "2 when a path cannot be read, is not YAML kubectl could read, or does not build (a template error, a chart "
        "dependency not built, kubectl or helm missing, --build-timeout): each such path is one line, every other "
        "result is still reported, and the exit code comes at the end. Directories are searched for .yaml, .yml "
        "and .json files, following symlinks. What Argo CD or Flux would apply is what is checked: a directory with "
        "a kustomization.yaml is built with `kubectl kustomize` (kubectl from PATH or SPECINFER_KUBECTL) and a Helm "
        "chart (Chart.yaml) rendered with `helm template` (helm from PATH or SPECINFER_HELM, values from -f; "
        "--skip-charts leaves charts out); their own files, and files a kustomization uses as patches, are not "
        "checked alone. A problem in a built object names the directory built, the object, and the patch that set "
        "the value (or the file the object came from, or its chart template). Nothing is fetched from the network "
        f"unless {FLAG} is given: a kustomization naming a remote base or file is refused (exit 2). Other kinds of "
        "objects, JSON patches and non-object documents are skipped, but for the Helm values that Argo CD Applications "
        "(helm.valuesObject, helm.values) and Flux HelmReleases (spec.values) give the specinfer charts: they are "
        "merged onto the chart's defaults and checked against its values.schema.json (shipped with this command), "
        "an invalid one exiting 1 as an invalid resource does. Values from the input are printed with control "
        "characters and line breaks escaped (\\n, \\x1b), in every output. In CI, before merge: specinfer "
        "validate REPO/",
    )
    v.add_argument("paths", nargs="+", metavar="PATH", help="file, directory, or - for standard input")
    v.add_argument("-o", "--output", choices=("text", "json"), default="text")
    v.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    v.add_argument("-v", "--verbose", action="store_true", help="name each file or document skipped, and why")
    v.add_argument(
        "--policy",
        metavar="FILE",
        help="a SpeculativeInferencePolicy manifest (`kubectl get specinferpolicy NAME -o yaml`) to check the "
        "resources against, instead of the policy the chart installs with its default values (its defaults, and "
        f"the default runtime image's engine releases: {_releases(DEFAULT_INSTALL_POLICY)})",
    )
    v.add_argument(
        "--engine-version",
        action="append",
        type=engine_version,
        metavar="ENGINE=RELEASE",
        help="a release the default runtime image runs (vllm-ascend=0.25.1rc1, vllm=0.25.1; repeat for both), as the "
        "chart's runtimeEngineVersions state it: resources without spec.runtime.image whose features need later "
        "releases are invalid (docs/support-matrix.md); replaces the policy's defaultEngineVersions",
    )
    _build_arguments(v)
    v.set_defaults(func=cmd_validate)

    r = sub.add_parser(
        "render",
        help="print the child objects (ConfigMap, Deployment, Service, PodDisruptionBudget, HorizontalPodAutoscaler "
        "or ScaledObject, InferencePool) as YAML",
    )
    r.add_argument("paths", nargs="+", metavar="PATH", help="file, directory, or - for standard input")
    flags.add_arguments(r)  # the operator's own flags, so that render shows what it would render
    r.add_argument("-v", "--verbose", action="store_true", help="name each file or document skipped, and why")
    _build_arguments(r)
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

    m = sub.add_parser(
        "support-matrix",
        help="print which vllm-ascend and vLLM releases run each method and option (Markdown)",
    )
    m.set_defaults(func=cmd_support_matrix)

    tune.add_parser(sub)
    return top


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr or io.StringIO()
    args = parser().parse_args(argv)
    if out is None:  # started with standard output closed (`>&-`)
        print("specinfer: standard output is closed", file=err)
        return EXIT_UNREADABLE
    try:
        code: int = args.func(args, out, err)
        out.flush()
    except BrokenPipeError:
        # `specinfer render ... | head`: the reader went away. Point stdout at /dev/null so that the
        # interpreter's own flush at exit does not fail again, and say so once.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print("specinfer: standard output was closed before everything was written", file=err)
        return EXIT_UNREADABLE
    except KeyboardInterrupt:
        print("specinfer: interrupted", file=err)
        return EXIT_UNREADABLE
    except Exception as error:  # a bug: still one line, never a traceback
        say(f"specinfer: unexpected {type(error).__name__}: {error} (please report it)", err)
        return EXIT_UNREADABLE
    return code


if __name__ == "__main__":
    sys.exit(main())
