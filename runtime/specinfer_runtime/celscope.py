"""What data a CEL expression reads, so that it is evaluated over that data alone.

The cel binding converts every value of a context into CEL (microseconds per string or map) and copies the
value of every field an expression selects: `object.spec.placement.nodeSelector` copies the whole spec, then
the whole placement. An expression over a large resource would pay the resource's size at every step, and a
rule set over it once per rule. Each expression is parsed here (once) and the fields it can read are found,
so that it is given the resource pruned to them: the same verdict, at the cost of what it reads.

The analysis over-approximates: whatever an expression could read is kept. A field is kept whole when the
expression uses its value; only its presence when it is only tested with `has()` (its value then stands in
as null); only its size when it is only measured with `size()` (a string of that length stands in for a
list or map). An expression this parser does not read is given its data whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

Use = Literal["presence", "size", "full"]
_RANK: dict[Use, int] = {"presence": 0, "size": 1, "full": 2}
ITEMS = "[]"  # what an index reaches: every item of a list, every value of a map
ELEMENTS = "{}"  # what a comprehension iterates: every item of a list, every key of a map
MACROS = {"all", "exists", "exists_one", "filter", "map"}

_TOKEN = re.compile(
    r"""\s*(?:(?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?u?)|(?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
    r"""|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>&&|\|\||==|!=|<=|>=|[-+*/%!<>?:.,()\[\]{}]))""",
    re.DOTALL,
)
_BINARY = (("||",), ("&&",), ("==", "!=", "<", "<=", ">", ">=", "in"), ("+", "-"), ("*", "/", "%"))


class UnreadableError(ValueError):
    """An expression outside the subset this parser reads."""


Node = tuple[Any, ...]


class _Parser:
    """A recursive-descent parser of the CEL the rules use, to a tuple tree: ("name", n), ("select", x, f),
    ("index", x, i), ("call", f, receiver | None, args), ("op", args), ("cond", c, a, b), ("list", items)."""

    def __init__(self, text: str) -> None:
        self.tokens: list[str] = []
        position = 0
        while text[position:].strip():
            match = _TOKEN.match(text, position)
            if match is None or match.end() == position:
                raise UnreadableError(f"cannot read {text[position : position + 20]!r}")
            self.tokens.append(match.group(match.lastgroup or ""))
            position = match.end()
        self.at = 0

    def peek(self) -> str:
        return self.tokens[self.at] if self.at < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if not token or (expected is not None and token != expected):
            raise UnreadableError(f"expected {expected or 'more'}, found {token!r}")
        self.at += 1
        return token

    def parse(self) -> Node:
        node = self.conditional()
        if self.peek():
            raise UnreadableError(f"unexpected {self.peek()!r}")
        return node

    def conditional(self) -> Node:
        node = self.binary(0)
        if self.peek() != "?":
            return node
        self.take()
        then = self.conditional()
        self.take(":")
        return ("cond", node, then, self.conditional())

    def binary(self, level: int) -> Node:
        if level == len(_BINARY):
            return self.unary()
        node = self.binary(level + 1)
        while self.peek() in _BINARY[level]:
            self.take()
            node = ("op", (node, self.binary(level + 1)))
        return node

    def unary(self) -> Node:
        if self.peek() in ("!", "-"):
            self.take()
            return ("op", (self.unary(),))
        return self.member(self.primary())

    def member(self, node: Node) -> Node:
        while self.peek() in (".", "["):
            if self.take() == "[":
                node = ("index", node, self.conditional())
                self.take("]")
                continue
            name = self.take()
            node = ("call", name, node, self.arguments()) if self.peek() == "(" else ("select", node, name)
        return node

    def arguments(self) -> tuple[Node, ...]:
        self.take("(")
        args = []
        while self.peek() != ")":
            args.append(self.conditional())
            if self.peek() != ")":
                self.take(",")
        self.take(")")
        return tuple(args)

    def primary(self) -> Node:
        token = self.take()
        if token == "(":
            node = self.conditional()
            self.take(")")
            return node
        if token == "[":
            items = []
            while self.peek() != "]":
                items.append(self.conditional())
                if self.peek() != "]":
                    self.take(",")
            self.take("]")
            return ("list", tuple(items))
        if token[0] in "'\"" or token[0].isdigit() or token in ("true", "false", "null"):
            return ("literal",)
        if not (token[0].isalpha() or token[0] == "_"):
            raise UnreadableError(f"unexpected {token!r}")
        return ("call", token, None, self.arguments()) if self.peek() == "(" else ("name", token)


@dataclass
class Scope:
    """The fields read below one value: how its own value is used, and the fields read inside it."""

    use: Use | None = None
    fields: dict[str, Scope] = field(default_factory=dict)

    def at(self, path: tuple[str, ...]) -> Scope:
        node = self
        for key in path:
            node = node.fields.setdefault(key, Scope())
        return node

    def mark(self, use: Use) -> None:
        if self.use is None or _RANK[use] > _RANK[self.use]:
            self.use = use

    def merge(self, other: Scope) -> None:
        if other.use is not None:
            self.mark(other.use)
        for key, inner in other.fields.items():
            self.fields.setdefault(key, Scope()).merge(inner)


Alias = tuple[str, tuple[str, ...]]  # a variable and a path below it


class _Reads:
    """The walk of a parsed expression: the data each node may be (its aliases), and what is read."""

    def __init__(self) -> None:
        self.roots: dict[str, Scope] = {}

    def use(self, aliases: set[Alias], how: Use) -> None:
        for root, path in aliases:
            self.roots.setdefault(root, Scope()).at(path).mark(how)

    def value(self, node: Node, bound: dict[str, set[Alias]]) -> set[Alias]:
        """Walk `node`, recording what it reads; what its value may be (data not otherwise read yet)."""
        kind = node[0]
        if kind == "name":
            return bound.get(node[1], {(node[1], ())})
        if kind == "select":
            return {(root, (*path, node[2])) for root, path in self.value(node[1], bound)}
        if kind == "index":
            self.consume(node[2], bound)
            return {(root, (*path, ITEMS)) for root, path in self.value(node[1], bound)}
        if kind == "cond":
            self.consume(node[1], bound)
            return self.value(node[2], bound) | self.value(node[3], bound)
        if kind == "call":
            return self.call(node[1], node[2], node[3], bound)
        for inner in node[1] if kind in ("op", "list") else ():
            self.consume(inner, bound)
        return set()

    def consume(self, node: Node, bound: dict[str, set[Alias]]) -> None:
        self.use(self.value(node, bound), "full")

    def call(
        self, name: str, receiver: Node | None, args: tuple[Node, ...], bound: dict[str, set[Alias]]
    ) -> set[Alias]:
        if name == "has" and receiver is None and len(args) == 1 and args[0][0] == "select":
            self.use(self.value(args[0], bound), "presence")
            return set()
        if name in MACROS and receiver is not None and len(args) in (2, 3) and args[0][0] == "name":
            items = {(root, (*path, ELEMENTS)) for root, path in self.value(receiver, bound)}
            self.use(items, "presence")  # every element is there, if only to be counted
            inner = {**bound, args[0][1]: items}
            for arg in args[1:-1] if name == "map" else args[1:]:
                self.consume(arg, inner)
            if name == "map":
                return self.value(args[-1], inner)
            return {(root, path[:-1]) for root, path in items} if name == "filter" else set()
        if name == "size" and len(args) + (receiver is not None) == 1:
            self.use(self.value(receiver if receiver is not None else args[0], bound), "size")
            return set()
        for arg in (receiver, *args) if receiver is not None else args:
            self.consume(arg, bound)
        return set()


@cache
def reads(expression: str) -> dict[str, Scope] | None:
    """The fields of each variable that `expression` may read; None when it is outside the subset read here."""
    try:
        tree = _Parser(expression).parse()
    except UnreadableError:
        return None
    walk = _Reads()
    walk.consume(tree, {})
    return walk.roots


_ABSENT = Scope("presence")


def pruned(value: Any, scope: Scope) -> Any:
    """`value` with only what `scope` reads: the rest left out, values only tested for presence as null,
    lists and maps only measured as strings of their size."""
    if scope.use == "full" or not isinstance(value, dict | list):
        return value
    if not scope.fields:
        return None if scope.use == "presence" else "-" * len(value)
    values, elements = scope.fields.get(ITEMS), scope.fields.get(ELEMENTS)
    if isinstance(value, list):
        inner = _merged(values, elements)
        if inner is None:
            return "-" * len(value)
        return value if inner.use == "full" else [pruned(item, inner) for item in value]
    every = elements is not None or scope.use == "size"  # iterated or counted: every key stays
    if not every and values is None:  # named fields only (the common case, and the hot one)
        return {
            key: value[key] if inner.use == "full" else pruned(value[key], inner)
            for key, inner in scope.fields.items()
            if key in value
        }
    out = {}
    for key, item in value.items():
        inner = _merged(scope.fields.get(key), values)
        if inner is not None:
            out[key] = pruned(item, inner)
        elif every:
            out[key] = pruned(item, _ABSENT)
    return out


def _merged(a: Scope | None, b: Scope | None) -> Scope | None:
    if a is None or b is None:
        return a or b
    both = Scope()
    both.merge(a)
    both.merge(b)
    return both
