"""A plugin whose import raises."""

raise RuntimeError("dsh-broken: boom at import time")
