"""Kubernetes name formats (apimachinery's validation), as anchored regular expressions and CEL predicates.

Kubernetes refuses a Deployment whose pod template holds a bad label key, toleration, node or
namespace name; the spec fields that end up there are held to the same formats when the resource
is applied, so the operator's own apply never fails on them.
"""

from __future__ import annotations

import re

from specinfer_runtime.celrules import cel_string

_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = rf"{_LABEL}(\.{_LABEL})*"
_NAME = "[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"  # the name part of a qualified name: at most 63

# With max_length 63: a namespace, a Service.
DNS_LABEL = f"^{_LABEL}$"
# With max_length 253: most object names (Secrets, claims, PriorityClasses, nodes).
DNS_SUBDOMAIN = f"^{_SUBDOMAIN}$"
# At most 63 characters, possibly empty.
LABEL_VALUE = f"^({_NAME})?$"
# Printable ASCII other than '=' (Kubernetes 1.34+; older releases allow fewer characters).
ENV_NAME = "^[ -<>-~]+$"

QUALIFIED_NAME_FORMAT = (
    "an optional DNS subdomain prefix of at most 253 characters and '/', then a name of at most 63 "
    "characters (alphanumerics, '-', '_' or '.', starting and ending alphanumeric), e.g. 'example.com/my-key'"
)
LABEL_VALUE_FORMAT = "at most 63 characters: alphanumerics, '-', '_' or '.', starting and ending alphanumeric"


def qualified_name(expr: str) -> str:
    """CEL: `expr` is a qualified name (label keys, taint keys, topology keys)."""
    return (
        f"({expr}.matches({cel_string(f'^({_SUBDOMAIN}/)?{_NAME}$')}) "
        f"&& (!{expr}.contains('/') || size({expr}.split('/')[0]) <= 253))"
    )


# The same formats for Python, where a CEL evaluation per value would cost more than the value: the metadata
# of an object (tens of thousands of labels fit in one), checked as apimachinery checks it. The lookahead
# bounds the prefix as `qualified_name`'s split does.
QUALIFIED_NAME = re.compile(rf"(?:(?=[^/]{{1,253}}/){_SUBDOMAIN}/)?{_NAME}")
LABEL_VALUE_TEXT = re.compile(f"(?:{_NAME})?")
