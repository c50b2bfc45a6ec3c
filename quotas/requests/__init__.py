"""GPU requests: asking, the approval workflow, placement under quota and the pool's
waiting queue, the lifecycle after placement, the notices of each step, and their pages,
API and websocket.

Built on ``quotas.tenancy`` (members, quotas, usage), which never imports this package.
Not the PyPI ``requests``: this is ``quotas.requests``, reached by its full name.
"""
