"""``/v1/files`` and ``/v1/batches`` (mounted at ``/v1/`` by ``governor.urls``)."""

from django.urls import path

from batches.api import openai as v

urlpatterns = [
    path("files", v.files, name="openai-files"),
    path("files/<str:file_id>", v.file_detail, name="openai-file"),
    path("files/<str:file_id>/content", v.file_content, name="openai-file-content"),
    path("batches", v.batches, name="openai-batches"),
    path("batches/<str:batch_id>", v.batch_detail, name="openai-batch"),
    path("batches/<str:batch_id>/cancel", v.batch_cancel_view, name="openai-batch-cancel"),
]
