from celery import shared_task

from routing import budgets


@shared_task(acks_late=True, ignore_result=True)
def release_stale_reservations() -> int:
    """Gives back budget held by calls that never settled (a server killed mid-call)."""
    return budgets.release_expired()
