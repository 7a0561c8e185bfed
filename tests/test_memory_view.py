"""The one parser of a memory id a client sent (the web app's table and buttons, the API's URLs)."""

from __future__ import annotations

import numpy as np
import pytest

from memory.bank import UnknownMemory
from siliconfriend.core.memory_view import MAX_MEMORY_ID, memory_id


@pytest.mark.parametrize("value", [7, "7", " 7 ", 7.0, np.int64(7), np.float64(7.0)])
def test_an_id_as_a_number_or_its_digits(value):
    assert memory_id(value) == 7


def test_the_largest_id_a_store_holds():
    assert memory_id(str(MAX_MEMORY_ID)) == memory_id(np.int64(MAX_MEMORY_ID)) == MAX_MEMORY_ID


@pytest.mark.parametrize(
    "value",
    [
        0,
        -3,
        "-3",
        3.5,
        "3.5",
        "1e3",
        "+3",
        "x",
        "",
        None,
        True,
        float("nan"),
        float("inf"),
        MAX_MEMORY_ID + 1,
        "9" * 30,
        [1],
    ],
)
def test_anything_else_is_no_such_memory(value):
    with pytest.raises(UnknownMemory, match="no memory"):
        memory_id(value)
