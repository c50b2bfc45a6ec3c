"""/api/v1/gpu-requests/."""
