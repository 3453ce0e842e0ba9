"""The pure parsers (topology/spec.py, budgets/spec.py) hold the same rules as the Django side they replace."""

import pytest
from django.utils.text import slugify
from hypothesis import given
from hypothesis import strategies as st

from budgets.models import POSIX_USER
from budgets.spec import POSIX_USER_MESSAGE, POSIX_USER_PATTERN
from topology.choices import DomainKind, Executor
from topology.spec import DOMAIN_KINDS, EXECUTORS, is_slug

NAMES = ["gb200-east", "nvl72-01", "a", "", "-a", "a-", "_a", "a_", "a--b", "a-_-b", "a_b", "A", "a b", "a\tb",
         "é", "ａ", "a.b", "a\u0301", "ﬁ", "a\n", "42", "hgx-{:02d}"]


@pytest.mark.parametrize("name", NAMES)
def test_is_slug_is_what_django_slugify_leaves_alone(name):
    assert is_slug(name) == (slugify(name) == name)


@given(st.text(alphabet=st.sampled_from("abzAZ09_- \t.é\u0301ﬁ"), max_size=8) | st.text(max_size=8))
def test_is_slug_agrees_with_django_on_any_text(name):
    assert is_slug(name) == (slugify(name) == name)


def test_the_kinds_and_executors_are_those_the_models_store():
    assert DOMAIN_KINDS == tuple(DomainKind.values)
    assert EXECUTORS == tuple(Executor.values)


def test_the_profile_validator_is_the_org_files_rule():
    assert (POSIX_USER.regex.pattern, POSIX_USER.message) == (POSIX_USER_PATTERN, POSIX_USER_MESSAGE)
