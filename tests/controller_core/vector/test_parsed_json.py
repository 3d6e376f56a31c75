"""``explain._parsed``: the cluster-level records' data JSON parsed in one call, each record's value the same as
``json.loads`` of its own text -- records without JSON left None, strings with commas, brackets and escapes, nested
lists --, and a text that does not parse raising as it would alone; a text holding two values (which would shift the
others in the joined array) is parsed alone too."""
from __future__ import annotations

import json

import pytest

from controller_core.vector.explain import _parsed


def test_each_value_is_its_own_texts():
    texts = [json.dumps({"topicId": "a,b]", "partitionId": 0, "isr": [1, 2]}), None,
             json.dumps({"name": "x\"},{", "nested": {"l": [[], [1]]}, "u": "\u00e9"}), "{}", None]
    assert _parsed(texts) == [None if t is None else json.loads(t) for t in texts]
    assert _parsed([]) == [] and _parsed([None]) == [None]


def test_a_bad_text_raises_as_alone_and_two_values_are_not_split():
    with pytest.raises(ValueError):
        _parsed(['{"a": 1}', '{"a": '])
    with pytest.raises(ValueError):
        _parsed(['{"a": 1}, {"b": 2}'])  # not one JSON text: json.loads of it alone raises
