"""Router policy API: admins and auditors read; admins train, judge, activate and retire."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import ReadsEverythingOrAdmin
from evaluations.api.serializers.routing import (
    RouterActivateSerializer,
    RouterPolicySerializer,
    RouterTrainSerializer,
)
from evaluations.selectors import routing as selectors
from evaluations.services import routing as services


class RouterPolicyListView(generics.ListAPIView):
    """Router policies, by route, newest first; POST trains a draft from two eval runs."""

    permission_classes = [ReadsEverythingOrAdmin]
    serializer_class = RouterPolicySerializer

    def get_queryset(self):
        return selectors.router_policy_list()

    @extend_schema(request=RouterTrainSerializer, responses={201: RouterPolicySerializer})
    def post(self, request):
        body = RouterTrainSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        # A refusal (same version twice, a target outside (0, 1], too few cases) is the service's
        # ValidationError: the API's exception handler answers it as a 400.
        policy = services.router_policy_train(
            route=d["route"], cheap_run=d["cheap_eval_run"], strong_run=d["strong_eval_run"],
            quality_target=d["quality_target"], cheap_usd_per_mtok=d["cheap_usd_per_mtok"],
            strong_usd_per_mtok=d["strong_usd_per_mtok"], seed=d["seed"], actor=request.user,
        )  # fmt: skip
        return Response(RouterPolicySerializer(policy).data, status=status.HTTP_201_CREATED)


class RouterPolicyDetailView(generics.RetrieveAPIView):
    permission_classes = [ReadsEverythingOrAdmin]
    serializer_class = RouterPolicySerializer

    def get_queryset(self):
        return selectors.router_policy_list()


class RouterPolicyGateView(APIView):
    """Judge the policy on its test cases (its gate); the verdict is recorded on it."""

    permission_classes = [ReadsEverythingOrAdmin]

    @extend_schema(request=None, responses=RouterPolicySerializer)
    def post(self, request, pk: int):
        policy = get_object_or_404(selectors.router_policy_list(), pk=pk)
        return Response(
            RouterPolicySerializer(services.router_policy_judge(policy=policy, actor=request.user)).data
        )


class RouterPolicyActivateView(APIView):
    """Serve the policy on its route (its gate passed, or ``override_reason`` says why anyway)."""

    permission_classes = [ReadsEverythingOrAdmin]

    @extend_schema(request=RouterActivateSerializer, responses=RouterPolicySerializer)
    def post(self, request, pk: int):
        policy = get_object_or_404(selectors.router_policy_list(), pk=pk)
        body = RouterActivateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        policy = services.router_policy_activate(
            policy=policy, actor=request.user, override_reason=body.validated_data["override_reason"]
        )
        return Response(RouterPolicySerializer(policy).data)


class RouterPolicyRetireView(APIView):
    permission_classes = [ReadsEverythingOrAdmin]

    @extend_schema(request=None, responses=RouterPolicySerializer)
    def post(self, request, pk: int):
        policy = get_object_or_404(selectors.router_policy_list(), pk=pk)
        return Response(
            RouterPolicySerializer(services.router_policy_retire(policy=policy, actor=request.user)).data
        )
