from django.urls import path

from operations import budget_views as views

urlpatterns = [
    # The org page grew into the budget overview; /org/ stays for old links and bookmarks.
    path("org/", views.budget_overview, name="org-tree"),
    path("budgets/", views.budget_overview, name="budget-overview"),
    path("budgets/shares/", views.shares_edit, name="budget-top-shares"),
    path("budgets/units/<slug:name>/", views.unit_detail, name="budget-unit"),
    path("budgets/units/<slug:name>/shares/", views.shares_edit, name="budget-shares"),
    path("budgets/requests/", views.request_list, name="budget-request-list"),
    path("budgets/requests/new/", views.request_new, name="budget-request-new"),
    path("budgets/requests/<id:pk>/", views.request_detail, name="budget-request-detail"),
    path("budgets/requests/<id:pk>/approve/", views.request_approve, name="budget-request-approve"),
    path("budgets/requests/<id:pk>/deny/", views.request_deny, name="budget-request-deny"),
    path("budgets/requests/<id:pk>/escalate/", views.request_escalate, name="budget-request-escalate"),
    path("budgets/requests/<id:pk>/cancel/", views.request_cancel, name="budget-request-cancel"),
    path("budgets/requests/<id:pk>/what-if/", views.request_what_if, name="budget-request-what-if"),
]
