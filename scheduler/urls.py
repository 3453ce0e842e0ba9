from django.urls import path

from scheduler import views

urlpatterns = [
    path("queue/", views.queue_home, name="queue-home"),
    path("clusters/<slug:name>/queue/", views.queue, name="queue"),
    path("jobs/<id:pk>/", views.job_detail, name="job-detail"),
    path("jobs/<id:pk>/cancel/", views.job_cancel_view, name="job-cancel"),
]
