"""load_org: FORMATS.md's org spec, idempotent, every share change in the ledger, bad files refused whole."""

import copy
from decimal import Decimal

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from budgets.choices import ChangeSource, Role
from budgets.loaders import load_org_file
from budgets.models import Allocation, AllocationChange, Membership, Unit, UserProfile
from budgets.permissions import is_oncall
from budgets.selectors import posix_account
from tests.conftest import DEMO
from topology.loaders import load_cluster_file

pytestmark = pytest.mark.django_db

ORG = {
    "users": [
        {"username": "alice", "email": "alice@example.org"},
        {"username": "bob"}, {"username": "carol"}, {"username": "dan"}, {"username": "pat"}, {"username": "lee"},
        {"username": "olga", "oncall": True, "password": "olga-password"},
    ],
    "units": [
        {"name": "nlp", "managers": ["pat"], "share": {"gb200-east": 60}, "children": [
            {"name": "olmo", "managers": ["lee"], "members": ["alice", "bob"], "share": {"gb200-east": 70}},
            {"name": "tulu", "members": ["carol"], "share": {"gb200-east": 30}},
        ]},
        {"name": "vision", "share": {"gb200-east": 40}, "members": ["dan"]},
    ],
}


@pytest.fixture
def cluster(db):
    cluster, _ = load_cluster_file(DEMO / "cluster.yaml")
    return cluster


def write(tmp_path, spec, name="org.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    return path


def test_it_loads_units_people_and_shares(tmp_path, cluster):
    call_command("load_org", str(write(tmp_path, ORG)))

    olmo = Unit.objects.get(name="olmo")
    assert olmo.parent.name == "nlp" and [u.name for u in olmo.path()] == ["nlp", "olmo"]
    assert set(Unit.objects.projects().values_list("name", flat=True)) == {"olmo", "tulu", "vision"}
    assert set(Membership.objects.filter(unit=olmo).values_list("user__username", "role")) == {
        ("lee", Role.MANAGER), ("alice", Role.MEMBER), ("bob", Role.MEMBER),
    }
    assert Allocation.objects.current().get(unit=olmo, cluster=cluster).share_percent == Decimal("70")
    assert AllocationChange.objects.filter(source=ChangeSource.LOADER).count() == 4
    olga = get_user_model().objects.get(username="olga")
    assert is_oncall(olga) and olga.check_password("olga-password")
    assert not is_oncall(get_user_model().objects.get(username="alice"))


def test_loading_the_same_file_twice_changes_nothing(tmp_path, cluster):
    path = write(tmp_path, ORG)
    load_org_file(path)
    assert load_org_file(path) == {"users": 0, "units": 0, "memberships": 0, "allocations": 0}
    assert AllocationChange.objects.count() == 4


def test_a_changed_share_closes_the_old_allocation_and_records_before_and_after(tmp_path, cluster):
    load_org_file(write(tmp_path, ORG))
    changed = copy.deepcopy(ORG)
    changed["units"][0]["children"][0]["share"] = {"gb200-east": 60}
    changed["units"][0]["children"][1]["share"] = {}  # tulu loses its allocation
    changed["units"][0]["children"][0]["members"] = ["alice"]
    load_org_file(write(tmp_path, changed, "changed.yaml"))

    olmo = Unit.objects.get(name="olmo")
    assert Allocation.objects.current().get(unit=olmo).share_percent == Decimal("60")
    assert Allocation.objects.filter(unit=olmo).count() == 2  # history kept
    assert not Allocation.objects.current().filter(unit__name="tulu").exists()
    change = AllocationChange.objects.filter(unit=olmo).first()
    assert (change.before_percent, change.after_percent, change.actor) == (
        Decimal("70"), Decimal("60"), "system:load_org")
    tulu_change = AllocationChange.objects.filter(unit__name="tulu").first()
    assert (tulu_change.before_percent, tulu_change.after_percent) == (Decimal("30"), None)
    assert not Membership.objects.filter(unit=olmo, user__username="bob").exists()


def test_the_ledger_is_append_only(tmp_path, cluster):
    load_org_file(write(tmp_path, ORG))
    change = AllocationChange.objects.first()
    change.reason = "rewritten"
    with pytest.raises(ValueError, match="append-only"):
        change.save()
    with pytest.raises(ValueError, match="append-only"):
        change.delete()


def _with(mutate):
    spec = copy.deepcopy(ORG)
    mutate(spec)
    return spec


@pytest.mark.parametrize(
    "spec, message",
    [
        (_with(lambda s: s["units"][0]["children"][1].update(share={"gb200-east": 31})),
         "units[0] (nlp).children: shares of the children of nlp on gb200-east add up to 101.00 %, over 100 %"),
        (_with(lambda s: s["units"][1].update(share={"gb200-east": 41})),
         "units: shares of the top-level units on gb200-east add up to 101.00 %, over 100 %"),
        (_with(lambda s: s["units"][1].update(share={"gb200-east": 140})),
         "units[1] (vision).share.gb200-east: 140 must be between 0 and 100"),
        (_with(lambda s: s["units"][1].update(members=["dan", "zed"])),
         "units[1] (vision).members: unknown user 'zed'"),
        (_with(lambda s: s["units"][0]["children"].append({"name": "vision"})),
         "units[1] (vision).name: unit vision is defined twice (also at units[0] (nlp).children[2] (vision))"),
        (_with(lambda s: s["units"][1].update(share={"h100-west": 10})),
         "units[1] (vision).share.h100-west: no such cluster"),
        (_with(lambda s: s["units"][1].update(share={"gb200-east": "forty"})),
         "units[1] (vision).share.gb200-east: 'forty' is not a percentage"),
        (_with(lambda s: s["units"][1].update(name="Vision Team")),
         "units[1] (Vision Team).name: 'Vision Team' must be a lower-case name"),
        (_with(lambda s: s["users"].append({"username": "alice"})), "users[7] (alice).username: alice is listed twice"),
        (_with(lambda s: s["units"][1].update(budget=5)), "units[1] (vision).budget: unknown key"),
        (_with(lambda s: s["users"][1].update(posix_user="Bob Smith")),
         "users[1] (bob).posix_user: 'Bob Smith' is not a POSIX account name"),
        (_with(lambda s: s["users"][1].update(posix_user=7)), "users[1] (bob).posix_user: 7 is not a POSIX account"),
    ],
)
def test_a_bad_file_is_refused_whole_with_the_entry_and_field_named(tmp_path, cluster, spec, message):
    with pytest.raises(CommandError) as refused:
        call_command("load_org", str(write(tmp_path, spec)))
    assert message in str(refused.value)
    assert not Unit.objects.exists() and not AllocationChange.objects.exists()
    assert not get_user_model().objects.exists()


def test_the_demo_loads_and_reloads(cluster):
    call_command("demo", "--no-history")
    call_command("demo", "--no-history")
    # A small agent cluster beside the simulated one, its hosts waiting for an agent.
    from topology.models import Cluster, Host

    lab = Cluster.objects.get(name="lab")
    assert lab.executor == "agent" and Host.objects.filter(domain__cluster=lab, state="down").count() == 2
    assert Unit.objects.projects().count() == 5
    assert get_user_model().objects.get(username="admin").is_superuser
    assert is_oncall(get_user_model().objects.get(username="olga"))


def test_posix_user_sets_the_account_jobs_run_as_and_leaving_it_out_keeps_it(tmp_path, cluster, client):
    spec = _with(lambda s: s["users"][0].update(posix_user="asmith"))
    load_org_file(write(tmp_path, spec))
    alice = get_user_model().objects.get(username="alice")
    assert posix_account(alice) == "asmith"
    assert posix_account(get_user_model().objects.get(username="bob")) == "bob"  # the username, by default
    load_org_file(write(tmp_path, ORG))  # not in the file: left as it is
    assert posix_account(alice) == "asmith"
    load_org_file(write(tmp_path, _with(lambda s: s["users"][0].update(posix_user=""))))  # "": the username again
    assert posix_account(alice) == "alice"
    # And the admin edits it.
    admin = get_user_model().objects.create_superuser("root-admin", password="root-admin-password")
    client.force_login(admin)
    profile = UserProfile.objects.get(user=alice)
    page = client.get(f"/admin/budgets/userprofile/{profile.pk}/change/")
    assert page.status_code == 200 and 'name="posix_user"' in page.content.decode()
    response = client.post(f"/admin/budgets/userprofile/{profile.pk}/change/", {"user": alice.pk,
                                                                                "posix_user": "Not Valid"})
    assert "a POSIX account name" in response.content.decode()
    client.post(f"/admin/budgets/userprofile/{profile.pk}/change/", {"user": alice.pk, "posix_user": "al_ice-2"})
    assert posix_account(alice) == "al_ice-2"


def _approve_in_browser(unit_name, percent, cluster):
    """A share changed outside the file, as an approved request is recorded."""
    from django.utils import timezone

    from budgets.services import apply_share

    now = timezone.now()
    return apply_share(unit=Unit.objects.get(name=unit_name), cluster=cluster, start=now, end=None,
                       share=Decimal(percent), actor="pat", source=ChangeSource.REQUEST,
                       reason="approved request #1", now=now)


def test_reloading_refuses_to_revert_a_share_changed_since_and_names_it(tmp_path, cluster):
    path = write(tmp_path, ORG)
    call_command("load_org", str(path))
    _approve_in_browser("tulu", "25", cluster)
    with pytest.raises(CommandError) as refused:
        call_command("load_org", str(path))
    message = str(refused.value)
    assert "tulu on gb200-east: 25 % now, set by pat (approved request)" in message
    assert "since the org file was last loaded (30 %); the file says 30 %" in message
    assert "--overwrite" in message and "olmo" not in message
    assert Allocation.objects.current().get(unit__name="tulu", cluster=cluster).share_percent == Decimal("25")
    assert AllocationChange.objects.filter(source=ChangeSource.LOADER).count() == 4  # nothing new


def test_a_file_that_agrees_with_the_change_loads_and_other_edits_still_apply(tmp_path, cluster):
    call_command("load_org", str(write(tmp_path, ORG)))
    _approve_in_browser("tulu", "25", cluster)
    edited = _with(lambda s: s["units"][0]["children"][1]["share"].update({"gb200-east": 25}))
    edited["units"][0]["children"][0]["share"]["gb200-east"] = 65
    call_command("load_org", str(write(tmp_path, edited)))
    current = Allocation.objects.current()
    assert current.get(unit__name="tulu", cluster=cluster).share_percent == Decimal("25")
    assert current.get(unit__name="olmo", cluster=cluster).share_percent == Decimal("65")


def test_overwrite_puts_the_file_back_and_the_ledger_says_what_it_replaced(tmp_path, cluster):
    path = write(tmp_path, ORG)
    call_command("load_org", str(path))
    _approve_in_browser("tulu", "25", cluster)
    call_command("load_org", str(path), "--overwrite")
    assert Allocation.objects.current().get(unit__name="tulu", cluster=cluster).share_percent == Decimal("30")
    change = AllocationChange.objects.filter(unit__name="tulu", source=ChangeSource.LOADER).order_by("-id").first()
    assert (change.before_percent, change.after_percent) == (Decimal("25"), Decimal("30"))
    assert "with --overwrite, replacing tulu on gb200-east: 25 % now, set by pat" in change.reason
    # Loaded again: the file's value is what the loader last set, so nothing to refuse.
    call_command("load_org", str(path))


def test_the_demo_loads_its_org_once_and_keeps_shares_changed_in_the_browser(cluster):
    call_command("demo", "--no-history")
    _approve_in_browser("olmo", "65", cluster)
    call_command("demo", "--no-history")
    assert Allocation.objects.current().get(unit__name="olmo", cluster=cluster).share_percent == Decimal("65")
    assert not AllocationChange.objects.filter(unit__name="olmo", before_percent=Decimal("65")).exists()
