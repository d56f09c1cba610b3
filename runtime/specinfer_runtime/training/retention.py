"""What a training run removes before it starts (`specinfer-train --prune`, the Job's init container, the only
step with the claim writable as a whole): what retention says the claim no longer keeps.

- samples past the retention age in every pod's directory, those of pods that are gone included (an engine
  removes only its own), and then the oldest beyond sampling.maxBytes for the store as a whole;
- draft generations the operator no longer keeps (storage.keepDrafts: the newest promoted and the one in
  force; rolled-back and failed ones go here), and half-written ones;
- every run's scratch: hidden states of prompts, which a run stopped at its deadline leaves behind.

Directories of pods are left in place, even empty: a live engine's mount is its directory, and removing it
would stop its recorder until the pod restarts.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specinfer_runtime.samples import files

if TYPE_CHECKING:
    from specinfer_runtime.training.job import TrainingRun

_GENERATION = re.compile(r"\.?gen-([0-9]{1,7})(\.partial)?")


def prune_samples(directory: Path, retention_seconds: float, max_bytes: int, now: float) -> tuple[int, int]:
    """Remove every pod's samples past the retention age, then the oldest until the rest fit `max_bytes`;
    (files removed, bytes kept)."""
    removed, left = 0, []
    for entry in files(directory):
        with contextlib.suppress(OSError):
            stat = entry.stat(follow_symlinks=False)
            if now - stat.st_mtime > retention_seconds:
                os.unlink(entry.path)
                removed += 1
            else:
                left.append((stat.st_mtime, stat.st_size, entry.path))
    kept = sum(size for _, size, _ in left)
    for _, size, path in sorted(left):
        if kept <= max_bytes:
            break
        with contextlib.suppress(OSError):
            os.unlink(path)
            removed += 1
            kept -= size
    return removed, kept


def prune_drafts(directory: Path, keep: set[int]) -> list[str]:
    """Remove the generations not in `keep`, and half-written ones of any; what was removed."""
    gone = []
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            found = _GENERATION.fullmatch(entry.name)
            if found is None or not entry.is_dir(follow_symlinks=False):
                continue
            if found.group(2) or int(found.group(1)) not in keep:
                shutil.rmtree(entry.path, ignore_errors=True)
                gone.append(entry.name)
    return sorted(gone)


def clear(directory: Path) -> int:
    """Remove everything under `directory`; how many entries."""
    count = 0
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
            count += 1
    return count


def prune_claim(config: TrainingRun, now: float) -> dict[str, Any]:
    """The first step of a run: what it removed, for its log."""
    removed, kept = prune_samples(Path(config.samples), config.retention_seconds, config.max_bytes, now)
    drafts = prune_drafts(Path(config.output).parent, {*config.keep, config.generation})
    scratch = clear(Path(config.scratch).parent)
    return {"samplesRemoved": removed, "samplesBytes": kept, "draftsRemoved": drafts, "scratchRemoved": scratch}
