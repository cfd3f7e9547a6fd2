"""URL map of the console. Each app mounts its pages and its API under its own prefix."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

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
    path("api/catalog/", include("catalog.api.urls")),
    path("api/billing/", include("billing.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]

# Apps that are built by later issues mount themselves when present.
_OPTIONAL = [
    ("deployments/", "deployments.urls"),
    ("api/deployments/", "deployments.api.urls"),
    ("benchmarks/", "evaluations.urls"),
    ("api/evaluations/", "evaluations.api.urls"),
    ("gates/", "evaluations.gate_urls"),
]
for _prefix, _module in _OPTIONAL:
    try:
        __import__(_module)
    except ModuleNotFoundError as exc:
        if exc.name and _module.startswith(exc.name):
            continue
        raise
    urlpatterns.append(path(_prefix, include(_module)))
