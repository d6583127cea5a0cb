"""The guest agent: runs inside every instance, serves exec, files and processes.

Imports only the standard library, trio, h11 and its own modules. It is loaded on
the host by the zygote (`zygote.py`) and carried into each instance by fork.
"""
