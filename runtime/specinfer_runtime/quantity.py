"""Kubernetes' resource quantities (k8s.io/apimachinery/pkg/api/resource.ParseQuantity): which strings it takes,
and their values. The API server's CEL has isQuantity() and quantity(); the CEL run in-process gets them from here
(celrules.py), so that both take the same strings."""

from __future__ import annotations

import re
from decimal import Decimal

# The form, as ParseQuantity's own refusal quotes it ("quantities must match the regular expression ...").
FORM = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
# What its parser walks: a sign, digits, a fraction, then suffix letters and an exponent's sign and digits.
_GRAMMAR = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[-+]?[0-9]*)")
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_EXPONENT = re.compile(r"[eE]([-+]?[0-9]+)")
_INT64 = 2**63
_BEYOND = 400  # an exponent past a float's range: values are compared as floats (celrules.py)


def parse(text: str) -> Decimal | None:
    """The value of a quantity, or None where Kubernetes refuses the string."""
    match = _GRAMMAR.fullmatch(text)
    if not text or match is None:
        return None
    sign, whole, fraction, suffix = match.groups()
    number = Decimal(f"{sign}{whole or '0'}.{fraction or '0'}")
    if suffix in _BINARY:
        return number * Decimal(2 ** _BINARY[suffix])
    exponent = _DECIMAL.get(suffix)
    if exponent is None:
        power = _EXPONENT.fullmatch(suffix)
        if power is None or not -_INT64 <= int(power.group(1)) < _INT64:
            return None  # a suffix Kubernetes does not know (GB, K, e)
        exponent = int(power.group(1))
    return number.scaleb(max(-_BEYOND, min(exponent, _BEYOND)))  # 1e999999999999 is a quantity: past any bound
