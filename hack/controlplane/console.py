"""What hack/cluster prints: timestamped progress lines on stdout, and fatal errors that end the command.

Every module reports through these two, so the output keeps one format whichever step speaks.
"""

import sys
import time
from typing import NoReturn


def log(msg: str) -> None:
    print(f"[cluster {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def die(msg: str, code: int = 1) -> NoReturn:
    print(f"[cluster] ERROR: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)
