"""What a body dribbled in tiny TCP segments costs one scrape, next to the same body sent at once.

A pod may answer with a Content-Length (or chunked) body of almost 4 MiB, the scrape's limit, written 32 bytes
per segment without Nagle: each segment is a receive, an h11 event and a read of the exposition, so a body in
130,000 pieces cost a scraping thread seconds of CPU where the same body sent at once costs milliseconds. The
scrape refuses a body in more than 256 pieces of less than 1 KiB on average (measure/scrape.py). Both are
scraped here on loopback, in the same run, and the CPU time of the scraping thread is printed; the target is
the dribbled body's cost at most 10x the baseline's (the body sent at once, read whole).

Run with `make bench-scrape-pieces`.
"""

from __future__ import annotations

import statistics
import time

from hack.hostile import ALMOST_4_MIB, CHUNKED, OK_HEAD, REAL, Behaviour, answer, dribble, serving
from specinfer_operator.measure.scrape import Endpoint, ScrapeError, scrape

ROUNDS = 5
TIMEOUT = 60.0  # what ends a scrape here is its own end or error, not the deadline
TARGET = 10.0
BODY = (REAL * (ALMOST_4_MIB // len(REAL)))[:ALMOST_4_MIB]


def cpu_of(behaviour: Behaviour) -> tuple[float, str]:
    """The scraping thread's CPU seconds for one scrape of `behaviour`, and how it ended."""
    with serving(behaviour) as server:
        started = time.thread_time()
        try:
            scrape(Endpoint("127.0.0.1", server.port), TIMEOUT)
            result = "ok"
        except ScrapeError as error:
            result = error.result
        return time.thread_time() - started, result


def main() -> None:
    cases = {
        "sent at once (baseline)": answer(BODY),
        "Content-Length, 32-byte segments": dribble(OK_HEAD + b"Content-Length: %d\r\n\r\n" % len(BODY), BODY, 32, 0),
        "chunked, 32-byte segments": dribble(CHUNKED + b"%x\r\n" % len(BODY), BODY, 32, 0),
    }
    print(f"a {len(BODY) / (1 << 20):.1f} MiB body; CPU of the scraping thread, median of {ROUNDS} scrapes")
    print(f"{'body':<36} {'CPU ms':>8} {'result':>10}")
    figures = {}
    for name, behaviour in cases.items():
        runs = [cpu_of(behaviour) for _ in range(ROUNDS)]
        figures[name] = statistics.median(cpu for cpu, _ in runs)
        print(f"{name:<36} {figures[name] * 1000:>8.1f} {runs[0][1]:>10}")
    base = figures["sent at once (baseline)"]
    worst = max(v for k, v in figures.items() if k != "sent at once (baseline)")
    verdict = "within" if worst <= TARGET * base else "ABOVE"
    print(f"worst dribbled body: {worst / base:.2f}x the baseline ({verdict} the {TARGET:g}x target)")


if __name__ == "__main__":
    main()
