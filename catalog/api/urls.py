from rest_framework.routers import DefaultRouter

from catalog.api import views

router = DefaultRouter()
router.register("gpu-types", views.GpuTypeViewSet)
router.register("models", views.ModelViewSet)
router.register("versions", views.ModelVersionViewSet)

urlpatterns = router.urls
