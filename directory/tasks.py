from celery import shared_task

from directory import lookup


# Late acks: the check only reads the directory and sets each account to what it says,
# so a second run after a lost worker changes nothing the first one did not.
@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def check_accounts_task() -> dict:
    """Every LDAP_SYNC_EVERY_S: directory users disabled or gone are deactivated."""
    return lookup.check_accounts()
