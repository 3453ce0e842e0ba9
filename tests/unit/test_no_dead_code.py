"""Code nothing calls is gone, so nobody reads it as a rule that holds."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("owner, name", [
    ("budgets.models.Unit", "is_project"),
    ("budgets.models.UnitQuerySet", "managed_by"),
    ("budgets.models.BudgetRequest", "is_time_limited"),
    ("scheduler.core.packing.Fragmentation", "of_node"),
])
def test_unused_helpers_are_gone(owner, name):
    from importlib import import_module

    module, _, attribute = owner.rpartition(".")
    assert not hasattr(getattr(import_module(module), attribute), name)


def test_the_unused_percent_of_filter_and_the_stray_readme_section_are_gone():
    from scheduler.templatetags import allot

    assert "percent_of" not in allot.register.filters
    assert not (REPO / "topology" / "README-section.md").exists()


def test_housekeeping_expires_grants_with_no_fallback_for_a_missing_budgets_app():
    import inspect

    from scheduler import loop

    assert "ImportError" not in inspect.getsource(loop.run_housekeeping)
