"""The cluster dashboard's panel of what preemptions cost (issue 18): preemptions per job and wasted ones."""

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.choices import EventKind
from scheduler.models import JobEvent
from scheduler.selectors import preemption_costs
from tests.conftest import get_user
from tests.factories import make_job
from topology.models import Cluster

pytestmark = pytest.mark.django_db


def _event(job, kind, at, cause=""):
    JobEvent.objects.create(job=job, kind=kind, at=at, cause=cause, actor="scheduler")


def test_it_counts_preemptions_per_job_and_those_whose_preemptor_did_not_start_in_time(demo, client):
    """The demo cluster: grace 60 s for allocated victims, tick 5 s, so a preemptor has 70 s to start.

    v (allocated) is preempted twice: for a, which starts 30 s later (kept), and for b, which never starts
    (wasted: 2 h ago, long past its deadline). u (unallocated) is preempted for c 5 s ago: not judged yet.
    One preemption for the job's own maximum runtime does not count.
    """
    cluster = Cluster.objects.get(name="gb200-east")
    assert (cluster.grace_period_seconds, cluster.tick_seconds) == (60, 5)
    now = timezone.now()
    v, u = make_job(gpus=8), make_job(gpus=1, min_runtime=0, project="tulu", user="carol")
    a, b, c, m = make_job(gpus=8), make_job(gpus=8), make_job(gpus=1), make_job(gpus=1)
    _event(v, EventKind.START, now - timedelta(hours=5))
    _event(v, EventKind.PREEMPT, now - timedelta(hours=4), f"job:{a.pk}")
    _event(a, EventKind.START, now - timedelta(hours=4) + timedelta(seconds=30))
    _event(v, EventKind.START, now - timedelta(hours=3))
    _event(v, EventKind.PREEMPT, now - timedelta(hours=2), f"job:{b.pk}")
    _event(u, EventKind.START, now - timedelta(minutes=10))
    _event(u, EventKind.PREEMPT, now - timedelta(seconds=5), f"job:{c.pk}")
    _event(m, EventKind.START, now - timedelta(hours=6))
    _event(m, EventKind.PREEMPT, now - timedelta(hours=1), "max_runtime")
    costs = preemption_costs(cluster, now=now)
    # Jobs that ran: v, a, u, m.
    assert (costs["preemptions"], costs["jobs"], costs["max"]) == (3, 4, 2)
    assert costs["per_job"] == pytest.approx(0.75)
    assert (costs["wasted"], costs["on_behalf"]) == (1, 2)
    assert costs["wasted_share"] == pytest.approx(0.5)

    client.force_login(get_user("pat"))
    html = client.get("/clusters/gb200-east/").content.decode()
    assert '<div class="value">0.75</div><div class="label">preemptions per job, last 24 h (at most 2 of one)' in html
    assert "wasted <strong>50 %</strong> (1 of 2)" in html


def test_a_plan_is_judged_by_its_longest_grace_as_in_the_simulator(demo):
    """a preempts an unallocated job (grace 10 s) and an allocated one (60 s) at once: it can start only when
    the second has left, so starting 50 s later is in time for both (deadline 60 s + two 5 s ticks)."""
    cluster = Cluster.objects.get(name="gb200-east")
    now = timezone.now()
    filler, trainer = make_job(gpus=4, min_runtime=0, project="tulu", user="carol"), make_job(gpus=4)
    a = make_job(gpus=8)
    at = now - timedelta(hours=1)
    for victim in (filler, trainer):
        _event(victim, EventKind.START, at - timedelta(hours=1))
        _event(victim, EventKind.PREEMPT, at, f"job:{a.pk}")
    _event(a, EventKind.START, at + timedelta(seconds=50))
    costs = preemption_costs(cluster, now=now)
    assert (costs["wasted"], costs["on_behalf"]) == (0, 2)
