"""URLs of the example project."""

from __future__ import annotations

from django.urls import path

from examples.django_app.views import pay

urlpatterns = [path("orders/<str:order_id>/pay", pay)]
