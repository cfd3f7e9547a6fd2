"""REST API of deployments and routes: admins and auditors read, admins write (drf-spectacular)."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action, api_view, permission_classes
from rest_framework.response import Response

from core.access import ReadsEverythingOrAdmin
from deployments import selectors, services
from deployments.api.serializers import (
    AdmissionSerializer,
    DeploymentEventSerializer,
    DeploymentSerializer,
    ModelRouteSerializer,
    ReconcileRunSerializer,
    RouteFreeSerializer,
    RouteTargetSerializer,
    ScaleSerializer,
)
from deployments.models import Deployment, ModelRoute, ReconcileRun, RouteTarget
from deployments.reconciler import serve_config_preview


def _drf_error(exc: DjangoValidationError) -> serializers.ValidationError:
    if hasattr(exc, "error_dict"):
        detail = {("non_field_errors" if k == "__all__" else k): v for k, v in exc.message_dict.items()}
        return serializers.ValidationError(detail)
    return serializers.ValidationError({"non_field_errors": exc.messages})


class DeploymentViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, viewsets.GenericViewSet
):
    """Deployments. Create runs the preflight (400 with the numbers when it does not fit).

    Changes go through the actions (scale, stop, start) and DELETE; each one enqueues a reconcile.
    """

    serializer_class = DeploymentSerializer
    permission_classes = [ReadsEverythingOrAdmin]
    filterset_fields = ["status", "engine_kind", "pool", "desired_state", "gpu_type", "model_version"]

    def get_queryset(self):
        return selectors.deployment_list()

    def perform_create(self, serializer):
        try:
            deployment, preflight = services.deployment_create(
                actor=self.request.user, **serializer.validated_data
            )
        except DjangoValidationError as exc:
            raise _drf_error(exc) from exc
        deployment._preflight_warnings = preflight.warnings
        serializer.instance = deployment

    @extend_schema(
        responses={204: OpenApiResponse(description="Deleted; Ray drops the app at the next reconcile")}
    )
    def destroy(self, request, pk=None):
        try:
            services.deployment_delete(deployment=self.get_object(), actor=request.user)
        except DjangoValidationError as exc:
            raise _drf_error(exc) from exc
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _act(self, fn, **kwargs):
        try:
            deployment = fn(deployment=self.get_object(), actor=self.request.user, **kwargs)
        except DjangoValidationError as exc:
            raise _drf_error(exc) from exc
        return Response(DeploymentSerializer(deployment).data)

    @extend_schema(request=ScaleSerializer, responses=DeploymentSerializer)
    @action(detail=True, methods=["post"])
    def scale(self, request, pk=None):
        """Set fixed replicas, or autoscaling bounds, target and delays (a minimum above the maximum
        is refused with a 400 naming it; nothing changes)."""
        body = ScaleSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return self._act(services.deployment_scale, **body.validated_data)

    @extend_schema(request=AdmissionSerializer, responses=DeploymentSerializer)
    @action(detail=True, methods=["post"])
    def admission(self, request, pk=None):
        """Set how many requests the gateways send it at once (null: its measured capacity's).
        Beyond it they queue by traffic class and shed sheddable requests first."""
        body = AdmissionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return self._act(services.deployment_admission_set, **body.validated_data)

    @extend_schema(request=None, responses=DeploymentSerializer)
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        """Take the deployment off Ray; settings and routes stay."""
        return self._act(services.deployment_stop)

    @extend_schema(request=None, responses=DeploymentSerializer)
    @action(detail=True, methods=["post"])
    def start(self, request, pk=None):
        """Put a stopped deployment back on Ray (the preflight runs again)."""
        return self._act(services.deployment_start)

    @extend_schema(responses=DeploymentEventSerializer(many=True))
    @action(detail=True, methods=["get"])
    def events(self, request, pk=None):
        """The append-only timeline, newest first."""
        events = selectors.deployment_events(deployment=self.get_object(), limit=200)
        return Response(DeploymentEventSerializer(events, many=True).data)


class ModelRouteViewSet(viewsets.ModelViewSet):
    """Public model names the gateway serves."""

    queryset = ModelRoute.objects.prefetch_related("targets__deployment").order_by("public_name")
    serializer_class = ModelRouteSerializer
    permission_classes = [ReadsEverythingOrAdmin]

    def perform_create(self, serializer):
        data = dict(serializer.validated_data)
        tenants = data.pop("allowed_tenants", [])
        serializer.instance = services.model_route_save(
            route=ModelRoute(**data), allowed_tenants=tenants, actor=self.request.user
        )

    def perform_update(self, serializer):
        route = serializer.instance
        data = dict(serializer.validated_data)
        tenants = data.pop("allowed_tenants", None)
        for key, value in data.items():
            setattr(route, key, value)
        serializer.instance = services.model_route_save(
            route=route, allowed_tenants=tenants, actor=self.request.user
        )

    def perform_destroy(self, instance):
        services.model_route_delete(route=instance, actor=self.request.user)

    @extend_schema(request=RouteFreeSerializer, responses=ModelRouteSerializer)
    @action(detail=True, methods=["post"])
    def free(self, request, pk=None):
        """Mark the route served at $0 on purpose (or take the mark off), with a reason (audited).
        Unmarked, a model with no price in force is refused for tenants with a budget."""
        body = RouteFreeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            route = services.model_route_free_set(
                route=self.get_object(), actor=request.user, **body.validated_data
            )
        except DjangoValidationError as exc:
            raise _drf_error(exc) from exc
        return Response(ModelRouteSerializer(route).data)


class RouteTargetViewSet(viewsets.ModelViewSet):
    """Deployments behind a route with their weights (POST upserts by route + deployment)."""

    queryset = RouteTarget.objects.select_related("route", "deployment").order_by(
        "route__public_name", "deployment__slug"
    )
    serializer_class = RouteTargetSerializer
    permission_classes = [ReadsEverythingOrAdmin]
    filterset_fields = ["route", "deployment"]

    def _set(self, serializer, route, deployment, weight):
        try:
            serializer.instance = services.route_target_set(
                route=route, deployment=deployment, weight=weight, actor=self.request.user
            )
        except DjangoValidationError as exc:
            raise _drf_error(exc) from exc

    def perform_create(self, serializer):
        data = serializer.validated_data
        self._set(serializer, data["route"], data["deployment"], data.get("weight", 100))

    def perform_update(self, serializer):
        t = serializer.instance
        data = serializer.validated_data
        if data.get("route", t.route) != t.route or data.get("deployment", t.deployment) != t.deployment:
            raise serializers.ValidationError(
                "Change the weight only; add a new target for another deployment."
            )
        self._set(serializer, t.route, t.deployment, data.get("weight", t.weight))

    def perform_destroy(self, instance):
        services.route_target_delete(target=instance, actor=self.request.user)

    def get_serializer(self, *args, **kwargs):
        serializer = super().get_serializer(*args, **kwargs)
        # The (route, deployment) pair is upserted by the service, not refused as a duplicate.
        if hasattr(serializer, "validators"):
            serializer.validators = []
        return serializer


class ReconcileRunViewSet(viewsets.ReadOnlyModelViewSet):
    """The reconciler's recent runs (outcome, config hash, Ray's error)."""

    queryset = ReconcileRun.objects.order_by("-id")
    serializer_class = ReconcileRunSerializer
    permission_classes = [ReadsEverythingOrAdmin]


@extend_schema(
    responses={200: OpenApiResponse(description="{public_name: {long_context_threshold, targets}}")}
)
@api_view(["GET"])
@permission_classes([ReadsEverythingOrAdmin])
def routing_table_view(request):
    """The routing table as the gateway receives it in its snapshot."""
    return Response(selectors.routing_table())


@extend_schema(responses={200: OpenApiResponse(description="Ray Serve ServeDeploySchema")})
@api_view(["GET"])
@permission_classes([ReadsEverythingOrAdmin])
def serve_config_view(request):
    """The whole Ray Serve config the reconciler sends."""
    return Response(serve_config_preview())


@extend_schema(request=None, responses={202: OpenApiResponse(description="Reconcile enqueued")})
@api_view(["POST"])
@permission_classes([ReadsEverythingOrAdmin])
def reconcile_view(request):
    """Ask for a reconcile now (admins)."""
    from deployments.tasks import reconcile

    reconcile.delay(trigger="api")
    return Response({"enqueued": True}, status=status.HTTP_202_ACCEPTED)


# Keep a reference for type checkers: Deployment is the viewset's model.
__all__ = [
    "Deployment",
    "DeploymentViewSet",
    "ModelRouteViewSet",
    "RouteTargetViewSet",
    "ReconcileRunViewSet",
]
