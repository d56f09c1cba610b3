"""What the nodes of the local cluster would mount from claims: a directory per claim under the tests' workdir,
shared by every pod that mounts the claim (kwok pods mount nothing; the harnesses behind them use these)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specinfer_operator.render.learning import LEARNING_VOLUME
from specinfer_runtime import samples


def claim_directory(workdir: Path, claim: str) -> Path:
    where = workdir / "claims" / claim
    where.mkdir(parents=True, exist_ok=True)
    return where


def claim_of(pod: dict[str, Any], volume: str) -> str | None:
    """The claim behind the pod's volume of that name, if it is one."""
    found: dict[str, Any] = next((v for v in pod["spec"]["volumes"] if v["name"] == volume), {})
    claim = (found.get("persistentVolumeClaim") or {}).get("claimName")
    return str(claim) if claim else None


def mounted(pod: dict[str, Any], volume: str, workdir: Path) -> Path | None:
    """The directory the engine container sees at its mount of `volume` (a claim's, with its subPath, or its
    subPathExpr with the pod's name as the kubelet expands it)."""
    claim = claim_of(pod, volume)
    mount = next((m for m in pod["spec"]["containers"][0].get("volumeMounts", []) if m["name"] == volume), None)
    if claim is None or mount is None:
        return None
    expanded = str(mount.get("subPathExpr", "")).replace(f"$({samples.POD_ENV})", pod["metadata"]["name"])
    where: Path = claim_directory(workdir, claim) / str(mount.get("subPath", expanded))
    where.mkdir(parents=True, exist_ok=True)
    return where


def recorder_env(pod: dict[str, Any], workdir: Path) -> dict[str, str]:
    """spec.learning's recorder settings as the engine would see them outside a container: its samples directory
    on the claim, and the pod's name (a downward-API variable, which kwok does not fill in)."""
    found = mounted(pod, LEARNING_VOLUME, workdir)
    if found is None:
        return {}
    return {samples.DIR_ENV: str(found), samples.POD_ENV: str(pod["metadata"]["name"])}


def local_draft(config: dict[str, Any], pod: dict[str, Any], workdir: Path) -> dict[str, Any] | None:
    """The engine config with a draft the pod mounts from a claim (a trained generation of spec.learning) named
    by its directory instead, as vLLM outside a container can load it; None when the draft is not on a claim."""
    draft = (config.get("speculative") or {}).get("draftModel") or {}
    if not ((draft.get("source") or {}).get("pvc")):
        return None
    found = mounted(pod, "model-draft", workdir)
    if found is None:
        return None
    return {**config, "speculative": {**config["speculative"], "draftModel": {"name": str(found)}}}
