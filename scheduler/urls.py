from django.urls import path

from scheduler import views

urlpatterns = [
    path("jobs/", views.job_history_view, name="job-history"),
    path("jobs/new/", views.job_submit_view, name="job-submit"),
    path("usage/", views.usage_view, name="usage"),
    path("jobs/<id:pk>/", views.job_detail, name="job-detail"),
    path("jobs/<id:pk>/cancel/", views.job_cancel_view, name="job-cancel"),
]
