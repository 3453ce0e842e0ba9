"""Fit test, GPU choice and policy scenarios for scheduler.core.packing."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from scheduler.core.packing import (
    POLICIES,
    Fragmentation,
    NodeState,
    Packer,
    TargetWorkload,
    Task,
    TaskShape,
    best_fit_gpu,
    choose,
    choose_gpus,
    eventual_waste,
    fits,
    make_policy,
)


def share(milli: int, cpu: int = 1000, mem: int = 1024, models=()) -> Task:
    return Task(cpu_milli=cpu, memory_mib=mem, num_gpu=1, gpu_milli=milli, gpu_models=frozenset(models))


def whole(n: int, cpu: int = 1000, mem: int = 1024, models=()) -> Task:
    return Task(cpu_milli=cpu, memory_mib=mem, num_gpu=n, gpu_milli=1000, gpu_models=frozenset(models))


def node(name: str = "n0", gpus=(1000, 1000), cpu: int = 64_000, mem: int = 262_144, model: str = "A") -> NodeState:
    return NodeState(name, model if gpus else "", cpu, mem, tuple(gpus))


def packer(nodes, policy: str, tasks=()) -> Packer:
    workload = TargetWorkload.from_tasks(tasks or [share(500), whole(1)])
    rng = random.Random(7) if policy == "random" else None
    return Packer(nodes, policy=policy, workload=workload, rng=rng)


# ------------------------------------------------------------------ P1


def test_it_places_p1_by_best_fit():
    """SCENARIOS P1: 600, 500, 400 on a 2-GPU host go to GPU 0, 1, 0."""
    state = node(gpus=(1000, 1000))
    chosen = []
    for milli in (600, 500, 400):
        task = share(milli)
        gpus = choose_gpus(state, task)
        chosen.append(gpus)
        state = state.after(task, gpus)
    assert chosen == [(0,), (1,), (0,)]
    assert state.gpu_free == (0, 500)


@pytest.mark.parametrize("policy", ["bestfit", "allot"])
def test_it_places_p1_through_the_packer(policy):
    tasks = [share(600), share(500), share(400)]
    p = packer([node(gpus=(1000, 1000))], policy, tasks)
    assert [p.place(t).gpus for t in tasks] == [(0,), (1,), (0,)]
    assert p.node(0).gpu_free == (0, 500)
    assert p.used_gpu_milli == 1500


# ------------------------------------------------------------ fit table


@dataclass(frozen=True)
class FitCase:
    name: str
    node: NodeState
    task: Task
    gpus: tuple[int, ...] | None


FIT_CASES = [
    FitCase("share takes the tightest GPU", node(gpus=(1000, 300, 600)), share(250), (1,)),
    FitCase("share never overflows a GPU", node(gpus=(400, 450)), share(500), None),
    FitCase("share ties go to the lowest index", node(gpus=(700, 700)), share(500), (0,)),
    FitCase("whole GPU needs a fully free GPU", node(gpus=(999, 1000)), whole(1), (1,)),
    FitCase("multi-GPU takes whole free GPUs", node(gpus=(1000, 500, 1000, 1000)), whole(2), (0, 2)),
    FitCase("multi-GPU needs enough free GPUs", node(gpus=(1000, 500, 1000)), whole(3), None),
    FitCase("CPU bounds", node(cpu=999), share(100, cpu=1000), None),
    FitCase("memory bounds", node(mem=1023), share(100, mem=1024), None),
    FitCase("GPU model restricts", node(model="A"), share(100, models={"B"}), None),
    FitCase("GPU model allows", node(model="B"), share(100, models={"A", "B"}), (0,)),
    FitCase("CPU-only ignores the model", node(model="A"), Task(500, 512), ()),
    FitCase("CPU-only fits a GPU-less node", node(gpus=()), Task(500, 512), ()),
    FitCase("GPU task does not fit a GPU-less node", node(gpus=()), share(100), None),
]


@pytest.mark.parametrize("case", FIT_CASES, ids=lambda c: c.name)
def test_it_fits_and_chooses_gpus(case):
    assert choose_gpus(case.node, case.task) == case.gpus
    assert fits(case.node, case.task) == (case.gpus is not None)


@pytest.mark.parametrize("case", FIT_CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_agrees_on_feasibility(case, policy):
    decision = packer([case.node], policy, [case.task]).decide(case.task)
    assert (decision is None) == (case.gpus is None)


def test_best_fit_gpu_edges():
    assert best_fit_gpu([], 100) is None
    assert best_fit_gpu([100, 99], 100) == 0
    assert best_fit_gpu([1000, 100, 100], 100) == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(cpu_milli=-1, memory_mib=0),
        dict(cpu_milli=0, memory_mib=0, num_gpu=0, gpu_milli=10),
        dict(cpu_milli=0, memory_mib=0, num_gpu=1, gpu_milli=0),
        dict(cpu_milli=0, memory_mib=0, num_gpu=1, gpu_milli=1001),
        dict(cpu_milli=0, memory_mib=0, num_gpu=2, gpu_milli=500),
    ],
)
def test_it_refuses_malformed_tasks(kwargs):
    with pytest.raises(ValueError):
        Task(**kwargs)


def test_commit_refuses_a_placement_that_does_not_fit():
    p = packer([node(gpus=(600,))], "bestfit")
    with pytest.raises(ValueError):
        p.commit(share(700), p.decide(share(500)))


def test_policies_need_what_they_use():
    with pytest.raises(ValueError):
        make_policy("fgd")
    with pytest.raises(ValueError):
        make_policy("nope", TargetWorkload.from_tasks([]))
    with pytest.raises(ValueError):
        Packer([node()], policy="random")


# ------------------------------------------------------ policy scenarios


def test_ties_go_to_the_first_node():
    nodes = [node("a"), node("b"), node("c")]
    for policy in ("bestfit", "fgd", "allot"):
        assert packer(nodes, policy).decide(share(500)).node_name == "a"


def test_bestfit_prefers_the_fuller_node():
    nodes = [node("roomy", gpus=(1000, 1000)), node("tight", gpus=(1000, 200))]
    assert packer(nodes, "bestfit").decide(whole(1)).node_name == "tight"


def test_fgd_fills_a_hole_the_workload_cannot_use_otherwise():
    # Only 500s and whole GPUs are expected: a 500-hole is usable, so FGD
    # completes the GPU with 500 free rather than cutting a fresh one.
    nodes = [node("fresh", gpus=(1000, 1000)), node("half", gpus=(1000, 500))]
    decision = packer(nodes, "fgd", [share(500), whole(1)]).decide(share(500))
    assert (decision.node_name, decision.gpus) == ("half", (1,))


def test_random_is_reproducible_with_the_same_seed():
    nodes = [node(f"n{i}") for i in range(10)]
    wl = TargetWorkload.from_tasks([share(300)])
    picks = []
    for _ in range(2):
        p = Packer(nodes, policy="random", workload=wl, rng=random.Random(3))
        picks.append([p.place(share(300)).node_name for _ in range(8)])
    assert picks[0] == picks[1]
    assert len(set(picks[0])) > 1


def test_allot_keeps_cpu_for_the_gpus_that_need_it():
    # A CPU-only task should not take the CPU that the free GPUs of a
    # CPU-poor node need when a node with spare CPU exists.
    tasks = [whole(1, cpu=12_000), Task(12_000, 1024)]
    poor = node("poor", gpus=(1000,) * 8, cpu=96_000)
    rich = node("rich", gpus=(1000, 1000), cpu=104_000)
    assert packer([poor, rich], "allot", tasks).decide(Task(12_000, 1024)).node_name == "rich"


def test_allot_keeps_the_only_nodes_that_fit_a_big_task():
    # The 8-GPU 120-core task fits only the 128-core node: 1-GPU tasks go
    # elsewhere while another node can take them.
    big = whole(8, cpu=120_000, mem=700_000)
    small = whole(1, cpu=8_000)
    nodes = [
        node("big", gpus=(1000,) * 8, cpu=128_000, mem=786_432),
        node("other", gpus=(1000,) * 8, cpu=96_000, mem=393_216),
    ]
    p = packer(nodes, "allot", [big, small, small, small])
    assert p.place(small).node_name == "other"
    assert p.place(big).node_name == "big"


# --------------------------------------------------------- measures


def test_fragmentation_by_hand():
    # Expected: half 500-milli shares, half whole GPUs. Node GPUs 1000 and
    # 300 free: the 300 is too small for either -> 0.5*300 + 0.5*300.
    frag = Fragmentation([(TaskShape(1000, 500, 1), 0.5), (TaskShape(1000, 1000, 1), 0.5)])
    assert frag.of("A", 8000, (1000, 300)) == pytest.approx(300)
    # Too little CPU for either shape: all 1300 free milli are fragments.
    assert frag.of("A", 500, (1000, 300)) == pytest.approx(1300)
    # CPU-only shapes see every free GPU as fragment.
    assert Fragmentation([(TaskShape(1000, 0, 0), 1.0)]).of("A", 8000, (1000, 300)) == pytest.approx(1300)


def test_typical_shapes_follow_the_coverage_cut():
    tasks = [share(500)] * 90 + [share(300)] * 6 + [whole(2)] * 4
    shapes = TargetWorkload.from_tasks(tasks).typical(0.95)
    assert [(s.gpu_milli, n) for s, n in shapes] == [(500, 90), (300, 6)]


def test_eventual_waste_by_hand():
    # Sizes 400 (3 tasks) and 600 (1 task), weighted by count. A 600 hole
    # gets a 400 (-> 200, dead) or a 600 (-> 0): W[600] = (3*200 + 0) / 4 =
    # 150. A 1000 hole gets a 400 (-> 600) or a 600 (-> 400, then a 400 ->
    # 0): W[1000] = (3*150 + 1*0) / 4 = 112.5.
    wl = TargetWorkload.from_tasks([share(400)] * 3 + [share(600)])
    waste, smallest = eventual_waste(wl, dead_share=0.05)
    assert smallest == 400
    assert waste[399] == 399 and waste[400] == 0
    assert waste[600] == pytest.approx(150)
    assert waste[1000] == pytest.approx(112.5)


def test_eventual_waste_drops_rare_small_sizes():
    wl = TargetWorkload.from_tasks([share(100)] + [share(450)] * 99)
    waste, smallest = eventual_waste(wl, dead_share=0.05)
    assert smallest == 450
    assert waste[190] == 190  # only the rare 100 could fill it


def test_choose_is_the_packer_decision():
    nodes = [node("a", gpus=(1000, 300)), node("b", gpus=(1000, 1000, 1000))]
    wl = TargetWorkload.from_tasks([share(300), share(700), whole(1)])
    for policy in ("bestfit", "fgd", "allot"):
        p = Packer(nodes, policy=policy, workload=wl)
        p.place(share(700))
        assert p.decide(share(300)) == choose(p.nodes(), share(300), policy=policy, workload=wl, inventory=nodes)
