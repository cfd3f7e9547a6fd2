"""Eval suites, eval runs, gate policies and decisions, mounted at ``/gates/``."""

from django.urls import path

from evaluations import gate_views as views

app_name = "gates"

urlpatterns = [
    path("", views.DecisionListView.as_view(), name="decision_list"),
    path("decisions.<str:fmt>", views.DecisionExportView.as_view(), name="decision_export"),
    path("decisions/<int:pk>/", views.DecisionDetailView.as_view(), name="decision_detail"),
    path("versions/<int:pk>/", views.VersionGatesView.as_view(), name="version_gates"),
    path("versions/<int:pk>/run/", views.GateRunStartView.as_view(), name="gate_run_start"),
    path("policies/", views.PolicyListView.as_view(), name="policy_list"),
    path("policies/<int:model_pk>/", views.PolicyDetailView.as_view(), name="policy_detail"),
    path("policies/<int:model_pk>/edit/", views.PolicyEditView.as_view(), name="policy_edit"),
    path("suites/", views.SuiteListView.as_view(), name="suite_list"),
    path("suites/upload/", views.SuiteUploadView.as_view(), name="suite_upload"),
    path("suites/<int:pk>/", views.SuiteDetailView.as_view(), name="suite_detail"),
    path("suites/<int:pk>/run/", views.EvalRunStartView.as_view(), name="evalrun_start"),
    path("suites/<int:pk>/v<int:number>.jsonl", views.SuiteDownloadView.as_view(), name="suite_download"),
    path("evals/<int:pk>/", views.EvalRunDetailView.as_view(), name="evalrun_detail"),
    path("evals/<int:pk>/export.<str:fmt>", views.EvalRunExportView.as_view(), name="evalrun_export"),
]
