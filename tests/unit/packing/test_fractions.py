"""Properties of the packer on random clusters and task streams (Hypothesis).

Whatever the policy: the milli-GPUs on one GPU never exceed 1000, CPU and
memory never go negative, multi-GPU tasks get whole free GPUs, GPU models
are respected, a refused task fits nowhere, the cached incremental decision
equals a fresh one on the same snapshot, and the same input gives the same
output.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.packing import (
    POLICIES,
    WHOLE_GPU_MILLI,
    NodeState,
    Packer,
    TargetWorkload,
    Task,
    choose,
    fits,
)

MODELS = ("A", "B")


@st.composite
def nodes(draw):
    count = draw(st.integers(1, 5))
    out = []
    for i in range(count):
        gpus = draw(st.integers(0, 8))
        free = draw(st.lists(st.sampled_from([0, 90, 190, 300, 530, 1000, 1000]), min_size=gpus, max_size=gpus))
        out.append(
            NodeState(
                name=f"n{i}",
                model=draw(st.sampled_from(MODELS)) if gpus else "",
                cpu_milli=draw(st.integers(0, 64)) * 1000,
                memory_mib=draw(st.integers(0, 64)) * 1024,
                gpu_free=tuple(free),
            )
        )
    return out


@st.composite
def tasks(draw):
    kind = draw(st.sampled_from(["cpu", "share", "share", "share", "whole", "multi"]))
    cpu = draw(st.integers(0, 16)) * 1000
    mem = draw(st.integers(0, 16)) * 1024
    models = frozenset(draw(st.sets(st.sampled_from(MODELS), max_size=2))) if kind != "cpu" else frozenset()
    if kind == "cpu":
        return Task(cpu, mem)
    if kind == "share":
        return Task(cpu, mem, 1, draw(st.sampled_from([50, 110, 160, 230, 320, 470, 500, 650, 810, 999])), models)
    if kind == "whole":
        return Task(cpu, mem, 1, WHOLE_GPU_MILLI, models)
    return Task(cpu, mem, draw(st.sampled_from([2, 4, 8])), WHOLE_GPU_MILLI, models)


def run(cluster, stream, policy, seed=0):
    workload = TargetWorkload.from_tasks(stream)
    rng = random.Random(seed) if policy == "random" else None
    packer = Packer(cluster, policy=policy, workload=workload, rng=rng)
    return packer, workload, rng


@given(cluster=nodes(), stream=st.lists(tasks(), min_size=1, max_size=25), policy=st.sampled_from(POLICIES))
@settings(max_examples=150, deadline=None)
def test_fractions_never_exceed_a_gpu(cluster, stream, policy):
    packer, workload, rng = run(cluster, stream, policy)
    held: dict[tuple[int, int], int] = {}
    initial_used = {(i, g): WHOLE_GPU_MILLI - f for i, n in enumerate(cluster) for g, f in enumerate(n.gpu_free)}
    for task in stream:
        snapshot = packer.nodes()
        if rng is not None:
            fresh_rng = random.Random()
            fresh_rng.setstate(rng.getstate())
        decision = packer.decide(task)
        # The cached, incremental decision is the one a fresh packer takes.
        fresh = choose(
            snapshot,
            task,
            policy=policy,
            workload=workload,
            inventory=cluster,
            rng=fresh_rng if rng is not None else None,
        )
        assert decision == fresh
        if decision is None:
            assert not any(fits(n, task) for n in snapshot)
            continue
        before = snapshot[decision.node]
        assert fits(before, task)
        assert len(decision.gpus) == task.num_gpu == len(set(decision.gpus))
        if task.num_gpu:
            assert task.allows(before.model)
        for g in decision.gpus:
            if task.shares_gpu:
                assert before.gpu_free[g] >= task.gpu_milli
            else:
                assert before.gpu_free[g] == WHOLE_GPU_MILLI  # whole GPUs only
        packer.commit(task, decision)
        for g in decision.gpus:
            held[(decision.node, g)] = held.get((decision.node, g), 0) + task.gpu_milli
    for i, state in enumerate(packer.nodes()):
        assert state.cpu_milli >= 0 and state.memory_mib >= 0
        for g, free in enumerate(state.gpu_free):
            assert 0 <= free <= WHOLE_GPU_MILLI
            assert initial_used[(i, g)] + held.get((i, g), 0) == WHOLE_GPU_MILLI - free
    capacity = sum(WHOLE_GPU_MILLI * len(n.gpu_free) for n in cluster)
    assert packer.used_gpu_milli == capacity - sum(sum(n.gpu_free) for n in packer.nodes())


@given(cluster=nodes(), stream=st.lists(tasks(), min_size=1, max_size=15), policy=st.sampled_from(POLICIES))
@settings(max_examples=60, deadline=None)
def test_same_input_same_output(cluster, stream, policy):
    outcomes = []
    for _ in range(2):
        packer, _, _ = run(cluster, stream, policy, seed=11)
        outcomes.append([packer.place(t) for t in stream])
    assert outcomes[0] == outcomes[1]
