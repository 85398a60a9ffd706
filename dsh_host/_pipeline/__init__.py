"""The pipeline of one call (contract §4, stages A to M): ``Pipeline.run`` in ``_pipeline`` is the
whole flow in one place; ``Pipeline`` is made of one class per stage group (``_calling`` and
``_chains``: how hooks are called; ``_gate``: A-G; ``_dispatch``: H-J; ``_finish``: K-M), each fast
path beside its general version. Batches (``_batch``, ``_baton``) run the same stages. Plugin
faults and hook deadlines are contained here (``_contain``, ``_stage``); every read of trio's
private state is in ``_trio_internals``.

May import ``_registry``, ``_schema`` and ``_model``.
"""
