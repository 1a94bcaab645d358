"""The tenant function (`memflow.importers.tenant`): real remote formats of every host family,
Windows working directories, non-ASCII and punctuated folders, explicit rules, worktrees; two
different repositories never share a tenant, existing names stay (red team H2, issue 16 item 4,
issue 17 item 4)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memflow.importers.tenant import (
    SUFFIX_CHARS,
    TenantMapError,
    TenantMapper,
    folder_repo,
    folder_tenant,
    legacy_tenant,
    parse_map,
    remote_identity,
    remote_tenant,
    sanitize_part,
)
from schemas.scope import Scope, ScopeError

SUFFIX = re.compile(rf"-[a-z2-7]{{{SUFFIX_CHARS}}}$")


def _suffixed(scope: Scope | None, org: str, base: str) -> bool:
    return (
        scope is not None
        and scope.tenant_id == org
        and scope.ns.startswith(base + "-")
        and bool(SUFFIX.search(scope.ns))
        and len(scope.ns) == len(base) + 1 + SUFFIX_CHARS
    )


# -- remotes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "git@github.com:acme/payments.git",
        "https://github.com/acme/payments",
        "https://github.com/acme/payments.git",
        "ssh://git@github.com/acme/payments.git",
        "ssh://git@ssh.github.com:443/acme/payments.git",
        "https://user:s3cret@github.com/acme/payments.git",  # credentials are never read
        "https://www.github.com/acme/payments/",
    ],
)
def test_github_remotes_keep_their_names(url: str) -> None:
    assert remote_tenant(url) == Scope("acme", "payments")


AZURE_CONTOSO = [
    "https://dev.azure.com/contoso/Payments/_git/api",
    "https://contoso@dev.azure.com/contoso/Payments/_git/api",
    "git@ssh.dev.azure.com:v3/contoso/Payments/api",
    "ssh://git@ssh.dev.azure.com/v3/contoso/Payments/api",
    "https://contoso.visualstudio.com/Payments/_git/api",
    "https://contoso.visualstudio.com/DefaultCollection/Payments/_git/api",
    "contoso@vs-ssh.visualstudio.com:v3/contoso/Payments/api",
]


def test_every_spelling_of_one_azure_devops_repo_is_one_tenant_of_its_organisation() -> None:
    tenants = {remote_tenant(u) for u in AZURE_CONTOSO}
    assert len(tenants) == 1
    (tenant,) = tenants
    assert _suffixed(tenant, "contoso", "Payments.api")


def test_azure_devops_repos_of_different_companies_are_different_tenants() -> None:
    """H2: both used to be `git/api`."""
    a = remote_tenant("https://dev.azure.com/contoso/Payments/_git/api")
    b = remote_tenant("https://fabrikam@dev.azure.com/fabrikam/Website/_git/api")
    c = remote_tenant("https://dev.azure.com/contoso/Website/_git/api")
    assert a and b and c and len({a, b, c}) == 3
    assert (a.tenant_id, b.tenant_id, c.tenant_id) == ("contoso", "fabrikam", "contoso")
    assert remote_tenant("https://dev.azure.com/contoso/My%20Project/_git/My%20Repo") is not None


def test_gitlab_subgroups_under_different_parents_are_different_tenants() -> None:
    """H2: both used to be `team-a/service`."""
    a = remote_tenant("https://gitlab.com/acme/team-a/service.git")
    b = remote_tenant("git@gitlab.com:other/team-a/service.git")
    assert _suffixed(a, "acme", "team-a.service") and _suffixed(b, "other", "team-a.service")
    assert a != b
    deep = remote_tenant("https://gitlab.example.com/acme/platform/infra/terraform/modules.git")
    assert _suffixed(deep, "acme", "platform.infra.terraform.modules")


@pytest.mark.parametrize(
    ("url", "org", "base"),
    [
        ("git@bitbucket.org:acme/payments.git", "acme", "payments"),
        ("https://acme-admin@bitbucket.org/acme/payments.git", "acme", "payments"),
        ("https://gitea.example.org/acme/web.git", "acme", "web"),
        ("ssh://git@gitea.example.org:2222/acme/web.git", "acme", "web"),
        ("https://git.corp.example:8443/scm/acme/web.git", "scm", "acme.web"),
        ("git@gitlab.com:acme/payments.git", "acme", "payments"),
        ("/srv/git/acme/core.git", "acme", "core"),
        ("file:///srv/git/acme/core", "acme", "core"),
    ],
)
def test_other_hosts_keep_their_path_and_carry_the_identitys_suffix(
    url: str, org: str, base: str
) -> None:
    assert _suffixed(remote_tenant(url), org, base)


def test_one_path_on_different_hosts_and_ports_gives_different_tenants() -> None:
    urls = [
        "git@github.com:acme/payments.git",
        "git@gitlab.com:acme/payments.git",
        "git@bitbucket.org:acme/payments.git",
        "ssh://git@git.corp:2222/acme/payments.git",
        "ssh://git@git.corp:2223/acme/payments.git",
        "https://git.corp/acme/payments.git",
    ]
    assert len({remote_tenant(u) for u in urls}) == len(urls)
    # the default port is the same host
    assert remote_tenant("ssh://git@git.corp:22/acme/x") == remote_tenant("git@git.corp:acme/x")


@pytest.mark.parametrize(
    "url", ["https://github.com/", "", None, "not a url", "https://dev.azure.com/contoso"]
)
def test_what_names_no_repository_names_no_tenant(url: str | None) -> None:
    assert remote_tenant(url) is None


def test_a_secret_in_a_remote_never_names_a_tenant() -> None:
    token = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"
    for url in (f"https://gitlab.com/acme/{token}.git", f"https://github.com/{token}/x"):
        scope = remote_tenant(url)
        assert scope is not None and token not in scope.key


# Hosts and path parts as people name them, punctuation and scripts included.
HOSTS = st.sampled_from(
    ["github.com", "gitlab.com", "bitbucket.org", "git.corp:2222", "gitea.example.org"]
)
PART = st.text(
    alphabet=st.characters(
        codec="utf-8", exclude_characters="/\\:@?#%\x00", exclude_categories=("Cs", "Cc")
    ),
    min_size=1,
    max_size=30,
).filter(lambda p: p.strip(". ") and p not in (".", "..") and not p.endswith(".git"))


@settings(max_examples=400, deadline=None)
@given(
    a=st.tuples(HOSTS, st.lists(PART, min_size=2, max_size=4)),
    b=st.tuples(HOSTS, st.lists(PART, min_size=2, max_size=4)),
)
def test_distinct_host_and_full_path_give_distinct_tenants(a, b) -> None:
    urls = [f"https://{host}/{'/'.join(parts)}.git" for host, parts in (a, b)]
    ids = [remote_identity(u) for u in urls]
    tenants = [remote_tenant(u) for u in urls]
    assert all(t is not None for t in tenants)  # every one is a valid Scope
    if ids[0] != ids[1]:
        assert tenants[0] != tenants[1], urls
    else:
        assert tenants[0] == tenants[1]


@settings(max_examples=300, deadline=None)
@given(owner=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9-]{0,30}", fullmatch=True),
       repo=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,40}", fullmatch=True))  # fmt: skip
def test_existing_github_tenants_keep_their_names(owner: str, repo: str) -> None:
    """What earlier versions named a GitHub remote (its last two parts, made valid), this one
    names it too, whenever that old name was already valid and is no suffix look-alike."""
    url = f"git@github.com:{owner}/{repo}.git"
    old = legacy_tenant(TenantMapper(), "/nonexistent/x", url)
    try:
        unchanged = Scope(owner, repo)  # the old name was the remote's own, already valid
    except ScopeError:
        unchanged = None  # e.g. "a..b": the old name was a made-up one
    if old is not None and old == unchanged and not SUFFIX.search(repo):
        assert remote_tenant(url) == old


# -- folders ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "base"),
    [
        ("C++ tools", "C-tools"),
        ("C tools", "C-tools"),
        ("Проект", "Proekt"),
        ("工具", "GongJu"),
        ("café", "cafe"),
        ("My Project", "My-Project"),
        ("tools-abcdefgh", "tools-abcdefgh"),  # looks suffixed: gets one of its own
    ],
)
def test_folders_that_lose_something_are_named_with_their_suffix(name: str, base: str) -> None:
    assert _suffixed(folder_tenant("local", name), "local", base)


def test_folders_that_used_to_collide_are_different_tenants() -> None:
    """H2: `C++ tools` and `C tools` were one tenant; every Cyrillic or CJK folder was
    `local/unknown`."""
    names = ["C++ tools", "C tools", "C# tools", "Проект", "Проекты", "工具", "工具箱", "données"]
    assert len({folder_tenant("local", n) for n in names}) == len(names)
    assert all(folder_tenant("local", n).ns != "unknown" for n in names)


@settings(max_examples=400, deadline=None)
@given(a=PART, b=PART)
def test_distinct_folder_names_give_distinct_tenants(a: str, b: str) -> None:
    assert (folder_repo(a) == folder_repo(b)) == (a == b)
    Scope("local", folder_repo(a))


@settings(max_examples=300, deadline=None)
@given(name=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,60}", fullmatch=True))
def test_valid_folder_names_keep_their_names(name: str) -> None:
    if sanitize_part(name) == name and not SUFFIX.search(name):
        assert folder_repo(name) == name


# -- working directories --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cwd", "repo"),
    [
        ("e:\\Workspace\\src\\github\\claude-code-log", "claude-code-log"),
        ("C:\\Users\\dain\\workspace\\JSSoundRecorder\\", "JSSoundRecorder"),
        ("C:/Users/dain/work/api", "api"),
        ("\\\\fileserver\\projects\\payments", "payments"),
        ("D:\\", "unknown"),
    ],
)
def test_windows_working_directories_are_read_as_windows_paths(cwd: str, repo: str) -> None:
    assert TenantMapper().choose(cwd).scope == Scope("local", repo)


def test_the_tenant_never_depends_on_the_importers_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """H2 / issue 17: the same transcript landed as `work/main`, `acme/payments` or
    `local/e-Workspace-...` depending on where the importer ran."""
    here = tmp_path / "importer-runs-here"
    (here / ".git").mkdir(parents=True)
    (here / ".git" / "config").write_text('[remote "origin"]\n url = git@github.com:work/main\n')
    mapper = TenantMapper()
    cwds = ["e:\\Workspace\\app", "relative/app", "app", "/somewhere/else/app"]
    elsewhere = {c: mapper.choose(c).scope for c in cwds}
    monkeypatch.chdir(here)
    assert {c: mapper.choose(c).scope for c in cwds} == elsewhere
    assert set(elsewhere.values()) == {Scope("local", "app")}


def test_a_recorded_remote_wins_over_the_local_checkout(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    (checkout / ".git" / "config").write_text('[remote "origin"]\n url = git@github.com:me/fork\n')
    mapper = TenantMapper()
    assert mapper.choose(str(checkout)).scope == Scope("me", "fork")
    choice = mapper.choose(str(checkout), "https://github.com/openai/codex.git")
    assert (choice.scope, choice.how) == (Scope("openai", "codex"), "recorded")


def test_map_rules_longest_prefix_wins(tmp_path: Path) -> None:
    mapper = TenantMapper(
        parse_map(f"{tmp_path}=acme/*; {tmp_path / 'pay'}=acme/payments\n"), default_org="me"
    )
    assert mapper.choose(str(tmp_path / "pay" / "src")).scope == Scope("acme", "payments")
    assert mapper.choose(str(tmp_path / "web")).scope == Scope("acme", "web")
    assert mapper.choose(str(tmp_path) + "-other").scope == Scope("me", tmp_path.name + "-other")
    assert mapper.choose(None).scope == Scope("me", "unknown")


def test_map_rules_for_windows_directories_match_case_insensitively() -> None:
    mapper = TenantMapper(parse_map("C:\\Users\\dain\\work=acme/*; e:\\Workspace=acme/ws"))
    assert mapper.choose("c:\\users\\DAIN\\work\\api").scope == Scope("acme", "api")
    assert mapper.choose("E:\\workspace\\src\\x").scope == Scope("acme", "ws")
    assert mapper.choose("C:\\Users\\dain\\workshop").scope == Scope("local", "workshop")
    assert mapper.choose("/home/dain/work/api").how == "default"


def test_bad_map_rules_are_refused() -> None:
    for bad in ("/x", "/x=acme", "/x=/repo", "=acme/x", "/x=ac me/x"):
        with pytest.raises(TenantMapError):
            parse_map(bad)


def test_from_env_reads_the_settings_when_called(tmp_path: Path) -> None:
    env = {"MEMFLOW_TENANT_MAP": f"{tmp_path}=acme/api", "MEMFLOW_DEFAULT_ORG": "team"}
    mapper = TenantMapper.from_env(env)
    assert mapper.choose(str(tmp_path)).how == "map"
    assert mapper.choose("/elsewhere/tool").scope == Scope("team", "tool")


def test_worktree_git_file_reads_the_common_config(tmp_path: Path) -> None:
    main = tmp_path / "main"
    (main / ".git" / "worktrees" / "wt").mkdir(parents=True)
    (main / ".git" / "config").write_text('[remote "origin"]\n  url = git@github.com:acme/core\n')
    (main / ".git" / "worktrees" / "wt" / "commondir").write_text("../..\n")
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / ".git").write_text(f"gitdir: {main / '.git' / 'worktrees' / 'wt'}\n")
    choice = TenantMapper().choose(str(wt))
    assert (choice.scope, choice.how) == (Scope("acme", "core"), "remote")


def test_a_repository_without_remote_uses_its_top_directory(tmp_path: Path) -> None:
    top = tmp_path / "my-service"
    (top / ".git").mkdir(parents=True)
    (top / ".git" / "config").write_text("[core]\n")
    assert TenantMapper(default_org="me").choose(str(top / "a" / "b")).scope == Scope(
        "me", "my-service"
    )


def test_a_fifo_for_a_git_config_is_never_opened(tmp_path: Path) -> None:
    top = tmp_path / "trap"
    (top / ".git").mkdir(parents=True)
    os.mkfifo(top / ".git" / "config")
    assert TenantMapper(default_org="me").choose(str(top)).scope == Scope("me", "trap")


def test_legacy_names_are_what_earlier_versions_gave(tmp_path: Path) -> None:
    mapper = TenantMapper()
    gitlab = "https://gitlab.com/acme/team-a/service.git"
    assert legacy_tenant(mapper, "/nonexistent", gitlab) == Scope("team-a", "service")
    azure = "https://dev.azure.com/contoso/Payments/_git/api"
    assert legacy_tenant(mapper, "/nonexistent", azure) == Scope("git", "api")
    assert legacy_tenant(mapper, str(tmp_path / "C++ tools"), None) == Scope("local", "C-tools")
    assert legacy_tenant(mapper, "e:\\Workspace\\app", None) is None  # it depended on the cwd


def test_a_name_that_its_suffix_makes_token_shaped_is_named_by_the_suffix() -> None:
    """Hypothesis found it: a folder name that is no secret, whose suffixed name is
    token-shaped (a short prefix, `-`, 30 and more characters), so Scope refused it."""
    name = "A-00000110SThAaEuIJJobs!"
    repo = folder_repo(name)
    assert repo.startswith("redacted-") and SUFFIX.search(repo)
    assert Scope("local", repo).ns == repo
    assert folder_repo(name + "x") != repo


@pytest.mark.parametrize(
    "url",
    [
        "https://gitlab.com/A!00000110SThAaEuIJJobs!epdgjvf7/repo",
        "git@github.com:A!00000110SThAaEuIJJobs!epdgjvf7/x.git",
        "https://gitlab.com/A%2100000110SThAaEuIJJobs%21epdgjvf7/repo",
    ],
)
def test_an_org_that_punctuation_makes_token_shaped_is_named_redacted(url: str) -> None:
    """A hostile review found it: the org half was never checked, so such a remote stopped
    a whole import run with a ScopeError."""
    scope = remote_tenant(url)
    assert scope is not None and scope.tenant_id == "redacted"
    assert SUFFIX.search(scope.ns)
    assert remote_tenant(url.replace("repo", "other").replace("x.git", "y.git")) != scope


@settings(max_examples=300, deadline=None)
@given(org=PART, repo=PART)
def test_every_remote_of_generated_parts_is_a_valid_tenant(org: str, repo: str) -> None:
    for url in (f"https://gitlab.com/{org}/{repo}", f"git@github.com:{org}/{repo}.git"):
        remote_tenant(url)  # a Scope or None, never a ScopeError
