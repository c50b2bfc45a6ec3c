"""Tenancy: tenants, their members and roles, the users who sign in, and the quotas and
usage of each tenant in each pool (services, forms, pages, API).

Nothing here imports ``quotas.requests``: GPU requests are built on tenancy, not the other
way round (tests/test_boundaries.py).
"""
