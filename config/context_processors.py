from django.conf import settings
from django.urls import reverse

from budgets.permissions import is_oncall
from budgets.selectors import waiting_count
from scheduler.racks import needs_repair_count

# (label, url name, path prefixes that mark it current)
NAV = [
    ("Queue", "queue-home", ("/queue",)),
    ("Jobs", "job-history", ("/jobs",)),
    ("Usage", "usage", ("/usage",)),
    ("Clusters", "cluster-list", ("/clusters", "/hosts")),
    ("Budgets", "budget-overview", ("/budgets", "/org")),
    ("Repairs", "repairs", ("/repairs",)),
]


def navigation(request):
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"time_zone": settings.TIME_ZONE}
    path = request.path
    items = [
        {"label": label, "url": reverse(name), "active": any(path.startswith(p) for p in prefixes)}
        for label, name, prefixes in NAV
    ]
    waiting = waiting_count(user)
    if waiting:
        budgets = next(item for item in items if item["label"] == "Budgets")
        budgets["badge"] = waiting
        budgets["badge_title"] = f"{waiting} budget request{'s' if waiting != 1 else ''} waiting for your decision"
    oncall = is_oncall(user)
    if oncall:
        broken = needs_repair_count()
        if broken:
            repairs = next(item for item in items if item["label"] == "Repairs")
            repairs["badge"] = broken
            repairs["badge_title"] = f"{broken} host{'s' if broken != 1 else ''} drained or down, waiting for repair"
    # Every time on the pages is in this zone; the top bar says which.
    return {"nav_items": items, "is_oncall": oncall, "budget_requests_waiting": waiting,
            "time_zone": settings.TIME_ZONE}
