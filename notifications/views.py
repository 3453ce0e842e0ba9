from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from notifications.forms import SubscriptionForm
from notifications.models import Kind
from notifications.services import recent_for, subscription_of, subscription_update


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
        from accounts.selectors import tokens_of

        context = {"tokens": tokens_of(request.user), **account_context(request.user, form)}
        return render(request, "accounts/account.html", context, status=400)
    subscription_update(user=request.user, email=form.cleaned_data["email"],
                        webhook_url=form.cleaned_data["webhook_url"], kinds=form.cleaned_data["kinds"])
    messages.success(request, "Notifications saved.")
    return redirect("account")
