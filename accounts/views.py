"""Account pages: your API tokens (revoke them), your password (change it; reset it by e-mail), your
notifications (what, where to)."""

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.views.decorators.http import require_POST

from accounts.selectors import tokens_of
from accounts.services import token_revoke, token_revoke_all
from notifications.forms import SubscriptionForm
from notifications.models import Kind
from notifications.services import recent_for, subscription_of, subscription_update


@login_required
def account(request):
    return render(request, "accounts/account.html", {"tokens": tokens_of(request.user),
                                                     **account_context(request.user)})


@login_required
@require_POST
def token_revoke_view(request, pk):
    token = tokens_of(request.user).filter(pk=pk).first()
    if token is None:
        raise Http404("you have no such token")
    if token_revoke(token=token, actor=request.user, reason="revoked on the account page"):
        messages.success(request, f"Token {token.prefix}… revoked: it no longer works anywhere.")
    return redirect("account")


class PasswordChangeView(auth_views.PasswordChangeView):
    """Change your password; every API token ends with the old one (log in again on the command line)."""

    template_name = "accounts/password_change.html"
    success_url = reverse_lazy("account")

    def form_valid(self, form):
        response = super().form_valid(form)
        ended = token_revoke_all(user=self.request.user, actor=self.request.user, reason="password changed")
        messages.success(self.request, f"Password changed. {ended} API token{'s' if ended != 1 else ''} revoked: "
                                       "run `allot login` again where you use the command line.")
        return response


class PasswordResetView(auth_views.PasswordResetView):
    """Ask for a reset link by e-mail (sent through Django's mail backend: the console in the embedded default)."""

    template_name = "accounts/password_reset.html"
    email_template_name = "accounts/password_reset_email.txt"
    subject_template_name = "accounts/password_reset_subject.txt"
    success_url = reverse_lazy("password_reset_done")


class PasswordResetConfirmView(auth_views.PasswordResetConfirmView):
    template_name = "accounts/password_reset_confirm.html"
    success_url = reverse_lazy("password_reset_complete")

    def form_valid(self, form):
        response = super().form_valid(form)
        token_revoke_all(user=form.user, actor=form.user, reason="password reset by e-mail")
        return response


# The account page's notifications section: the account page owns it (accounts sits above notifications).
def form_for(user, data=None) -> SubscriptionForm:
    subscription = subscription_of(user)
    initial = {"kinds": [kind for kind in Kind.values if subscription.wants(kind)], "email": subscription.email,
               "webhook_url": subscription.webhook_url}
    return SubscriptionForm(data, initial=initial, user=user)


def account_context(user, form=None) -> dict:
    """What the account page shows of notifications: the form and the latest deliveries, failures with why."""
    return {"notification_form": form or form_for(user), "notifications": recent_for(user)}


@login_required
@require_POST
def subscription_view(request):
    form = form_for(request.user, request.POST)
    if not form.is_valid():
        context = {"tokens": tokens_of(request.user), **account_context(request.user, form)}
        return render(request, "accounts/account.html", context, status=400)
    subscription_update(user=request.user, email=form.cleaned_data["email"],
                        webhook_url=form.cleaned_data["webhook_url"], kinds=form.cleaned_data["kinds"])
    messages.success(request, "Notifications saved.")
    return redirect("account")
