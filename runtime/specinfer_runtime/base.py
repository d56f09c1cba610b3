"""The pydantic base every spec section derives from: camelCase fields, strict types, CEL rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from specinfer_runtime.celrules import Rule, check

# The values an editor offers and checks for a field whose CRD schema has no enum, because a rule of its own
# (ValueRules) refuses the others with a better message than the API server's enum error.
EDITOR_ENUM = "x-editor-enum"


class Section(BaseModel):
    """A spec object. Strict like the API server: no type coercion, no unknown fields."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        strict=True,
        frozen=True,
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = ()
    # Rules on the whole object (`object`), for a ValidatingAdmissionPolicy: those CEL in the CRD cannot afford.
    admission_rules: ClassVar[tuple[Rule, ...]] = ()

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = handler(core_schema)
        target = handler.resolve_ref_schema(schema)
        if cls.cel_rules:
            target["x-kubernetes-validations"] = [r.to_kubernetes() for r in cls.cel_rules]
        return schema

    def dump(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase keys, unset optionals absent."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


@dataclass(frozen=True)
class CelRules:
    """CEL rules on a value that is not a Section, such as each string of a list, as `Annotated` metadata.

    A rule there is checked once per item, which keeps each expression within the API server's cost
    budget where one rule over the whole list would not be."""

    rules: tuple[Rule, ...]

    def __get_pydantic_json_schema__(self, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = handler(core_schema)
        handler.resolve_ref_schema(schema)["x-kubernetes-validations"] = [r.to_kubernetes() for r in self.rules]
        return schema


@dataclass(frozen=True)
class ValueRules:
    """CEL rules on one value that is not a Section (a quantity, a method name), as `Annotated` metadata, checked
    where the schema checks the value: by the API server as its `x-kubernetes-validations`, in Python as the
    value is validated, with the rule's message. So a bad value is one schema error naming its field, and the
    rules on the object around it, which may read it, never see it."""

    rules: tuple[Rule, ...]

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(self, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = handler(core_schema)
        handler.resolve_ref_schema(schema)["x-kubernetes-validations"] = [r.to_kubernetes() for r in self.rules]
        return schema

    def _check(self, value: Any) -> Any:
        broken = check(self.rules, value, "")
        if broken:
            raise ValueError("; ".join(v.message for v in broken))
        return value


def section_field(model: type[Section], description: str) -> Any:
    """An optional object whose defaults always apply. The CRD default spells them out: the API server
    checks a default against the object's CEL rules before nested defaults would fill it in."""
    return Field(default_factory=model, description=description, json_schema_extra={"default": model().dump()})


def list_map(key: str, max_items: int, description: str) -> Any:
    """An optional list keyed by `key`, as Kubernetes keeps one (server-side apply merges by it, and the API
    server refuses a repeated key)."""
    return Field(
        default=None,
        max_length=max_items,
        description=description,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [key]},
    )


def unique(values: list[int]) -> list[int]:
    """Refuse repeated list items, with the API server's wording."""
    seen: set[int] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"Duplicate value: {value}")
        seen.add(value)
    return values
