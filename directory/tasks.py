from celery import shared_task

from directory import lookup


@shared_task(ignore_result=True)
def check_accounts_task() -> dict:
    """Every LDAP_SYNC_EVERY_S: directory users disabled or gone are deactivated."""
    return lookup.check_accounts()
