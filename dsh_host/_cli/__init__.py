"""The ``dsh`` command line: argument parsing, the commands, rendering of cards and tables, shell
completion and the plugin scaffold.

A face: it sits on top of every layer and is imported by nothing but ``__main__`` and the console
script.
"""
