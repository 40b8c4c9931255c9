"""The simulator's JSON Schema walker (fake_upstreams/jsonschema_instance.py): what it builds is
valid against the schema, checked by the `jsonschema` package (and formats by `jsonschema_rs`,
both installed with schemathesis), for the schemas clients send: pydantic's
`model_json_schema()`, the openai SDK's strict version of it, zod-to-json-schema's output and
hand-written edge cases. Hostile schemas never make it raise."""

from __future__ import annotations

import datetime
import enum
import json
import uuid
from typing import Annotated, Literal

import jsonschema
import jsonschema_rs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.lib._pydantic import to_strict_json_schema
from pydantic import AnyUrl, BaseModel, Field, conint, conlist, constr

from fake_upstreams.jsonschema_instance import instance


def assert_valid(schema, value):
    jsonschema.validators.validator_for(schema)(schema).validate(value)
    formats = jsonschema_rs.validator_for(schema, validate_formats=True)
    assert formats.is_valid(value), list(formats.iter_errors(value))
    json.dumps(value)  # plain JSON, nothing Python-only


# --------------------------------------------------------------------------- pydantic models


class Colour(enum.StrEnum):
    red = "red"
    green = "green"


class Priority(enum.IntEnum):
    low = 1
    high = 3


class Address(BaseModel):
    street: str
    city: str
    postcode: Annotated[str, Field(pattern=r"^\d{3}$")]
    country: Literal["NO", "SE"] = "NO"


class Person(BaseModel):
    name: constr(min_length=2, max_length=40)
    email: Annotated[str, Field(json_schema_extra={"format": "email"})]
    age: conint(ge=18, le=99)
    height: Annotated[float, Field(gt=0.5, lt=2.5)]
    score: Annotated[float, Field(multiple_of=0.25, ge=10)]
    id: uuid.UUID
    born: datetime.date
    seen: datetime.datetime
    wakes: datetime.time
    homepage: AnyUrl
    colour: Colour
    priority: Priority
    home: Address
    previous: list[Address]
    nickname: str | None
    tags: conlist(str, min_length=2, max_length=3)
    numbers: set[int]
    extras: dict[str, int]
    pair: tuple[int, str]
    active: bool = True


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: conint(ge=1, le=9)


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool


class Owner(BaseModel):
    pet: Annotated[Cat | Dog, Field(discriminator="kind")]
    others: list[Cat | Dog]


class Tree(BaseModel):
    label: str
    children: list[Tree]
    parent: Tree | None


class Event(BaseModel):
    """What the README's structured-output example asks for."""

    name: str
    date: str
    participants: list[str]


@pytest.mark.parametrize("model", [Address, Person, Owner, Tree, Event])
def test_pydantic_models_schemas_and_their_strict_form(model):
    for schema in (model.model_json_schema(), to_strict_json_schema(model)):
        value = instance(schema, hint="Echo: hi")
        assert_valid(schema, value)
        model.model_validate(value)  # the client's own check passes too


def test_every_property_is_filled_and_the_hint_lands_in_the_first_free_string():
    value = instance(to_strict_json_schema(Person), hint="Echo: hello")
    assert set(value) == set(Person.model_fields)
    assert value["name"] == "Echo: hello"  # within 2..40 characters
    assert value["nickname"] == "sample nickname"  # the first non-null branch
    assert value["home"]["postcode"] == "123"  # a simple pattern gets a simple match
    assert value["age"] == 18 and value["score"] == 10 and 0.5 < value["height"] < 2.5
    assert len(value["tags"]) == 2 and value["pair"][0] == 1
    assert value["colour"] == "red" and value["priority"] == 1
    assert instance(Event.model_json_schema(), hint="Echo: x") == {
        "name": "Echo: x",
        "date": "sample date",
        "participants": ["sample participants"],
    }


def test_the_same_schema_gives_the_same_document():
    schema = to_strict_json_schema(Person)
    first = json.dumps(instance(schema, hint="h"))
    assert all(json.dumps(instance(schema, hint="h")) == first for _ in range(3))


def test_recursion_ends():
    value = instance(Tree.model_json_schema())
    depth = 0
    while value["children"]:
        value, depth = value["children"][0], depth + 1
    assert 0 < depth < 20
    schema = {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}
    instance(schema)  # no way out: cut short, no exception


# --------------------------------------------------------------------------- zod-like schemas

ZOD = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "title": {"type": "string", "minLength": 3},
        "email": {"type": "string", "format": "email"},
        "site": {"type": "string", "format": "uri"},
        "when": {"type": "string", "format": "date-time"},
        "id": {"type": "string", "format": "uuid"},
        "rating": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 5},
        "count": {"type": "integer", "minimum": 0, "maximum": 10, "multipleOf": 5},
        "status": {"type": "string", "enum": ["draft", "live"]},
        "version": {"type": "number", "const": 2},
        "note": {"type": ["string", "null"]},
        "maybe": {"anyOf": [{"type": "null"}, {"$ref": "#/definitions/Item"}]},
        "items": {"type": "array", "items": {"$ref": "#/definitions/Item"}, "minItems": 2},
        "tuple": {
            "type": "array",
            "items": [{"type": "string"}, {"type": "boolean"}],
            "additionalItems": False,
            "minItems": 2,
        },
        "either": {"oneOf": [{"type": "string", "maxLength": 2}, {"type": "integer"}]},
    },
    "required": ["title", "email", "items"],
    "additionalProperties": False,
    "definitions": {
        "Item": {
            "type": "object",
            "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}$"}},
            "required": ["sku"],
            "additionalProperties": False,
        }
    },
}


def test_zod_like_schema():
    value = instance(ZOD, hint="Echo: x")
    assert_valid(ZOD, value)
    assert value["items"] == [{"sku": "ABC"}, {"sku": "ABC"}]
    assert value["maybe"] == {"sku": "ABC"} and value["version"] == 2 and value["count"] == 0


# --------------------------------------------------------------------------- edge cases


EDGES = [
    {"type": "integer", "exclusiveMinimum": 4, "exclusiveMaximum": 6},
    {"type": "number", "minimum": 10.005, "multipleOf": 0.01},
    {"type": "number", "maximum": -3.5},
    {"type": "integer", "minimum": -100, "maximum": -90, "multipleOf": 7},
    {"type": "number", "minimum": 1e300},
    {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "number",
        "minimum": 3,
        "exclusiveMinimum": True,
        "maximum": 4,
        "exclusiveMaximum": True,
    },
    {"type": "string", "minLength": 30},
    {"type": "string", "maxLength": 0},
    {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
    {"type": "string", "pattern": "^[a-z]+$", "minLength": 3},
    {"type": "string", "format": "ipv4"},
    {"type": "string", "format": "time"},
    {"type": "array", "items": {"type": "integer"}, "minItems": 5, "uniqueItems": True},
    {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 3, "uniqueItems": True},
    {"type": "array", "items": {"type": "string"}, "minItems": 3, "uniqueItems": True},
    {
        "type": "array",
        "items": {"type": "string", "format": "date"},
        "minItems": 3,
        "uniqueItems": True,
    },
    {"type": "array", "maxItems": 0},
    {"type": "array", "prefixItems": [{"type": "integer"}, {"const": "x"}], "items": False},
    {"type": "object", "minProperties": 2, "additionalProperties": {"type": "boolean"}},
    {"type": "object", "required": ["a", "b"], "properties": {"a": {"type": "null"}}},
    {"type": "object", "properties": {"gone": False, "any": True}},
    {"type": "object", "maxProperties": 1, "properties": {"a": {}, "b": {}}, "required": ["b"]},
    {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"properties": {"b": {"type": "string"}}, "required": ["b"]},
        ]
    },
    {"$defs": {"N": {"type": "integer", "minimum": 7}}, "allOf": [{"$ref": "#/$defs/N"}]},
    {"$defs": {"S": {"type": "string"}}, "$ref": "#/$defs/S", "maxLength": 3},
    {"anyOf": [{"type": "null"}, {"type": "boolean"}]},
    {"type": ["null", "integer"], "minimum": 2},
    {"type": "boolean", "default": False},
    {"enum": [None, 3]},
    {},
    True,
]


@pytest.mark.parametrize("schema", EDGES, ids=range(len(EDGES)))
def test_edge_cases_are_valid(schema):
    assert_valid(schema, instance(schema, hint="a hint"))


# --------------------------------------------------------------------------- hostile schemas

KEYWORDS = (
    "type properties required items prefixItems anyOf oneOf allOf $ref $defs enum const minItems "
    "maxItems minLength maxLength pattern format minimum maximum exclusiveMinimum multipleOf "
    "additionalProperties minProperties uniqueItems x"
).split()
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(["#", "#/$defs/x", "#/definitions", "^(a+)+$", "[", "date", "uuid"])
    | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(KEYWORDS), children, max_size=5)
    ),
    max_leaves=30,
)


@settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(json_values)
def test_any_json_as_a_schema_never_raises(schema):
    json.dumps(instance(schema, hint="h"))


@pytest.mark.parametrize(
    "schema",
    [
        {"allOf": [{"$ref": "#"}] * 5},
        {"anyOf": [{"$ref": "#"}] * 5, "type": "object"},
        {
            "type": "object",
            "properties": {name: {"$ref": "#"} for name in "abcde"},
            "required": list("abcde"),
        },
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    ],
)
def test_self_references_stay_bounded(schema):
    assert len(json.dumps(instance(schema))) < 250_000  # a few thousand nodes at most


def test_huge_bounds_stay_small():
    value = instance({"type": "array", "minItems": 2**62, "items": {"minLength": 2**40}})
    assert len(value) <= 64 and all(len(s) <= 4096 for s in value)
