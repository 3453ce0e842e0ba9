from django.urls import reverse

from budgets.permissions import is_oncall

# (label, url name, path prefixes that mark it current)
NAV = [
    ("Clusters", "cluster-list", ("/clusters", "/hosts")),
    ("Org", "org-tree", ("/org",)),
]


def navigation(request):
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    path = request.path
    items = [
        {"label": label, "url": reverse(name), "active": any(path.startswith(p) for p in prefixes)}
        for label, name, prefixes in NAV
    ]
    return {"nav_items": items, "is_oncall": is_oncall(user)}
