"""`specinfer tune`: the operator's recommendation for engines it does not run.

Each source is one engine's `/metrics`: a URL, a file, or standard input. Sources with the same K (the
draft positions an engine exports; 0 without speculation) are pooled into one profile, the first source
names the K that serves now, and the recommendation is tuning.recommend's. A URL read twice, `--window`
seconds apart, gives the increase over that time instead of the engine's lifetime counters.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO
from urllib.parse import urlsplit

from specinfer_operator.cli.files import open_regular
from specinfer_operator.cli.output import say
from specinfer_operator.cli.yaml_documents import ManifestError
from specinfer_operator.measure.acceptance import MAX_POSITIONS
from specinfer_operator.measure.scrape import LIMIT, Endpoint, ScrapeError, fetch, read
from specinfer_operator.measure.window import Counts
from specinfer_operator.tuning.model import Profile
from specinfer_operator.tuning.recommendation import Bounds, Recommendation, recommend

EXIT_OK, EXIT_NO_ADVICE, EXIT_UNREADABLE = 0, 1, 2
TIMEOUT = 5.0  # seconds for each read of a URL
MAX_WINDOW = 3600.0  # seconds between the two reads of a URL
MAX_BATCH = 4096  # requests per step


def within(kind: type[int] | type[float], low: float, high: float) -> Any:
    """An argparse type: a number of `kind` from `low` to `high` (finite), or a one-line refusal."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if not low <= value <= high:  # NaN compares false: refused with the rest
            raise argparse.ArgumentTypeError(f"{text} is not from {low:g} to {high:g}")
        return value

    return parse


class SourceError(Exception):
    """A source that cannot be read, in one line."""


def _endpoint(url: str) -> Endpoint:
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port or 80
    except ValueError as error:
        raise SourceError(f"{url}: not a URL: {error}") from error
    if parts.scheme != "http" or not host:
        raise SourceError(f"{url}: only http://HOST:PORT/PATH URLs are read")
    return Endpoint(host, port, parts.path or "/metrics")


def _bytes(source: str, stdin: Any) -> bytes:
    """A file's or standard input's content, at most LIMIT bytes."""
    try:
        if source == "-":
            data: bytes = stdin.buffer.read(LIMIT + 1)
        else:
            with open_regular(source) as file:
                data = file.read(LIMIT + 1)
    except ManifestError as error:
        raise SourceError(f"{source}: {error}") from error
    except OSError as error:
        raise SourceError(f"{source}: {error.strerror or error}") from error
    if len(data) > LIMIT:
        raise SourceError(f"{source}: larger than {LIMIT >> 20} MiB, not a /metrics page")
    return data


def counters(source: str, window: float, stdin: Any) -> tuple[Counts, bool]:
    """A source's counters (the increase over `window` seconds for a URL when it is set), and whether the
    engine speculates."""
    try:
        if "://" not in source:
            return read(_bytes(source, stdin))
        endpoint = _endpoint(source)
        found, speculating = read(fetch(endpoint, TIMEOUT))
        if window <= 0:
            return found, speculating
        time.sleep(window)
        later, speculating = read(fetch(endpoint, TIMEOUT))
    except ScrapeError as error:
        raise SourceError(f"{source}: {error}") from error
    increase = later.since(found)
    if increase is None:
        raise SourceError(f"{source}: counters went down during the window: the engine restarted")
    return increase, speculating


@dataclass(frozen=True)
class Pooled:
    """The sources that ran one K, summed."""

    k: int
    sources: int
    counts: Counts


def pool(read_sources: list[tuple[Counts, bool]]) -> list[Pooled]:
    """One entry per K, in the order the K first appear (the first is the current one)."""
    found: dict[int, Pooled] = {}
    for counts, speculating in read_sources:
        k = len(counts.per_position) if speculating else 0
        before = found.get(k)
        found[k] = Pooled(k, 1, counts) if before is None else Pooled(k, before.sources + 1, before.counts + counts)
    return list(found.values())


def _row(entry: Pooled, profile: Profile | None, enough: bool) -> dict[str, Any]:
    ratios = entry.counts.figures()
    return {
        "numSpeculativeTokens": entry.k,
        "sources": entry.sources,
        "drafts": entry.counts.drafts,
        "draftTokens": entry.counts.draft_tokens,
        "decodeSteps": entry.counts.steps.steps,
        "enoughEvidence": enough,
        "stepMilliseconds": None if profile is None else round(1000 * profile.step_seconds, 3),
        "tokensPerStep": None if profile is None else round(profile.tokens_per_step, 3),
        "decodeBatch": None if profile is None else round(profile.batch, 2),
        "meanAcceptanceLength": None
        if ratios.mean_acceptance_length is None
        else round(ratios.mean_acceptance_length, 3),
        "positionAcceptanceRates": [round(r, 4) for r in ratios.position_rates or ()],
    }


def _advice(found: Recommendation | None) -> dict[str, Any] | None:
    if found is None:
        return None
    out: dict[str, Any] = {"message": found.describe()}
    if found.explore is not None:
        out["measureNext"] = found.explore
        return out
    out.update(
        numSpeculativeTokens=found.k,
        speculation=found.k > 0,
        expectedGainPercent=round(100 * found.gain, 1),
        batch=round(found.batch, 2),
        extrapolated=found.extrapolated,
    )
    if found.schedule:
        out["numSpeculativeTokensPerBatchSize"] = [
            {"minBatchSize": a, "maxBatchSize": b, "numSpeculativeTokens": k} for a, b, k in found.schedule
        ]
    return out


def _figure(value: float | None, places: int) -> str:
    return "-" if value is None else f"{value:.{places}f}"


def _text(rows: list[dict[str, Any]], advice: dict[str, Any] | None, why: str, out: TextIO) -> None:
    print("K   sources  decode steps  step ms  tokens/step  batch  acceptance by position", file=out)
    for row in rows:
        cells = [
            f"{row['numSpeculativeTokens']:<3}",
            f"{row['sources']:<8}",
            f"{row['decodeSteps']:<13,}",
            f"{_figure(row['stepMilliseconds'], 2):<8}",
            f"{_figure(row['tokensPerStep'], 2):<12}",
            f"{_figure(row['decodeBatch'], 2):<6}",
            " ".join(f"{r:.2f}" for r in row["positionAcceptanceRates"]) or "-",
        ]
        note = "" if row["enoughEvidence"] else "  (too few draft tokens: not used)"
        print(" ".join(cells) + note, file=out)
    current = rows[0]
    if current["meanAcceptanceLength"] is not None:
        print(
            f"\nmean acceptance length at K={current['numSpeculativeTokens']}: {current['meanAcceptanceLength']}",
            file=out,
        )
    print(f"recommendation: {advice['message'] if advice else why}", file=out)


def cmd_tune(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.min_k > args.max_k:
        print(f"specinfer tune: --min-k {args.min_k} is above --max-k {args.max_k}", file=err)
        return EXIT_UNREADABLE
    try:
        entries = pool([counters(s, args.window, sys.stdin) for s in args.sources])
    except SourceError as error:
        say(f"specinfer tune: {error}", err)
        return EXIT_UNREADABLE
    rows, profiles = [], []
    for entry in entries:
        profile = Profile.of(entry.counts, entry.k)
        enough = profile is not None and (entry.k == 0 or entry.counts.draft_tokens >= args.min_draft_tokens)
        rows.append(_row(entry, profile, enough))
        if profile is not None and enough:
            profiles.append(profile)
    bounds = Bounds(min_k=args.min_k, max_k=args.max_k, off=True, max_batch=args.max_batch)
    current = entries[0].k
    found = recommend(profiles, current, bounds, args.batch) if current > 0 else None
    why = (
        "the first source does not speculate: give the /metrics of an engine that does first"
        if current == 0
        else f"not enough evidence at K={current} (at least {args.min_draft_tokens} draft tokens and one decode step)"
    )
    advice = _advice(found)
    if args.output == "json":
        json.dump({"profiles": rows, "recommendation": advice, **({} if advice else {"reason": why})}, out, indent=2)
        out.write("\n")
    else:
        _text(rows, advice, why, out)
    return EXIT_OK if advice else EXIT_NO_ADVICE


def add_parser(sub: Any) -> None:
    t = sub.add_parser(
        "tune",
        help="recommend K from engines' /metrics (acceptance per position and measured step time)",
        description="Read the /metrics of one or more vLLM engines (URLs, files, or - for standard input), pool "
        "those with the same K, and print per-position acceptance, mean acceptance length, step time and the K "
        "(or speculation off, or a per-batch-size schedule) with the most tokens per second, with its expected "
        "gain. The first source is the configuration that serves now. Step time is fitted across the K measured: "
        "with one K, the answer is which K to measure next. Exit 0 with advice, 1 without enough evidence, 2 when "
        "a source cannot be read.",
    )
    t.add_argument("sources", nargs="+", metavar="SOURCE", help="http://HOST:PORT/metrics, a file, or -")
    t.add_argument(
        "--window", type=within(float, 0, MAX_WINDOW), default=0.0, help="read each URL twice this many seconds apart"
    )
    k = within(int, 1, MAX_POSITIONS)
    t.add_argument("--min-k", type=k, default=1, help="smallest K to recommend (default 1)")
    t.add_argument("--max-k", type=k, default=14, help="largest K to recommend (default 14, the Ascend limit)")
    t.add_argument(
        "--batch",
        type=within(float, 1, MAX_BATCH),
        default=None,
        help="batch size to recommend for (default: as measured)",
    )
    t.add_argument(
        "--max-batch", type=within(int, 1, MAX_BATCH), default=256, help="the schedule's last batch size (maxNumSeqs)"
    )
    t.add_argument(
        "--min-draft-tokens",
        type=within(int, 1, 1 << 53),
        default=200,
        help="evidence a K needs to count (default 200)",
    )
    t.add_argument("-o", "--output", choices=("text", "json"), default="text")
    t.set_defaults(func=cmd_tune)
