"""MIG geometry of the 80 GB A100 and H100 (same slice layout).

A MIG-enabled GPU has 8 memory slices and 7 compute slices. A GPU instance
of a profile occupies a run of memory slices starting at one of the
profile's valid start slots; instances may not share a memory slice. Start
slots and sizes are NVIDIA's (``nvidia-smi mig -lgipp`` on an A100/H100
80 GB, NVIDIA MIG User Guide, "Getting Started" / "Supported MIG Profiles")::

    1g.10gb  (ID 19)  starts {0,1,2,3,4,5,6}  size 1   up to 7
    1g.20gb  (ID 15)  starts {0,2,4,6}        size 2   up to 4
    2g.20gb  (ID 14)  starts {0,2,4}          size 2   up to 3
    3g.40gb  (ID  9)  starts {0,4}            size 4   up to 2
    4g.40gb  (ID  5)  starts {0}              size 4   up to 1
    7g.80gb  (ID  0)  starts {0}              size 8   up to 1

A *layout* is a sequence of ``(profile name, start slot)``. This module only
ever adds instances to free slots: a running instance is never moved or
re-created (``place``, ``add_instance``); ``choose_layout`` is for a GPU
that has no instances yet.

Pure and deterministic: every choice has a stable tie-break.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

MEMORY_SLICES = 8
COMPUTE_SLICES = 7


@dataclass(frozen=True)
class Profile:
    name: str
    compute_slices: int
    # Memory slices an instance occupies, from its start slot.
    size: int
    starts: tuple[int, ...]

    @property
    def max_instances(self) -> int:
        # A profile's own placements never overlap, so all can coexist.
        return len(self.starts)

    def slices(self, start: int) -> range:
        return range(start, start + self.size)


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("1g.10gb", 1, 1, (0, 1, 2, 3, 4, 5, 6)),
        Profile("1g.20gb", 1, 2, (0, 2, 4, 6)),
        Profile("2g.20gb", 2, 2, (0, 2, 4)),
        Profile("3g.40gb", 3, 4, (0, 4)),
        Profile("4g.40gb", 4, 4, (0,)),
        Profile("7g.80gb", 7, 8, (0,)),
    )
}

# Largest first: the order in which "room left" is compared.
_BY_SIZE = tuple(sorted(PROFILES.values(), key=lambda p: (-p.compute_slices, -p.size, p.name)))

Layout = tuple[tuple[str, int], ...]


class MigLayoutError(ValueError):
    """A layout that the hardware would refuse; the message names the conflict."""


def _profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise MigLayoutError(f"unknown MIG profile {name!r}; known: {', '.join(PROFILES)}") from None


def _canonical(layout: Iterable[tuple[str, int]]) -> Layout:
    return tuple(sorted(((name, int(start)) for name, start in layout), key=lambda ps: (ps[1], ps[0])))


def validate_layout(layout: Iterable[tuple[str, int]]) -> Layout:
    """The layout in canonical order (by start slot), or MigLayoutError.

    Errors name the conflict: an unknown profile, a start slot the profile
    cannot use, two instances on one memory slice, or too many compute
    slices.
    """
    owner: dict[int, tuple[str, int]] = {}
    compute = 0
    for name, start in layout:
        profile = _profile(name)
        if start not in profile.starts:
            valid = ", ".join(map(str, profile.starts))
            raise MigLayoutError(f"{name} cannot start at slice {start} (valid starts: {valid})")
        for s in profile.slices(start):
            if s in owner:
                other, other_start = owner[s]
                raise MigLayoutError(f"{name}@{start} overlaps {other}@{other_start} on memory slice {s}")
            owner[s] = (name, start)
        compute += profile.compute_slices
    if compute > COMPUTE_SLICES:
        raise MigLayoutError(f"instances need {compute} compute slices, the GPU has {COMPUTE_SLICES}")
    return _canonical(layout)


def is_valid_layout(layout: Iterable[tuple[str, int]]) -> bool:
    try:
        validate_layout(layout)
    except MigLayoutError:
        return False
    return True


def used_slices(layout: Iterable[tuple[str, int]]) -> frozenset[int]:
    return frozenset(s for name, start in layout for s in _profile(name).slices(start))


def free_starts(profile: str, layout: Iterable[tuple[str, int]]) -> tuple[int, ...]:
    """Start slots where ``profile`` fits now (layout assumed valid)."""
    p = _profile(profile)
    layout = tuple(layout)
    used = used_slices(layout)
    compute_left = COMPUTE_SLICES - sum(PROFILES[name].compute_slices for name, _ in layout)
    if p.compute_slices > compute_left:
        return ()
    return tuple(start for start in p.starts if not used.intersection(p.slices(start)))


def room(layout: Iterable[tuple[str, int]]) -> tuple[int, ...]:
    """How many more instances of each profile would fit, largest profile first."""
    layout = tuple(layout)
    return tuple(len(free_starts(p.name, layout)) for p in _BY_SIZE)


def place(profile: str, layout: Iterable[tuple[str, int]]) -> int | None:
    """The start slot for one more ``profile`` instance, or None if none fits.

    Never moves existing instances. Among the free start slots, the one
    that leaves the most room for the other profiles (compared largest
    profile first: keeping a 4g/3g slot beats keeping two 1g slots); ties go
    to the lowest slot. On an empty GPU a 1g.10gb goes to slot 6, which
    still leaves a 4g.40gb (or 3g.40gb) and three 2g.20gb possible.
    """
    layout = validate_layout(layout)
    options = free_starts(profile, layout)
    if not options:
        return None
    return max(options, key=lambda start: (room(layout + ((profile, start),)), -start))


def add_instance(profile: str, layout: Iterable[tuple[str, int]]) -> Layout | None:
    """``layout`` plus one ``profile`` instance where ``place`` puts it, or None."""
    layout = validate_layout(layout)
    start = place(profile, layout)
    return None if start is None else _canonical(layout + ((profile, start),))


@lru_cache(maxsize=1)
def all_layouts() -> tuple[Layout, ...]:
    """Every valid layout (including the empty one), canonical and sorted."""
    placements = sorted(((p.name, s) for p in PROFILES.values() for s in p.starts), key=lambda ps: (ps[1], ps[0]))
    found: list[Layout] = []

    def extend(prefix: Layout, index: int, used: frozenset[int], compute: int) -> None:
        found.append(prefix)
        for j in range(index, len(placements)):
            name, start = placements[j]
            p = PROFILES[name]
            slices = set(p.slices(start))
            if used.isdisjoint(slices) and compute + p.compute_slices <= COMPUTE_SLICES:
                extend(prefix + ((name, start),), j + 1, used | slices, compute + p.compute_slices)

    extend((), 0, frozenset(), 0)
    return tuple(sorted(set(found)))


def choose_layout(demand: Mapping[str, int], required: str | None = None) -> Layout:
    """Instances to create on an empty GPU for the requests it sees.

    ``demand`` is the number of waiting requests per profile. Creates only
    instances someone asked for (no more of a profile than requested, so
    the free rest stays available to ``place`` later), choosing the valid
    layout that serves the most compute slices, then the most memory
    slices, then leaves the most room (``room``), then has the fewest
    instances; remaining ties go to the first layout in canonical order.

    ``required`` names a profile the layout must hold at least one instance
    of (the request being placed now, which comes first whatever the rest
    of the demand would prefer).
    """
    wanted = {}
    for name, count in demand.items():
        _profile(name)
        if count < 0:
            raise ValueError(f"negative demand for {name}: {count}")
        if count:
            wanted[name] = count
    if required is not None:
        _profile(required)
        wanted[required] = max(1, wanted.get(required, 0))

    def key(layout: Layout) -> tuple:
        served = [PROFILES[name] for name, _ in layout]
        return (
            sum(p.compute_slices for p in served),
            sum(p.size for p in served),
            room(layout),
            -len(layout),
        )

    best: Layout = ()
    best_key = None if required is not None else key(best)
    for layout in all_layouts():
        counts = Counter(name for name, _ in layout)
        if any(counts[name] > wanted.get(name, 0) for name in counts):
            continue
        if required is not None and not counts[required]:
            continue
        k = key(layout)
        if best_key is None or k > best_key:
            best, best_key = layout, k
    return best


def profile_milli(name: str) -> int:
    """A profile's share of the GPU in milli-GPU: its compute slices out of 7, rounded down.

    What a job on such an instance holds and is charged (1g → 142, 2g → 285,
    3g → 428, 4g → 571, 7g → 1000). Any valid layout sums to at most 1000
    (seven 1g instances make 994) and any eight compute slices to more, so a
    GPU's bound of 1000 milli also bounds its compute slices at 7.
    """
    return 1000 * _profile(name).compute_slices // COMPUTE_SLICES


def compute_used(layout: Iterable[tuple[str, int]]) -> int:
    return sum(_profile(name).compute_slices for name, _ in layout)


def layout_summary(layout: Sequence[tuple[str, int]]) -> str:
    """``1g.10gb@6, 3g.40gb@0`` style, for reasons and logs."""
    return ", ".join(f"{name}@{start}" for name, start in _canonical(layout)) or "(no instances)"
