"""``transformer_limits.jsonable``: one coercion to plain JSON types, with the three choices its
callers differ in (what ±inf/NaN become, what an unknown value becomes, how deep to convert)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from transformer_limits.jsonable import jsonable
from transformer_limits.verify.running import jsonable_settings


def test_numpy_values_become_python_values_recursively():
    value = {1: (np.float64(0.5), np.int64(3), np.bool_(True)), "a": np.arange(3).reshape(1, 3), "s": "x"}
    out = jsonable(value)
    assert out == {"1": [0.5, 3, True], "a": [[0, 1, 2]], "s": "x"}
    assert type(out["1"][1]) is int and type(out["1"][2]) is bool and type(out["1"][0]) is float
    json.dumps(out, allow_nan=False)


@pytest.mark.parametrize("nonfinite, expected", [("null", [None, None, None, 1.0]),
                                                 ("string", ["inf", "-inf", "nan", 1.0])])
def test_nonfinite_floats_become_null_or_text(nonfinite, expected):
    assert jsonable([math.inf, -np.inf, np.float64("nan"), 1.0], nonfinite=nonfinite) == expected


def test_keep_leaves_nonfinite_floats_for_json_dumps():
    out = jsonable(np.array([math.inf, 1.0]), nonfinite="keep")
    assert out[0] == math.inf and json.dumps(out) == "[Infinity, 1.0]"


def test_unknown_values_pass_through_or_go_to_other():
    marker = object()
    assert jsonable([marker])[0] is marker
    assert jsonable({"v": marker}, other=lambda v: "converted") == {"v": "converted"}
    with pytest.raises(TypeError, match="set"):
        jsonable({1, 2}, other=lambda v: (_ for _ in ()).throw(TypeError(f"{type(v).__name__} is not JSON")))


def test_depth_limits_the_conversion():
    value = {"a": (1, (2, 3)), "b": [np.float64(1.5)]}
    assert jsonable(value, depth=2) == {"a": [1, (2, 3)], "b": [np.float64(1.5)]}
    assert jsonable(value, depth=0) is value
    assert jsonable(value) == {"a": [1, [2, 3]], "b": [1.5]}


def test_settings_convert_their_top_level_tuples_only():
    settings = {"levels": (8, 16), "cells": [(1, 2)], "tol": math.inf, "name": "relu"}
    assert jsonable_settings(settings) == {"levels": [8, 16], "cells": [(1, 2)], "tol": math.inf, "name": "relu"}


@pytest.mark.parametrize("kwargs, match", [(dict(nonfinite="drop"), "nonfinite"), (dict(depth=-1), "depth"),
                                           (dict(depth=True), "depth")])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        jsonable([1.0], **kwargs)
