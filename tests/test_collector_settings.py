"""The test run's garbage-collector settings (tests/conftest.py, ``pytest_collection_finish``): the heap
built by collection is frozen, and a full collection waits for 100 middle-generation collections.
Without them each xdist worker spends 11-13 s of its 130 s rescanning that heap
(docs/performance.md, fifteenth sitting); this guards the setting, never the speed."""

import gc


def test_the_heap_built_by_collection_is_frozen():
    # a bare interpreter tracks about 1.1e4 objects; with the imports of tests/conftest.py (NumPy, Numba,
    # hypothesis) and one module collected, 8e4; the whole suite's collection, more: a freeze before
    # those imports (or none) fails here
    assert gc.get_freeze_count() > 50_000


def test_full_collections_are_spaced():
    assert gc.get_threshold() == (700, 10, 100)
