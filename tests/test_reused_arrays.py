"""The pool of host arrays behind the layer stacks' caches: an array is handed out again only when
nothing outside the pool references it (a pass the caller still holds is never overwritten)."""

import numpy as np
import pytest

from transformer_limits.numeric.reused_arrays import ReusedArrays


def test_an_array_is_reused_only_once_dropped_with_all_its_views():
    pool = ReusedArrays()
    a, b = pool.empty((3, 4)), pool.empty((3, 4))
    assert a is not b
    a_id = id(a)
    del a
    again = pool.empty((3, 4))
    assert id(again) == a_id  # held from here on
    view = b[1:].T  # a view holds its base
    b_id = id(b)
    del b
    assert id(pool.empty((3, 4))) not in (a_id, b_id)  # both in use: a third array
    del view
    assert id(pool.empty((3, 4))) == b_id  # the first free array in the pool's order
    assert pool.empty((4, 3)).shape == (4, 3) and pool.empty((3, 4), np.float32).dtype == np.float32


def test_unused_arrays_beyond_the_byte_cap_are_dropped():
    pool = ReusedArrays(max_bytes=1000)
    for _ in range(5):
        pool.empty((100,))  # 800 bytes each, dropped at once
    assert pool.held_bytes <= 1000 + 800
    kept = [pool.empty((100,)) for _ in range(4)]  # in use: kept whatever the cap
    assert len({id(a) for a in kept}) == 4
    with pytest.raises(ValueError, match="max_bytes"):
        ReusedArrays(max_bytes=-1)


def test_a_held_forward_pass_is_not_overwritten_by_the_next_one():
    pytest.importorskip("numba")
    from transformer_limits.numeric.attention.losses import sample_tokens
    from transformer_limits.numeric.attention.transformer import AttentionTransformer, init_params

    m = AttentionTransformer(4, 4, 4, backend="numba")
    params = init_params(3, 2, 4, 4, 4, seed=0)
    first = m.forward(sample_tokens(40, 4, seed=1), params)
    before = [np.array(c.A, copy=True) for c in first.caches]
    second = m.forward(sample_tokens(40, 4, seed=2), params)
    for cache, want in zip(first.caches, before):
        np.testing.assert_array_equal(cache.A, want)
    assert not np.array_equal(second.caches[0].A, before[0])
    def stack_ids(fwd):
        stack = fwd.run.caches.stacked
        return {id(getattr(stack, name)) for name in ("QF", "KT", "VT", "A", "LOGZ")}

    ids = stack_ids(first) | stack_ids(second)
    assert len(ids) == 10  # two passes held: ten arrays
    del first, second, cache
    third = m.forward(sample_tokens(40, 4, seed=3), params)  # the dropped passes' arrays come back
    assert stack_ids(third) <= ids
