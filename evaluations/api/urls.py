"""Benchmark API routes, mounted by the lead at ``/api/evaluations/``."""

from django.urls import path

from evaluations.api import gate_views, views

app_name = "evaluations-api"

urlpatterns = [
    path("runs/", views.RunListCreateView.as_view(), name="run_list"),
    path("runs/<int:pk>/", views.RunDetailView.as_view(), name="run_detail"),
    path("runs/<int:pk>/status/", views.RunStatusView.as_view(), name="run_status"),
    path("runs/<int:pk>/cancel/", views.RunCancelView.as_view(), name="run_cancel"),
    path("suites/", gate_views.SuiteListCreateView.as_view(), name="suite_list"),
    path("eval-runs/<int:pk>/", gate_views.EvalRunDetailView.as_view(), name="evalrun_detail"),
    path("gate-decisions/", gate_views.DecisionListView.as_view(), name="decision_list"),
    path("versions/<int:pk>/gates/", gate_views.VersionGatesView.as_view(), name="version_gates"),
    path("versions/<int:pk>/gates/run/", gate_views.GateRunStartView.as_view(), name="gate_run_start"),
]
