"""The pipeline of one call (contract §4, stages A to M): the gate, approval, guards, execute
wrappers, the body, post-execute, the final check and the observers; batches; containment of plugin
faults and hook deadlines.

May import ``_registry``, ``_schema`` and ``_model``.
"""
