"""API routes of benchmark runs, eval suites and runs, and gates, mounted at ``/api/evaluations/``."""

from django.urls import path

from evaluations.api.views import benchmarks, evals, gates, routing

app_name = "evaluations-api"

urlpatterns = [
    path("runs/", benchmarks.RunListCreateView.as_view(), name="run_list"),
    path("runs/<int:pk>/", benchmarks.RunDetailView.as_view(), name="run_detail"),
    path("runs/<int:pk>/status/", benchmarks.RunStatusView.as_view(), name="run_status"),
    path("runs/<int:pk>/cancel/", benchmarks.RunCancelView.as_view(), name="run_cancel"),
    path("suites/", evals.SuiteListCreateView.as_view(), name="suite_list"),
    path("eval-runs/<int:pk>/", evals.EvalRunDetailView.as_view(), name="evalrun_detail"),
    path("gate-decisions/", gates.DecisionListView.as_view(), name="decision_list"),
    path("versions/<int:pk>/gates/", gates.VersionGatesView.as_view(), name="version_gates"),
    path("versions/<int:pk>/gates/run/", gates.GateRunStartView.as_view(), name="gate_run_start"),
    path("router-policies/", routing.RouterPolicyListView.as_view(), name="router_list"),
    path("router-policies/<int:pk>/", routing.RouterPolicyDetailView.as_view(), name="router_detail"),
    path("router-policies/<int:pk>/gate/", routing.RouterPolicyGateView.as_view(), name="router_gate"),
    path(
        "router-policies/<int:pk>/activate/",
        routing.RouterPolicyActivateView.as_view(),
        name="router_activate",
    ),
    path("router-policies/<int:pk>/retire/", routing.RouterPolicyRetireView.as_view(), name="router_retire"),
]
