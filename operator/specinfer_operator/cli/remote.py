"""Builds that fetch nothing unless asked (--allow-remote).

kustomize fetches what a kustomization names remotely while it builds: it GETs a file given as an HTTP(S) URL and
clones (with git) a base given as a git URL, from addresses the repository chooses. Two layers keep a build of an
untrusted repository off the network:

- refuse_remote(): before kubectl runs, every kustomization the build reads (the one built, and through its local
  bases, components, generators, transformers and validators, each one they read) is searched for a remote
  reference in every field kustomize loads from, and the build is refused, in one line naming the file, the field
  and the reference, at the first one;
- offline(): the tools run with an environment in which a fetch this search did not foresee fails: HTTP(S)
  through a proxy that refuses every connection (Go's net/http and git's curl honour it; Go still connects
  directly to loopback addresses), git allowed no transport at all and none of the user's git configuration,
  helm given empty configuration, cache and plugin homes (no repositories, registry logins nor plugins), and no
  kubeconfig (helm template and kubectl kustomize need no cluster).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specinfer_operator.cli.files import read_text
from specinfer_operator.cli.kustomize import kustomization_in, read_kustomization
from specinfer_operator.cli.yaml_documents import ManifestError, documents

FLAG = "--allow-remote"
# Fields of a kustomization (and of a builtin plugin's configuration) kustomize loads a file from, each a string
# or a list of strings: kustomize's file loader GETs an HTTP(S) URL (api/internal/loader/fileloader.go).
_LOADED = (
    "crds",
    "configurations",
    "patchesStrategicMerge",
    "path",
    "paths",
    "files",
    "envs",
    "env",
    "repo",
    "chartRepoUrl",
    "valuesFile",
    "additionalValuesFiles",
    "values",
    "targetFilePath",
)
# Fields holding mappings (or lists of them) with _LOADED fields of their own.
_NESTED = (
    "openapi",
    "patches",
    "patchesJson6902",
    "replacements",
    "configMapGenerator",
    "secretGenerator",
    "helmCharts",
    "helmChartInflationGenerator",
)
# Fields listing files or directories: a git URL is cloned (api/internal/git/repospec.go); a local directory is
# a kustomization searched in turn. Entries of the PLUGINS fields may be plugin configurations written inline, and
# what they load (files, or the resources of kustomizations) are plugin configurations, searched too.
_BASES = ("resources", "bases", "components")
_PLUGINS = ("generators", "transformers", "validators")
_URL = re.compile(r"^(git::)?([a-z][a-z0-9+.-]*://|https?:|[a-z][a-z0-9-]*@|github\.com[/:])", re.IGNORECASE)
BUILTIN = "builtin"  # the apiVersion of kustomize's builtin plugins' configurations (others need alpha plugins)
DENY_PROXY = "http://127.0.0.1:0"  # nothing listens on port 0: every connection through it is refused


def remote(reference: str) -> bool:
    """Whether kustomize would fetch `reference` rather than read a local path: any URL with a scheme (http,
    https, ssh, file, oci...), `http:`/`https:` without slashes (Go parses the scheme all the same), the SCP form
    `user@host:path`, `github.com/ORG/REPO`, each perhaps after `git::`. A superset of what kustomize fetches."""
    return bool(_URL.match(reference.strip()))


def _strings(value: Any, at: str) -> Iterator[tuple[str, str]]:
    """(field path, string) for a string or each string of a list."""
    if isinstance(value, str):
        yield at, value
    elif isinstance(value, list):
        yield from ((f"{at}[{i}]", v) for i, v in enumerate(value) if isinstance(v, str))


def _mappings(value: Any, at: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(value, dict):
        yield at, value
    elif isinstance(value, list):
        yield from ((f"{at}[{i}]", v) for i, v in enumerate(value) if isinstance(v, dict))


def _loaded(fields: Mapping[str, Any], at: str = "") -> Iterator[tuple[str, str]]:
    """(field path, string) for every string of `fields` kustomize loads as a file (`files` entries may be
    `KEY=FILE`: both are given)."""
    for key in _LOADED:
        for where, text in _strings(fields.get(key), f"{at}{key}"):
            yield where, text
            if key == "files" and "=" in text:
                yield where, text.partition("=")[2]
    for key in _NESTED:
        for where, nested in _mappings(fields.get(key), f"{at}{key}"):
            yield from _loaded(nested, f"{where}.")


class _Search:
    """One build's search: each kustomization and plugin file read once, `shown` naming files as the report does."""

    def __init__(self, shown: Callable[[Path], str]) -> None:
        self.shown = shown
        self.seen: set[tuple[Path, bool]] = set()

    def name(self, file: Path) -> str:
        """`file` as the report names it (resolved first: a link's target names what is read)."""
        return self.shown(file.resolve())

    def _refuse(self, file: Path, at: str, reference: str) -> ManifestError:
        return ManifestError(
            f"{self.name(file)}: {at}: {reference.strip()} is remote: kustomize would fetch it, and nothing is "
            f"fetched from the network without {FLAG}"
        )

    def _fields(self, file: Path, fields: Mapping[str, Any], at: str = "") -> None:
        for where, reference in _loaded(fields, at):
            if remote(reference):
                raise self._refuse(file, where, reference)

    def _configs(self, file: Path, text: str, at: str = "") -> None:
        """Search the builtin plugin configurations in `text` (a path is a YAML scalar: none)."""
        try:
            found = [d.data for d in documents(text)]
        except ManifestError as error:  # kustomize might read what is not read here: not built then
            raise ManifestError(f"{self.name(file)}: {at}{error}") from error
        for config in found:
            if isinstance(config, dict) and config.get("apiVersion") == BUILTIN:
                self._fields(file, config, at)

    def _once(self, file: Path, plugins: bool) -> bool:
        key = (file.resolve(), plugins)
        first = key not in self.seen
        self.seen.add(key)
        return first

    def kustomization(self, file: Path, plugins: bool) -> None:
        """Search a kustomization file; `plugins` when what it builds configures plugins."""
        if not self._once(file, plugins):
            return
        try:
            fields = read_kustomization(file)
        except ManifestError as error:
            raise ManifestError(f"{self.name(file)}: {error}") from error
        self._fields(file, fields)
        for key in (*_BASES, *_PLUGINS):
            for at, entry in _strings(fields.get(key), key):
                if key in _PLUGINS:  # written inline, or else a path
                    self._configs(file, entry, f"{at} (inline): ")
                self._entry(file, at, entry, plugins or key in _PLUGINS)

    def _entry(self, file: Path, at: str, entry: str, plugins: bool) -> None:
        """A file or directory a kustomization lists: refused when remote, else searched when it may hold
        remote references (a kustomization; a file of plugin configurations)."""
        if remote(entry):
            raise self._refuse(file, at, entry)
        path = file.parent / entry
        if path.is_dir():
            found = kustomization_in(path)
            if found is not None:
                self.kustomization(found, plugins)
        elif plugins and path.is_file() and self._once(path, plugins):
            try:
                text = read_text(path)
            except ManifestError as error:
                raise ManifestError(f"{self.name(path)}: {error}") from error
            self._configs(path, text)


def refuse_remote(file: Path, shown: Callable[[Path], str]) -> None:
    """ManifestError, in one line, at the first remote reference the kustomization in `file` would fetch as it
    builds."""
    _Search(shown).kustomization(file, plugins=False)


_DROPPED = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "kubeconfig")


@contextmanager
def offline(allow_remote: bool) -> Iterator[dict[str, str] | None]:
    """The environment kubectl and helm run in: None (this process's own) with --allow-remote, else one in which
    they fetch nothing (the module's docstring says what each setting covers)."""
    if allow_remote:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="specinfer-offline-") as empty:
        env = {k: v for k, v in os.environ.items() if k.lower() not in _DROPPED and not k.startswith(("GIT_", "HELM_"))}
        for name in ("http_proxy", "https_proxy", "all_proxy"):
            env[name] = env[name.upper()] = DENY_PROXY
        env |= {
            "NO_PROXY": "",
            "no_proxy": "",
            "GIT_ALLOW_PROTOCOL": "",  # an empty list: no transport, not even file://
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "HELM_CONFIG_HOME": empty,
            "HELM_CACHE_HOME": empty,
            "HELM_DATA_HOME": empty,
            "KUBECONFIG": os.devnull,
        }
        yield env
