"""A program's own options or script language that write files or run other programs.

A prefix allow rule (``Bash(sed -n:*)``, ``Bash(sort:*)``) admits a program for what it is
usually asked to do; its options (``sed -i``, ``sort -o``, ``rg --pre``) and its script
language (sed's ``e`` and ``w``, awk's ``system()``, pipes and ``>``) can write any file or run
any program. Such a line is never allowed by the prefix rule: the reason names the option or
construct. A deny or ask rule on a program sees it inside such a script (an ask where the
script is only read conservatively). Plain uses stay allowed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh_plugins_builtin._rules._rules import RuleSet, Verdict
from tests.dsh_plugins_builtin.test_verdict_rows import ruleset


def verdict(rules: RuleSet, line: str) -> Verdict:
    return rules.decide("bash", None, {"command": line})


URL = "https://example.com/x"

# (the prefix allow rule, the line, what the reason must name)
OWN_OPTIONS = [
    # sed: in place, any spelling (a cluster, a suffix, a long option abbreviated, after files)
    ("Bash(sed -n:*)", "sed -n -i -e 's/x/y/' dsh.toml", "sed -i dsh.toml writes"),
    ("Bash(sed:*)", "sed -ni 's/x/y/' f", "sed -i f writes"),
    ("Bash(sed:*)", "sed -i.bak 's/x/y/' f", "sed -i f writes"),
    ("Bash(sed:*)", "sed -Ei.bak 's/x/y/' f", "sed -i f writes"),
    ("Bash(sed:*)", "sed --in-place=.b 's/x/y/' f", "sed -i f writes"),
    ("Bash(sed:*)", "sed --in 's/x/y/' f", "sed -i f writes"),
    ("Bash(sed:*)", "sed 's/x/y/' f -i", "sed -i f writes"),
    ("Bash(sed:*)", "sed -s -i -- 's/x/y/' f", "sed -i f writes"),
    # sed: scripts that write (w, W, s///w), from -e, --expression= or the first operand
    ("Bash(sed -n:*)", "sed -n 'w .git/config' f", "sed w .git/config writes"),
    ("Bash(sed -n:*)", "sed -n '1,3W out' f", "sed W out writes"),
    ("Bash(sed:*)", "sed 's/a/b/w out' f", "sed s///w out writes"),
    ("Bash(sed:*)", "sed 's|a|b|gw out' f", "sed s///w out writes"),
    ("Bash(sed:*)", "sed -e p -e '$w out' f", "sed w out writes"),
    ("Bash(sed:*)", "sed --expression='/x/,/y/w out' f", "sed w out writes"),
    ("Bash(sed:*)", "sed -n '/[/]/w out' f", "sed w out writes"),
    # sed: scripts that run a command (e, s///e) or come from a file
    ("Bash(sed:*)", "sed '1e touch x' f", "sed's e command"),
    ("Bash(sed:*)", "sed -n 1etouch f", "sed's e command"),
    ("Bash(sed:*)", "sed 's/.*/date/e' f", "sed's e command or s///e flag"),
    ("Bash(sed:*)", "sed -n '/x/I,+3{s|a|b|ge;p}' f", "s///e flag"),
    ("Bash(sed:*)", "sed 'a text;\nx;e' f", "sed's e command"),
    # sed: labels and versions end at a blank, a number may run into the next command
    ("Bash(sed:*)", "sed ':a{ s/a/b/e' f", "s///e flag"),
    ("Bash(sed -n:*)", "sed -n 'Tl 3W out' f", "sed W out writes"),
    ("Bash(sed:*)", "sed 'v 4.2l 3e' f", "sed's e command"),
    ("Bash(sed:*)", "sed 'v 4.2=i\\\n e' f", "sed's e command"),
    ("Bash(sed:*)", "sed 'Q 2s e x e' f", "s///e flag"),
    ("Bash(sed:*)", "sed -f script.sed f", "sed -f"),
    ("Bash(sed:*)", "sed --file=script.sed f", "sed -f"),
    ("Bash(sed:*)", "sed -nf script.sed f", "sed -f"),
    ("Bash(gsed:*)", "gsed -i s/a/b/ f", "sed -i f writes"),
    # awk: system(), pipes both ways, >/>> in print, program files, gawk's -i/-l/@include
    ("Bash(awk:*)", "awk 'BEGIN{system(\"touch x\")}'", "awk's system()"),
    ("Bash(awk:*)", "awk -F: '{ system ($1) }' f", "awk's system()"),
    ("Bash(awk:*)", "awk '{print | \"sh\"}' f", "a pipe in an awk program"),
    ("Bash(awk:*)", "awk 'BEGIN{\"date\" | getline d}'", "a pipe in an awk program"),
    ("Bash(nawk:*)", "nawk 'BEGIN { print |& \"cmd\" }'", "a pipe in an awk program"),
    ("Bash(gawk:*)", "gawk -e 'BEGIN{system(\"x\")}'", "awk's system()"),
    ("Bash(gawk:*)", "gawk --source='BEGIN{system(\"x\")}'", "awk's system()"),
    ("Bash(awk:*)", "awk '{print > \"dsh.toml\"}' f", "awk > dsh.toml writes"),
    ("Bash(awk:*)", "awk '{printf $0 >> \"out\"}' f", "awk >> out writes"),
    ("Bash(awk:*)", "awk '{print > $1}' f", "awk > writes a file only known at run time"),
    ("Bash(awk:*)", "awk -f prog.awk f", "awk -f"),
    ("Bash(awk:*)", "awk --file=prog.awk f", "awk --file"),
    ("Bash(gawk:*)", "gawk -i inplace '{print}' f", "awk -i"),
    ("Bash(gawk:*)", "gawk --include=inplace '{print}' f", "awk --include"),
    ("Bash(gawk:*)", "gawk -l ./ext.so 'BEGIN{}'", "awk -l"),
    ("Bash(gawk:*)", "gawk --load=./ext.so 'BEGIN{}'", "awk --load"),
    ("Bash(gawk:*)", "gawk '@include \"x.awk\"' f", "@include"),
    ("Bash(mawk:*)", "mawk -W exec prog f", "awk -W"),
    # sort: -o (alone, glued, in a cluster, abbreviated, after files), --compress-program
    ("Bash(sort:*)", "sort -o dsh.toml f", "sort -o dsh.toml writes"),
    ("Bash(sort:*)", "sort -odsh.toml f", "sort -o dsh.toml writes"),
    ("Bash(sort:*)", "sort -ro dsh.toml f", "sort -o dsh.toml writes"),
    ("Bash(sort:*)", "sort --output=dsh.toml f", "sort -o dsh.toml writes"),
    ("Bash(sort:*)", "sort --ou dsh.toml f", "sort -o dsh.toml writes"),
    ("Bash(sort:*)", "sort f -o dsh.toml", "sort -o dsh.toml writes"),
    ("Bash(sort:*)", "sort --compress-program ./x f", "sort --compress-program"),
    ("Bash(sort:*)", "sort --compress-program=./x f", "sort --compress-program"),
    ("Bash(sort:*)", "sort --comp=./x f", "sort --compress-program"),
    ("Bash(sort:*)", "sort -S 1M --compr ./x -T . f", "sort --compress-program"),
    # rg --pre (and --hostname-bin): a program run on each file
    ("Bash(rg:*)", "rg --pre ./evil.sh x", "rg --pre"),
    ("Bash(rg:*)", "rg --pre=./evil.sh x", "rg --pre"),
    ("Bash(rg:*)", "rg -i --pre-glob '*.gz' --pre ./e x", "rg --pre"),
    ("Bash(rg:*)", "rg --hostname-bin=./x --hyperlink-format=default x", "rg --hostname-bin"),
    # git: configured external diff drivers and text conversion filters
    ("Bash(git diff:*)", "git diff --ext-diff", "git diff --ext-diff"),
    ("Bash(git diff:*)", "git diff --ext HEAD", "git diff --ext-diff"),
    ("Bash(git diff:*)", "git diff --textconv", "git diff --textconv"),
    ("Bash(git log:*)", "git log -p --ext-diff", "git log --ext-diff"),
    ("Bash(git show:*)", "git show --textconv HEAD", "git show --textconv"),
    ("Bash(git grep:*)", "git grep --textconv x", "git grep --textconv"),
    ("Bash(git blame:*)", "git blame --textconv f", "git blame --textconv"),
    ("Bash(git cat-file:*)", "git cat-file --filters HEAD:f", "git cat-file --filters"),
    # other programs that write their file operands or an option's file
    ("Bash(tee:*)", "tee dsh.toml", "tee dsh.toml writes"),
    ("Bash(tee:*)", "tee -a x y", "tee x writes"),
    ("Bash(tee:*)", "tee -- -x", "tee -x writes"),
    ("Bash(dd:*)", "dd if=f of=dsh.toml", "dd of= dsh.toml writes"),
    ("Bash(uniq:*)", "uniq f dsh.toml", "uniq dsh.toml writes"),
    ("Bash(uniq:*)", "uniq -c -f 1 --skip-chars 2 f dsh.toml", "uniq dsh.toml writes"),
    ("Bash(less:*)", "less -o dsh.toml f", "less -o dsh.toml writes"),
    ("Bash(less:*)", "less --log-file=dsh.toml f", "less --log-file dsh.toml writes"),
    ("Bash(less:*)", "less -Odsh.toml f", "less -O dsh.toml writes"),
    ("Bash(perl:*)", "perl -pi -e 's/x/y/' dsh.toml", "perl -i dsh.toml writes"),
    ("Bash(perl:*)", "perl -i.bak -pe 's/x/y/' f", "perl -i f writes"),
    ("Bash(perl:*)", "perl -p -i -e 's/a/b/' f", "perl -i f writes"),
    ("Bash(perl:*)", "perl -0pi -e 's/a/b/' f", "perl -i f writes"),
    ("Bash(perl:*)", "perl -Ilib -l012pi -e 's/a/b/' f", "perl -i f writes"),
    ("Bash(curl:*)", f"curl -o dsh.toml {URL}", "curl -o dsh.toml writes"),
    ("Bash(curl:*)", f"curl -sSo dsh.toml {URL}", "curl -o dsh.toml writes"),
    ("Bash(curl:*)", f"curl -odsh.toml {URL}", "curl -o dsh.toml writes"),
    ("Bash(curl:*)", f"curl --output=dsh.toml {URL}", "curl --output dsh.toml writes"),
    ("Bash(curl:*)", f"curl -O {URL}", "curl -O writes a file only known at run time"),
    ("Bash(curl:*)", f"curl -K cfg {URL}", "curl -K writes a file only known at run time"),
    ("Bash(curl:*)", f"curl --cookie-jar c {URL}", "curl --cookie-jar c writes"),
    ("Bash(wget:*)", f"wget -O dsh.toml {URL}", "wget -O dsh.toml writes"),
    ("Bash(wget:*)", f"wget -qO dsh.toml {URL}", "wget -O dsh.toml writes"),
    ("Bash(wget:*)", f"wget --output-doc=dsh.toml {URL}", "wget --output-document"),
    ("Bash(wget:*)", f"wget -e output_document=x {URL}", "wget -e writes a file only known"),
    # other programs that run a program named on the line
    ("Bash(man:*)", "man -P 'touch x' ls", "man -P"),
    ("Bash(man:*)", "man --pager=x ls", "man --pager"),
    ("Bash(man:*)", "man -H ls", "man -H"),
    ("Bash(zip:*)", "zip -T -TT 'touch x' a.zip f", "zip -TT"),
    ("Bash(zip:*)", "zip --unzip-command='touch x' -T a.zip f", "zip --unzip-command"),
    ("Bash(ssh:*)", "ssh -o ProxyCommand='touch x' h", "ssh -o proxycommand"),
    ("Bash(ssh:*)", "ssh -oLocalCommand=x -o PermitLocalCommand=yes h", "ssh -o localcommand"),
    ("Bash(ssh:*)", "ssh -F cfg h", "ssh -F"),
    ("Bash(ssh:*)", "ssh -vE dsh.toml h", "ssh -E dsh.toml writes where"),
    ("Bash(busybox:*)", "busybox sed -i s/a/b/ f", "sed -i f writes"),
    ("Bash(scp:*)", "scp -S ./prog a h:b", "scp -S"),
    ("Bash(rsync:*)", "rsync -e ./x a h:b", "rsync -e"),
    ("Bash(rsync:*)", "rsync -avze ./x a h:b", "rsync -e"),
    ("Bash(rsync:*)", "rsync --rsh=./x a h:b", "rsync --rsh"),
    ("Bash(rsync:*)", "rsync --rsync-path='touch x' a h:b", "rsync --rsync-path"),
    # more programs that write an output file named by an option or an operand
    ("Bash(tree:*)", "tree -a -o dsh.toml", "tree -o dsh.toml writes"),
    ("Bash(shuf:*)", "shuf --output=dsh.toml f", "shuf --output dsh.toml writes"),
    ("Bash(shuf:*)", "shuf -n1 -odsh.toml f", "shuf -o dsh.toml writes"),
    ("Bash(iconv:*)", "iconv -f latin1 -t utf8 -o dsh.toml f", "iconv -o dsh.toml writes"),
    ("Bash(xxd:*)", "xxd -c 8 f dsh.toml", "xxd dsh.toml writes"),
    ("Bash(xxd:*)", "xxd -r f dsh.toml", "xxd dsh.toml writes"),
    ("Bash(yq:*)", "yq -i '.a = 1' dsh.toml", "yq -i dsh.toml writes"),
    ("Bash(sdiff:*)", "sdiff -o dsh.toml a b", "sdiff -o dsh.toml writes"),
    ("Bash(xmllint:*)", "xmllint --format --output dsh.toml f", "xmllint --output dsh.toml"),
    # and that run one: fd -x/-X, sqlite3's dot-commands and file functions
    ("Bash(fd:*)", "fd -e py -x touch", "fd -x"),
    ("Bash(fd:*)", "fd --exec-batch=touch", "fd --exec"),
    ("Bash(fdfind:*)", "fdfind -HX touch", "fdfind -X"),
    ("Bash(sqlite3:*)", "sqlite3 db '.shell touch x'", "sqlite3 dot-command"),
    ("Bash(sqlite3:*)", "sqlite3 db 'select 1;' '.system touch x'", "sqlite3 dot-command"),
    ("Bash(sqlite3:*)", "sqlite3 db \"select writefile('dsh.toml', 'x')\"", "file function"),
    ("Bash(sqlite3:*)", "sqlite3 db \"ATTACH 'dsh.toml' AS x\"", "file function"),
    ("Bash(sqlite3:*)", "sqlite3 -cmd '.shell touch x' db 'select 1'", "sqlite3 -init or -cmd"),
    ("Bash(sqlite3:*)", "sqlite3 -separator , db", "from stdin"),
    # tar's side files, split's and csplit's prefixes, file's compiled magic (second review)
    ("Bash(tar -tf:*)", "tar -tf x.tar --index-file=/elsewhere/dsh.toml", "tar --index-file"),
    ("Bash(tar -tf:*)", "tar -tf x.tar --index-f=o", "tar --index-file o writes"),
    ("Bash(tar:*)", "tar -tf x.tar --volno-file vol", "tar --volno-file vol writes"),
    ("Bash(tar:*)", "tar -cg /elsewhere/snap -f a.tar d", "tar -g /elsewhere/snap"),
    ("Bash(tar:*)", "tar cgf /elsewhere/snap o.tar src", "tar -g /elsewhere/snap"),  # old style
    ("Bash(tar:*)", "tar -cf /elsewhere/dsh.toml src", "tar -f (the archive) /elsewhere/dsh.toml"),
    ("Bash(tar:*)", "tar --create --file=/elsewhere/a.tar src", "tar --file"),
    ("Bash(tar:*)", "tar rf /elsewhere/a.tar x", "tar -f (the archive) /elsewhere/a.tar"),
    ("Bash(tar:*)", "tar -xf a.tar", "tar -x (the files its archive names)"),
    ("Bash(tar:*)", "tar xzf a.tar -C /elsewhere", "tar -x"),
    ("Bash(split:*)", "split -b1 a /elsewhere/pre", "split /elsewhere/pre"),
    ("Bash(split:*)", "split --filter='touch x' a", "split --filter"),
    ("Bash(csplit:*)", "csplit -f /elsewhere/p a 1", "csplit -f /elsewhere/p"),
    ("Bash(file:*)", "file -C -m /elsewhere/magic", "file -C"),
    # behind a wrapper, and under find -exec (each file found is written)
    ("Bash(sed:*)", "timeout 5 sed -i s/a/b/ f", "sed -i f writes"),
    ("Bash(sed:*)", "find . -name f -exec sed -i s/a/b/ {} +", "sed -i writes a file only"),
]


@pytest.mark.parametrize(("allow", "line", "why"), OWN_OPTIONS)
def test_an_option_or_script_that_writes_or_runs_is_not_allowed_by_a_prefix_rule(
    tmp_path: Path, allow: str, line: str, why: str
) -> None:
    wrappers = ["Bash(timeout:*)", "Bash(find:*)"]
    found = verdict(ruleset(tmp_path, allow=[allow, *wrappers]), line)
    assert found.effect == "ask", found
    assert why in (found.note or ""), found.note
    assert "so allow rules do not apply" in (found.note or "")


@pytest.mark.parametrize(
    ("allow", "line"),
    [
        ("Bash(xargs:*)", "xargs sed -n p"),  # stdin may add -i FILE
        ("Bash(xargs:*)", "xargs sort"),  # -o FILE, --compress-program=PROG
        ("Bash(xargs:*)", "xargs rg foo"),  # --pre=PROG
        ("Bash(xargs:*)", "xargs awk '{print}'"),
        ("Bash(xargs:*)", "xargs tee"),
    ],
)
def test_xargs_may_not_append_options_to_a_program_whose_options_are_read(
    tmp_path: Path, allow: str, line: str
) -> None:
    rules = ruleset(tmp_path, allow=[allow, "Bash(sed:*)", "Bash(sort:*)", "Bash(rg:*)",
                                     "Bash(awk:*)", "Bash(tee:*)"])  # fmt: skip
    assert verdict(rules, line).effect == "ask"


SAFE = [
    ("Bash(sed -n:*)", "sed -n 1,5p f"),
    ("Bash(sed:*)", "sed 's/a/b/g' f"),
    ("Bash(sed:*)", "sed -E 's/(a|b)/c/' f"),
    ("Bash(sed:*)", "sed ':a;N;$!ba;s/\\n/ /g' f"),
    ("Bash(sed -n:*)", "sed -n 's/hello world/ewe/p' f"),  # e and w in text, p as flag
    ("Bash(sed -n:*)", "sed -n '/[/]e/p' f"),
    ("Bash(sed:*)", "sed 'y/ew/we/' f"),
    ("Bash(sed -n:*)", "sed -n '$=' f"),
    ("Bash(sed:*)", "sed '1r header' f"),  # r reads a file
    ("Bash(sed:*)", "sed 'a\\\nwhen e' f"),  # text, not commands
    ("Bash(sed -n:*)", "sed -n 'l 5;p' f"),
    ("Bash(sed:*)", "sed -n 's/a/b/w /dev/stdout' f"),
    ("Bash(sed:*)", "sed --sandbox -n '1e touch x' f"),  # sed refuses e, r and w
    ("Bash(awk:*)", "awk '{print $1}' f"),
    ("Bash(awk:*)", "awk -F: '$3 > 100 {print $1}' f"),
    ("Bash(awk:*)", "awk '/a|b/ {n++} END {print n}' f"),
    ("Bash(awk:*)", "awk 'BEGIN{x = 4 / 2; print x}'"),
    ("Bash(awk:*)", "awk '{print ($1 > 5)}' f"),
    ("Bash(awk:*)", 'awk \'{print "oops" > "/dev/stderr"}\' f'),
    ("Bash(awk:*)", "awk 'NR==1 || NR==2' f"),
    ("Bash(awk:*)", "awk -v n=1 '{print $n}' f"),
    ("Bash(awk:*)", "awk '{ s = \"system(x) | y\" } # system(z) | w\n{ print s }' f"),
    ("Bash(sort:*)", "sort f"),
    ("Bash(sort:*)", "sort -k2,2 -t: -rn f"),
    ("Bash(sort:*)", "sort -u -T . f"),
    ("Bash(rg:*)", "rg foo"),
    ("Bash(rg:*)", "rg -z --no-pre foo"),
    ("Bash(git diff:*)", "git diff"),
    ("Bash(git diff:*)", "git diff --stat --no-ext-diff"),
    ("Bash(git diff:*)", "git diff --text"),
    ("Bash(git log:*)", "git log -p --no-textconv"),
    ("Bash(tee:*)", "tee"),
    ("Bash(tee:*)", "tee /dev/null"),
    ("Bash(dd:*)", "dd if=f of=/dev/null bs=1M"),
    ("Bash(uniq:*)", "uniq -c -f 1 f"),
    ("Bash(less:*)", "less -R f"),
    ("Bash(perl:*)", "perl -ne 'print if /x/' f"),
    ("Bash(curl:*)", f"curl -sS {URL}"),
    ("Bash(curl:*)", f"curl -o /dev/null -s --cookie a=b {URL}"),
    ("Bash(wget:*)", f"wget -qO- {URL}"),
    ("Bash(man:*)", "man ls"),
    ("Bash(ssh:*)", "ssh -o ConnectTimeout=5 h true"),
    ("Bash(ssh:*)", "ssh -oForwardAgent=yes -p 22 h true"),  # no -F in -o's value
    ("Bash(man:*)", "man -S 1:8 -k printf"),
    ("Bash(rsync:*)", "rsync -av a h:b"),
    ("Bash(tree:*)", "tree -L 2 -I node_modules"),
    ("Bash(shuf:*)", "shuf -n 3 f"),
    ("Bash(iconv:*)", "iconv -f latin1 -t utf8 f"),
    ("Bash(xxd:*)", "xxd -l 64 f"),
    ("Bash(yq:*)", "yq '.a' f.yaml"),
    ("Bash(fd:*)", "fd -e py -t f src"),
    ("Bash(sqlite3:*)", "sqlite3 -readonly db 'select name from sqlite_master;'"),
    ("Bash(sqlite3:*)", "sqlite3 -safe db"),
    ("Bash(tar -tf:*)", "tar -tf x.tar"),
    ("Bash(file:*)", "file -b f"),
]


@pytest.mark.parametrize(("allow", "line"), SAFE)
def test_plain_uses_stay_allowed(tmp_path: Path, allow: str, line: str) -> None:
    found = verdict(ruleset(tmp_path, allow=[allow]), line)
    assert found.effect == "allow", found


def test_git_is_not_allowed_on_a_line_that_writes_a_file(tmp_path: Path) -> None:
    """``uniq`` and ``less`` write no file unless told to: then git would read what they
    wrote (a nested repository's ``HEAD``), as after ``tee``."""
    (tmp_path / "src").mkdir()
    rules = ruleset(
        tmp_path, allow=["Bash(uniq:*)", "Bash(less:*)", "Bash(git status:*)", "Edit(./**)"]
    )
    assert verdict(rules, "uniq f src/out").effect == "allow"  # the write alone: an edit rule
    assert verdict(rules, "uniq f; git status").effect == "allow"
    for line in ("uniq f src/HEAD; git status", "less -o src/HEAD f; git status"):
        found = verdict(rules, line)
        assert found.effect == "ask", line
        assert "may write the repository it reads" in (found.note or "")


def test_a_write_is_judged_as_a_write_would_be(tmp_path: Path) -> None:
    """An edit allow rule reaching the file admits it; an edit deny rule denies it."""
    rules = ruleset(tmp_path, allow=["Bash(sed:*)", "Bash(sort:*)", "Edit(./src/**)"])
    assert verdict(rules, "sed -i s/a/b/ src/f").effect == "allow"
    assert verdict(rules, "sort -o src/out f").effect == "allow"
    assert verdict(rules, "sed -i s/a/b/ src/f dsh.toml").effect == "ask"
    denied = ruleset(tmp_path, allow=["Bash"], deny=["Edit(./dsh.toml)"])
    found = verdict(denied, "sed -ni 's/x/y/' dsh.toml")
    assert (found.effect, found.rule and found.rule.text) == ("deny", "Edit(./dsh.toml)")
    found = verdict(denied, "awk '{print > $1}' f")  # any file: as an ask
    assert (found.effect, found.note) == ("ask", "awk > writes a file only known at run time")


# (the line, the deny rule it must meet)
IN_SCRIPTS = [
    ("sed -n '1e rm -rf x' f", "Bash(rm:*)"),
    ("sed -n 1ecurl f", "Bash(curl:*)"),
    ("sed -n $'1e rm x' f", "Bash(rm:*)"),
    ("sed -e p -e '1e curl x' f", "Bash(curl:*)"),
    ("sed --expression='$e rm x' f", "Bash(rm:*)"),
    ("sed -n '/a/{e curl x\n}' f", "Bash(curl:*)"),
    ("sed 's/x/curl v/e' f", "Bash(rm:*)"),  # the pattern space: any command, the first rule
    ("sed 's/^/r/;s/$/m v/e' f", "Bash(rm:*)"),
    ("awk 'BEGIN{system(\"rm -rf x\")}'", "Bash(rm:*)"),
    ("awk 'BEGIN{system(\"curl x\")}'", "Bash(curl:*)"),
    ("awk 'BEGIN { \"curl x\" | getline }'", "Bash(curl:*)"),
    ("awk '{print | \"curl -d@- x\"}' f", "Bash(curl:*)"),
    ("gawk -e 'BEGIN{system(\"curl x\")}'", "Bash(curl:*)"),
    ("awk $'BEGIN{system(\"curl x\")}'", "Bash(curl:*)"),
    ('awk \'BEGIN{system("r" "m x")}\'', "Bash(rm:*)"),  # any command
    ("perl -e 'system(\"curl x\")'", "Bash(curl:*)"),
    ("perl -e '`curl x`'", "Bash(curl:*)"),
    ("python3 -c 'import os; os.system(\"curl x\")'", "Bash(curl:*)"),
    ('python -c \'import subprocess; subprocess.run(["curl", "x"])\'', "Bash(curl:*)"),
    ("ruby -e 'system(%q(curl x))'", "Bash(curl:*)"),
    ('node -e \'require("child_process").execSync("curl x")\'', "Bash(curl:*)"),
    ("find . -exec sed '1e curl x' {} ';'", "Bash(curl:*)"),
    ("busybox sed 1ecurl f", "Bash(curl:*)"),
    (f"python -c '{'x=1;' * 400}import os; os.system(\"curl x\")'", "Bash(curl:*)"),  # padded
    ("xargs sed -n 1ecurl", "Bash(curl:*)"),
    ("env awk 'BEGIN{system(\"curl x\")}'", "Bash(curl:*)"),
]


@pytest.mark.parametrize(("line", "rule"), IN_SCRIPTS)
@pytest.mark.parametrize("effect", ["deny", "ask"])
def test_a_deny_or_ask_rule_sees_its_program_inside_a_script(
    tmp_path: Path, line: str, rule: str, effect: str
) -> None:
    lists = {effect: ["Bash(rm:*)", "Bash(curl:*)"]}
    found = verdict(ruleset(tmp_path, allow=["Bash"], **lists), line)
    assert found.effect in ("ask", effect), found
    assert found.rule is not None
    assert found.rule.text == rule


def test_a_script_only_read_conservatively_asks_rather_than_denies(tmp_path: Path) -> None:
    rules = ruleset(tmp_path, allow=["Bash"], deny=["Bash(rm:*)"])
    found = verdict(rules, "awk 'BEGIN{system(\"rm -rf x\")}'")
    assert found.effect == "ask"
    assert "applies as an ask" in (found.note or "")
    assert verdict(rules, "sed -n '1e rm -rf x' f").effect == "deny"  # read as sh -c reads it
    for line in ("sed -n 1,5p f", "awk '{print $1}' f", "sort f", "rg foo", "perl -ne 'print' f"):
        assert verdict(rules, line).effect == "allow", line
