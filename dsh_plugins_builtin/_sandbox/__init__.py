"""The sandbox: the policy (writable roots, protected paths), the file fence for the file
tools, descriptor-relative path walking, and the confinement of commands (bubblewrap; Landlock with
its fork server; the seccomp filter).

Helpers of the ``sandbox`` plugin and of the tools; imports only public ``dsh_host`` names and
``_common``.
"""
