"""/api/v1/tenants/, memberships/, quotas/ and users/."""
