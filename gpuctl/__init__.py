"""gpuctl: the GPU Portal's command-line client for people and CI jobs.

A client only: it speaks the REST API over HTTP and imports nothing of Django or the
portal's apps, so it installs and runs on any machine with Python.
"""

__version__ = "0.1.0"
