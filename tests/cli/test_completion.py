"""Shell completion for vramctl (contrib/completions/vramctl.bash and _vramctl).

bash: the file is sourced in a clean `bash --norc`, COMP_WORDS/COMP_CWORD are set as
programmable completion sets them, _vramctl is called and COMPREPLY read back. Expected:
  - the commands are those of `vramctl --help` (plus `help`), completed from a prefix;
  - after a command, `-` offers every option its `vramctl COMMAND --help` usage names (each
    jobs subcommand's too) and the global options of `vramctl --help`;
  - model names come from a live vramd (the `vramd` fixture, two models), reached with the
    line's --url or with $VRAMD_URL, for logs/load/unload, jobs submit and jobs list --model;
  - with no vramd listening, model names complete to nothing, the function returns 0 and
    commands still complete.
zsh: only where zsh is installed (skipped otherwise): the file parses, compinit registers it,
and in an interactive zsh (zsh/zpty) Tab offers the commands, jobs subcommands, options, and
the live vramd's model names (none when it is not running).
"""
import re
import shlex
import shutil
import subprocess

import pytest

from vramdkit import REPO_ROOT, binary, free_port

from .conftest import clean_env, vramctl

BASH_FILE = REPO_ROOT / "contrib" / "completions" / "vramctl.bash"
ZSH_FILE = REPO_ROOT / "contrib" / "completions" / "_vramctl"


def complete(*words, env=None):
    """COMPREPLY for the line `vramctl WORDS...` with the cursor on the last word."""
    words = ["vramctl", *words]
    script = (f"source {shlex.quote(str(BASH_FILE))}\n"
              f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)})\n"
              f"COMP_CWORD={len(words) - 1}\n"
              f"COMP_LINE={shlex.quote(' '.join(words))}; COMP_POINT=${{#COMP_LINE}}\n"
              "_vramctl; rc=$?\n"
              "printf '%s\\n' \"${COMPREPLY[@]}\"\n"
              "exit $rc\n")
    e = env or clean_env()
    e["PATH"] = f"{binary('vramctl').parent}:{e.get('PATH', '/usr/bin:/bin')}"
    p = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], capture_output=True,
                       text=True, env=e, timeout=30, cwd=REPO_ROOT)
    assert p.returncode == 0, p
    assert p.stderr == "", p.stderr
    return sorted(x for x in p.stdout.splitlines() if x)


def help_block(text, title):
    lines = text.split(f"\n{title}:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return [ln.split()[0] for ln in lines if ln.startswith("  ") and not ln.startswith("    ")]


def help_commands():
    p = vramctl("--help")
    assert p.returncode == 0, p
    return help_block(p.stdout, "Commands")


def usage_options(text):
    """The options a usage text names: --word and -x."""
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-[a-z])\b", text))


def test_commands_complete():
    cmds = help_commands()
    assert {"status", "ps", "jobs", "check-config"} <= set(cmds), cmds
    assert complete("") == sorted(cmds + ["help"])
    assert complete("st") == ["status"]
    assert complete("check") == ["check-config"]
    assert complete("-") == sorted(["--url", "--token", "--token-file", "--json", "--timeout",
                                    "--help", "--version"])
    assert complete("jobs", "") == sorted(["submit", "get", "wait", "result", "cancel", "list"])
    assert complete("help", "lo") == ["load", "logs"]


def test_each_commands_options_complete():
    global_opts = {"--url", "--token", "--token-file", "--json", "--timeout"}
    for cmd in help_commands():
        p = vramctl(cmd, "--help")
        usage = p.stdout.split("\n\n", 1)[0]
        if cmd == "jobs":
            for line in usage.replace("usage:", "      ").split("vramctl jobs ")[1:]:
                sub = line.split()[0]
                got = set(complete("jobs", sub, "-"))
                want = usage_options(line) | global_opts
                assert want <= got, (sub, want - got)
            continue
        got = set(complete(cmd, "-"))
        want = usage_options(usage) | global_opts
        assert want <= got, (cmd, want - got)
    assert complete("logs", "--f") == ["--follow", "--for"]
    assert complete("jobs", "list", "--state", "c") == ["cancelled"]


@pytest.fixture
def two_models(vramd):
    vd = vramd.start(models={"alpha": vramd.worker("alpha"), "beta-2": vramd.worker("beta-2")})
    vd.url = f"http://127.0.0.1:{vd.port}"
    return vd


def test_model_names_from_running_vramd(two_models):
    url = two_models.url
    assert complete("--url", url, "load", "") == ["alpha", "beta-2"]
    assert complete("--url", url, "logs", "b") == ["beta-2"]
    assert complete("unload", "--url", url, "") == ["alpha", "beta-2"]
    assert complete("--url", url, "jobs", "submit", "") == ["alpha", "beta-2"]
    assert complete("--url", url, "jobs", "list", "--model", "a") == ["alpha"]
    assert complete("load", "", env=clean_env(VRAMD_URL=url)) == ["alpha", "beta-2"]
    # --url on the line wins over $VRAMD_URL, as in vramctl
    dead = f"http://127.0.0.1:{free_port()}"
    assert complete("--url", url, "load", "", env=clean_env(VRAMD_URL=dead)) == ["alpha", "beta-2"]
    assert complete("--url", dead, "load", "", env=clean_env(VRAMD_URL=url)) == []
    # a model name is the first argument only
    assert complete("--url", url, "load", "alpha", "") == []


def test_no_vramd_running():
    dead = f"http://127.0.0.1:{free_port()}"
    env = clean_env(VRAMD_URL=dead)
    assert complete("load", "", env=env) == []
    assert complete("--url", dead, "logs", "a", env=env) == []
    assert complete("s", env=env) == ["status"]
    assert "--strict" in complete("check-config", "-", env=env)


ZSH_CAPTURE = r"""
# Types ARG2 into an interactive zsh (in a pty) with the completion system and _vramctl from
# ARG1 loaded, presses Tab, and prints each match the completion adds as <<match>>.
zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z "PROMPT=; fpath=(${(q)1} \$fpath); autoload -U compinit; compinit -u -D"
zpty -w z 'bindkey "^I" complete-word; zstyle ":completion:*" insert-tab false'
zpty -w z 'compadd() { if (( ${@[(I)-[OAD]]} )); then builtin compadd "$@"; return; fi; local -a __h; builtin compadd -O __h "$@"; print -rl -- "<<"${^__h}">>"; builtin compadd "$@" }'
zpty -w z 'comppostfuncs=(__end); __end() { print -r -- "@@""END@@"; exit }'
zpty -w -n z "$2"$'\t'
while zpty -r z line; do
  print -rn -- $line
  [[ $line == *@@END@@* ]] && break
done
zpty -d z
"""


def zsh_complete(zsh, line, env=None):
    """The matches zsh's completion system offers for LINE (cursor at its end)."""
    e = env or clean_env()
    e["PATH"] = f"{binary('vramctl').parent}:{e.get('PATH', '/usr/bin:/bin')}"
    p = subprocess.run([zsh, "-f", "-c", ZSH_CAPTURE, "capture", str(ZSH_FILE.parent), line],
                       capture_output=True, text=True, env=e, timeout=30, cwd=REPO_ROOT)
    assert "@@END@@" in p.stdout, p
    return sorted(set(re.findall(r"<<([^<>\s\"$]*)>>", p.stdout)))


@pytest.fixture
def zsh():
    path = shutil.which("zsh")
    if not path:
        pytest.skip("zsh is not installed")
    return path


def test_zsh_completion_parses(zsh):
    p = subprocess.run([zsh, "-n", str(ZSH_FILE)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    text = ZSH_FILE.read_text()
    for cmd in help_commands():
        assert f"'{cmd}:" in text, cmd
    # loaded by compinit, the function is defined and names vramctl
    script = (f"fpath=({shlex.quote(str(ZSH_FILE.parent))} $fpath); autoload -U compinit; "
              "compinit -u -D; print -r -- ${_comps[vramctl]}")
    p = subprocess.run([zsh, "-f", "-c", script], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and p.stdout.strip() == "_vramctl", p


def test_zsh_completes_commands_and_models(zsh, two_models):
    assert zsh_complete(zsh, "vramctl ") == sorted(help_commands() + ["help"])
    assert zsh_complete(zsh, "vramctl jobs ") == sorted(["submit", "get", "wait", "result", "cancel", "list"])
    assert "--strict" in zsh_complete(zsh, "vramctl check-config --")
    url = two_models.url
    assert zsh_complete(zsh, f"vramctl --url {url} load ") == ["alpha", "beta-2"]
    assert zsh_complete(zsh, "vramctl unload ", env=clean_env(VRAMD_URL=url)) == ["alpha", "beta-2"]
    dead = f"http://127.0.0.1:{free_port()}"
    assert zsh_complete(zsh, f"vramctl --url {dead} load ") == []
