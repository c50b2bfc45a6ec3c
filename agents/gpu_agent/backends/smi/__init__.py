"""Vendor management tools (npu-smi, hy-smi, rocm-smi, amd-smi) read as subprocesses.

One parser module per tool turns its text or JSON into :class:`SmiCard` readings; ``tool.py``
runs the tool and maps them to the agent's model. Parsers never invent a value: what the
tool does not print, or prints as ``NA``/``-``/``N/A``, stays ``None``.
"""
