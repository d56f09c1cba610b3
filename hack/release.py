"""make release: one version everywhere, the images and charts built, pushed, signed, and a manifest of digests.

    python -m hack.release check [VERSION]     # every place that states the version agrees (with VERSION if given)
    python -m hack.release set-version VERSION # writes VERSION into every place (then commit it)
    python -m hack.release publish VERSION --registry REGISTRY [--insecure] [--images operator,runtime,trainer]

`publish` (what `make release` runs, after `make chart-package`) builds the operator, runtime and trainer images with
podman from their Dockerfiles (OCI labels: version, revision, source), writes each image's SPDX SBOM to dist/sbom/,
pushes the images to REGISTRY/specinfer-NAME:VERSION and the charts of dist/charts/ to oci://REGISTRY/charts, signs
each by digest with cosign and attests each image's SBOM (COSIGN_KEY=a key reference signs with that key, without a
transparency log upload; --keyless signs with the CI's OIDC identity; neither: nothing is signed), and writes
dist/release-VERSION.json: every reference with its digest. --insecure is for a registry on plain HTTP (127.0.0.1).
Build arguments PYTHON_IMAGE, VLLM_ASCEND_IMAGE, VLLM_ASCEND_VERSION and VLLM_VERSION are taken from the environment
when set (images/build's local bases stand in for the upstream ones where no registry can be reached).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hack import sbom

ROOT = Path(__file__).resolve().parent.parent
PODMAN = [str(ROOT / "images" / "podman")]
CACHE = Path(os.environ.get("SPECINFER_CACHE") or Path.home() / ".cache" / "specinfer")
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$")
SOURCE = "https://github.com/specinfer/specinfer"


@dataclass(frozen=True)
class Place:
    """A line of a file that states the release's version: `pattern` matches it once, its group is the version."""

    path: str
    pattern: str

    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern, re.MULTILINE)


RUNTIME_REF = r"ghcr\.io/specinfer/specinfer-runtime:"
TRAINER_REF = r"ghcr\.io/specinfer/specinfer-trainer:"
PLACES = (
    Place("pyproject.toml", r'^version = "([^"]+)"$'),
    Place("charts/specinfer-crds/Chart.yaml", r"^version: (\S+)$"),
    Place("charts/specinfer-crds/Chart.yaml", r'^appVersion: "([^"]+)"$'),
    Place("charts/specinfer-operator/Chart.yaml", r"^version: (\S+)$"),
    Place("charts/specinfer-operator/Chart.yaml", r'^appVersion: "([^"]+)"$'),
    Place("Dockerfile", r"^ARG VERSION=(\S+)$"),
    Place("images/runtime/Dockerfile", r"^ARG VERSION=(\S+)$"),
    Place("images/trainer/Dockerfile", r"^ARG VERSION=(\S+)$"),
    Place("images/trainer/Dockerfile", rf"^ARG RUNTIME_IMAGE={RUNTIME_REF}(\S+)$"),
    Place("operator/specinfer_operator/render/children.py", rf'^DEFAULT_RUNTIME_IMAGE = "{RUNTIME_REF}([^"]+)"$'),
    Place("operator/specinfer_operator/render/children.py", rf'^DEFAULT_TRAINER_IMAGE = "{TRAINER_REF}([^"]+)"$'),
    Place("README.md", r"^VERSION=(\S+) +# the release to install$"),
    Place("docs/install.md", r"^VERSION=(\S+) +# the release to install$"),
)


@dataclass(frozen=True)
class Image:
    """An image the release builds: its name, Dockerfile, and the image it is built on when that is one of ours."""

    name: str
    dockerfile: str
    on: str | None = None


IMAGES = (
    Image("operator", "Dockerfile"),
    Image("runtime", "images/runtime/Dockerfile"),
    Image("trainer", "images/trainer/Dockerfile", on="runtime"),
)
CHARTS = ("specinfer-crds", "specinfer-operator")
BASE_ARGS = ("PYTHON_IMAGE", "VLLM_ASCEND_IMAGE", "VLLM_ASCEND_VERSION", "VLLM_VERSION")


class ReleaseError(Exception):
    """A release that cannot go on: what is wrong and how to fix it."""


def stated(root: Path = ROOT) -> dict[str, str]:
    """Each place's version, keyed `path: pattern`; a place whose line is missing or not single fails."""
    found = {}
    for place in PLACES:
        matches = place.regex().findall((root / place.path).read_text())
        if len(matches) != 1:
            raise ReleaseError(f"{place.path}: {len(matches)} lines match {place.pattern!r}, want exactly 1")
        found[f"{place.path}: {place.pattern}"] = matches[0]
    return found


def disagreements(root: Path = ROOT, version: str | None = None) -> list[str]:
    """What states another version than `version` (the pyproject's when None), one line each."""
    found = stated(root)
    want = version or next(iter(found.values()))
    return [f"{where} says {got!r}, not {want!r}" for where, got in found.items() if got != want]


def set_version(version: str, root: Path = ROOT) -> None:
    """Writes `version` into every place (the charts' README badges follow with `make chart`)."""
    if not SEMVER.match(version):
        raise ReleaseError(
            f"version {version!r} is not a semantic version (MAJOR.MINOR.PATCH[-PRERELEASE]), e.g. 0.3.0"
        )
    for place in PLACES:
        path = root / place.path
        text = place.regex().sub(lambda m: m.group(0).replace(m.group(1), version), path.read_text(), count=1)
        path.write_text(text)


def not_stated(version: str, wrong: list[str]) -> str:
    """Which places do not state `version`, and the fix."""
    lines = "\n  ".join(wrong)
    return (
        f"the repository does not state {version} everywhere:\n  {lines}\nfix: make version VERSION=x.y.z, then commit"
    )


def run(argv: Sequence[str], capture: bool = True) -> str:
    """Runs a command, echoing it to stderr: its stdout and stderr (helm prints its digests to either), or with
    capture=False its output streamed to stderr (builds and pushes that take minutes)."""
    print("+", " ".join(argv), file=sys.stderr, flush=True)
    if not capture:
        if (code := subprocess.run(argv, stdout=sys.stderr, cwd=ROOT, check=False).returncode) != 0:
            raise ReleaseError(f"{argv[0]} exited with {code} (its output is above)")
        return ""
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise ReleaseError(f"{argv[0]} exited with {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout + done.stderr


def revision() -> str:
    """The commit the release is built from; `-dirty` when the tree has changes the commit does not."""
    commit = run(["git", "rev-parse", "HEAD"]).strip()
    dirty = run(["git", "status", "--porcelain", "--untracked-files=no"]).strip()
    return f"{commit}-dirty" if dirty else commit


@dataclass(frozen=True)
class Signer:
    """cosign's arguments for signing: with a key (no transparency log upload), or keyless in CI."""

    cosign: str
    args: tuple[str, ...]
    insecure: bool

    def sign(self, reference: str) -> None:
        run([self.cosign, "sign", "--yes", *self.args, *self._registry(), reference])

    def attest(self, reference: str, predicate: Path) -> None:
        run(
            [
                self.cosign,
                "attest",
                "--yes",
                "--type",
                "spdxjson",
                "--predicate",
                str(predicate),
                *self.args,
                *self._registry(),
                reference,
            ]
        )

    def _registry(self) -> tuple[str, ...]:
        return ("--allow-insecure-registry", "--allow-http-registry") if self.insecure else ()


def signer(keyless: bool, insecure: bool) -> Signer | None:
    """COSIGN_KEY's key, else keyless when asked, else None (the release is not signed)."""
    key = os.environ.get("COSIGN_KEY")
    if not key and not keyless:
        return None
    run([str(ROOT / "hack" / "build-binaries.sh"), "cosign"])
    cosign = str(CACHE / "bin" / "cosign")
    # With a key: no transparency log, and no signing config (cosign v3 fetches the public one from Sigstore's TUF
    # repository otherwise, which a loopback test cannot reach); keyless: Sigstore's public services.
    if not key:
        return Signer(cosign, (), insecure)
    return Signer(cosign, ("--key", key, "--use-signing-config=false", "--tlog-upload=false"), insecure)


def host_trust() -> list[str]:
    """Volumes that let pip in a build step trust the CAs the host trusts, as images/build does (the image does not
    see the host's certificate store otherwise); nothing of them is kept in the image."""
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if not bundle.is_file():
        return []
    conf = CACHE / "release-pip.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("[global]\ncert = /run/host-trust/ca-certificates.crt\n")
    return ["-v", f"{bundle}:/run/host-trust/ca-certificates.crt:ro", "-v", f"{conf}:/etc/pip.conf:ro"]


def build_image(image: Image, reference: str, version: str, commit: str, built: dict[str, str]) -> None:
    """podman build of one image, labelled and tagged `reference`; its base from `built` or the environment."""
    labels = {"version": version, "revision": commit, "source": SOURCE}
    args = ["--build-arg", f"VERSION={version}", "--build-arg", f"REVISION={commit}"]
    # Also as --label: buildah's layer cache keeps a LABEL step whose build argument changed (a rebuild at another
    # commit kept the old revision), while --label is applied to the committed image every time.
    args += [arg for key, value in labels.items() for arg in ("--label", f"org.opencontainers.image.{key}={value}")]
    args += [arg for name in BASE_ARGS if name in os.environ for arg in ("--build-arg", f"{name}={os.environ[name]}")]
    if image.on is not None:
        args += ["--build-arg", f"{image.on.upper()}_IMAGE={built[image.on]}"]
    build = ["build", "--format", "docker", "--network", "host", *host_trust(), *args]
    run([*PODMAN, *build, "-t", reference, "-f", image.dockerfile, "."], capture=False)


def push_image(reference: str, insecure: bool) -> str:
    """podman push; the digest of the manifest the registry holds."""
    with tempfile.TemporaryDirectory() as tmp:
        digestfile = Path(tmp) / "digest"
        tls = ["--tls-verify=false"] if insecure else []
        run([*PODMAN, "push", *tls, "--digestfile", str(digestfile), reference], capture=False)
        return digestfile.read_text().strip()


def push_chart(helm: str, package: Path, registry: str, insecure: bool) -> tuple[str, str]:
    """helm push of a packaged chart; its reference and digest (from helm's `Pushed:` and `Digest:` lines)."""
    out = run([helm, "push", str(package), f"oci://{registry}/charts", *(["--plain-http"] if insecure else [])])
    pushed = re.search(r"^Pushed: (\S+)$", out, re.MULTILINE)
    digest = re.search(r"^Digest: (sha256:[0-9a-f]{64})$", out, re.MULTILINE)
    if pushed is None or digest is None:
        raise ReleaseError(f"helm push printed no Pushed:/Digest: lines:\n{out}")
    return pushed.group(1), digest.group(1)


def publish(version: str, registry: str, insecure: bool, names: Sequence[str], keyless: bool) -> Path:
    """The release: images and charts built, pushed, signed; the manifest's path."""
    if wrong := disagreements(ROOT, version):
        raise ReleaseError(not_stated(version, wrong))
    commit = revision()
    created = os.environ.get("SOURCE_DATE_EPOCH") or run(["git", "log", "-1", "--format=%ct"]).strip()
    created_iso = run(["date", "-u", "-d", f"@{created}", "+%Y-%m-%dT%H:%M:%SZ"]).strip()
    sign = signer(keyless, insecure)
    dist = ROOT / "dist"
    (dist / "sbom").mkdir(parents=True, exist_ok=True)
    manifest: dict[str, object] = {
        "version": version,
        "revision": commit,
        "registry": registry,
        "signed": sign is not None,
    }
    built: dict[str, str] = {}
    images: list[dict[str, str]] = []
    for image in IMAGES:
        if image.name not in names:
            continue
        if image.on is not None and image.on not in built:
            raise ReleaseError(f"the {image.name} image is built on the {image.on} image: release both")
        reference = f"{registry}/specinfer-{image.name}:{version}"
        build_image(image, reference, version, commit, built)
        built[image.name] = reference
        digest = push_image(reference, insecure)
        document = sbom.document(reference, digest, commit, created_iso, SOURCE, sbom.probe(PODMAN, reference))
        sbom_path = dist / "sbom" / f"specinfer-{image.name}-{version}.spdx.json"
        sbom_path.write_text(json.dumps(document, indent=2) + "\n")
        pinned = f"{reference.rsplit(':', 1)[0]}@{digest}"
        if sign is not None:
            sign.sign(pinned)
            sign.attest(pinned, sbom_path)
        images.append(
            {
                "name": f"specinfer-{image.name}",
                "reference": reference,
                "digest": digest,
                "pinned": pinned,
                "sbom": str(sbom_path.relative_to(ROOT)),
            }
        )
    helm = str(CACHE / "bin" / "helm")
    charts = []
    for chart in CHARTS:
        package = dist / "charts" / f"{chart}-{version}.tgz"
        if not package.is_file():
            raise ReleaseError(f"{package} is missing: make chart-package packages the charts")
        reference, digest = push_chart(helm, package, registry, insecure)
        if sign is not None:
            sign.sign(f"{reference.rsplit(':', 1)[0]}@{digest}")
        charts.append({"name": chart, "reference": f"oci://{reference}", "digest": digest})
    manifest |= {"images": images, "charts": charts}
    out = dist / f"release-{version}.json"
    out.write_text(json.dumps(manifest, indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.release", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="every place states the same version")
    check.add_argument("version", nargs="?")
    commands.add_parser("set-version", help="write a version into every place").add_argument("version")
    pub = commands.add_parser("publish", help="build, push and sign the images and charts; write the manifest")
    pub.add_argument("version")
    pub.add_argument("--registry", required=True, help="e.g. ghcr.io/specinfer, or 127.0.0.1:PORT")
    pub.add_argument("--insecure", action="store_true", help="the registry speaks plain HTTP (loopback tests)")
    pub.add_argument("--images", default=",".join(i.name for i in IMAGES), help="comma-separated subset of images")
    pub.add_argument("--keyless", action="store_true", help="sign with cosign's keyless flow (CI's OIDC token)")
    args = parser.parse_args(argv)
    try:
        if args.command == "set-version":
            set_version(args.version)
        elif args.command == "check":
            if wrong := disagreements(ROOT, args.version):
                raise ReleaseError(not_stated(args.version or "one version", wrong))
        else:
            names = [n for n in args.images.split(",") if n]
            if unknown := set(names) - {i.name for i in IMAGES}:
                raise ReleaseError(
                    f"--images {args.images!r}: unknown {sorted(unknown)}; allowed: operator, runtime, trainer"
                )
            print(publish(args.version, args.registry, args.insecure, names, args.keyless))
    except ReleaseError as error:
        print(f"release: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
