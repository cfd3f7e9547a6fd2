"""Benchmark API routes, mounted by the lead at ``/api/evaluations/``."""

from django.urls import path

from evaluations.api import views

app_name = "evaluations-api"

urlpatterns = [
    path("runs/", views.RunListCreateView.as_view(), name="run_list"),
    path("runs/<int:pk>/", views.RunDetailView.as_view(), name="run_detail"),
    path("runs/<int:pk>/status/", views.RunStatusView.as_view(), name="run_status"),
    path("runs/<int:pk>/cancel/", views.RunCancelView.as_view(), name="run_cancel"),
]
