"""A loopback TCP server standing for a remote host: it records every connection it accepts and answers each with
404, so that a test can tell whether a command reached it, and what it asked for."""

from __future__ import annotations

import socket
import threading
from contextlib import suppress
from types import TracebackType

_MARK = b"SETTLED"
_RESPONSE = b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class Listener:
    """Serves one connection at a time, in the order they arrived; `requests` holds the first bytes of each."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.server = socket.create_server((host, 0), backlog=64)
        self.host, self.port = host, self.server.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        self.requests: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> Listener:
        self.thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        with suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()
        self.thread.join()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            with connection:
                connection.settimeout(5)  # a client that waits for the server to speak first (ssh) is let go
                try:
                    data = connection.recv(4096)
                except OSError:
                    data = b""
                self.requests.append(data)
                with suppress(OSError):
                    connection.sendall(_RESPONSE)

    def received(self) -> list[bytes]:
        """What every connection made so far sent first. A connection of its own is made last and waited for: as
        connections are served in order, every earlier one has been counted once it is answered."""
        with socket.create_connection((self.host, self.port)) as mark:
            mark.sendall(_MARK)
            while mark.recv(4096):
                pass
        assert self.requests[-1] == _MARK
        del self.requests[-1]
        return list(self.requests)
