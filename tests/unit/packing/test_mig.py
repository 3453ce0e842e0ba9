"""MIG geometry of the 80 GB A100/H100: layouts, placement, layout choice."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.mig import (
    COMPUTE_SLICES,
    PROFILES,
    MigLayoutError,
    add_instance,
    all_layouts,
    choose_layout,
    free_starts,
    is_valid_layout,
    place,
    used_slices,
    validate_layout,
)


def test_profiles_match_nvidia_placements():
    # nvidia-smi mig -lgipp on an 80 GB A100/H100.
    table = {name: (p.compute_slices, p.size, p.starts, p.max_instances) for name, p in PROFILES.items()}
    assert table == {
        "1g.10gb": (1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
        "1g.20gb": (1, 2, (0, 2, 4, 6), 4),
        "2g.20gb": (2, 2, (0, 2, 4), 3),
        "3g.40gb": (3, 4, (0, 4), 2),
        "4g.40gb": (4, 4, (0,), 1),
        "7g.80gb": (7, 8, (0,), 1),
    }


VALID = [
    [],
    [("7g.80gb", 0)],
    [("1g.10gb", s) for s in range(7)],
    [("1g.20gb", s) for s in (0, 2, 4, 6)],
    [("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4), ("1g.10gb", 6)],
    [("3g.40gb", 0), ("3g.40gb", 4)],
    [("4g.40gb", 0), ("3g.40gb", 4)],
    [("4g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)],
    [("3g.40gb", 4), ("1g.10gb", 0), ("1g.10gb", 1), ("2g.20gb", 2)],
    [("1g.20gb", 6), ("3g.40gb", 0), ("2g.20gb", 4)],
]


@pytest.mark.parametrize("layout", VALID, ids=str)
def test_it_accepts_valid_layouts(layout):
    canonical = validate_layout(layout)
    assert sorted(canonical) == sorted(layout)
    assert [s for _, s in canonical] == sorted(s for _, s in canonical)
    assert is_valid_layout(layout)


INVALID = [
    ([("1g.20gb", 1)], "1g.20gb cannot start at slice 1"),
    ([("1g.10gb", 7)], "1g.10gb cannot start at slice 7"),
    ([("3g.40gb", 2)], "3g.40gb cannot start at slice 2"),
    ([("4g.40gb", 4)], "4g.40gb cannot start at slice 4"),
    ([("2g.20gb", 0), ("1g.10gb", 1)], "1g.10gb@1 overlaps 2g.20gb@0 on memory slice 1"),
    ([("7g.80gb", 0), ("1g.10gb", 3)], "1g.10gb@3 overlaps 7g.80gb@0 on memory slice 3"),
    ([("4g.40gb", 0), ("3g.40gb", 0)], "3g.40gb@0 overlaps 4g.40gb@0 on memory slice 0"),
    ([("3g.40gb", 4), ("1g.20gb", 6)], "1g.20gb@6 overlaps 3g.40gb@4 on memory slice 6"),
    ([("1g.10gb", 3), ("1g.10gb", 3)], "1g.10gb@3 overlaps 1g.10gb@3 on memory slice 3"),
    ([("5g.50gb", 0)], "unknown MIG profile '5g.50gb'"),
]


@pytest.mark.parametrize("layout,message", INVALID, ids=[m for _, m in INVALID])
def test_it_names_the_conflict(layout, message):
    with pytest.raises(MigLayoutError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate_layout(layout)
    assert not is_valid_layout(layout)


def test_every_enumerated_layout_is_valid_and_within_the_gpu():
    layouts = all_layouts()
    assert () in layouts and len(set(layouts)) == len(layouts)
    for layout in layouts:
        assert validate_layout(layout) == layout
        assert sum(PROFILES[n].compute_slices for n, _ in layout) <= COMPUTE_SLICES
        counts = Counter(n for n, _ in layout)
        assert all(counts[n] <= PROFILES[n].max_instances for n in counts)


@pytest.mark.parametrize(
    "profile,layout,start",
    [
        ("7g.80gb", [], 0),
        ("4g.40gb", [], 0),
        ("3g.40gb", [], 4),  # keeps 0-3 for a 4g.40gb
        ("2g.20gb", [], 4),  # keeps 0-3 for a 4g.40gb
        ("1g.20gb", [], 6),
        ("1g.10gb", [], 6),  # keeps a 4g/3g at 0 and three 2g starts
        ("1g.10gb", [("4g.40gb", 0)], 6),
        ("1g.10gb", [("1g.10gb", 6)], 4),
        ("3g.40gb", [("1g.10gb", 6)], 0),
        ("2g.20gb", [("4g.40gb", 0), ("1g.10gb", 4)], None),  # 5 is free, a 2g needs 4-5
        ("7g.80gb", [("1g.10gb", 0)], None),
        ("4g.40gb", [("1g.10gb", 0)], None),
        ("1g.10gb", [("1g.10gb", s) for s in range(7)], None),
    ],
)
def test_place(profile, layout, start):
    assert place(profile, layout) == start


def test_place_refuses_an_invalid_layout():
    with pytest.raises(MigLayoutError):
        place("1g.10gb", [("2g.20gb", 1)])


def test_add_instance_never_moves_instances():
    layout = (("3g.40gb", 4),)
    grown = add_instance("1g.10gb", layout)
    assert set(layout) <= set(grown) and len(grown) == 2
    assert add_instance("4g.40gb", grown) is None


@given(st.lists(st.sampled_from(sorted(PROFILES)), max_size=12))
@settings(max_examples=200, deadline=None)
def test_adding_instances_keeps_the_layout_valid_and_stable(requests):
    layout = ()
    for profile in requests:
        before = set(layout)
        grown = add_instance(profile, layout)
        if grown is None:
            # Nothing fits: really no free start slot for it.
            assert free_starts(profile, layout) == ()
            continue
        assert validate_layout(grown) == grown
        assert before < set(grown) and len(grown) == len(layout) + 1
        layout = grown
    assert len(used_slices(layout)) <= 8


@pytest.mark.parametrize(
    "demand,expected",
    [
        ({}, ()),
        ({"7g.80gb": 1}, (("7g.80gb", 0),)),
        ({"1g.10gb": 10}, tuple(("1g.10gb", s) for s in range(7))),
        # 4 and 5 keep 0-3 (a 4g/3g), two 2g starts and 1g.20gb at 6.
        ({"1g.10gb": 2}, (("1g.10gb", 4), ("1g.10gb", 5))),
        # 3g + four 1g use all 7 compute slices and all 8 memory slices.
        (
            {"3g.40gb": 1, "1g.10gb": 10},
            (("1g.10gb", 0), ("1g.10gb", 1), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)),
        ),
        ({"2g.20gb": 1, "1g.20gb": 1}, (("2g.20gb", 4), ("1g.20gb", 6))),
        ({"4g.40gb": 1, "3g.40gb": 1}, (("4g.40gb", 0), ("3g.40gb", 4))),
        ({"7g.80gb": 1, "1g.10gb": 3}, (("7g.80gb", 0),)),
    ],
    ids=str,
)
def test_choose_layout(demand, expected):
    assert choose_layout(demand) == expected


def test_choose_layout_is_deterministic_and_only_serves_demand():
    demand = {"2g.20gb": 2, "1g.10gb": 1, "1g.20gb": 5}
    layout = choose_layout(demand)
    assert layout == choose_layout(dict(reversed(list(demand.items()))))
    counts = Counter(n for n, _ in layout)
    assert all(counts[n] <= demand[n] for n in counts)
    assert sum(PROFILES[n].compute_slices for n, _ in layout) == 6  # 2+2+1+1: a 4th 1g.20gb has no room


@given(st.dictionaries(st.sampled_from(sorted(PROFILES)), st.integers(0, 8), max_size=6))
@settings(max_examples=100, deadline=None)
def test_chosen_layouts_are_valid_and_maximal(demand):
    layout = choose_layout(demand)
    validate_layout(layout)
    counts = Counter(n for n, _ in layout)
    assert all(counts[n] <= demand.get(n, 0) for n in counts)
    # Nothing demanded that would still fit was left out.
    for name, wanted in demand.items():
        if counts[name] < wanted:
            assert (
                place(name, layout) is None
                or sum(PROFILES[n].compute_slices for n, _ in layout) + PROFILES[name].compute_slices > COMPUTE_SLICES
            )


def test_choose_layout_refuses_bad_demand():
    with pytest.raises(MigLayoutError):
        choose_layout({"9g.90gb": 1})
    with pytest.raises(ValueError):
        choose_layout({"1g.10gb": -1})
