"""Eval suites, eval runs, gate policies and decisions, mounted at ``/gates/``."""

from django.urls import path

from evaluations.views import evals, gates, routing

app_name = "gates"

urlpatterns = [
    path("", gates.DecisionListView.as_view(), name="decision_list"),
    path("decisions.<str:fmt>", gates.DecisionExportView.as_view(), name="decision_export"),
    path("decisions/<int:pk>/", gates.DecisionDetailView.as_view(), name="decision_detail"),
    path("versions/<int:pk>/", gates.VersionGatesView.as_view(), name="version_gates"),
    path("versions/<int:pk>/run/", gates.GateRunStartView.as_view(), name="gate_run_start"),
    path("policies/", gates.PolicyListView.as_view(), name="policy_list"),
    path("policies/<int:model_pk>/", gates.PolicyDetailView.as_view(), name="policy_detail"),
    path("policies/<int:model_pk>/edit/", gates.PolicyEditView.as_view(), name="policy_edit"),
    path("suites/", evals.SuiteListView.as_view(), name="suite_list"),
    path("suites/upload/", evals.SuiteUploadView.as_view(), name="suite_upload"),
    path("suites/<int:pk>/", evals.SuiteDetailView.as_view(), name="suite_detail"),
    path("suites/<int:pk>/run/", evals.EvalRunStartView.as_view(), name="evalrun_start"),
    path("suites/<int:pk>/v<int:number>.jsonl", evals.SuiteDownloadView.as_view(), name="suite_download"),
    path("evals/<int:pk>/", evals.EvalRunDetailView.as_view(), name="evalrun_detail"),
    path("routers/", routing.RouterListView.as_view(), name="router_list"),
    path("routers/train/", routing.RouterTrainView.as_view(), name="router_train"),
    path("routers/<int:pk>/", routing.RouterDetailView.as_view(), name="router_detail"),
    path("routers/<int:pk>/<str:action>/", routing.RouterActionView.as_view(), name="router_action"),
    path("evals/<int:pk>/export.<str:fmt>", evals.EvalRunExportView.as_view(), name="evalrun_export"),
]
