"""Small pieces several plugins share: canonical JSON for keys and the commit gate that holds
cancellation while a write lands.

Imports only public ``dsh_host`` names.
"""
