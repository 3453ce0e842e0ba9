from django.urls import path

from budgets import views

urlpatterns = [
    path("org/", views.org_tree, name="org-tree"),
]
