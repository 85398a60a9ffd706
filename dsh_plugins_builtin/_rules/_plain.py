"""The allow view of a command line: its simple commands as literal words, or why not.

`plain` walks a parsed line and collects each simple command's words, raising `NotPlain` (with
the reason rules report) at the first thing that is not a plain list of literal simple commands
joined by ``;``, ``&&``, ``||``, ``|`` or newlines (see `._shell` for the whole contract).
"""

from __future__ import annotations

import re

import tree_sitter

from ._decode import DUP_OPS, globbed, literal_value, node_text

__all__ = ["NotPlain", "Trailing", "command_parts", "note_trailing", "plain"]

_SEPARATORS = frozenset({";", "&&", "||", "|", "\n", "comment"})
_PLAIN = frozenset({"command", "list", "pipeline", "redirected_statement"})
_FD = re.compile(r"[0-9]+-?|-")
_NULL_OPS = frozenset({">", ">>", "&>", "&>>", ">|", "<"})


class NotPlain(Exception):
    pass


def command_parts(
    node: tree_sitter.Node, trailing: Trailing
) -> tuple[
    list[tree_sitter.Node], tree_sitter.Node | None, list[tree_sitter.Node], list[tree_sitter.Node]
]:
    """A command node's assignments, name, arguments and redirections."""
    assignments: list[tree_sitter.Node] = []
    name: tree_sitter.Node | None = None
    arguments: list[tree_sitter.Node] = []
    redirects: list[tree_sitter.Node] = []
    for child in node.named_children:
        if child.type == "variable_assignment":
            assignments.append(child)
        elif child.type == "command_name" and name is None:
            name = child
        elif child.type.endswith("redirect"):
            redirects.append(child)
        else:
            arguments.append(child)
    arguments.extend(sorted(trailing.get(_key(node), ()), key=lambda n: n.start_byte))
    return assignments, name, arguments, redirects


Trailing = dict[tuple[int, int], list[tree_sitter.Node]]


def _key(node: tree_sitter.Node) -> tuple[int, int]:
    return (node.start_byte, node.end_byte)


def note_trailing(statement: tree_sitter.Node, trailing: Trailing) -> None:
    """Words after a redirection that the grammar files under it (``git 2>&1 push``: it reads
    ``push`` as a second target) but bash passes to the command before it: the rightmost
    command of the redirected statement's body. (Found top-down: a node's parent costs
    tree-sitter a walk from the root.)"""
    extra: list[tree_sitter.Node] = []
    for redirect in statement.children_by_field_name("redirect"):
        if redirect.type == "file_redirect":
            extra.extend(redirect.children_by_field_name("destination")[1:])
        else:
            extra.extend(redirect.children_by_field_name("argument"))
    node = statement.child_by_field_name("body")
    while node is not None and node.type in ("redirected_statement", "pipeline", "list"):
        if node.type == "redirected_statement":
            node = node.child_by_field_name("body")
        else:
            named = node.named_children
            node = named[-1] if named else None
    if extra and node is not None and node.type == "command":
        trailing.setdefault(_key(node), []).extend(extra)


def _a(noun: str) -> str:
    return ("an " if noun[:1] in "aeiou" else "a ") + noun


def _check_redirect(node: tree_sitter.Node) -> None:
    if node.type != "file_redirect":
        raise NotPlain(_a(node.type.replace("_", " ")))
    ops = [c.type for c in node.children if not c.is_named]
    destination = node.child_by_field_name("destination")
    target = literal_value(destination) if destination is not None else None
    op = ops[0] if len(ops) == 1 else None
    if op in _NULL_OPS and target == "/dev/null":
        return
    if op in DUP_OPS and target is not None and _FD.fullmatch(target):
        return
    raise NotPlain("a redirection other than to /dev/null")


def _plain_command(node: tree_sitter.Node, trailing: Trailing) -> tuple[str, ...]:
    if any(not child.is_named for child in node.children):
        raise NotPlain(f"the token {next(c.type for c in node.children if not c.is_named)!r}")
    assignments, name, arguments, redirects = command_parts(node, trailing)
    for redirect in redirects:
        _check_redirect(redirect)
    if name is None:
        raise NotPlain("a variable assignment without a command")
    words: list[str] = []
    for assignment in assignments:
        value = assignment.child_by_field_name("value")
        literal = "" if value is None else literal_value(value)
        if literal is None or len(assignment.named_children) > 2:
            raise NotPlain("an assignment with an expansion")
        words.append(node_text(assignment.named_children[0]) + "=" + literal)
    command = literal_value(name)
    if command is None or globbed(name.named_children[0]):
        raise NotPlain("a command word that is not literal")
    words.append(command)
    for argument in arguments:
        literal = literal_value(argument)
        if literal is None:
            raise NotPlain(f"an expansion or substitution ({node_text(argument)[:40]!r})")
        words.append(literal)
    return tuple(words)


def plain(node: tree_sitter.Node, out: list[tuple[str, ...]], trailing: Trailing) -> None:
    for child in node.children:
        kind = child.type
        if not child.is_named:
            if kind not in _SEPARATORS:
                raise NotPlain(f"the operator {kind!r}")
        elif kind == "comment":
            continue
        elif kind == "command":
            out.append(_plain_command(child, trailing))
        elif kind == "redirected_statement":
            for redirect in child.children_by_field_name("redirect"):
                _check_redirect(redirect)
            body = child.child_by_field_name("body")
            if body is None or body.type not in _PLAIN:
                raise NotPlain("a redirected compound command")
            _plain_body(body, out, trailing)
        elif kind in ("list", "pipeline"):
            plain(child, out, trailing)
        elif kind in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
            continue  # checked with their redirected_statement
        else:
            raise NotPlain(_a(kind.replace("_", " ")))


def _plain_body(node: tree_sitter.Node, out: list[tuple[str, ...]], trailing: Trailing) -> None:
    if node.type == "command":
        out.append(_plain_command(node, trailing))
    else:
        plain(node, out, trailing)
