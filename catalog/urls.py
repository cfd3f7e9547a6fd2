from django.urls import path

from catalog import views

app_name = "catalog"

urlpatterns = [
    path("", views.catalog_home, name="home"),
    path("versions/", views.VersionListView.as_view(), name="version_list"),
    path("versions/new/", views.VersionCreateView.as_view(), name="version_create"),
    path("versions/<int:pk>/", views.VersionDetailView.as_view(), name="version_detail"),
    path("versions/<int:pk>/edit/", views.VersionCreateView.as_view(), name="version_edit"),
    path("versions/<int:pk>/lifecycle/", views.VersionTransitionView.as_view(), name="version_transition"),
    path("models/", views.ModelListView.as_view(), name="model_list"),
    path("models/new/", views.ModelFormView.as_view(), name="model_create"),
    path("models/<int:pk>/", views.ModelDetailView.as_view(), name="model_detail"),
    path("models/<int:pk>/edit/", views.ModelFormView.as_view(), name="model_edit"),
    path("kv/", views.KvCalculatorView.as_view(), name="kv_calculator"),
    path("gpus/", views.GpuTypeListView.as_view(), name="gpu_list"),
    path("gpus/new/", views.GpuTypeFormView.as_view(), name="gpu_create"),
    path("gpus/<int:pk>/", views.GpuTypeDetailView.as_view(), name="gpu_detail"),
    path("gpus/<int:pk>/costs/new/", views.GpuCostVersionCreateView.as_view(), name="gpu_cost_create"),
    path("gpus/<int:pk>/edit/", views.GpuTypeFormView.as_view(), name="gpu_edit"),
]
