"""Resource quantities (cpu, memory, sizes) as Kubernetes takes them: an integer, or a string it parses.

Kubernetes' own fields take `cpu: 16` as readily as `cpu: "16"`; a CRD says so with x-kubernetes-int-or-string.
What the string may be is Kubernetes' parser's (runtime/specinfer_runtime/quantity.py), checked by one CEL rule
on the value, so that `memory: 64GB` is refused at `kubectl apply` and by `specinfer validate` with the same
words: Kubernetes' own, the value, and what to write instead.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import PlainValidator, WithJsonSchema

from specinfer_runtime.base import ValueRules
from specinfer_runtime.celrules import Rule
from specinfer_runtime.quantity import FORM

MAX_LENGTH = 64
INT64 = 2**63  # the API server reads a larger integer as a float, which int-or-string refuses


def _int_or_string(value: Any) -> str:
    """What the API server takes where a CRD says int-or-string: an integer or a string, no other number. An
    integer is kept as the string Kubernetes writes it in a pod (16 is "16"), so what is rendered does not
    depend on how the manifest spelled it."""
    if isinstance(value, int) and not isinstance(value, bool) and -INT64 <= value < INT64:
        return str(value)
    if isinstance(value, str):
        if len(value) > MAX_LENGTH:
            raise ValueError(f"Too long: may not be more than {MAX_LENGTH} bytes")
        return value
    shown = str(value).lower() if isinstance(value, bool) else repr(value)
    raise ValueError(
        f"Invalid value: {shown}: must be of type integer or string: write a quantity with a fraction as a string, "
        'e.g. "0.5" or "1.5Gi"'
    )


def _rule(kind: str, examples: str) -> Rule:
    return Rule(
        id="kubernetes",
        rule="type(self) == int ? self >= 0 : (isQuantity(self) && quantity(self).compareTo(quantity('0')) >= 0)",
        message=f'"%s" is not a {kind} Kubernetes takes: quantities must match the regular expression '
        f"'{FORM}', with a suffix Kubernetes knows (Ki, Mi, Gi, Ti, Pi, Ei: powers of 1024; m, k, M, G, T, P, E: "
        f"powers of 1000), and may not be negative: write {examples}",
        args=("self",),
    )


_SIZE = _rule("size", "e.g. 64Gi (64 x 2^30 bytes) or 64G (64 x 10^9 bytes), without a B, or a number of bytes")
_CORES = _rule("CPU quantity", 'e.g. 16 (cores), or 500m or "0.5" (half a core)')
_SCHEMA = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
    "maxLength": MAX_LENGTH,
}

# Memory and storage: bytes, or a string with a suffix (B is not one).
Bytes = Annotated[str, PlainValidator(_int_or_string), WithJsonSchema(_SCHEMA), ValueRules((_SIZE,))]
# CPU: cores, or a string such as 500m.
Cores = Annotated[str, PlainValidator(_int_or_string), WithJsonSchema(_SCHEMA), ValueRules((_CORES,))]


def not_below(limit: str, request: str) -> str:
    """CEL: the quantity at `limit` is not below the one at `request` (both set and valid): Kubernetes refuses a
    limit below its request. Either may be an integer: quantity() takes a string."""
    both = f"isQuantity(string({limit})) && isQuantity(string({request}))"
    return f"!({both}) || quantity(string({limit})).compareTo(quantity(string({request}))) >= 0"
