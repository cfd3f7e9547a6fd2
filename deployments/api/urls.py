from django.urls import path
from rest_framework.routers import DefaultRouter

from deployments.api import cache, rollouts, views

app_name = "deployments-api"

router = DefaultRouter()
router.register("deployments", views.DeploymentViewSet, basename="deployment")
router.register("routes", views.ModelRouteViewSet, basename="route")
router.register("route-targets", views.RouteTargetViewSet, basename="route-target")
router.register("rollouts", rollouts.RolloutViewSet, basename="rollout")
router.register("reconcile-runs", views.ReconcileRunViewSet, basename="reconcile-run")

urlpatterns = [
    path("routing-table/", views.routing_table_view, name="routing-table"),
    path("serve-config/", views.serve_config_view, name="serve-config"),
    path("reconcile/", views.reconcile_view, name="reconcile"),
    path("deployments/<int:pk>/faults/", rollouts.deployment_faults_view, name="deployment-faults"),
    path("routes/<int:pk>/cache/", cache.RouteCacheView.as_view(), name="route-cache"),
    path("routes/<int:pk>/cache/drop/", cache.RouteCacheDropView.as_view(), name="route-cache-drop"),
    *router.urls,
]
