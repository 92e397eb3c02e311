"""Claude Code's permission rules mean here at least what they mean there: a deny rule a
user wrote for Claude Code denies at least what Claude Code denies, and an allow rule
allows no more (code.claude.com/docs/en/permissions). Each rule goes the whole way: the
settings document, ``settings_table`` / ``translate_rule``, then ``PermissionPolicy`` on
the real tools, as the child judges a call."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from agentcell.orchestrator.config._claude_settings import (
    claude_settings_layers,
    settings_table,
    translate_rule,
)
from agentcell.protocol import ToolCall
from agentcell.worker import Engine, PermissionPolicy, Rule
from agentcell.worker.rules._policy import Decision
from agentcell.worker.tools._bash import Bash
from agentcell.worker.tools._files import EditFile, Glob, Grep, ReadFile, WriteFile

from agentcell.testing import ScriptedModel, reply, tool_call, tool_results

TOOLS = {t.name: t for t in (Bash(), ReadFile(), WriteFile(), EditFile(), Grep(), Glob())}


def policy(
    permissions: dict[str, Any],
    project: Path,
    mode: str = "default",
    notes: list[str] | None = None,
) -> PermissionPolicy:
    """The policy a project's .claude/settings.json gives its agents."""
    table = settings_table(
        {"permissions": permissions}, "settings.json", project, notes if notes is not None else []
    )
    return PermissionPolicy(
        mode,
        allow=table.get("allow_rules", []),
        deny=table.get("deny_rules", []),
        ask=table.get("ask_rules", []),
    )


async def decision(policy: PermissionPolicy, tool: str, **arguments: Any) -> Decision:
    the_tool = TOOLS[tool]
    text = json.dumps(arguments)
    call = ToolCall(id="c", name=tool, arguments=text)
    verdict = await policy.before_tool(call, the_tool, the_tool.parse_args(text))
    return Decision.ALLOW if verdict is None else verdict.decision


# -- 1. ``Bash(prefix *)``: the prefix alone too (a word boundary, not "and more") ----------


@pytest.mark.parametrize("command", ["git push", "git push origin main", "rm", "rm -rf x"])
async def test_a_space_star_deny_rule_denies_the_bare_prefix(tmp_path: Path, command: str) -> None:
    denied = policy({"deny": ["Bash(git push *)", "Bash(rm *)"]}, tmp_path, "bypassPermissions")
    assert await decision(denied, "bash", command=command) is Decision.DENY


async def test_a_space_star_rule_keeps_its_word_boundary(tmp_path: Path) -> None:
    rules = policy({"deny": ["Bash(ls *)"]}, tmp_path, "bypassPermissions")
    assert await decision(rules, "bash", command="ls") is Decision.DENY
    assert await decision(rules, "bash", command="lsof") is Decision.ALLOW
    no_space = policy({"deny": ["Bash(ls*)"]}, tmp_path, "bypassPermissions")
    assert await decision(no_space, "bash", command="lsof") is Decision.DENY


async def test_the_docs_allow_and_deny_pair(tmp_path: Path) -> None:
    rules = policy({"allow": ["Bash(git *)"], "deny": ["Bash(git push *)"]}, tmp_path)
    assert await decision(rules, "bash", command="git push") is Decision.DENY
    assert await decision(rules, "bash", command="git status") is Decision.ALLOW
    assert await decision(rules, "bash", command="git") is Decision.ALLOW  # ``git *`` is ``git``


# -- 2. wrappers ---------------------------------------------------------------------------

WRAPPED_RM = [
    "timeout 30 rm -rf build",
    "timeout -s KILL 5 rm -rf build",
    "timeout --signal=KILL -k 2 5 rm -rf build",
    "time rm -rf build",
    "time -p rm -rf build",
    "nice rm -rf build",
    "nice -n 10 rm -rf build",
    "nice -10 rm -rf build",
    "nohup rm -rf build",
    "stdbuf -o0 rm -rf build",
    "stdbuf -o L -e 0 rm -rf build",
    "command rm -rf build",
    "builtin rm -rf build",
    "noglob rm -rf build",
    "find . -name '*.o' | xargs rm -f",
    "find . | xargs -n1 rm",
    "find . | xargs -0 -P 4 -I{} rm {}",
    "nohup timeout 5 nice -n 1 rm -rf build",
    "git status && timeout 5 /bin/rm -rf build",
    "sudo -u root rm -rf build",
]


@pytest.mark.parametrize("command", WRAPPED_RM)
async def test_a_deny_rule_sees_through_wrappers(tmp_path: Path, command: str) -> None:
    for mode, kind, expected in (("bypassPermissions", "deny", Decision.DENY), ("", "ask", None)):
        rules = policy({kind: ["Bash(rm *)"]}, tmp_path, mode or "bypassPermissions")
        assert await decision(rules, "bash", command=command) is (expected or Decision.ASK)


@pytest.mark.parametrize(
    "command",
    [
        "timeout 30 npm test",
        "timeout -s KILL 5 npm test --watch",
        "nice -n 10 npm test",
        "nohup npm test",
        "stdbuf -o0 npm test",
        "command npm test",
        "nohup timeout 5 npm test",
    ],
)
async def test_an_allow_rule_sees_through_the_documented_wrappers(
    tmp_path: Path, command: str
) -> None:
    rules = policy({"allow": ["Bash(npm test *)"]}, tmp_path)
    assert await decision(rules, "bash", command=command) is Decision.ALLOW


@pytest.mark.parametrize(
    "command",
    [
        "xargs -n1 npm test",  # xargs with flags: matched as xargs, per the docs
        "xargs npm test",  # bare xargs: narrower than Claude Code (stdin adds arguments)
        "watch npm test",  # exec wrappers: never covered by a prefix rule
        "setsid npm test",
        "flock /tmp/l npm test",
        "ionice npm test",
        "command -v npm test",  # a lookup, not a wrapper
        "timeout npm test",  # no duration: not timeout's documented form
        "nice --weird npm test",
        "noglob npm test",  # under bash, a program of that name
        "timeout 5 rm -rf x; npm test",
    ],
)
async def test_an_allow_rule_covers_no_other_wrapper(tmp_path: Path, command: str) -> None:
    rules = policy({"allow": ["Bash(npm test *)"]}, tmp_path)
    assert await decision(rules, "bash", command=command) is Decision.ASK


# -- 3. Read deny / ask rules ----------------------------------------------------------------


def project_with_secrets(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "secrets").mkdir(parents=True)
    (project / "src").mkdir()
    (project / ".env").write_text("API_KEY=SECRET-123\n")
    (project / "secrets" / "key").write_text("k=SECRET-456\n")
    (project / "src" / "app.py").write_text("print('SECRET-none')\n")
    (project / "innocent").symlink_to(project / ".env")
    return project


async def run_tool(project: Path, rules: PermissionPolicy, tool: str, **arguments: Any) -> str:
    """One call through a real engine, so the tool runs with the context the child gives it."""
    model = ScriptedModel([reply("", tool_call(tool, **arguments)), reply("ok")])
    engine = Engine(model, list(TOOLS.values()), hooks=[rules], workdir=project)
    await engine.run("go")
    return tool_results(model.calls[1].messages)[0].content


@pytest.mark.parametrize(
    "arguments",
    [
        {"pattern": "SECRET"},
        {"pattern": "SECRET", "path": "."},
        {"pattern": "SECRET", "include": ".env"},
        {"pattern": "SECRET", "include": "key"},
    ],
)
@pytest.mark.parametrize("kind", ["deny", "ask"])
async def test_grep_does_not_search_what_a_read_rule_covers(
    tmp_path: Path, arguments: dict[str, Any], kind: str
) -> None:
    project = project_with_secrets(tmp_path)
    rules = policy({kind: ["Read(./.env)", "Read(./secrets/**)"]}, project)
    out = await run_tool(project, rules, "grep", **arguments)
    assert "SECRET-123" not in out and "SECRET-456" not in out, out
    if "include" not in arguments:
        assert "src/app.py" in out  # the rest is still searched


async def test_glob_does_not_list_what_a_read_rule_covers(tmp_path: Path) -> None:
    project = project_with_secrets(tmp_path)
    rules = policy({"deny": ["Read(./.env)", "Read(./secrets/**)"]}, project)
    out = await run_tool(project, rules, "glob", pattern="**/*")
    assert "src/app.py" in out
    assert ".env" not in out and "secrets/key" not in out and "innocent" not in out, out


async def test_a_link_to_a_denied_file_is_not_read(tmp_path: Path) -> None:
    project = project_with_secrets(tmp_path)
    rules = policy({"deny": ["Read(./.env)"]}, project)
    out = await run_tool(project, rules, "read_file", path="innocent")
    assert "SECRET-123" not in out and "read rule" in out


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("write_file", {"path": ".env", "content": "X=1"}),
        ("write_file", {"path": "./sub/../.env", "content": "X=1"}),
        ("edit_file", {"path": ".env", "old_string": "a", "new_string": "b"}),
        ("write_file", {"path": "secrets/new", "content": "X=1"}),
    ],
)
async def test_a_read_deny_rule_blocks_edit_and_write_of_that_path(
    tmp_path: Path, tool: str, arguments: dict[str, Any]
) -> None:
    rules = policy({"deny": ["Read(./.env)", "Read(./secrets/**)"]}, tmp_path, "acceptEdits")
    assert await decision(rules, tool, **arguments) is Decision.DENY
    asking = policy({"ask": ["Read(./.env)", "Read(./secrets/**)"]}, tmp_path, "acceptEdits")
    assert await decision(asking, tool, **arguments) is Decision.ASK
    assert await decision(rules, "write_file", path="other.txt", content="x") is Decision.ALLOW


@pytest.mark.parametrize(
    "command",
    [
        "cat .env",
        "head -n1 .env",
        "tail -f .env",
        "sed -n 1p .env",
        "less .env",
        "more secrets/key",
        "cat '.env'",
        "echo hi && timeout 5 cat .env",
        "cat < .env",
    ],
)
async def test_a_read_rule_covers_the_files_bash_readers_name(tmp_path: Path, command: str) -> None:
    rules = policy({"deny": ["Read(./.env)", "Read(./secrets/**)"]}, tmp_path, "bypassPermissions")
    assert await decision(rules, "bash", command=command) is Decision.DENY
    asking = policy({"ask": ["Read(./.env)"], "allow": ["Bash"]}, tmp_path)
    if ".env" in command:
        assert await decision(asking, "bash", command=command) is Decision.ASK
    assert await decision(rules, "bash", command="cat README.md") is Decision.ALLOW


# -- 4. anchoring ----------------------------------------------------------------------------


def users_rules(tmp_path: Path, rules: dict[str, Any]) -> tuple[PermissionPolicy, Path, Path]:
    """The user's ~/.claude/settings.json, read for a project the agents work in."""
    home, project = tmp_path / "home", tmp_path / "project"
    (home / ".claude").mkdir(parents=True)
    project.mkdir()
    (home / ".claude" / "settings.json").write_text(json.dumps({"permissions": rules}))
    user, _, _ = claude_settings_layers(project, home, trusted=False)
    [(_, table)] = user
    return PermissionPolicy("bypass", deny=table.get("deny_rules", [])), home, project


async def test_a_users_relative_rule_holds_in_the_project_by_any_spelling(
    tmp_path: Path,
) -> None:
    rules, _, project = users_rules(tmp_path, {"deny": ["Read(./config/secrets/**)"]})
    for path in (
        "config/secrets/key",
        f"{project.resolve()}/config/secrets/key",
        "./config/../config/secrets/key",
    ):
        assert await decision(rules, "read_file", path=path) is Decision.DENY, path


async def test_a_users_slash_rule_is_anchored_at_dot_claude(tmp_path: Path) -> None:
    rules, home, project = users_rules(tmp_path, {"deny": ["Read(/secrets/**)"]})
    inside = f"{(home / '.claude').resolve()}/secrets/key"
    assert await decision(rules, "read_file", path=inside) is Decision.DENY
    assert await decision(rules, "read_file", path="secrets/key") is Decision.ALLOW
    assert await decision(rules, "read_file", path=f"{project}/secrets/key") is Decision.ALLOW


async def test_a_projects_slash_rule_is_anchored_at_the_project(tmp_path: Path) -> None:
    rules = policy({"deny": ["Read(/secrets/**)"]}, tmp_path, "bypassPermissions")
    for path in ("secrets/key", f"{tmp_path.resolve()}/secrets/key"):
        assert await decision(rules, "read_file", path=path) is Decision.DENY


# -- 5. ``*`` and parameter rules ------------------------------------------------------------


@pytest.mark.parametrize("tool", sorted(TOOLS))
async def test_a_star_deny_rule_denies_every_tool(tmp_path: Path, tool: str) -> None:
    rules = policy({"deny": ["*"]}, tmp_path, "bypassPermissions")
    arguments = {
        "bash": {"command": "ls"},
        "read_file": {"path": "a"},
        "write_file": {"path": "a", "content": ""},
        "edit_file": {"path": "a", "old_string": "a", "new_string": "b"},
        "grep": {"pattern": "x"},
        "glob": {"pattern": "*"},
    }[tool]
    assert await decision(rules, tool, **arguments) is Decision.DENY


def test_tool_name_globs() -> None:
    base = Path("/p")
    assert translate_rule("*", base) == ["*"]
    assert translate_rule("mcp__*", base) == ["mcp__*__*"]
    assert translate_rule("Web*", base) == ["web_fetch", "web_search"]
    notes: list[str] = []
    assert translate_rule("*", base, kind="allow", notes=notes) == []
    assert translate_rule("mcp__*", base, kind="allow", notes=notes) == []
    assert len(notes) == 2 and all("wildcard" in n for n in notes)
    assert translate_rule("mcp__github__get_*", base, kind="allow") == ["mcp__github__get_*"]


def task_call(**arguments: Any) -> tuple[ToolCall, Any]:
    """A task call as a sub-agent's parent tool passes it (JSON text, fields decoded)."""
    text = json.dumps(arguments)
    fields = {k: v for k, v in arguments.items() if isinstance(v, str)}
    return ToolCall(id="c", name="task", arguments=text), SimpleNamespace(text=text, **fields)


def test_a_parameter_rule_matches_that_argument() -> None:
    [rule] = [Rule.parse(r) for r in translate_rule("Agent(model:opus)", Path("/p")) or []]
    assert rule.catches(*task_call(subagent_type="x", prompt="p", model="opus"))
    assert not rule.catches(*task_call(subagent_type="x", prompt="p", model="haiku"))
    assert not rule.catches(*task_call(subagent_type="x", prompt="p"))  # left out: no match
    # Spellings the parent resolves to the same model (a second attack review).
    for spelled in ("Opus", " OPUS", "claude-opus-4-1", "anthropic:claude-opus-4-1"):
        assert rule.catches(*task_call(subagent_type="x", prompt="p", model=spelled)), spelled
    assert not rule.catches(*task_call(subagent_type="x", prompt="p", model="claude-sonnet-4"))
    [background] = [
        Rule.parse(r) for r in translate_rule("Agent(run_in_background:true)", Path("/p")) or []
    ]
    assert background == Rule("task", "background:true")
    assert background.catches(*task_call(subagent_type="x", prompt="p", background=True))
    assert not background.catches(*task_call(subagent_type="x", prompt="p", background=False))
    # A colon in an agent's name is not a parameter: ``plugin:agent`` names the type.
    plugin = Rule.parse("task(my-plugin:reviewer)")
    assert plugin.catches(*task_call(subagent_type="my-plugin:reviewer", prompt="p"))


def test_a_parameter_our_tool_lacks_is_named_in_a_note(tmp_path: Path) -> None:
    notes: list[str] = []
    table = settings_table(
        {"permissions": {"deny": ["Bash(run_in_background:true)", "Bash(command:rm *)"]}},
        "settings.json",
        tmp_path,
        notes,
    )
    assert "deny_rules" not in table
    assert any("run_in_background" in n and "no 'run_in_background' argument" in n for n in notes)
    assert any("command:rm *" in n and "main field" in n for n in notes)
    # ``git:* push`` is not a parameter rule (the colon is literal there).
    assert translate_rule("Bash(git:* push)", tmp_path) == ["bash(git:* push)"]


# -- 6. allow rules no broader than Claude Code's ----------------------------------------------


async def test_a_path_allow_rules_star_stays_within_one_folder(tmp_path: Path) -> None:
    rules = policy({"allow": ["Edit(src/*.ts)", "Edit(lib/**)"]}, tmp_path)
    edit = {"old_string": "a", "new_string": "b"}
    assert await decision(rules, "edit_file", path="src/x.ts", **edit) is Decision.ALLOW
    assert await decision(rules, "edit_file", path="src/deep/x.ts", **edit) is Decision.ASK
    assert await decision(rules, "edit_file", path="vendor/src/x.ts", **edit) is Decision.ASK
    assert await decision(rules, "edit_file", path="lib/a/b/c.ts", **edit) is Decision.ALLOW
    absolute = f"{tmp_path.resolve()}/src/deep/x.ts"
    assert await decision(rules, "edit_file", path=absolute, **edit) is Decision.ASK


async def test_a_bare_name_allow_rule_matches_at_any_depth(tmp_path: Path) -> None:
    rules = policy({"allow": ["Edit(notes.md)"]}, tmp_path)
    edit = {"old_string": "a", "new_string": "b"}
    for path in ("notes.md", "a/b/notes.md", f"{tmp_path.resolve()}/a/notes.md"):
        assert await decision(rules, "edit_file", path=path, **edit) is Decision.ALLOW
    assert await decision(rules, "edit_file", path="a/notes.md.bak", **edit) is Decision.ASK


async def test_a_write_path_allow_rule_allows_nothing(tmp_path: Path) -> None:
    notes: list[str] = []
    rules = policy({"allow": ["Write(docs/**)"]}, tmp_path, notes=notes)
    assert await decision(rules, "write_file", path="docs/a.md", content="x") is Decision.ASK
    assert any("never consults" in n for n in notes)
    denied = policy({"deny": ["Write(docs/**)"]}, tmp_path, "bypassPermissions")
    assert await decision(denied, "write_file", path="docs/a.md", content="x") is Decision.DENY


# -- 7. WebFetch(domain:...) ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("domain", "url", "matches"),
    [
        ("example.com", "https://example.com/docs", True),
        ("example.com", "http://EXAMPLE.com./", True),
        ("example.com", "https://example.com:8443/x?y", True),
        ("example.com", "https://api.example.com/x", False),
        ("example.com", "https://evil.net/example.com/", False),
        ("example.com", "https://example.com.evil.net/", False),
        ("*.example.com", "https://api.example.com/x", True),
        ("*.example.com", "https://a.b.example.com/x", True),
        ("*.example.com", "https://example.com/", False),
        ("*.example.com", "https://evil.net/a.example.com/", False),
        ("*.example.com", "https://evilexample.com/", False),
        ("example.*", "https://example.org/", True),
        ("example.*", "https://example.evil.com/", False),
        ("*", "https://anything.net/", True),
    ],
)
def test_a_domain_rule_matches_the_urls_host(domain: str, url: str, matches: bool) -> None:
    rules = [Rule.parse(r) for r in translate_rule(f"WebFetch(domain:{domain})", Path("/p")) or []]
    call = ToolCall(id="c", name="web_fetch", arguments=json.dumps({"url": url}))
    args = SimpleNamespace(url=url)
    assert any(rule.allows(call, args) for rule in rules) is matches
    assert any(rule.catches(call, args) for rule in rules) is matches


# -- a wrapper line too long to take apart --------------------------------------------------


async def test_a_wrapper_line_too_long_to_take_apart_is_caught_whole(tmp_path: Path) -> None:
    """Every later word of a wrapper line starts a piece, so pieces cost the square of the
    words: a 16 MiB ``env a a a …`` line held the process for minutes. Past
    ``MAX_WRAPPED_WORDS`` the line is judged whole: a deny or ask rule catches it, a read
    rule is matched against every word. A line as long that runs no wrapper is judged as
    before (a long heredoc is not denied)."""
    from agentcell.worker.rules._wrappers import MAX_WRAPPED_WORDS

    rules = policy({"deny": ["Bash(rm *)", "Read(./.env)"]}, tmp_path, "bypassPermissions")
    long_wrapped = "env " + "a " * MAX_WRAPPED_WORDS + "ls"
    assert await decision(rules, "bash", command=long_wrapped) is Decision.DENY
    short_wrapped = "env " + "a " * (MAX_WRAPPED_WORDS - 8) + "ls"
    assert await decision(rules, "bash", command=short_wrapped) is Decision.ALLOW
    plain = "echo " + "a " * (4 * MAX_WRAPPED_WORDS)
    assert await decision(rules, "bash", command=plain) is Decision.ALLOW
    reads = policy({"deny": ["Read(./.env)"]}, tmp_path, "bypassPermissions")
    long_read = "env " + "-u X " * MAX_WRAPPED_WORDS + "cat .env"
    assert await decision(reads, "bash", command=long_read) is Decision.DENY


# -- a deny rule reads the line as the shell does (second attack review) -------------------

SPELLED_RM = [
    "'rm' -rf build",
    '"rm" -rf build',
    "\\rm -rf build",
    "r''m -rf build",
    "if :; then rm -rf build; fi",
    "for f in a; do rm -rf $f; done",
    "while rm -rf build; do :; done",
    "{ rm -rf build; }",
    "! rm -rf build",
    ">/dev/null rm -rf build",
    "2>/dev/null rm -rf build",
    "A='a b' rm -rf build",
    "f() { rm -rf build; }; f",
    "case a in a) rm -rf build;; esac",
    "echo $(rm -rf build)",
    "timeout 5 'rm' -rf build",
]


@pytest.mark.parametrize("command", SPELLED_RM)
async def test_a_deny_rule_catches_a_command_however_it_is_spelt(
    tmp_path: Path, command: str
) -> None:
    """The allow side parses a line; the deny side matched its raw text, so quoting, a
    compound command or a leading redirection carried ``rm`` past ``Bash(rm *)`` (an
    attack review: 48 spellings). Every simple command is now read as the shell reads it."""
    rules = policy({"deny": ["Bash(rm *)"], "allow": ["Bash"]}, tmp_path)
    assert await decision(rules, "bash", command=command) is Decision.DENY
    asking = policy({"ask": ["Bash(rm *)"]}, tmp_path, "bypassPermissions")
    assert await decision(asking, "bash", command=command) is Decision.ASK


@pytest.mark.parametrize("command", ["git 'push' origin main", 'git "push"', "git pu''sh"])
async def test_the_docs_pair_holds_against_quoting(tmp_path: Path, command: str) -> None:
    rules = policy({"allow": ["Bash(git *)"], "deny": ["Bash(git push *)"]}, tmp_path)
    assert await decision(rules, "bash", command=command) is Decision.DENY


@pytest.mark.parametrize(
    "command", ["cat .e*", "cat<.env", "< .env cat", "if :; then cat .env; fi", "cat '.env'"]
)
async def test_a_read_rule_catches_what_a_line_reads_however_it_is_spelt(
    tmp_path: Path, command: str
) -> None:
    (tmp_path / ".env").write_text("API_KEY=secret\n")
    rules = policy({"deny": ["Read(./.env)"]}, tmp_path, "bypassPermissions")
    rules.workdir = str(tmp_path)
    assert await decision(rules, "bash", command=command) is Decision.DENY
    assert await decision(rules, "bash", command="cat README*") is Decision.ALLOW


async def test_a_link_to_a_denied_file_is_not_written_nor_edited(tmp_path: Path) -> None:
    """``innocent -> .env`` under ``Read(./.env)``: write_file through the link overwrote
    ``.env``, and edit_file's success or failure told the secret a character at a time
    (a second attack review)."""
    project = project_with_secrets(tmp_path)
    rules = policy({"deny": ["Read(./.env)"]}, project, "acceptEdits")
    written = await run_tool(project, rules, "write_file", path="innocent", content="X=1\n")
    assert "a read rule covers: not written" in written
    edited = await run_tool(
        project, rules, "edit_file", path="innocent", old_string="API_KEY=S", new_string="x"
    )
    assert "a read rule covers: not edited" in edited
    assert (project / ".env").read_text() == "API_KEY=SECRET-123\n"


async def test_a_folder_rule_covers_what_is_in_it(tmp_path: Path) -> None:
    """``Read(./secrets)`` (no ``/**``) hid the folder from grep's walk but let
    ``read_file secrets/key`` through (a second attack review). A folder's name covers
    what is in it, as in gitignore, which Claude Code follows."""
    project = project_with_secrets(tmp_path)
    rules = policy({"deny": ["Read(./secrets)"]}, project)
    assert await decision(rules, "read_file", path="secrets/key") is Decision.DENY
    assert await decision(rules, "read_file", path=f"{project}/secrets/key") is Decision.DENY
    assert await decision(rules, "read_file", path="src/app.py") is Decision.ALLOW


@pytest.mark.parametrize(
    "command",
    [
        "echo x > config/app.toml",
        "echo x >> config/app.toml",
        "ls 2> config/app.toml",
        "ls &> config/app.toml",
        "echo x | tee -a config/app.toml",
        "sed -i s/a/b/ config/app.toml",
        "if :; then echo x >| config/app.toml; fi",
        "echo x > config/*.toml",
    ],
)
async def test_an_edit_rule_covers_what_a_bash_line_writes(tmp_path: Path, command: str) -> None:
    """Claude Code checks an output redirection's target as a file write against the
    Edit rules, and the file commands it recognises (``sed -i``); a deny on
    ``Edit(./config/**)`` let ``echo x > config/app.toml`` through."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "app.toml").write_text("a = 1\n")
    rules = policy({"deny": ["Edit(./config/**)"]}, tmp_path, "bypassPermissions")
    rules.workdir = str(tmp_path)
    assert await decision(rules, "bash", command=command) is Decision.DENY
    asking = policy({"ask": ["Edit(./config/**)"]}, tmp_path, "bypassPermissions")
    asking.workdir = str(tmp_path)
    assert await decision(asking, "bash", command=command) is Decision.ASK


@pytest.mark.parametrize(
    "command", ["cat config/app.toml", "echo x > /dev/null", "sed s/a/b/ config/app.toml"]
)
async def test_an_edit_rule_leaves_reads_and_the_null_device(tmp_path: Path, command: str) -> None:
    rules = policy({"deny": ["Edit(./config/**)"]}, tmp_path, "bypassPermissions")
    assert await decision(rules, "bash", command=command) is Decision.ALLOW


@pytest.mark.parametrize(
    "command",
    [
        "echo " + "$(" * 1300 + "rm x" + ")" * 1300,
        "( " * 3000 + "rm x" + " )" * 3000,
        "{ " * 2000 + "rm x;" + " }" * 2000,
    ],
)
async def test_a_line_nested_past_the_parser_is_read_flat(tmp_path: Path, command: str) -> None:
    """A line bashlex cannot take (or whose tree is deeper than Python recurses) is
    split as words instead: the rule still sees ``rm``."""
    rules = policy({"deny": ["Bash(rm *)"]}, tmp_path, "bypassPermissions")
    assert await decision(rules, "bash", command=command) is Decision.DENY
