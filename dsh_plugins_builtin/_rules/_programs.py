"""Common programs whose own options or script language run another program or write a file
(a part of `._hidden`): what a prefix allow rule such as ``Bash(sort:*)`` must not admit.

`program_runs` says why a line runs a program of its own naming (hidden code: no rule allows
it, deny and ask rules ask); `program_writes` gives the files its options write, judged as a
``Write`` would be (an edit allow rule must reach them, an edit deny rule denies); `CHECKED`
names the programs whose options are read so (``xargs`` may not append options to them).
``sed`` and ``awk`` are read in `._sed` and `._awk`.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Sequence

from ._awk import read_awk
from ._options import Spec, read_permuted
from ._sed import read_sed
from ._tar import tar_writes
from ._wrappers import DYNAMIC
from ._writes import option_words, option_writes

__all__ = [
    "CHECKED",
    "program_runs",
    "program_writes",
    "script_tokens",
]

_AWKS = frozenset({"awk", "gawk", "mawk", "nawk", "original-awk", "busybox-awk"})
_SEDS = frozenset({"sed", "gsed"})
_SSH = frozenset({"ssh", "scp", "sftp"})
_QUIET = frozenset({"-", "/dev/null", "/dev/stdout", "/dev/stderr"})

_SORT = Spec(
    frozenset("bcCdfghiMmnRrsuVz"),
    frozenset("kotST"),
    frozenset(),
    {
        "ignore-leading-blanks": ("-b", False), "check": ("-c", None),
        "dictionary-order": ("-d", False), "ignore-case": ("-f", False),
        "general-numeric-sort": ("-g", False), "human-numeric-sort": ("-h", False),
        "ignore-nonprinting": ("-i", False), "key": ("-k", True), "merge": ("-m", False),
        "month-sort": ("-M", False), "numeric-sort": ("-n", False), "output": ("-o", True),
        "random-sort": ("-R", False), "random-source": ("--random-source", True),
        "reverse": ("-r", False), "sort": ("--sort", True), "stable": ("-s", False),
        "buffer-size": ("-S", True), "field-separator": ("-t", True),
        "temporary-directory": ("-T", True), "unique": ("-u", False),
        "version-sort": ("-V", False), "zero-terminated": ("-z", False),
        "compress-program": ("--compress-program", True), "debug": ("--debug", False),
        "files0-from": ("--files0-from", True), "parallel": ("--parallel", True),
        "batch-size": ("--batch-size", True), "help": ("--help", False),
        "version": ("--version", False),
    },
)  # fmt: skip
"""GNU coreutils ``sort``."""

# long options (any abbreviation) that run a program named by their value
_RUNS_LONG = {
    "rg": ("--pre", "--hostname-bin"),
    "man": ("--pager", "--html"),
    "zip": ("--unzip-command",),
    "rsync": ("--rsh", "--rsync-path"),
    "fd": ("--exec", "--exec-batch"),
    "fdfind": ("--exec", "--exec-batch"),
    "split": ("--filter",),
}
# short options (alone or in a cluster, up to the first that takes a value) that run one,
# and the short options that take a value; zip's is the two letters -TT
_RUNS_SHORT = {
    "man": ("PH", "CMPSsmLeprREHX"),
    "rsync": ("e", "eBfTM"),
    "scp": ("FS", "cDFiJloPS"),
    "sftp": ("FS", "BbcDFiJloPRS"),
    "ssh": ("F", "BbcDEeFIiJLlmOopQRSWw"),
    "fd": ("xX", "etEdjScxXo"),
    "fdfind": ("xX", "etEdjScxXo"),
}
_SSH_VALUES = frozenset("BbcDEeFIiJLlmOoPpQRSWw")
_SSH_KEYS = frozenset(
    {"proxycommand", "localcommand", "permitlocalcommand", "knownhostscommand", "match",
     "pkcs11provider", "securitykeyprovider", "include"}
)  # fmt: skip
# curl's and wget's options that write a file (value: the file; None: a name only known at
# run time, or options read from elsewhere that may name one)
_CURL_LONG = {
    "--output": True, "--dump-header": True, "--cookie-jar": True, "--trace": True,
    "--trace-ascii": True, "--stderr": True, "--libcurl": True, "--etag-save": True,
    "--hsts": True, "--alt-svc": True, "--output-dir": None, "--config": None,
    "--remote-name": None, "--remote-name-all": None,
}  # fmt: skip
_CURL_SHORT = {"o": True, "D": True, "c": True, "K": None, "O": None}
_CURL_VALUES = frozenset("AbcCdDeEFHKmoPQrTuUwxXyYz")
_WGET_LONG = {
    "--output-document": True, "--output-file": True, "--append-output": True,
    "--save-cookies": True, "--warc-file": True, "--execute": None, "--config": None,
    "--directory-prefix": None,
}  # fmt: skip
_WGET_SHORT = {"O": True, "o": True, "a": True, "e": None, "P": None}
_WGET_VALUES = frozenset("aAeDiIloOPQtTUwXR")
# each program's options that name a file it writes: (long ones, short ones, the short ones
# that take a value, which end a cluster)
_Table = tuple[dict[str, bool | None], dict[str, bool | None], frozenset[str]]
_OUTPUTS: dict[str, _Table] = {
    "curl": (_CURL_LONG, _CURL_SHORT, _CURL_VALUES),
    "wget": (_WGET_LONG, _WGET_SHORT, _WGET_VALUES),
    "ssh": ({}, {"E": True}, _SSH_VALUES),  # its log, appended
    "less": ({"--log-file": True, "--LOG-FILE": True}, {"o": True, "O": True}, frozenset("bhjkoOpPtTxyz#")),
    "tree": ({}, {"o": True}, frozenset("LPIoHT")),
    "shuf": ({"--output": True}, {"o": True}, frozenset("ino")),
    "iconv": ({"--output": True}, {"o": True}, frozenset("fto")),
    "sdiff": ({"--output": True}, {"o": True}, frozenset("owI")),
    "xmllint": ({"--output": True}, {}, frozenset()),
    "csplit": ({"--prefix": True}, {"f": True}, frozenset("bfn")),  # PREFIX00, PREFIX01...
    "file": ({"--compile": None}, {"C": None}, frozenset("efFmP")),  # each magic file's .mgc
}  # fmt: skip
# the options that take a value, for the programs that write their second operand
_SECOND = {
    "split": (
        "-a",
        "-b",
        "-C",
        "-l",
        "-n",
        "-t",
        "--suffix-length",
        "--additional-suffix",
        "--bytes",
        "--line-bytes",
        "--lines",
        "--number",
        "--separator",
        "--filter",
    ),
    "uniq": ("-f", "-s", "-w", "--skip-fields", "--skip-chars", "--check-chars"),
    "xxd": ("-c", "-g", "-l", "-o", "-s", "-n", "-cols", "-groupsize", "-len", "-seek", "-name"),
}

CHECKED = (
    _AWKS
    | _SEDS
    | _SSH
    | {"sort", "rg", "tee", "dd", "perl", "man", "zip", "rsync", "yq", "fd", "fdfind",
       "sqlite3", "tar"}
    | set(_OUTPUTS) | set(_SECOND)
)  # fmt: skip
"""Programs whose options the rules read for what they run or write."""


def program_runs(words: Sequence[str]) -> str | None:
    """Why the line *words* runs a program of its own naming (``None``: it runs none)."""
    head = posixpath.basename(words[0]) if words else ""
    if head in _SEDS:
        return read_sed(tuple(words)).why
    if head in _AWKS:
        return read_awk(tuple(words)).why
    if head == "sort":
        read = read_permuted(words, 1, _SORT)
        if read is None:
            return "sort with options the rules cannot read"
        if any(name == "--compress-program" for name, _ in read[0]):
            return "sort --compress-program, which runs a program it is given"
        return None
    if head == "sqlite3":
        return _sqlite_runs(words)
    for option in _RUNS_LONG.get(head, ()):
        for word in option_words(words):
            name = word.split("=", 1)[0]
            if word.startswith("--") and len(name) > 3 and option.startswith(name):
                return f"{head} {option}, which runs a program it is given"
    short, values = _RUNS_SHORT.get(head, ("", ""))
    for word in option_words(words):
        if head == "zip" and word.startswith("-TT"):
            return "zip -TT, which runs a program it is given"
        if head in _SSH and (why := _ssh_option(head, word, words)) is not None:
            return why
        for letter in word[1:] if word[1:2] != "-" else "":
            if letter in short:
                return f"{head} -{letter}, which runs a program it is given"
            if letter in values:
                break
    return None


_SQLITE_CODE = re.compile(
    r"(?im)^\s*\.|\b(?:attach|vacuum|load_extension|writefile|edit|readfile)\b"
)  # a dot-command (.shell, .system, .output, .once, .load, .read ...), a file written or read


_SQLITE_VALUES = frozenset(
    {"separator", "nullvalue", "newline", "vfs", "mmap", "lookaside", "maxsize", "pagecache",
     "heap", "escape"}
)  # fmt: skip


def _sqlite_runs(words: Sequence[str]) -> str | None:
    """Why ``sqlite3 [OPTIONS] DB [SQL...]`` may run a program or write a file: a dot-command
    or a file function in its SQL, commands from ``-init``/``-cmd`` or from stdin (no SQL on
    the line); ``-safe`` turns them all off."""
    if "-safe" in words or "--safe" in words:
        return None
    operands: list[str] = []
    i = 1
    while i < len(words):
        name = words[i].lstrip("-") if words[i].startswith("-") else None
        if name in ("init", "cmd", "A"):
            return "sqlite3 -init or -cmd, which run commands (.shell, .system) of their own"
        if name is None:
            operands.append(words[i])
        i += 2 if name in _SQLITE_VALUES else 1
    if len(operands) < 2:
        return "sqlite3 reading its commands from stdin, where .shell or .system may run one"
    if any(_SQLITE_CODE.search(sql) for sql in operands[1:]):
        return "an sqlite3 dot-command or file function, which may run a program or write a file"
    return None


def _ssh_option(head: str, word: str, words: Sequence[str]) -> str | None:
    """Why ssh's (scp's, sftp's) option *word* runs a program: ``-o ProxyCommand=...`` and
    the other configuration keys that name a command or a file of configuration."""
    if word[1:2] == "-":
        return None
    at = next((k for k, c in enumerate(word[1:], 1) if c in _SSH_VALUES), None)
    if at is None or word[at] != "o":
        return None
    value = word[at + 1 :]
    if not value:
        index = list(words).index(word)
        value = words[index + 1] if index + 1 < len(words) else ""
    key = value.replace("=", " ").split(" ", 1)[0].strip().lower()
    if key in _SSH_KEYS or value == DYNAMIC:
        return f"{head} -o {key}, which runs a program or reads configuration"
    return None


def program_writes(words: Sequence[str]) -> list[tuple[str, str]]:
    """The files the line *words* writes through its options or script: (option, path) pairs,
    the path `DYNAMIC` when it is only known at run time."""
    head = posixpath.basename(words[0]) if words else ""
    out: list[tuple[str, str]] = []
    if head in _SEDS:
        out = list(read_sed(tuple(words)).writes)
    elif head in _AWKS:
        out = list(read_awk(tuple(words)).writes)
    elif head == "sort":
        read = read_permuted(words, 1, _SORT)
        out = [("sort -o", value or "") for name, value in (read or ((), ()))[0] if name == "-o"]
    elif head == "tee":
        out = [("tee", word) for word in _operands(words)]
    elif head in _SECOND:  # uniq [OPTION]... [INPUT [OUTPUT]], xxd likewise
        out = _second_operand(head, words)
    elif head == "yq":  # -i/--inplace: the files it names
        inplace = any(w in ("-i", "--inplace") or w.startswith("--inplace=") for w in words)
        files = _operands(words)
        out = [("yq -i", word) for word in files[len(files) > 1 :]] if inplace else []
    elif head == "dd":
        out = [("dd of=", word[3:]) for word in words[1:] if word.startswith("of=")]
    elif head == "perl":
        out = _perl_in_place(words)
    elif head == "tar":
        out = tar_writes(words)
    elif head in _OUTPUTS:
        out = option_writes(head, words, *_OUTPUTS[head])
    return [(option, path) for option, path in out if path not in _QUIET]


def _second_operand(head: str, words: Sequence[str]) -> list[tuple[str, str]]:
    """``uniq [OPTION]... [INPUT [OUTPUT]]`` (``xxd`` likewise): the second operand is written
    over (an option named in `_SECOND` takes the next word, any abbreviation of a long one)."""
    valued = _SECOND[head]
    operands: list[str] = []
    i = 1
    while i < len(words):
        word = words[i]
        if word == "--":
            operands += words[i + 1 :]
            break
        if word in valued or (
            word.startswith("--") and "=" not in word and len(word) > 3
            and any(o.startswith(word) for o in valued)
        ):  # fmt: skip
            i += 2
            continue
        if not word.startswith("-") or word == "-":
            operands.append(word)
        i += 1
    return [(head, path) for path in operands[1:]]


def _operands(words: Sequence[str]) -> list[str]:
    out: list[str] = []
    for k, word in enumerate(words[1:], 1):
        if word == "--":
            return [*out, *words[k + 1 :]]
        if not word.startswith("-") or word == "-":
            out.append(word)
    return out


def _perl_in_place(words: Sequence[str]) -> list[tuple[str, str]]:
    """``perl -i`` (``-pi``, ``-i.bak``, ``-pi -e ...``): every file it reads, written over."""
    in_place = code = False
    i = 1
    while i < len(words) and words[i].startswith("-") and words[i] not in ("-", "--"):
        word = words[i]
        at = 1
        while at < len(word):
            letter = word[at]
            at += 1
            if letter in "eE":
                code = True
                i += 0 if word[at:] else 1
                break
            if letter == "i":
                in_place = True
                break
            if letter in "0l":  # optional octal digits (-0xHEX), then more switches (-0pi)
                digits = "01234567"
                if letter == "0" and word[at : at + 1] in ("x", "X"):
                    at, digits = at + 1, "0123456789abcdefABCDEF"
                while at < len(word) and word[at] in digits:
                    at += 1
            elif letter in "IMmxCdDF":
                i += 0 if word[at:] or letter not in "IM" else 1
                break
        i += 1
    if not in_place:
        return []
    i += 1 if i < len(words) and words[i] == "--" else 0
    files = list(words[i:] if code else words[i + 1 :])
    return [("perl -i", path) for path in files] or [("perl -i", DYNAMIC)]


_NAME_CHARACTERS = re.compile(r"[A-Za-z0-9_.+/-]+")


@functools.lru_cache(maxsize=1024)
def script_tokens(word: str) -> tuple[tuple[str, ...], dict[str, tuple[int, ...]]]:
    """The words a word may hold as a script another program runs (``awk`` ``system("rm
    v")``, ``perl -e``, ``python -c`` ``os.system('rm v')``, ``sed '1e rm v'``): the runs of
    characters a program name, a path or an option may hold; and where each program name
    (a token with any path cut off) stands among them."""
    tokens = tuple(_NAME_CHARACTERS.findall(word))
    where: dict[str, list[int]] = {}
    for k, token in enumerate(tokens):
        where.setdefault(posixpath.basename(token), []).append(k)
    return tokens, {name: tuple(at) for name, at in where.items()}
