"""The payment view: the payment row and its charge job commit together, or neither."""

from __future__ import annotations

from django.conf import settings
from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from examples.django_app.jobs import charge


class PaymentRefused(Exception):
    """A check after the enqueue refused the payment (a fraud score, a limit)."""


@require_POST
def pay(request: HttpRequest, order_id: str) -> JsonResponse:
    """Record a payment and enqueue its charge; 202 with the job's id, 402 when refused."""
    amount = int(request.POST["amount"])
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(
                    f"INSERT INTO {settings.PAYMENTS_TABLE} (order_id, amount)"
                    " VALUES (%s, %s) RETURNING id",
                    [order_id, amount],
                )
                (payment_id,) = cursor.fetchone()
            # Queued by transaction.on_commit: a rollback below leaves no job behind.
            job_id = charge.enqueue_on_commit(connection, order_id, amount)
            if amount > settings.PAYMENT_LIMIT:
                raise PaymentRefused(f"{amount} is over the limit of {settings.PAYMENT_LIMIT}")
    except PaymentRefused as e:
        return JsonResponse({"error": str(e)}, status=402)
    return JsonResponse({"payment_id": payment_id, "job_id": job_id}, status=202)
