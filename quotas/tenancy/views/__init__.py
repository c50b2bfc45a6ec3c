"""Tenancy's pages: tenants, members and quotas (``tenants``); users (``users``)."""
