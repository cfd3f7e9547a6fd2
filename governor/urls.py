"""URL map of the console. Each app mounts its pages and its API under its own prefix."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from core.api import RedocView, SwaggerView
from governor import views

urlpatterns = [
    path("", views.HomeView.as_view(), name="home"),
    path("healthz", views.healthz, name="healthz"),
    path(
        "accounts/login/", auth_views.LoginView.as_view(template_name="registration/login.html"), name="login"
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("catalog/", include("catalog.urls")),
    path("billing/", include("billing.urls")),
    path("notifications/", include("notify.urls")),
    path("operations/", include("operations.urls")),
    path("audit/", include("audit.urls")),
    path("api/catalog/", include("catalog.api.urls")),
    path("api/billing/", include("billing.api.urls")),
    path("deployments/", include("deployments.urls")),
    path("api/deployments/", include("deployments.api.urls")),
    path("benchmarks/", include("evaluations.urls.benchmarks")),
    path("api/evaluations/", include("evaluations.api.urls")),
    path("gates/", include("evaluations.urls.gates")),
    path("cost/", include("evaluations.urls.cost")),
    path("api/audit/", include("audit.api.urls")),
    path("batches/", include("batches.urls")),
    path("api/batches/", include("batches.api.urls")),
    # The OpenAI Batch API, which the gateway passes on to here (docs/decisions/0036).
    path("v1/", include("batches.api.openai_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/redoc/", RedocView.as_view(url_name="api-schema"), name="api-redoc"),
]
