"""Paths that name any key (syncd.paths): JSON Pointers (RFC 6901) beside dotted paths, read
with ``get_path`` and written with ``set_path``. Pure: no I/O."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from syncd.paths import MISSING, MSG_PATH, get_path, parse_path, path_problem, set_path

#: A response whose keys a dotted path cannot all name (the shapes of Microsoft Graph, JSON-LD
#: and RFC 6901's own examples).
BODY: dict[str, Any] = {
    "@odata.nextLink": "https://graph.example/v1.0/users?$skiptoken=X",
    "$meta": {"total count": 3},
    "value": [{"id": "u1"}, {"id": "u2"}, {"id": "u3"}],
    "a/b": "slash",
    "m~n": "tilde",
    "~1": "a literal tilde-one",
    "": "the empty key",
    " ": "a space",
    "meta": {"next": "page-2", "0": "key zero"},
    "items": [[10, 11], [20, 21]],
}


# --- parse_path ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "parts"),
    [
        ("/@odata.nextLink", ("@odata.nextLink",)),
        ("/$meta/total count", ("$meta", "total count")),
        ("/value/0/id", ("value", "0", "id")),
        ("/a~1b", ("a/b",)),
        ("/m~0n", ("m~n",)),
        # ~1 is decoded before ~0 (RFC 6901 §4): "~01" is the key "~1", not "/".
        ("/~01", ("~1",)),
        ("/~10", ("/0",)),
        ("/", ("",)),
        ("/ ", (" ",)),
        ("//", ("", "")),
        ("/a//b/", ("a", "", "b", "")),
    ],
)
def test_a_json_pointer_parses_into_its_unescaped_keys(path: str, parts: tuple[str, ...]) -> None:
    assert path_problem(path) is None
    assert parse_path(path) == parts


@pytest.mark.parametrize(
    ("path", "parts"),
    [
        ("data", ("data",)),
        ("meta.next", ("meta", "next")),
        ("items.0.id", ("items", "0", "id")),
        ("response_metadata.next_cursor", ("response_metadata", "next_cursor")),
        # Characters a pointer escapes mean nothing special in a dotted path.
        ("a~1b", ("a~1b",)),
        ("$meta.total count", ("$meta", "total count")),
    ],
)
def test_a_dotted_path_splits_on_dots_as_before(path: str, parts: tuple[str, ...]) -> None:
    assert path_problem(path) is None
    assert parse_path(path) == parts


@pytest.mark.parametrize(
    "path",
    [
        "",  # neither spelling: a pointer to the whole document is not a place in it
        ".",
        "meta.",
        ".meta",
        "meta..next",
        "a\u0000b",
        "/a\u0000b",
        "/a~",  # "~" must be followed by 0 or 1
        "/a~2",
        "/~",
        "/a~/b",
        "/~~1",
    ],
)
def test_an_invalid_path_is_refused_with_the_syntax_it_should_have(path: str) -> None:
    assert path_problem(path) == MSG_PATH
    with pytest.raises(ValueError) as refused:
        parse_path(path)
    assert str(refused.value) == f"{path!r}: {MSG_PATH}"
    assert "dotted path" in MSG_PATH and "JSON Pointer" in MSG_PATH


@pytest.mark.parametrize("value", [None, 3, ["a"], {"a": 1}, b"/a"])
def test_a_path_that_is_not_text_is_a_problem(value: Any) -> None:
    assert path_problem(value) == MSG_PATH


def test_a_tilde_followed_by_a_tilde_is_refused() -> None:
    # RFC 6901: "~" is only ever followed by "0" or "1"; "~~01" has a "~" followed by "~".
    with pytest.raises(ValueError):
        parse_path("/~~01")


# --- get_path ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("/@odata.nextLink", BODY["@odata.nextLink"]),
        ("/$meta/total count", 3),
        ("/value/1/id", "u2"),
        ("/a~1b", "slash"),
        ("/m~0n", "tilde"),
        ("/~01", "a literal tilde-one"),
        ("/", "the empty key"),
        ("/ ", "a space"),
        ("/items/1/0", 20),
        ("/meta/0", "key zero"),  # an object's key "0" is a key, not an index
        ("meta.next", "page-2"),
        ("value.2.id", "u3"),
        ("items.0.1", 11),
        ("meta.0", "key zero"),
    ],
)
def test_get_path_reads_the_value_any_key_names(path: str, value: Any) -> None:
    assert get_path(BODY, path) == value


def test_a_dotted_path_cannot_reach_a_key_with_a_dot_but_its_pointer_can() -> None:
    assert get_path(BODY, "@odata.nextLink") is MISSING
    assert get_path(BODY, "/@odata.nextLink") == BODY["@odata.nextLink"]


@pytest.mark.parametrize(
    "path",
    [
        "/nothere",
        "/value/3",  # past the end
        "/value/-",  # RFC 6901's "past the last element" is never a value
        "/value/01",  # no leading zeros in an index
        "/value/+1",
        "/value/-1",
        "/value/ 1",
        "/value/id",  # an array has no keys
        "/@odata.nextLink/x",  # through a string
        "/$meta/total count/x",  # through a number
        "value.3.id",
        "meta.next.deeper",
    ],
)
def test_a_path_that_leads_nowhere_gives_missing(path: str) -> None:
    assert get_path(BODY, path) is MISSING


@pytest.mark.parametrize("part", ["\u00b2", "\u0661"])
def test_only_ascii_digits_index_an_array(part: str) -> None:
    # RFC 6901 §4: an array index is ASCII digits; anything else names no element.
    assert get_path({"a": [1, 2, 3]}, f"/a/{part}") is MISSING


def test_a_null_is_a_value_not_missing() -> None:
    assert get_path({"a": {"b": None}}, "/a/b") is None
    assert get_path({"a": {"b": None}}, "a.b") is None
    assert get_path({"a": {"b": None}}, "/a/b/c") is MISSING


def test_a_path_into_a_scalar_or_null_document_gives_missing() -> None:
    for document in (None, 3, "text", True):
        assert get_path(document, "/a") is MISSING
        assert get_path(document, "a") is MISSING


def test_get_path_of_an_invalid_path_raises_value_error() -> None:
    with pytest.raises(ValueError, match="JSON Pointer"):
        get_path(BODY, "/a~2")


# --- set_path ------------------------------------------------------------------------------


def test_set_path_writes_at_a_pointer_and_never_changes_its_argument() -> None:
    body: dict[str, Any] = {"variables": {"owner": "octocat"}, "$top": 100}
    before = copy.deepcopy(body)
    out = set_path(body, "/variables/after", "Y3Vyc29y")
    assert out == {"variables": {"owner": "octocat", "after": "Y3Vyc29y"}, "$top": 100}
    assert body == before
    assert out["variables"] is not body["variables"]


def test_set_path_makes_the_objects_on_the_way() -> None:
    assert set_path({}, "/filter/last edited/on_or_after", "2024-01-01T00:00:00Z") == {
        "filter": {"last edited": {"on_or_after": "2024-01-01T00:00:00Z"}}
    }
    assert set_path({}, "paging.start", 50) == {"paging": {"start": 50}}


def test_set_path_unescapes_the_keys_it_writes() -> None:
    assert set_path({}, "/a~1b/m~0n", 1) == {"a/b": {"m~n": 1}}
    assert set_path({}, "/@odata.count", True) == {"@odata.count": True}
    assert set_path({"": 0}, "/", 1) == {"": 1}


def test_set_path_replaces_an_existing_value_and_a_scalar_on_the_way() -> None:
    assert set_path({"a": 1}, "/a", 2) == {"a": 2}
    assert set_path({"a": "text"}, "/a/b", 2) == {"a": {"b": 2}}
    assert set_path({"a": None}, "a.b", 2) == {"a": {"b": 2}}


def test_set_path_writes_into_an_existing_array_index_and_copies_the_array() -> None:
    body: dict[str, Any] = {"sort": [{"updated": "asc"}, {"id": "asc"}]}
    out = set_path(body, "/sort/1/id", "desc")
    assert out == {"sort": [{"updated": "asc"}, {"id": "desc"}]}
    assert body["sort"][1] == {"id": "asc"}
    assert out["sort"] is not body["sort"]
    assert set_path({"a": [1, 2]}, "a.0", 9) == {"a": [9, 2]}


def test_set_path_past_an_array_replaces_it_by_an_object() -> None:
    # No index to write: the array is replaced by an object holding the key, as documented.
    assert set_path({"a": [1, 2]}, "/a/5", 9) == {"a": {"5": 9}}
    assert set_path({"a": [1, 2]}, "/a/-", 9) == {"a": {"-": 9}}


def test_what_set_path_writes_get_path_reads_back() -> None:
    for path in ("/a b/$c/@d.e", "/a~1b/~0", "x.y.z", "/0/1"):
        assert get_path(set_path({}, path, "v"), path) == "v"


def test_set_path_refuses_an_invalid_path() -> None:
    with pytest.raises(ValueError, match="JSON Pointer"):
        set_path({}, "a..b", 1)
