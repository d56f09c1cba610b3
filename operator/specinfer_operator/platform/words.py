"""What a container said of itself, as the operator may repeat it: its termination message, only when nothing
but its own file can be that message.

With terminationMessagePolicy FallbackToLogsOnError the kubelet makes a container's last log lines its
message, and a process that cannot start prints its environment (`PYTHONHOME = '<a Secret's value>'`); a
sidecar's message is whatever the sidecar (or whoever injected it) wrote. So only the operator's own
container, rendered with policy File, is heard; the engines' (controller/health.py) and the trainer's
(learning/outcome.py) alike.
"""

from __future__ import annotations

from typing import Any


def own_message(pod: dict[str, Any] | None, container: str, terminated: dict[str, Any]) -> str | None:
    """`terminated`'s message (a state of `container`, a container of `pod`) when the container has policy
    File; None when what it says cannot be trusted to be its own."""
    specs = ((pod or {}).get("spec") or {}).get("containers") or []
    spec = next((c for c in specs if isinstance(c, dict) and c.get("name") == container), {})
    if spec.get("terminationMessagePolicy") != "File":
        return None
    return str(terminated.get("message") or "")
