"""Account pages: your API tokens (revoke them), your password (change it; reset it by e-mail)."""

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.views.decorators.http import require_POST

from accounts.selectors import tokens_of
from accounts.services import token_revoke, token_revoke_all


@login_required
def account(request):
    from notifications.views import account_context

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
