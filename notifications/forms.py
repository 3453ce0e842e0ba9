from urllib.parse import urlsplit

from django import forms

from notifications.models import Kind


class SubscriptionForm(forms.Form):
    kinds = forms.MultipleChoiceField(choices=Kind.choices, required=False, widget=forms.CheckboxSelectMultiple,
                                      label="Tell me when")
    email = forms.BooleanField(required=False, label="By e-mail")
    webhook_url = forms.URLField(required=False, max_length=500, label="Webhook URL",
                                 assume_scheme="https", widget=forms.URLInput(attrs={"size": 60}),
                                 help_text="Slack-compatible: we POST {\"text\": …} as JSON.")

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user

    def clean_webhook_url(self):
        url = self.cleaned_data["webhook_url"]
        if url and urlsplit(url).scheme not in ("http", "https"):
            raise forms.ValidationError("The webhook URL must start with https:// (or http://).")
        return url

    def clean(self):
        data = super().clean()
        if data.get("email") and self.user is not None and not self.user.email:
            self.add_error("email", "Your account has no e-mail address: ask an admin to set one, or use a webhook.")
        if data.get("kinds") and not data.get("email") and not data.get("webhook_url"):
            self.add_error(None, "Choose how to be told: by e-mail, a webhook URL, or both.")
        return data
