"""A victim search ends at once only when no candidate could fit (`_Outlook.reachable`, preemption.py).

The random event sequences of test_kept_state.py are played again, with every bounded victim search checked:
when the per-pool bound says nothing is reachable, no live candidate of the blocks the gainer may take from
passes `could_fit`, so the walk it spares would have added none and ended as hopeless.
"""

from __future__ import annotations

from scheduler.core.preemption import Victims

from . import test_kept_state


def test_the_bound_ends_only_searches_no_candidate_could_fit() -> None:
    original = Victims.find
    ended = []

    def checked(self, req, gainer, charge, host_ok, within=None, whole_domain=False, one_host=False):
        if not (req.shared or req.earmarked):
            pools = self._search(req, host_ok).pools
            eligible, outlook = self._outlook(gainer, charge, within, whole_domain)
            if not outlook.reachable(req, pools, self._free_version):
                ended.append(req.job_id)
                assert not any(not candidate.taken and outlook.could_fit(candidate, req, pools)
                               for block, _ in eligible for candidate in block.candidates)
        return original(self, req, gainer, charge, host_ok, within, whole_domain, one_host)

    Victims.find = checked
    try:
        test_kept_state.test_a_kept_state_decides_as_a_state_built_afresh()
    finally:
        Victims.find = original
    assert ended, "no search was ended by the bound: the test checks nothing"


def test_a_job_that_could_reach_nothing_finds_no_victims() -> None:
    """`Victims.could_reach` (what `quiet_until` asks before looking again after a tick's charges) is an upper bound
    on every search: where it says no, a search of that job finds nothing, whatever scope and clause of rule 4b
    it keeps to."""
    original = Victims.find
    refused, asked = [], []

    def checked(self, req, gainer, charge, host_ok, within=None, whole_domain=False, one_host=False):
        found = original(self, req, gainer, charge, host_ok, within, whole_domain, one_host)
        asked.append(req.job_id)
        if not self.could_reach(req, gainer, charge):
            refused.append(req.job_id)
            assert found is None
        return found

    Victims.find = checked
    try:
        test_kept_state.test_a_kept_state_decides_as_a_state_built_afresh()
    finally:
        Victims.find = original
    assert refused and len(refused) < len(asked), "the bound said no to every search or to none: nothing checked"
