"""The exact JSON parse: long integers are found without a regular expression, and every
number keeps its kind and value."""

from __future__ import annotations

import json
import re

from hypothesis import given
from hypothesis import strategies as st

from syncd.jsontext import canonical_json, has_long_number, parse_json

# The rule has_long_number implements, as a regular expression (ASCII digits only).
LONG_NUMBER = re.compile(r"[0-9]{19}", re.ASCII)

_text = st.text(
    # Digits, other characters, and digits of other scripts (Arabic-Indic three, mathematical
    # bold nine) that JSON does not read as digits.
    alphabet=st.sampled_from(
        ["0", "1", "9", "5", "a", "-", ".", "\u0663", "\U0001d7d7", "é", '"', " "]
    ),
    max_size=60,
)


@given(_text)
def test_has_long_number_is_the_regular_expression(text: str) -> None:
    expected = LONG_NUMBER.search(text) is not None
    assert has_long_number(text) is expected
    assert has_long_number(text.encode("utf-8")) is expected


def test_long_runs_at_the_edges() -> None:
    assert has_long_number("1" * 19)
    assert not has_long_number("1" * 18)
    assert has_long_number('{"a":"x' + "7" * 19 + '"}')  # in a string: parsed by json, same value
    assert not has_long_number("123456789012345678.1234567890")
    # Non-ASCII digits are not JSON digits.
    assert not has_long_number("\u0663" * 30)
    # A lone surrogate (from a "\\ud800" escape read back) does not break the scan.
    assert not has_long_number("\ud800" + "1" * 5)


@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(min_value=-(10**40), max_value=10**40)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=10),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(max_size=5), children, max_size=4)
        ),
        max_leaves=12,
    )
)
def test_parse_json_round_trips_every_value(value: object) -> None:
    text = canonical_json(value).decode()
    parsed = parse_json(text)
    assert parsed == value
    assert json.dumps(parsed, sort_keys=True) == json.dumps(value, sort_keys=True)
