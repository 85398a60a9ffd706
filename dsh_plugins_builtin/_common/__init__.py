"""Small pieces several plugins share: canonical JSON for keys, the commit gate that holds
cancellation while a write lands, and the user's state, data and cache directories.

Imports only public ``dsh_host`` names.
"""
