"""The audit writer: rows, redaction, and the writer thread that keeps SQLite off the call path.

Helpers of the ``audit`` plugin; import ``_common`` and public ``dsh_host`` names.
"""
