"""The engine releases a runtime image declares, recorded when it is built and checked against what it holds.

The image's build arguments name its vLLM and vllm-ascend releases; they become its labels
(io.specinfer.engine.*) and ENGINE_VERSIONS_FILE, and the chart states the same releases to admission. A
declaration that does not match the distributions installed fails the build, so no image says it runs what
it does not.

    python -m specinfer_runtime.image_versions VLLM_ASCEND_VERSION VLLM_VERSION   # "" for none
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from specinfer_runtime.compat import ASCEND_DISTRIBUTION, VLLM_DISTRIBUTIONS, installed

ENGINE_VERSIONS_FILE = Path("/etc/specinfer/engine-versions.json")


def mismatches(declared: Mapping[str, str], found: Mapping[str, str]) -> list[str]:
    """How the declared releases (vllmAscend, vllm; "" for none) differ from the distributions found."""
    vllm = next((found[d] for d in VLLM_DISTRIBUTIONS if d in found), "")
    have = {"vllmAscend": found.get(ASCEND_DISTRIBUTION, ""), "vllm": vllm}
    return [
        f"{key} is declared {declared[key] or 'absent'}, but the image has {have[key] or 'none'}"
        for key in ("vllmAscend", "vllm")
        if declared[key] != have[key]
    ]


def main(argv: Sequence[str] | None = None, found: Mapping[str, str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) not in (2, 3):
        print("usage: image_versions VLLM_ASCEND_VERSION VLLM_VERSION [FILE]", file=sys.stderr)
        return 2
    declared = {"vllmAscend": args[0], "vllm": args[1]}
    wrong = mismatches(declared, installed() if found is None else found)
    if wrong:
        print(f"image_versions: {'; '.join(wrong)}: fix the build arguments", file=sys.stderr)
        return 1
    out = Path(args[2]) if len(args) == 3 else ENGINE_VERSIONS_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({k: v for k, v in declared.items() if v}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
