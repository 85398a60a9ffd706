"""Permission rules (Claude Code syntax) and the reading of shell commands they match against.

Helpers of the ``permissions`` plugin; import only public ``dsh_host`` names.
"""
