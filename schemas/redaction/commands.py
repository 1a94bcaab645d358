from __future__ import annotations

import re

from schemas.redaction._base import (
    _at,
    _bounded,
    _Detector,
    _Scan,
)
from schemas.redaction.values import (
    _balanced_len,
    _is_value,
)

# up to whitespace, a quote or a shell operator. A bare one never starts with `-` (the next
# flag: `mongo -p --authenticationDatabase admin` prompts for the password).
_QUOTED_WORD = r"""'(?P<sq>[^'\n]*)'|"(?P<dq>(?:\\.|[^"\\\n])*)\""""
_SHELL_WORD = rf"""(?:{_QUOTED_WORD}|(?P<v>[^\s"'`|&;<>-][^\s"'`|&;<>]*))"""
_SHELL_WORD_GLUED = rf"""(?:{_QUOTED_WORD}|(?P<v>[^\s"'`|&;<>]+))"""
_SAME_COMMAND = r"[^\n|;&]*?[ \t]"


def _group(m: re.Match[str], name: str) -> str | None:
    try:
        return m.group(name)
    except IndexError:  # a pattern with no quoted form
        return None


def _shell_span(m: re.Match[str]) -> tuple[int, int] | None:
    for group in ("sq", "dq"):
        if _group(m, group) is not None:
            ok = _is_value(m.group(group), "password", quoted=True)
            return m.span(group) if ok else None
    group = "v" if _group(m, "v") is not None or _group(m, "v2") is None else "v2"
    start = m.start(group)
    end = start + _balanced_len(m.group(group))
    value = m.string[start:end]
    return (start, end) if _is_value(value, "password", quoted=False, literal=True) else None


def _command(pattern: str, gate: tuple[str, ...], starts: tuple[str, ...]) -> _Detector:
    # Credentials on the command lines agents run most; detect-secrets has no plugin for
    # them. The command word gates and anchors the search; the flag must be in the same
    # command (no `|`, `;`, `&` or newline before it): a `_Scan` from the command word.
    head, same_command, flag = pattern.partition(_SAME_COMMAND)
    return _Detector(
        "password",
        re.compile(pattern),  # flags are case-sensitive: `mysql -P 3306` is a port
        gate,
        priority=3,
        refine=_shell_span,
        starts=_at(*starts, before=r"\b"),
        scan=_Scan(re.compile(head), _COMMAND_RUN, re.compile(r"[ \t]" + flag))
        if same_command
        else None,
    )


_COMMAND_RUN = re.compile(r"[^\n|;&]*")


_LOGIN_TOOLS = "docker|podman|nerdctl|buildah|skopeo|oras|registry|acr|az"
_COMMANDS: tuple[_Detector, ...] = (
    _command(rf"\bsshpass\b{_SAME_COMMAND}-p[ \t]*{_SHELL_WORD_GLUED}", ("sshpass",), ("sshpass",)),
    _command(
        rf"\bredis-cli\b{_SAME_COMMAND}(?:-a|--pass)[ \t]+{_SHELL_WORD}",
        ("redis-cli",),
        ("redis-cli",),
    ),
    # `docker login -u bot -p X registry` (podman, nerdctl, buildah, skopeo, oras, helm
    # registry, az acr and az login take the same `-p`).
    _command(
        rf"\b(?:{_LOGIN_TOOLS})[ \t]+login\b{_SAME_COMMAND}-p[ \t]+{_SHELL_WORD}",
        ("login" + _bounded(r"[^\n|;&]", r"[ \t]-p", backtrack=True),),
        tuple(_LOGIN_TOOLS.split("|")),
    ),
    _command(
        rf"\bmongo(?:sh|dump|restore|import|export)?\b{_SAME_COMMAND}-p[ \t]+{_SHELL_WORD}",
        ("mongo",),
        ("mongo",),
    ),
    _command(rf"\bsqlcmd\b{_SAME_COMMAND}-P[ \t]*{_SHELL_WORD_GLUED}", ("sqlcmd",), ("sqlcmd",)),
    _command(rf"\bldap[a-z]*\b{_SAME_COMMAND}-w[ \t]*{_SHELL_WORD_GLUED}", ("ldap",), ("ldap",)),
    _command(
        rf"\b(?:un)?zip\b{_SAME_COMMAND}-P[ \t]*{_SHELL_WORD_GLUED}", ("zip",), ("zip", "unzip")
    ),
    _command(rf"\b7za?\b{_SAME_COMMAND}-p{_SHELL_WORD_GLUED}", ("7z",), ("7z",)),
    # MySQL's and MariaDB's clients and tools (`mysqldump`, `mariadb-dump`, `mariadb-admin` ...)
    _command(
        rf"\b(?:mysql(?:dump|admin|sh|import|check|binlog|slap|pump)?"
        rf"|mariadb(?:-?(?:dump|admin|import|check|binlog|slap))?)\b{_SAME_COMMAND}-p"
        rf"{_SHELL_WORD_GLUED}",
        ("mysql", "mariadb"),
        ("mysql", "mariadb"),
    ),
    # `lftp -u user,pass host`
    _command(
        rf"\blftp\b{_SAME_COMMAND}-u[ \t]+[^\s,'\"]+,{_SHELL_WORD_GLUED}", ("lftp",), ("lftp",)
    ),
    # FreeRDP's `/p:pass` (`xfreerdp`, `wlfreerdp`, `sdl-freerdp`), rdesktop's `-p pass`
    _command(
        rf"\b(?:[a-z]+-)?[a-z]*freerdp[0-9]?\b{_SAME_COMMAND}/p(?:assword)?:{_SHELL_WORD_GLUED}",
        ("freerdp",),
        ("xfreerdp", "wlfreerdp", "sdl-freerdp", "freerdp"),
    ),
    _command(rf"\brdesktop\b{_SAME_COMMAND}-p[ \t]*{_SHELL_WORD}", ("rdesktop",), ("rdesktop",)),
    # Oracle's tools and SQL*Plus' CONNECT: `sqlplus scott/tiger@orcl`, `expdp u/p@db ...`,
    # `CONNECT app/pw@//db:1521/svc` (the password between the user's `/` and the `@`)
    _command(
        r"\b(?:sqlplus|rman|expdp|impdp|sqlldr|dgmgrl|sql|conn(?:ect)?)[ \t]+(?:-\w+[ \t]+)*"
        r"""["']?[A-Za-z][\w$#.]*/(?P<v>[^\s@/"'|;&]+)(?=@|["']?(?:[ \t]|$))""",
        ("sqlplus", "rman", "expdp", "impdp", "sqlldr", "dgmgrl", "sql", "conn"),
        ("sqlplus", "rman", "expdp", "impdp", "sqlldr", "dgmgrl", "sql", "conn"),
    ),
    # openssl's `-pass pass:X`, `-passin pass:X`, `-passout pass:X`, `-k X`
    _command(
        rf"\bopenssl\b{_SAME_COMMAND}(?:-pass(?:in|out)?[ \t]+pass:|-k[ \t]+){_SHELL_WORD_GLUED}",
        ("openssl",),
        ("openssl",),
    ),
    # `htpasswd -b FILE USER PASS`, `rabbitmqctl add_user USER PASS`, `gh secret set X --body V`
    _command(
        # the flag's letters whole (`-[a-zA-Z]*b[a-zA-Z]*` tried each split of `-bbbb...`)
        rf"\bhtpasswd\b{_SAME_COMMAND}-(?=[a-zA-Z]*b)[a-zA-Z]*+(?:[ \t]+-[a-zA-Z]+)*"
        rf"[ \t]+\S+[ \t]+\S+[ \t]+{_SHELL_WORD_GLUED}",
        ("htpasswd",),
        ("htpasswd",),
    ),
    _command(
        rf"\brabbitmqctl\b{_SAME_COMMAND}(?:add_user|change_password)[ \t]+\S+[ \t]+"
        rf"{_SHELL_WORD_GLUED}",
        ("rabbitmqctl",),
        ("rabbitmqctl",),
    ),
    _command(
        rf"\bgh[ \t]+secret[ \t]+set\b{_SAME_COMMAND}(?:--body(?:[ \t]+|=)|-b[ \t]*)"
        rf"{_SHELL_WORD_GLUED}",
        ("secret" + _bounded(r"[ \t]", "set", least=1),),
        ("gh",),
    ),
    # A password piped into a command that reads it: `echo X | sudo -S ...`,
    # `echo X | docker login ... --password-stdin`, `echo X | passwd --stdin`, `| chpasswd`.
    _command(
        rf"\becho[ \t]+(?:-[ne][ \t]+)*{_SHELL_WORD_GLUED}[ \t]*\|[ \t]*"
        r"(?:sudo[ \t]+(?:-[a-zA-Z]+[ \t]+)*-[a-zA-Z]*S|[^\n|;&]*--password-stdin"
        r"|passwd[ \t]+--stdin|chpasswd)",
        ("echo" + _bounded(r"[^\n|]", r"\|"),),
        ("echo",),
    ),
    # `ssh-keygen -N 'new passphrase'`, `-P 'old passphrase'`
    _command(
        rf"\bssh-keygen\b{_SAME_COMMAND}-[NP][ \t]*{_SHELL_WORD_GLUED}",
        ("ssh-keygen",),
        ("ssh-keygen",),
    ),
    # Windows: `net use Z: \\fs\share PASSWORD /user:DOM\u`, `net use ... /user:DOM\u PASSWORD`,
    # `cmdkey /add:host /user:u /pass:PASSWORD`
    _command(
        r"\b(?i:net)[ \t]+(?i:use)\b"
        + _SAME_COMMAND
        + r"""(?:\\\\\S+[ \t]+(?P<v>[^\s/*"'][^\s"']*)"""
        r"""|/(?i:user|u):\S+[ \t]+(?P<v2>[^\s/*"'][^\s"']*))""",
        ("net" + _bounded(r"[ \t]", "use", least=1),),
        ("net",),
    ),
    _command(
        rf"\b(?i:cmdkey)\b{_SAME_COMMAND}/(?i:pass):{_SHELL_WORD_GLUED}",
        ("cmdkey",),
        ("cmdkey",),
    ),
    # PowerShell: `ConvertTo-SecureString "pw" -AsPlainText -Force` (flags in any order)
    _command(
        r"""\b(?i:convertto-securestring)(?:[ \t]+-(?i:string|force|asplaintext))*[ \t]+"""
        + _SHELL_WORD,
        ("convertto-securestring",),
        ("convertto-securestring",),
    ),
    # `smbclient -U user%pass`
    _command(
        rf"\bsmbclient\b{_SAME_COMMAND}-U[ \t]*[^\s%'\"]+%{_SHELL_WORD_GLUED}",
        ("smbclient",),
        ("smbclient",),
    ),
)


# --- e-mail addresses -------------------------------------------------------------------------
_CURL_USER_FLAG = r"""[ \t](?:-[uU][ \t]*|--(?:proxy-)?user[ \t=])
    (?:'[^\s:']*:(?P<sq>[^'\n]*)'|"[^\s:"]*:(?P<dq>(?:\\.|[^"\\\n])*)"
      |[^\s:"']+:(?P<v>[^\s"']+))"""


DETECTORS: tuple[_Detector, ...] = (
    # `curl -u user:pass` (quoted or not).
    _Detector(
        "password",
        re.compile(r"\bcurl\b[^\n|;]*?" + _CURL_USER_FLAG, re.VERBOSE),
        ("curl",),
        priority=3,
        refine=_shell_span,
        starts=_at("curl", before=r"\b"),
        scan=_Scan(
            re.compile(r"\bcurl\b"),
            re.compile(r"[^\n|;]*"),
            re.compile(_CURL_USER_FLAG, re.VERBOSE),
        ),
    ),
    *_COMMANDS,
)
