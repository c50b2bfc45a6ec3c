"""GPU Portal node agent: collects GPU readings and serves them over HTTP.

Standalone on purpose: it runs on GPU nodes that never have the portal installed,
so it imports only the standard library (and pynvml, lazily, for real cards).
"""

__version__ = "0.1.0"
