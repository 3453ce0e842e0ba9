"""Notifications: a user subscribes on the account page; the tick and the budget flow record what they are
owed (no network inside a tick); delivery by e-mail or a Slack-compatible webhook happens outside it, failures
retried, then shown."""

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.core import mail
from django.utils import timezone

from budgets.models import Unit
from budgets.services import budget_request_create
from notifications import services
from notifications.models import Notification, Subscription
from notifications.services import MAX_ATTEMPTS, deliver_due
from scheduler.tick import run_tick
from tests.conftest import get_user
from tests.factories import make_job

pytestmark = pytest.mark.django_db


class Hook:
    """A webhook receiver on 127.0.0.1 answering `status`; keeps the JSON bodies it got."""

    def __init__(self, status=200):
        self.status, self.bodies = status, []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                hook.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(hook.status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/allot"

    def close(self):
        self.server.shutdown()


@pytest.fixture
def hook():
    receiver = Hook()
    yield receiver
    receiver.close()


@pytest.fixture
def email_backend(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"


def subscribe(client, username, **fields):
    client.force_login(get_user(username))
    return client.post("/account/notifications/", fields)


def test_alice_subscribes_and_hears_of_her_job_starting_and_ending_by_mail_and_webhook(
        demo, client, hook, email_backend):
    answer = subscribe(client, "alice", kinds=["job_start", "job_end"], email="on", webhook_url=hook.url)
    assert answer.status_code == 302
    job = make_job(user="alice", project="olmo", gpus=8, min_runtime=600, name="long-context",
                   simulated_duration=60)
    make_job(user="bob", project="olmo", gpus=8, min_runtime=600)  # bob subscribed to nothing
    assert deliver_due() == 0
    run_tick(demo)
    owed = Notification.objects.filter(user__username="alice")
    assert sorted(owed.values_list("kind", "channel")) == [("job_start", "email"), ("job_start", "webhook")]
    assert not Notification.objects.filter(user__username="bob").exists()
    assert deliver_due() == 2
    assert mail.outbox[0].subject == f"Allot: job {job.pk} (long-context) started"
    assert mail.outbox[0].to == ["alice@example.org"] and f"/jobs/{job.pk}/" in mail.outbox[0].body
    assert hook.bodies[0]["text"].startswith(f"*Allot: job {job.pk} (long-context) started*\nJob {job.pk}")
    # The work is done a minute later: the end is told too.
    run_tick(demo, now=timezone.now() + timedelta(minutes=2))
    deliver_due(now=timezone.now() + timedelta(minutes=2))
    assert mail.outbox[-1].subject == f"Allot: job {job.pk} (long-context) completed"
    page = client.get("/account/").content.decode()
    assert "sent" in page and f"Allot: job {job.pk} (long-context) completed" in page


def test_the_tick_only_records_it_never_waits_on_a_mail_server_or_webhook(demo, client, monkeypatch):
    subscribe(client, "alice", kinds=["job_start"], webhook_url="https://hooks.example.org/never")

    def no_network(*args, **kwargs):
        raise AssertionError("a tick must not deliver")

    monkeypatch.setattr(services.requests, "post", no_network)
    make_job(user="alice", project="olmo", gpus=4, min_runtime=600)
    run_tick(demo)
    assert Notification.objects.get().status == "pending"


def test_a_failing_webhook_is_retried_with_back_off_then_failed_and_shown(demo, client, monkeypatch):
    failing = Hook(status=500)
    try:
        subscribe(client, "alice", kinds=["job_start"], webhook_url=failing.url)
        make_job(user="alice", project="olmo", gpus=4, min_runtime=600)
        run_tick(demo)
        now = timezone.now()
        assert deliver_due(now=now) == 0
        note = Notification.objects.get()
        assert (note.status, note.attempts) == ("pending", 1) and "answered 500" in note.last_error
        assert note.next_attempt_at == now + timedelta(minutes=1)
        assert deliver_due(now=now + timedelta(seconds=30)) == 0 and len(failing.bodies) == 1  # not due yet
        page = client.get("/account/").content.decode()
        assert "retrying (1 attempt so far" in page and "answered 500" in page
        moment = now
        for _ in range(MAX_ATTEMPTS - 1):
            moment += timedelta(hours=3)
            deliver_due(now=moment)
        note.refresh_from_db()
        assert (note.status, note.attempts) == ("failed", MAX_ATTEMPTS) and len(failing.bodies) == MAX_ATTEMPTS
        assert f"failed</strong> after {MAX_ATTEMPTS} attempts" in client.get("/account/").content.decode()
    finally:
        failing.close()


def test_a_budget_request_tells_its_deciders_who_subscribed(demo, client, email_backend):
    subscribe(client, "pat", kinds=["budget_waiting"], email="on")   # manages nlp, above olmo: decides
    subscribe(client, "mia", kinds=["budget_waiting"], email="on")   # manages multimodal: not hers
    request = budget_request_create(user=get_user("alice"), unit=Unit.objects.get(name="olmo"), cluster=demo,
                                    share=60, justification="long-context runs")
    deliver_due()
    assert [message.to for message in mail.outbox] == [["pat@example.org"]]
    assert mail.outbox[0].subject == f"Allot: budget request #{request.pk} waits for your decision"
    assert "alice asks for 60 % of gb200-east for olmo" in mail.outbox[0].body


def test_bad_choices_are_refused_naming_the_field(demo, client):
    answer = subscribe(client, "alice", kinds=["job_end"], webhook_url="ftp://example.org/x")
    assert answer.status_code == 400 and "must start with https://" in answer.content.decode()
    answer = subscribe(client, "alice", kinds=["job_end"])
    assert answer.status_code == 400 and "Choose how to be told" in answer.content.decode()
    assert not Subscription.objects.exists()


def test_delivery_is_a_celery_task_on_the_beat(settings):
    from config.celery import app

    app.loader.import_default_modules()  # what a worker does at start: every app's tasks module
    assert settings.CELERY_BEAT_SCHEDULE["notifications-deliver"]["task"] == "notifications.deliver"
    assert "notifications.deliver" in app.tasks
