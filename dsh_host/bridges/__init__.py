"""Faces of dsh for agent frameworks, one module each, each importing its framework itself:
`dsh_host.bridges.pydantic_ai` (``pip install 'dsh-host[pydantic-ai]'``) and
`dsh_host.bridges.openai_agents` (``[openai-agents]``). ``import dsh_host`` imports none of them.
"""
