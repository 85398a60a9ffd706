"""What a ``git`` line runs or writes beyond its words: configuration naming a program, options
and subcommands that run one, files its options write (a part of `._hidden`)."""

from __future__ import annotations

from collections.abc import Sequence

from ._wrappers import git_globals, strip_git_globals

__all__ = ["GIT_PROGRAM_OPTIONS", "GIT_WRITING", "git_runs", "git_writes"]

_GIT_CONFIG = frozenset({"-c", "--config-env", "--exec-path"})
GIT_WRITING = frozenset({"log", "diff", "show", "format-patch", "archive", "range-diff",
                          "whatchanged", "shortlog", "bundle"})  # fmt: skip


# git's subcommands and options that run a program named on the line (any abbreviation of a
# long option; a short one alone or in a cluster, as git's parse-options reads them)
GIT_PROGRAM_OPTIONS: dict[str, tuple[str, ...]] = {
    "grep": ("-O", "--open-files-in-pager", "--textconv"),
    # an external diff driver or a text conversion filter named in configuration
    "diff": ("--ext-diff", "--textconv"),
    "log": ("--ext-diff", "--textconv"),
    "show": ("--ext-diff", "--textconv"),
    "whatchanged": ("--ext-diff", "--textconv"),
    "blame": ("--textconv",),
    "cat-file": ("--textconv", "--filters"),
    "clone": ("-u", "--upload-pack", "-c", "--config", "--template"),
    "init": ("--template",),
    "fetch": ("--upload-pack",),
    "fetch-pack": ("--exec", "--upload-pack"),
    "send-pack": ("--receive-pack", "--exec"),
    "pull": ("--upload-pack",),
    "ls-remote": ("--upload-pack", "--exec"),
    "archive": ("--exec",),
    "push": ("--receive-pack", "--exec"),
    "rebase": ("-x", "--exec"),
    "difftool": ("-x", "--extcmd", "-t", "--tool"),
    "mergetool": ("-t", "--tool"),
    "send-email": ("--smtp-server", "--sendmail-cmd", "--to-cmd", "--cc-cmd"),
    "instaweb": ("-d", "--httpd", "-b", "--browser"),
    "web--browse": ("-b", "--browser", "-t", "--tool"),
}
_EXACT_OTHER = frozenset({"--text"})  # options whose names begin one that runs a program
_GIT_PROGRAM_SUBCOMMANDS = {"filter-branch": "", "submodule": "foreach", "bisect": "run"}


def git_runs(words: Sequence[str]) -> str | None:
    """Why this ``git`` line runs a program of its own naming (``None``: it does not)."""
    for word in git_globals(words):  # (the values of -C, --namespace ... skipped)
        if word.split("=", 1)[0] in _GIT_CONFIG:
            return f"git {word.split('=', 1)[0]}, whose configuration can name a program"
    rest = list((strip_git_globals(words) or ("git",))[1:])
    if not rest:
        return None
    sub = rest[0]
    runs = _GIT_PROGRAM_SUBCOMMANDS.get(sub)
    if runs is not None and (not runs or runs in rest[1:]):  # (submodule --quiet foreach)
        return f"git {sub} {runs}, which runs a command it is given"
    for option in GIT_PROGRAM_OPTIONS.get(sub, ()):
        for word in rest[1:]:
            if word == "--":
                break
            long = word.startswith("--") and len(word) > 3 and word not in _EXACT_OTHER
            if (option.startswith("--") and long and option.startswith(word.split("=", 1)[0])) or (
                not option.startswith("--")
                and word.startswith("-")
                and not word.startswith("--")
                and option[1] in word[1:]
            ):
                return f"git {sub} {option}, which runs a program it is given"
    return None


_GIT_OUTPUT = ("--output", "--output-directory")


def git_writes(words: Sequence[str]) -> list[tuple[str, str]]:
    """The files git's ``--output`` (any abbreviation; ``--output-directory``) and, for
    ``format-patch`` and ``archive``, ``-o`` make it write: (option, path) pairs."""
    rest = list((strip_git_globals(words) or ())[1:])
    sub, out, i = (rest[0] if rest else ""), [], 1
    while i < len(rest) and rest[i] != "--":
        word = rest[i]
        name, eq, value = word.partition("=")
        short = sub in ("format-patch", "archive") and word.startswith("-o") and word[1:2] != "-"
        long = len(name) > 3 and any(o.startswith(name) for o in _GIT_OUTPUT)
        if short or long:
            if short:
                value = word[2:]
            if not (value if short else eq) and i + 1 < len(rest):
                i += 1
                value = rest[i]
            out.append((f"git {sub} {name if long else '-o'}", value))
        i += 1
    return out
