"""Redaction: every secret category, in prose, JSON and names; no false alarms on coding text.

Fake secrets are generated at run time (seeded) so that no token-shaped literal sits in the
repository for scanners to trip on.
"""

from __future__ import annotations

import base64
import json
import random
import re
import string
from dataclasses import dataclass

import polars as pl
import pytest
from detect_secrets.plugins import keyword

from schemas.redaction import (
    PLACEHOLDER,
    _base,
    _gates,
    assignments,
    contains_secret,
    detectors,
    keywords,
    library,
    redact,
    redact_id,
    redact_json,
    redact_record,
    redact_series,
    redact_series_with_count,
    redact_with_count,
    ruleset,
    secret_mask,
    values,
)

_RNG = random.Random(20240611)
ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
URLSAFE = ALNUM + "-_"


def rand(n: int, alphabet: str = ALNUM) -> str:
    # Random keys mix cases and digits; make sure each sample does.
    while True:
        value = "".join(_RNG.choice(alphabet) for _ in range(n))
        if alphabet != ALNUM or (
            any(c.isdigit() for c in value)
            and any(c.isupper() for c in value)
            and any(c.islower() for c in value)
        ):
            return value


def b64url_json(obj: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def pem(label: str) -> str:
    body = "\n".join(rand(64, ALNUM + "+/") for _ in range(5))
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----"


@dataclass(frozen=True)
class Case:
    id: str
    text: str
    secret: str  # what must not survive
    kind: str  # the placeholder expected
    kept: str = ""  # context that must survive


def _cases() -> list[Case]:
    aws_id = "AKIA" + rand(16, UPPER_DIGITS)
    aws_secret = rand(40, ALNUM + "/+")
    azure = base64.b64encode(_RNG.randbytes(64)).decode()
    jwt = ".".join(
        [
            b64url_json({"alg": "HS256", "typ": "JWT"}),
            b64url_json({"sub": "1234567890", "name": "Jane Doe", "iat": 1516239022}),
            rand(43, URLSAFE),
        ]
    )
    ghp, gho, ghs = ("gh" + p + "_" + rand(36) for p in "pos")
    pat = "github_pat_" + rand(22) + "_" + rand(59)
    glpat = "glpat-" + rand(20, URLSAFE)
    xoxb = f"xoxb-{_RNG.randrange(10**11, 10**12)}-{_RNG.randrange(10**12, 10**13)}-{rand(24)}"
    team, hook = rand(8, UPPER_DIGITS), rand(10, UPPER_DIGITS)
    webhook = f"https://hooks.slack.com/services/T{team}/B{hook}/{rand(24)}"
    discord = "M" + rand(25) + "." + rand(6) + "." + rand(27)
    telegram = f"{_RNG.randrange(10**8, 10**9)}:{rand(35, URLSAFE)}"
    openai_legacy = "sk-" + rand(20) + "T3BlbkFJ" + rand(20)
    openai_proj = "sk-proj-" + rand(64, URLSAFE) + "T3BlbkFJ" + rand(64, URLSAFE)
    openai_svc = "sk-svcacct-" + rand(48)
    anthropic = "sk-ant-api03-" + rand(93, URLSAFE) + "-" + rand(6)
    stripe_live = "sk_live_" + rand(99)
    stripe_test = "rk_test_" + rand(24)
    sendgrid = "SG." + rand(22, URLSAFE) + "." + rand(43, URLSAFE)
    twilio = "SK" + rand(32, string.digits + "abcdef")
    npm = "npm_" + rand(36)
    pypi = "pypi-AgEIcHlwaS5vcmc" + rand(120, URLSAFE)
    gcp = "AIza" + rand(35, URLSAFE)
    hf = "hf_" + rand(34)
    bearer = rand(40, URLSAFE)
    basic = base64.b64encode(b"admin:correct-horse-battery").decode()
    pw = "Tr0ub4dor&3"
    rsa, openssh, generic = pem("RSA PRIVATE KEY"), pem("OPENSSH PRIVATE KEY"), pem("PRIVATE KEY")
    ec, pgp = pem("EC PRIVATE KEY"), pem("PGP PRIVATE KEY BLOCK")
    putty = (
        "PuTTY-User-Key-File-2: ssh-rsa\nEncryption: none\nPrivate-Lines: 2\n"
        f"{rand(64)}\n{rand(40)}\nPrivate-MAC: {rand(40, '0123456789abcdef')}"
    )
    session, csrf = rand(32, URLSAFE), rand(32)
    return [
        Case("aws_key_id", f"export AWS_ACCESS_KEY_ID={aws_id}", aws_id, "aws_key", "export"),
        Case(
            "aws_secret_quoted",
            f'aws_secret_access_key = "{aws_secret}"',
            aws_secret,
            "aws_key",
            "aws_secret_access_key",
        ),
        Case(
            "aws_secret_env",
            f"AWS_SECRET_ACCESS_KEY={aws_secret} aws s3 ls",
            aws_secret,
            "secret",
            "aws s3 ls",
        ),
        Case(
            "azure_storage",
            f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={azure};"
            "EndpointSuffix=core.windows.net",
            azure,
            "azure_storage_key",
            "AccountName=acme;AccountKey=[REDACTED:azure_storage_key];EndpointSuffix",
        ),
        Case("gcp_api_key", f"maps key {gcp} in the config", gcp, "gcp_api_key", "in the config"),
        Case("github_ghp", f"git push https://{ghp}@github.com/o/r", ghp, "github_token"),
        Case("github_gho", f"oauth token {gho}", gho, "github_token", "oauth token"),
        Case("github_ghs", f"GH app token: {ghs}", ghs, "github_token", "GH app"),
        Case("github_pat", f"use {pat} for the API", pat, "github_token", "for the API"),
        Case("gitlab_pat", f"GITLAB: {glpat}", glpat, "gitlab_token", "GITLAB"),
        Case("slack_bot", f"slack bot {xoxb} posts", xoxb, "slack_token", "posts"),
        Case("slack_webhook", f"webhook {webhook}", webhook, "slack_token", "webhook"),
        Case("discord_bot", f"discord bot {discord} online", discord, "discord_token", "online"),
        Case("telegram_bot", f"telegram {telegram} ok", telegram, "telegram_token", "ok"),
        Case("openai_legacy", f"key {openai_legacy} end", openai_legacy, "openai_key", "end"),
        Case("openai_project", f"OPENAI_KEY: {openai_proj}", openai_proj, "openai_key"),
        Case("openai_service", f"svc {openai_svc} here", openai_svc, "openai_key", "here"),
        Case("anthropic", f"use {anthropic} now", anthropic, "anthropic_key", "now"),
        Case("stripe_live", f"charge with {stripe_live}", stripe_live, "stripe_key", "charge"),
        Case("stripe_test", f"test mode {stripe_test}", stripe_test, "stripe_key", "test mode"),
        Case("sendgrid", f"mail via {sendgrid}", sendgrid, "sendgrid_key", "mail via"),
        Case("twilio", f"twilio api {twilio} sms", twilio, "twilio_key", "sms"),
        Case(
            "npmrc",
            f"//registry.npmjs.org/:_authToken={npm}",
            npm,
            "npm_token",
            "//registry.npmjs.org/:_authToken=",
        ),
        Case("npm_bare", f"publish with {npm} today", npm, "npm_token", "today"),
        Case("pypi", f"twine upload -p {pypi} dist/*", pypi, "pypi_token", "dist/*"),
        Case("huggingface", f"HF {hf} login", hf, "huggingface_token", "login"),
        Case(
            "bearer_header",
            f"curl -H 'Authorization: Bearer {bearer}' https://api.example.com",
            bearer,
            "bearer_token",
            "Authorization: Bearer [REDACTED:bearer_token]",
        ),
        Case(
            "bearer_json_header",
            f'{{"headers": {{"Authorization": "Bearer {bearer}"}}}}',
            bearer,
            "bearer_token",
            '"Authorization": "Bearer [REDACTED:bearer_token]"',
        ),
        Case("bearer_prose", f"sent bearer {bearer} twice", bearer, "bearer_token", "twice"),
        Case(
            "basic_header",
            f"Authorization: Basic {basic}",
            basic,
            "basic_auth",
            "Authorization: Basic",
        ),
        Case("jwt", f"session={jwt}; Path=/", jwt, "jwt", "Path=/"),
        Case("jwt_bearer", f"Authorization: Bearer {jwt}", jwt, "jwt", "Authorization: Bearer"),
        Case("password_eq", f"password={pw}", pw, "password", "password=[REDACTED:password]"),
        Case("passwd_colon", f"passwd: {pw}", pw, "password", "passwd: [REDACTED:password]"),
        Case(
            "secret_json", f'{{"secret": "{pw}"}}', pw, "secret", '{"secret": "[REDACTED:secret]"}'
        ),
        Case(
            "pgpassword",
            f"PGPASSWORD={pw} psql -h db -U app",
            pw,
            "password",
            "PGPASSWORD=[REDACTED:password] psql -h db -U app",
        ),
        Case(
            "api_key_single",
            f"api_key = '{pw}'",
            pw,
            "api_key",
            "api_key = '[REDACTED:api_key]'",
        ),
        Case(
            "annotated",
            f'db_password: str = "{pw}"',
            pw,
            "password",
            'db_password: str = "[REDACTED:password]"',
        ),
        Case("yaml", f"database:\n  password: {pw}\n  host: db", pw, "password", "host: db"),
        Case("cli_flag", f"mysql --password {pw} -h db", pw, "password", "-h db"),
        Case("github_token_env", "GITHUB_TOKEN=" + rand(30), "", "token", "GITHUB_TOKEN="),
        Case(
            "ado", f"Server=db;User Id=app;Password={pw};", pw, "password", "Server=db;User Id=app;"
        ),
        Case(
            "escaped_json",
            f'{{\\"password\\": \\"{pw}\\"}}',
            pw,
            "password",
            '\\"password\\": \\"[REDACTED:password]\\"',
        ),
        Case(
            "postgres_url",
            "postgres://app:s3cr3t-Pa55@db:5432/pay",
            "s3cr3t-Pa55",
            "password",
            "postgres://app:[REDACTED:password]@db:5432/pay",
        ),
        Case(
            "url_special_chars",
            "mysql://root:p4$$w0rd!;x@127.0.0.1:3306/app",
            "p4$$w0rd!",
            "password",
            "mysql://root:[REDACTED:password]@127.0.0.1:3306/app",
        ),
        Case(
            "url_no_user",
            "redis://:hunter22@cache:6379/0",
            "hunter22",
            "password",
            "redis://:[REDACTED:password]@cache:6379/0",
        ),
        Case(
            "url_at_in_password",
            "mongodb+srv://svc:p@ss@cluster0.example.net/db",
            "p@ss",
            "password",
            "mongodb+srv://svc:[REDACTED:password]@cluster0.example.net/db",
        ),
        Case("curl_user", "curl -u admin:s3cr3t-99 https://api", "s3cr3t-99", "password", "admin:"),
        Case("mysql_p", "mysql -u root -pS3cret!9 -h db", "S3cret!9", "password", "-h db"),
        Case(
            "query_token",
            f"GET /cb?access_token={bearer}&state=xyz",
            bearer,
            "token",
            "?access_token=[REDACTED:token]&state=xyz",
        ),
        Case("js_api_key", f"const apiKey = '{pw}';", pw, "api_key", "const apiKey = '"),
        Case("pem_rsa", f"key:\n{rsa}\nthanks", rsa, "private_key", "thanks"),
        Case("pem_openssh", f"id_ed25519 is\n{openssh}\n", openssh, "private_key", "id_ed25519"),
        Case("pem_generic", f"{generic} (pkcs8)", generic, "private_key", "(pkcs8)"),
        Case("pem_ec", f"ec {ec}", ec, "private_key"),
        Case("pem_pgp", f"gpg export:\n{pgp}", pgp, "private_key", "gpg export"),
        Case("putty", f"ppk:\n{putty}\n-- end", putty, "private_key", "-- end"),
        Case(
            "email", "contact jane.doe@example.com today", "jane.doe@example.com", "email", "today"
        ),
        Case(
            "email_underscore", "owner: john_smith@corp.io", "john_smith@corp.io", "email", "owner"
        ),
        Case(
            "email_plus",
            "<ops+alerts@mail.example.co.uk>",
            "ops+alerts@mail.example.co.uk",
            "email",
            "<",
        ),
        Case("email_mailto", "[mail](mailto:bob@corp.io)", "bob@corp.io", "email", "(mailto:"),
        Case(
            "email_author",
            "Author: Jane Doe <jane@corp.com>",
            "jane@corp.com",
            "email",
            "Jane Doe <",
        ),
        Case(
            "email_unicode", "owner: josé_núñez@corp.es", "josé_núñez@corp.es", "email", "owner: "
        ),
        # PostgreSQL's password file: only the password field goes
        Case(
            "pgpass_line",
            f"db.internal:5432:payments:app:{pw}",
            pw,
            "password",
            "db.internal:5432:payments:app:[REDACTED:password]",
        ),
        Case(
            "pgpass_file",
            f"$ cat ~/.pgpass\nlocalhost:5432:*:postgres:{pw}\n*:*:*:replicator:correct horse 9\n",
            "correct horse 9",
            "password",
            "localhost:5432:*:postgres:[REDACTED:password]\n*:*:*:replicator:[REDACTED:password]\n",
        ),
        # cookies: values go, names and attributes stay
        Case(
            "cookie_header",
            f"curl -H 'Cookie: sessionid={session}; csrftoken={csrf}' https://app.example.com/api",
            session,
            "cookie",
            "-H 'Cookie: sessionid=[REDACTED:cookie]; csrftoken=[REDACTED:cookie]' https://",
        ),
        Case(
            "set_cookie",
            f"Set-Cookie: SID={session}; Path=/; Secure; HttpOnly; Max-Age=3600; SameSite=Lax",
            session,
            "cookie",
            "Set-Cookie: SID=[REDACTED:cookie]; Path=/; Secure; HttpOnly; Max-Age=3600;"
            " SameSite=Lax",
        ),
        Case(
            "curl_cookie",
            f"curl -b 'session={session}; theme=dark' https://app.example.com",
            session,
            "cookie",
            "curl -b 'session=[REDACTED:cookie]; theme=[REDACTED:cookie]' https://app.example.com",
        ),
        Case(
            "cookies_txt",
            "# Netscape HTTP Cookie File\n"
            f".example.com\tTRUE\t/\tFALSE\t1767225600\tsessionid\t{session}",
            session,
            "cookie",
            ".example.com\tTRUE\t/\tFALSE\t1767225600\tsessionid\t[REDACTED:cookie]",
        ),
        # passwords stated in prose, beyond English
        Case(
            "prose_de",
            f"das Passwort für die Datenbank ist {pw}",
            pw,
            "password",
            "das Passwort für die Datenbank ist [REDACTED:password]",
        ),
        Case(
            "prose_ru",
            f"пароль от базы — {pw}, не теряй",
            pw,
            "password",
            "пароль от базы — [REDACTED:password], не теряй",
        ),
        Case(
            "prose_zh",
            f"数据库密码是{pw}，请勿外传",
            pw,
            "password",
            "数据库密码是[REDACTED:password]，",
        ),
    ]


CASES = _cases()
CASE_IDS = [c.id for c in CASES]


def _assert_redacted(out: str, case: Case, *, exact_kind: bool = True) -> None:
    if case.secret:
        assert case.secret not in out
        # the whole token went, not a fixed-length prefix of it
        assert case.secret[-6:] not in out or case.secret[-6:] in case.kept
    if exact_kind:
        assert PLACEHOLDER.format(kind=case.kind) in out, out
    else:  # JSON escaping can hide the context a specific detector needs
        assert "[REDACTED:" in out, out
    assert case.kept in out, out
    assert not contains_secret(out), out


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_category_is_redacted(case: Case) -> None:
    assert contains_secret(case.text)
    out, n = redact_with_count(case.text)
    assert n >= 1
    _assert_redacted(out, case)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_category_in_prose(case: Case) -> None:
    text = f"While fixing the deploy I ran\n{case.text}\nand the build went green again."
    out = redact(text)
    assert out is not None
    _assert_redacted(out, case)
    assert out.startswith("While fixing the deploy I ran\n")
    assert out.endswith("and the build went green again.")


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_category_in_json(case: Case) -> None:
    doc = {"turn": {"role": "user", "content": case.text, "tags": ["ops", case.text]}}
    # as JSON text (a stored record) it stays parseable
    out = redact(json.dumps(doc))
    assert out is not None
    parsed = json.loads(out)
    for value in (parsed["turn"]["content"], parsed["turn"]["tags"][1]):
        _assert_redacted(value, case, exact_kind=False)
    # as a parsed value, the structure stays
    walked = redact_json(doc)
    assert walked["turn"]["role"] == "user" and walked["turn"]["tags"][0] == "ops"
    _assert_redacted(walked["turn"]["content"], case)
    _assert_redacted(walked["turn"]["tags"][1], case)


@pytest.mark.parametrize("case", [c for c in CASES if len(c.text) <= 120], ids=lambda c: c.id)
def test_category_in_names(case: Case) -> None:
    out = redact_series(pl.Series("subject", [case.text, "AuthService", case.text]))
    assert out[1] == "AuthService"
    assert out[0] == out[2] == redact(case.text)
    _assert_redacted(out[0], case)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_idempotent(case: Case) -> None:
    once = redact(case.text)
    assert redact(once) == once
    assert redact_with_count(once or "")[1] == 0


def _kinds() -> set[str]:
    kinds = {d.kind for d in detectors._DETECTORS}
    return kinds | {"password", "token", "api_key", "secret", "basic_auth", "auth_token"}


@pytest.mark.parametrize("kind", sorted(_kinds()))
def test_placeholders_do_not_trigger(kind: str) -> None:
    ph = PLACEHOLDER.format(kind=kind)
    contexts = [
        ph,
        f"password={ph}",
        f'{{"secret": "{ph}", "api_key": {json.dumps(ph)}}}',
        f"PGPASSWORD={ph} psql",
        f"postgres://app:{ph}@db:5432/pay",
        f"Authorization: Bearer {ph}",
        f"mysql --password {ph} -h db",
        f"token: {ph}",
        f"{ph}{ph}@{ph}.com",
        f"db.internal:5432:payments:app:{ph}",
        f"# ~/.pgpass\n{ph}:5432:*:{ph}:{ph}",
        f"Cookie: sessionid={ph}; csrftoken={ph}",
        f"Set-Cookie: SID={ph}; Path=/; HttpOnly",
        f".example.com\tTRUE\t/\tFALSE\t0\tsessionid\t{ph}",
        f"das Passwort ist {ph}",
        f"密码是{ph}",
    ]
    for text in contexts:
        assert not contains_secret(text), text
        assert redact(text) == text


def test_counts_every_secret_and_keeps_the_rest() -> None:
    aws_id = "AKIA" + rand(16, UPPER_DIGITS)
    text = (
        f"Deploy used {aws_id}; mail ops@example.org; "
        "db at postgres://app:hunter22@db/pay and password=letmein99 today."
    )
    out, n = redact_with_count(text)
    assert n == 4
    assert out == (
        "Deploy used [REDACTED:aws_key]; mail [REDACTED:email]; "
        "db at postgres://app:[REDACTED:password]@db/pay and password=[REDACTED:password] today."
    )


def test_none_passes_through() -> None:
    assert redact(None) is None


def test_truncated_pem_block_is_cut_to_the_end() -> None:
    block = pem("RSA PRIVATE KEY")
    text = "here is the key " + block[: len(block) // 2]
    assert redact(text) == "here is the key [REDACTED:private_key]"


def test_token_longer_than_the_library_pattern_is_cut_whole() -> None:
    key = "sk_live_" + rand(99)
    assert redact(f"[{key}]") == "[[REDACTED:stripe_key]]"


# Ordinary coding text must come back unchanged.
CLEAN = [
    "commit 3f2a9c1 fixes the retry loop",
    "git show 3f2a9c1e9b8d7c6a5f4e3d2c1b0a9f8e7d6c5b4a",
    "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "request id 123e4567-e89b-12d3-a456-426614174000",
    "bump fastapi to v0.115.2 and pydantic 2.9.0-rc.1",
    "src/auth/password_reset.py",
    "/home/dev/.ssh/known_hosts",
    "reset the password flow",
    "The password field must not be logged",
    "Password policy: at least 12 characters",  # a colon, then prose: see test below
    base64.b64encode(b"the quick brown fox jumps over the lazy dog").decode(),
    "ssh deploy@10.0.0.5 uptime",
    "ssh root@bastion",
    "git clone git@github.com:acme/payments.git",
    "npm i react@18.2.0 @types/node",
    "FROM python@sha256:0123456789abcdef",
    "<img src='logo@2x.png'>",
    "@dataclass(frozen=True)",
    "max_tokens=4096",
    "token_type: bearer",
    "tokenizer = AutoTokenizer.from_pretrained(name)",
    "def login(user: str, password: str) -> bool:",
    "password = os.environ['PGPASSWORD']",
    "password = settings.DB_PASSWORD",
    "password: ${DB_PASSWORD}",
    'password: "{{ vault_db_password }}"',
    "password: <your-password>",
    "password: ********",
    '"password": null',
    "secret_key = get_secret('prod')",
    "the bearer token expires after an hour",
    "Authorization header missing",
    "http://localhost:8080/api/v1/health",
    "https://docs.python.org/3/library/re.html#re.Pattern",
    "PWD=/home/dev/project",
    "primary key (tenant_id, entity_id)",
    "keyboard shortcuts",
    "sk-learn-model-selection-utilities",
    "x-api-key header is required",
    "kubectl get secret db-creds -o yaml",
    "eyJfoo.eyJbar is not a token",
    "Asia/Tokyo timezone",
    "UserRepository.find_by_email(email)",
    "const token = await getToken()",
    "password: Optional[str] = None",
    "docker run -u 1000:1000 app",
    "mysql -u root -p -h db",
    'curl -u "$USER:$PASS" https://api.example.com',
    "Author: dependabot[bot] <49699333+dependabot[bot]@users.noreply.github.com>",
    'api_key: "${{ secrets.API_KEY }}"',
    "tokens: 1500",
    "primary_key=True",
    "cache_key = f'user:{id}'",
    "public_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
    "",
]


@pytest.mark.parametrize("text", CLEAN)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact(text) == text
    assert not contains_secret(text)


def test_documented_decisions() -> None:
    # an e-mail-shaped SSH login is redacted: the name is as personal as an address
    assert redact("ssh jane@build.example.com") == "ssh [REDACTED:email]"
    # a key followed by a colon takes the next word as its value, even in prose
    assert redact("Password: hunter22") == "Password: [REDACTED:password]"
    # a type annotation is not a value, an assignment after it is
    assert redact("password: str") == "password: str"
    assert redact('password: str = "hunter22"') == 'password: str = "[REDACTED:password]"'


def test_redact_json_nested_structures() -> None:
    value = {
        "user": "jane@example.com",
        "config": {
            "password": "hunter22",
            "port": 5432,
            "db": {"PGPASSWORD": 123456, "dsn": "postgres://app:pw99@db/x"},
            "secrets": {"inner": "abc123", "list": ["x1y2", 7731]},
            "api_key": None,
            "verbose": True,
        },
        "triples": [
            {
                "subject": "AuthService",
                "predicate": "USES",
                "object": "AKIA" + rand(16, UPPER_DIGITS),
            },
            ("tuple", "ops@example.org"),
        ],
        "max_tokens": 4096,
        "bob@example.com": "an address as a key",
    }
    out = redact_json(value)
    assert out["user"] == "[REDACTED:email]"
    cfg = out["config"]
    assert cfg["password"] == "[REDACTED:password]"
    assert cfg["port"] == 5432
    assert cfg["db"] == {
        "PGPASSWORD": "[REDACTED:password]",
        "dsn": "postgres://app:[REDACTED:password]@db/x",
    }
    assert cfg["secrets"] == {
        "inner": "[REDACTED:secret]",
        "list": ["[REDACTED:secret]", "[REDACTED:secret]"],
    }
    assert cfg["api_key"] is None and cfg["verbose"] is True
    assert out["triples"][0] == {
        "subject": "AuthService",
        "predicate": "USES",
        "object": "[REDACTED:aws_key]",
    }
    assert out["triples"][1] == ["tuple", "[REDACTED:email]"]
    assert out["max_tokens"] == 4096
    assert out["[REDACTED:email]"] == "an address as a key"
    assert redact_json(out) == out
    assert not contains_secret(json.dumps(out))


@pytest.mark.parametrize(
    "value",
    [
        "line one\njane@example.com",
        "josé_núñez@corp.es wrote",
        "tab\tghp_" + "a1B2" * 9,
        'PGPASSWORD="s3cr3t-99" psql',
        "password=abc\\",
        "see C:\\Users\\dev, token=" + "Zx9" * 4,
    ],
)
def test_json_text_stays_parseable(value: str) -> None:
    """Spans never split a backslash escape of the JSON text they sit in."""
    out = redact(json.dumps({"content": value}))
    assert out is not None
    content = json.loads(out)["content"]
    assert "[REDACTED:" in content
    assert not contains_secret(content)


def test_redact_json_keeps_colliding_keys() -> None:
    out = redact_json({"a@example.com": 1, "b@example.com": 2})
    assert sorted(out.values()) == [1, 2]
    assert all(k.startswith("[REDACTED:email]") for k in out)


def _mixed_column() -> pl.Series:
    values: list[str | None] = []
    for i, case in enumerate(CASES):
        values += [case.text, f"Service{i % 7}", None, case.text, "reset the password flow"]
    values += CLEAN
    return pl.Series("object", values)


def test_series_path_equals_scalar_path() -> None:
    column = _mixed_column()
    expected = [redact(v) for v in column.to_list()]
    assert redact_series(column).to_list() == expected
    assert redact_series(column).name == "object"
    redacted, counts = redact_series_with_count(column)
    assert redacted.to_list() == expected
    assert counts.dtype == pl.Int32
    assert counts.to_list() == [0 if v is None else redact_with_count(v)[1] for v in column]
    assert secret_mask(column).to_list() == [v is not None and contains_secret(v) for v in column]
    assert not secret_mask(redacted).any()
    assert redact_series(redacted).equals(redacted)


def test_series_edge_cases() -> None:
    clean = pl.Series("n", ["a", None, "b"])
    assert redact_series(clean).equals(clean)
    assert redact_series_with_count(clean)[1].to_list() == [0, 0, 0]
    nulls = pl.Series("n", [None, None])
    assert redact_series(nulls).to_list() == [None, None]
    assert secret_mask(nulls).to_list() == [False, False]
    with pytest.raises(TypeError):
        redact_series(pl.Series("n", [1, 2]))


def test_the_column_path_finds_every_secret() -> None:
    """The column functions skip no value the scalar path redacts (no prefilter in between)."""
    texts = pl.Series([c.text for c in CASES])
    assert secret_mask(texts).to_list() == [contains_secret(t) for t in texts]
    assert secret_mask(texts).all()
    assert redact_series(texts).to_list() == [redact(t) for t in texts]


def test_library_gates_were_reviewed_for_this_detect_secrets() -> None:
    stale = [
        s.plugin.__name__ for s in library._LIBRARY if library.fingerprint(s.plugin) != s.reviewed
    ]
    assert not stale, f"detect-secrets denylists changed; review the gates of {stale}"
    assert all(d.gate != library.CATCH_ALL for d in detectors._DETECTORS)


@pytest.mark.parametrize("kw", keyword.DENYLIST)
def test_keyword_gate_covers_detect_secrets_keywords(kw: str) -> None:
    for spelling in (kw.replace("_?", ""), kw.replace("_?", "_")):
        assert any(word in spelling for word in keywords._KEYWORD_GATE), spelling


# --- red-team regressions (review 2026-12: F3, F7, F8, F11) -----------------------------------


def test_f3_a_placeholder_followed_by_a_colon_is_no_assignment() -> None:
    gcp = "AIza" + rand(35, URLSAFE)
    text = f"Here is the Maps key {gcp}: please restrict it to our domain."
    out = redact(text)
    assert out == "Here is the Maps key [REDACTED:gcp_api_key]: please restrict it to our domain."
    assert not contains_secret(out) and redact(out) == out
    for text in ("[REDACTED:private_key]: word", "[REDACTED:api_key]: please", "[REDACTED]: x1"):
        assert redact(text) == text and not contains_secret(text)


@pytest.mark.parametrize("kind", sorted(_kinds()))
def test_placeholder_is_never_a_key_nor_a_value(kind: str) -> None:
    ph = PLACEHOLDER.format(kind=kind)
    for text in (
        f"{ph}: word",
        f"{ph}=value1",
        f"{ph} is Hunter2RT",  # the prose rule reads a password word, never a placeholder
        f'"{ph}": "Tr0ub4dor"',
        f"key {ph}: please restrict it",
        f"{ph}[{ph}]: {ph}",
    ):
        assert redact(text) == text, text
        assert not contains_secret(text), text


def test_a_secret_next_to_a_placeholder_is_left_as_the_first_pass_left_it() -> None:
    """Text touching a placeholder was judged when the secret still stood there; with the
    placeholder in its place (other characters, other length) it could read otherwise."""
    block = pem("RSA PRIVATE KEY")
    once = redact(f"password: {block}/path")
    assert once == "password: [REDACTED:private_key]/path"
    assert redact(once) == once


SAS_SIG = "Rt7Kq9%2FzX2mLw8VbN4cYs1HfJ0aPdE6uG3iKoQ%3D"
F7 = [
    ("sshpass -p SshPassRT4 ssh h", "SshPassRT4", "sshpass -p [REDACTED:password] ssh h"),
    (
        "docker login -u b -p DockerPwRT3 r.io",
        "DockerPwRT3",
        "docker login -u b -p [REDACTED:password] r.io",
    ),
    (
        "docker login -u b --password DockerPwRT3 r.io",
        "DockerPwRT3",
        "docker login -u b --password [REDACTED:password] r.io",
    ),
    ("redis-cli -a RedisPwRT5 ping", "RedisPwRT5", "redis-cli -a [REDACTED:password] ping"),
    (
        "DO dop_v1_8f3a9c1e2d4b5a6f7e8d9c0b1a2f3e4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b9a0f1e2d",
        "8f3a9c1e2d4b5a6f7e8d9c0b1a2f3e4d",
        "DO [REDACTED:digitalocean_token]",
    ),
    (
        f"https://x.blob.core.windows.net/c/f?sv=2021-08-06&sig={SAS_SIG}",
        SAS_SIG,
        "https://x.blob.core.windows.net/c/f?sv=2021-08-06&sig=[REDACTED:signature]",
    ),
    (
        "https://b.s3.amazonaws.com/k?X-Amz-Date=20261201T000000Z&X-Amz-Signature="
        "a1b2c3d4e5f6RTsig0011223344556677889900aabbccddeeff0011",
        "a1b2c3d4e5f6RTsig",
        "https://b.s3.amazonaws.com/k?X-Amz-Date=20261201T000000Z&X-Amz-Signature="
        "[REDACTED:signature]",
    ),
    ("DB_PASSWORD=Hunter2RT(prod)", "Hunter2RT", "DB_PASSWORD=[REDACTED:password]"),
    ("password=Sup3r[Secret]RT", "Sup3r", "password=[REDACTED:password]"),
    ("password: Sup3r[Secret]RT", "Sup3r", "password: [REDACTED:password]"),
    ("connect(password=Hunter2RT(prod), x=1)", "Hunter2RT", "password=[REDACTED:password], x=1)"),
    ("my password is hunter2RT", "hunter2RT", "my password is [REDACTED:password]"),
    ("the password is X9!abc, ok", "X9!abc", "the password is [REDACTED:password], ok"),
    ("pw: hunter2", "hunter2", "pw: [REDACTED:password]"),
    ("DB_PW=hunter2", "hunter2", "DB_PW=[REDACTED:password]"),
    (
        "the admin password for the staging db is 'correct horse 9'",
        "correct horse",
        "the admin password for the staging db is '[REDACTED:password]'",
    ),
    (
        "I changed the password to Abc123!",
        "Abc123",
        "I changed the password to [REDACTED:password]!",
    ),
    ("password Hunter2RT works", "Hunter2RT", "password [REDACTED:password] works"),
    ("my pin and password is 83920174", "83920174", "password is [REDACTED:password]"),
    (
        "the AWS secret is wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY ok",
        "wJalrXUtnFEMI",
        "the AWS secret is [REDACTED:aws_secret_key] ok",
    ),
    (
        "aws: AKIAIOSFODNN7EXAMPLE / wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI",
        "aws: [REDACTED:aws_key] / [REDACTED:aws_secret_key]",
    ),
    ("mongosh -u admin -p Mongo9Pw --host db", "Mongo9Pw", "-p [REDACTED:password] --host db"),
    ("sqlcmd -S db -U sa -P 'Sql!9pw'", "Sql!9pw", "-P '[REDACTED:password]'"),
    ("ldapsearch -x -D cn=admin -w LdapPw9 -b dc=x", "LdapPw9", "-w [REDACTED:password] -b"),
    ("openssl enc -aes256 -pass pass:Enc9Pw -in f", "Enc9Pw", "pass:[REDACTED:password] -in f"),
    ("smbclient //h/s -U bob%Smb9Pw", "Smb9Pw", "-U bob%[REDACTED:password]"),
    ("gpg --batch --passphrase Gpg9Pass -d f.gpg", "Gpg9Pass", "--passphrase [REDACTED:password]"),
    (
        "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=Root;"
        "SharedAccessKey=AbCd1234EfGh5678IjKl9012MnOp3456QrSt7890uvw=",
        "AbCd1234EfGh",
        "SharedAccessKeyName=Root;SharedAccessKey=[REDACTED:",
    ),
    (
        "client secret 1Ab8Q~Zx9_yW.vU-tS7rQ6pO5nM4lK3jI2hG1fE0d",
        "Zx9_yW",
        "client secret [REDACTED",
    ),
]


@pytest.mark.parametrize(("text", "secret", "kept"), F7, ids=[t[:32] for t, _, _ in F7])
def test_f7_misses_are_found(text: str, secret: str, kept: str) -> None:
    out = redact(text)
    assert out is not None
    assert secret not in out, out
    assert kept in out, out
    assert redact(out) == out and not contains_secret(out)
    assert secret_mask(pl.Series([text, out])).to_list() == [True, False]


URLS = [
    (
        "postgres://app:hunter2@db:5432/pay",
        "postgres://app:[REDACTED:password]@db:5432/pay",
    ),
    (
        "postgres://app:p&ss=x;y@db.internal:5432/pay?sslmode=require&application_name=api",
        "postgres://app:[REDACTED:password]@db.internal:5432/pay?sslmode=require"
        "&application_name=api",
    ),
    (
        "mongodb+srv://svc:p~ss@cluster0.example.net/db?retryWrites=true",
        "mongodb+srv://svc:[REDACTED:password]@cluster0.example.net/db?retryWrites=true",
    ),
    (
        f"https://x.blob.core.windows.net/c/f?sv=2021-08-06&se=2026-01-01&sp=r&sig={SAS_SIG}"
        "&spr=https",
        "https://x.blob.core.windows.net/c/f?sv=2021-08-06&se=2026-01-01&sp=r"
        "&sig=[REDACTED:signature]&spr=https",
    ),
    (
        "https://api.example.com/v1/items?page=2&access_token=Zx9Zx9Zx9Zx9Zx9&sort=asc",
        "https://api.example.com/v1/items?page=2&access_token=[REDACTED:token]&sort=asc",
    ),
    (
        "git clone https://x-access-token:ghp_" + "a1B2" * 9 + "@github.com/acme/pay.git",
        "git clone https://x-access-token:[REDACTED:github_token]@github.com/acme/pay.git",
    ),
]


@pytest.mark.parametrize(("text", "expected"), URLS, ids=[u[:24] for u, _ in URLS])
def test_a_url_keeps_scheme_host_port_path_and_other_parameters(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(expected) == expected


PROSE_CLEAN = [
    "the password policy is strict",
    "password reset tokens expire after 24h",
    "password123 is a bad password",
    "the password is at least 12 characters",
    "the password is set in .env",
    "the password is the same as before",
    "passwords are hashed with bcrypt",
    "the password is base64-encoded",
    "The password is required.",
    "the password is stored in vault",
    "the pw field in the form",
    "the password was rotated yesterday",
]


@pytest.mark.parametrize("text", PROSE_CLEAN)
def test_prose_about_passwords_is_left_alone(text: str) -> None:
    assert redact(text) == text


CODE_CLEAN = [
    'f"password={password}"',
    "f'token: {token}'",
    "export DB_PASSWORD=$(vault read -field=pw secret/db)",
    "DB_PASSWORD=`cat /run/secrets/db`",
    "password: ${{ secrets.DB_PASSWORD }}",
    "PGPASSWORD=$DB_PASS psql -h db",
    'PGPASSWORD="${DB_PASS:?}" psql',
    'mysql -p"$MYSQL_PWD" -h db',
    "sshpass -e ssh host",
    'docker login -u "$USER" -p "$TOKEN" ghcr.io',
    "echo $CR_PAT | docker login ghcr.io -u bot --password-stdin",
    'redis-cli -a "$REDIS_PASSWORD" ping',
    "mongo -u admin -p --authenticationDatabase admin",
    "mysql -h db -P 3306 -u app",
    "aws commit 3f2a9c1e9b8d7c6a5f4e3d2c1b0a9f8e7d6c5b4a",
    "arn:aws:iam::123456789012:role/service-role/MyLambdaRoleName1234567890ABCDEFGH",
    "git rev-parse HEAD: 9fceb02d0ae598e95dc970b74767f19372d61af8 (secret rotation)",
    "pw_hash = bcrypt.hashpw(pw, salt)",
    "upward: true",
    "self.password = password",
    "if password == confirm_password:",
    'password = request.form["password"]',
    'password = getpass.getpass("Password: ")',
    "user.password = hash_password(form.password.data)",
    "password = models.CharField(max_length=128)",
    "password: z.string().min(12)",
    "secret: !vault |",
    "sig=abc",
    "X-Amz-SignedHeaders=host",
    "https://x.blob.core.windows.net/c/f?sv=2021-08-06&se=2026-01-01&sp=r",
    "connection: postgres://app@db:5432/pay",
    "https://bob@example.com/x",
]


@pytest.mark.parametrize("text", CODE_CLEAN)
def test_code_and_references_are_left_alone(text: str) -> None:
    assert redact(text) == text
    assert not contains_secret(text)


# --- redact_record (F11) ----------------------------------------------------------------------


def test_f11_escaped_slashes_are_read_decoded() -> None:
    raw = (
        '{"org":"globex","repo":"x","session_id":"s","turn_id":"t","ts":"2026-11-20T00:00:00Z",'
        '"role":"user","content":"DATABASE_URL=postgres:\\/\\/app:EscSlashRT1@db\\/x"}'
    )
    out = redact_record(raw, 2000)
    assert "EscSlashRT1" not in out
    assert "postgres:\\/\\/app:[REDACTED:password]@db\\/x" in out
    assert json.loads(out)["org"] == "globex"
    assert not contains_secret(out)


def test_f11_unicode_escapes_and_escaped_quotes() -> None:
    raw = json.dumps({"content": 'db_password="Uni9Code"'}).replace("d", "\\u0064")
    assert "password" not in raw.replace("\\u0064", "")[:0] + raw.split("content")[0]
    out = redact_record(raw, 2000)
    assert "Uni9Code" not in out and not contains_secret(out)
    # the placeholder took the escape sequences of the secret, nothing around it
    assert json.loads(out) == {"content": 'db_password="[REDACTED:password]"'}


def test_f11_the_clip_comes_after_redaction() -> None:
    head = '{"content":"' + "x" * 1960 + " "
    raw = head + 'db_password=\\"ClipBoundaryRT77\\" and more"}'
    for limit in range(len(head), len(raw) + 5):
        out = redact_record(raw, limit)
        assert len(out) <= limit
        assert "ClipBoundary" not in out and "Clip" not in out[len(head) :], (limit, out)
        assert not contains_secret(out)
        assert "[REDACTED" not in out or "[REDACTED:password]" in out  # never half a placeholder


def test_record_that_is_not_json() -> None:
    raw = "garbage ,, token=abcdefgh12345678 \x00 postgres:\\/\\/u:Pw9Xyz@h"
    out = redact_record(raw, 2000)
    assert out == "garbage ,, token=[REDACTED:token] \x00 postgres:\\/\\/u:[REDACTED:password]@h"
    assert redact_record(raw, 0) == ""
    assert redact_record("", 10) == ""
    assert redact_record("clean line", 5) == "clean"


def test_a_cut_that_makes_code_look_like_a_secret_is_redacted_again() -> None:
    raw = "x = 1; password = get_password()"
    out = redact_record(raw, raw.index("word()") + 4)  # ... = get_pass
    assert not contains_secret(out)
    assert out.startswith("x = 1; password = ")


# --- redact_id (F8) ---------------------------------------------------------------------------


def _digest(value: str) -> str:
    import hashlib

    return hashlib.sha256(value.encode()).hexdigest()[:8]


def test_f8_secrets_in_ids() -> None:
    aws = "AKIAQ7RT4EXMPL2XYZ12"
    assert redact_id(f"sess-{aws}") == f"sess-[REDACTED:aws_key]~{_digest('sess-' + aws)}"
    assert redact_id(f"{aws}.jsonl") == f"[REDACTED:aws_key]~{_digest(aws + '.jsonl')}.jsonl"
    ghp, xoxb = "ghp_" + rand(36), f"xoxb-123456789012-1234567890123-{rand(24)}"
    for value in (ghp, f"turn-{ghp}", xoxb, "sk_live_" + rand(30), "password=hunter22"):
        out = redact_id(value)
        assert "[REDACTED:" in out and not contains_secret(out)
        assert redact_id(out) == out
    # two sessions whose ids differ only in their secret stay two sessions
    assert redact_id(f"sess-{aws}") != redact_id("sess-AKIAQ7RT4EXMPL2XYZ13")


@pytest.mark.parametrize(
    "value",
    [
        "sess-01",
        "123e4567-e89b-12d3-a456-426614174000",
        "3f2a9c1e9b8d7c6a5f4e3d2c1b0a9f8e7d6c5b4a",
        "claude-code",
        "cursor/0.42.3",
        "2026-11-20.jsonl",
        "turn_000042",
        "[REDACTED:aws_key]~1f0c3e9a",
        "",
    ],
)
def test_clean_ids_are_unchanged(value: str) -> None:
    assert redact_id(value) == value


# --- shapes found by attacking the redactor after the fixes above ----------------------------

MORE = [
    ("machine api.github.com login bot password hunter2x", "hunter2x"),
    ("machine h\n  login bot\n  password hunter2x", "hunter2x"),
    ('{"auths": {"ghcr.io": {"auth": "YWRtaW46SHVudGVyMlJUc2VjcmV0"}}}', "YWRtaW46SHVudGVy"),
    ("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", "1a2b3c4d5e6f7a8b"),
    ("dapi1234567890abcdef1234567890abcdef", "1234567890abcdef1234"),
    ("VAULT_ADDR=x vault login hvs.CAESIJ1fH2ZM9TBrKrmGsNmjQ8mT3OA94HhblZa", "CAESIJ1fH2ZM9T"),
    ("lin_api_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789ABCD", "AbCdEfGhIjKlMnOp"),
    (
        "PMAK-0123456789abcdef01234567-0123456789abcdef0123456789abcdef01",
        "0123456789abcdef0123456789",
    ),
    ("xapp-1-A0123ABCDEF-1234567890123-" + "ab12" * 16, "ab12ab12ab12"),
    ("key-3ax6xnjp29jd6fds4gc373sgvjxteol0", "3ax6xnjp29jd6fds"),
    ("ENV DB_PASSWORD Hunter2RT", "Hunter2RT"),
    ('psk="Hunter2RT"', "Hunter2RT"),
    ("CREATE USER app WITH PASSWORD 'Hunter2RT';", "Hunter2RT"),
    ("CREATE USER 'app'@'%' IDENTIFIED BY 'Hunter2RT';", "Hunter2RT"),
    ("ALTER ROLE app PASSWORD 'it''s9'", "it''s9"),
    ("echo Hunter2RT | sudo -S apt install x", "Hunter2RT"),
    ("echo 'Hunter2RT' | docker login -u bot --password-stdin r.io", "Hunter2RT"),
    ("htpasswd -cb .htpasswd admin Hunter2RT", "Hunter2RT"),
    ("rabbitmqctl add_user app Hunter2RT", "Hunter2RT"),
    ('gh secret set DB_PASSWORD --body "Hunter2RT"', "Hunter2RT"),
    ("creds = {'user': 'app', 'pass': 'Hunter2RT'}", "Hunter2RT"),
    ("pass: Hunter2RT", "Hunter2RT"),
    ("<password>Hunter2RT</password>", "Hunter2RT"),
    ('<add key="DbPassword" value="Hunter2RT"/>', "Hunter2RT"),
    ('<input type="password" name="pw" value="Hunter2RT">', "Hunter2RT"),
    ("Passwort: Hunter2RT", "Hunter2RT"),
    ("senha=Hunter2RT", "Hunter2RT"),
]


@pytest.mark.parametrize(("text", "secret"), MORE, ids=[t[:28] for t, _ in MORE])
def test_more_shapes(text: str, secret: str) -> None:
    out = redact(text)
    assert out is not None and secret not in out, out
    assert redact(out) == out and not contains_secret(out)


@pytest.mark.parametrize(
    "text",
    [
        "secretRef: name: db-creds",
        "secretName: tls-cert",
        "SharedAccessKeyName=RootManageSharedAccessKey",
        "password_file=/run/secrets/db",
        "token_url: https://auth.example.com/token",
        "passwordless: true",
        "password_min_length = 12",
        "TOKEN_EXPIRY=3600",
        "api_key_header: X-Api-Key",
        "token_count: 1234",
        "Pass: 12 Fail: 0",
        "tests pass: 12",
        '{"pass": 12, "fail": 0}',
        "pwd: /home/dev",
        "--token-file /var/run/secrets/token",
        '"auth": "basic"',
        '"auth": "dGhpcyBpcyBub3QgYSBjcmVk"',  # base64 without a `user:password`
        "ENV NODE_ENV production",
        "<token_type>bearer</token_type>",
        "echo hello | sudo tee /etc/motd",
    ],
)
def test_more_look_alikes_stay(text: str) -> None:
    assert redact(text) == text


def test_redact_json_pass_key_needs_a_password() -> None:
    assert redact_json({"pass": 12, "fail": 0, "skipped": "none"}) == {
        "pass": 12,
        "fail": 0,
        "skipped": "none",
    }
    assert redact_json({"user": "app", "pass": "Hunter2RT"}) == {
        "user": "app",
        "pass": "[REDACTED:password]",
    }
    assert redact_json({"password_file": "/run/secrets/db"}) == {"password_file": "/run/secrets/db"}


# --- .pgpass lines, cookies, passwords in prose beyond English -------------------------------
#
# Samples follow the documented formats: PostgreSQL's "The Password File" (libpq), RFC 6265's
# examples (section 3.1), curl's `--cookie` documentation, the Netscape cookies.txt layout
# (cookiecentral FAQ, curl's cookie jar with `#HttpOnly_`), Chrome's "Copy as cURL".

NEW_KINDS = [
    # .pgpass
    (
        "db.internal:5432:payments:app:S3cretPw9",
        "db.internal:5432:payments:app:[REDACTED:password]",
    ),
    ("localhost:5432:*:postgres:secret", "localhost:5432:*:postgres:[REDACTED:password]"),
    ("*:*:*:replicator:Repl1cat0r!", "*:*:*:replicator:[REDACTED:password]"),
    ("10.0.0.5:6432:pay:pgbouncer:bouncer", "10.0.0.5:6432:pay:pgbouncer:[REDACTED:password]"),
    (
        "/var/run/postgresql:5432:pay:app:Unix9Sock",
        "/var/run/postgresql:5432:pay:app:[REDACTED:password]",
    ),
    (r"fe80\:\:1:5432:pay:app:Ipv6Pass9", r"fe80\:\:1:5432:pay:app:[REDACTED:password]"),
    (r"db:5432:pay:app:pa\:ss\\9X", "db:5432:pay:app:[REDACTED:password]"),
    (
        'echo "db.internal:5432:payments:app:S3cr3t!" >> ~/.pgpass && chmod 0600 ~/.pgpass',
        'echo "db.internal:5432:payments:app:[REDACTED:password]" >> ~/.pgpass && chmod 0600'
        " ~/.pgpass",
    ),
    (
        "# ~/.pgpass\n#hostname:port:database:username:password\n"
        "db.internal:5432:payments:app:correct horse battery\n",
        "# ~/.pgpass\n#hostname:port:database:username:password\n"
        "db.internal:5432:payments:app:[REDACTED:password]\n",
    ),
    (
        "my .pgpass has db:5432:pay:app:pa:ss9 in it",
        "my .pgpass has db:5432:pay:app:[REDACTED:password] in it",
    ),
    # cookies
    (
        "Set-Cookie: SID=31d4d96e407aad42; Path=/; Secure; HttpOnly",
        "Set-Cookie: SID=[REDACTED:cookie]; Path=/; Secure; HttpOnly",
    ),
    (
        "Set-Cookie: lang=en-US; Path=/; Domain=example.com",
        "Set-Cookie: lang=[REDACTED:cookie]; Path=/; Domain=example.com",
    ),
    (
        "Cookie: SID=31d4d96e407aad42; lang=en-US",
        "Cookie: SID=[REDACTED:cookie]; lang=[REDACTED:cookie]",
    ),
    (
        "Set-Cookie: id=a3fWa9; Expires=Thu, 21 Oct 2021 07:28:00 GMT; Max-Age=3600;"
        " SameSite=Lax; Domain=.example.com; Secure; HttpOnly",
        "Set-Cookie: id=[REDACTED:cookie]; Expires=Thu, 21 Oct 2021 07:28:00 GMT; Max-Age=3600;"
        " SameSite=Lax; Domain=.example.com; Secure; HttpOnly",
    ),
    (
        "HTTP/1.1 200 OK\r\nSet-Cookie: sessionid=k9x2Qm7pL4; Path=/; HttpOnly\r\n"
        "Set-Cookie: csrftoken=Zq81mX0aLw; Path=/\r\nContent-Type: text/html\r\n",
        "HTTP/1.1 200 OK\r\nSet-Cookie: sessionid=[REDACTED:cookie]; Path=/; HttpOnly\r\n"
        "Set-Cookie: csrftoken=[REDACTED:cookie]; Path=/\r\nContent-Type: text/html\r\n",
    ),
    (
        "set-cookie: a=1x9; Path=/, b=2y8; Path=/; HttpOnly",  # joined by a client
        "set-cookie: a=[REDACTED:cookie]; Path=/, b=[REDACTED:cookie]; Path=/; HttpOnly",
    ),
    (
        "curl -H 'Cookie: sessionid=abc123def; csrftoken=xyz789' https://app.example.com",
        "curl -H 'Cookie: sessionid=[REDACTED:cookie]; csrftoken=[REDACTED:cookie]'"
        " https://app.example.com",
    ),
    ("curl -b name=Jane https://example.com", "curl -b name=[REDACTED:cookie] https://example.com"),
    (
        'curl --cookie "sid=k9x2Qm7pL4" https://example.com',
        'curl --cookie "sid=[REDACTED:cookie]" https://example.com',
    ),
    (
        "curl 'https://app.example.com/api/me' \\\n  -H 'accept: application/json' \\\n"
        "  -H 'accept-language: en-US,en;q=0.9' \\\n"
        "  -b '_ga=GA1.1.123456789.1700000000; sessionid=k9x2Qm7pL4' \\\n"
        "  -H 'user-agent: Mozilla/5.0'",
        "curl 'https://app.example.com/api/me' \\\n  -H 'accept: application/json' \\\n"
        "  -H 'accept-language: en-US,en;q=0.9' \\\n"
        "  -b '_ga=[REDACTED:cookie]; sessionid=[REDACTED:cookie]' \\\n"
        "  -H 'user-agent: Mozilla/5.0'",
    ),
    (
        'fetch("https://app.example.com/api", {"headers": {"cookie": "sid=k9x2Qm7pL4"}})',
        'fetch("https://app.example.com/api", {"headers": {"cookie": "sid=[REDACTED:cookie]"}})',
    ),
    (
        '{"name": "Cookie", "value": "sessionid=k9x2Qm7pL4; theme=dark"}',
        '{"name": "Cookie", "value": "sessionid=[REDACTED:cookie]; theme=[REDACTED:cookie]"}',
    ),
    (
        "# Netscape HTTP Cookie File\n"
        ".netscape.com\tTRUE\t/\tFALSE\t946684799\tNETSCAPE_ID\t100103\n"
        "#HttpOnly_.example.com\tTRUE\t/\tTRUE\t1767225600\tsessionid\tk9x2Qm7pL4\n",
        "# Netscape HTTP Cookie File\n.netscape.com\tTRUE\t/\tFALSE\t946684799\tNETSCAPE_ID"
        "\t[REDACTED:cookie]\n#HttpOnly_.example.com\tTRUE\t/\tTRUE\t1767225600\tsessionid"
        "\t[REDACTED:cookie]\n",
    ),
    # prose, beyond English
    ("das Passwort ist Hunter2RT", "das Passwort ist [REDACTED:password]"),
    ("Das Kennwort lautet: Tr0ub4dor&3", "Das Kennwort lautet: [REDACTED:password]"),
    ("das Root-Passwort ist jetzt „x y 9“", "das Root-Passwort ist jetzt „[REDACTED:password]“"),
    ("le mot de passe est « correct horse »", "le mot de passe est « [REDACTED:password] »"),
    (
        "le mot de passe de l'admin est Hunter2RT.",
        "le mot de passe de l'admin est [REDACTED:password].",
    ),
    ("Mot de passe : Hunter2RT", "Mot de passe : [REDACTED:password]"),
    ("mi contraseña es Hunter2RT", "mi contraseña es [REDACTED:password]"),
    (
        "la contraseña de la base de datos es 'x y 9'",
        "la contraseña de la base de datos es '[REDACTED:password]'",
    ),
    ("la clave es Hunter2RT", "la clave es [REDACTED:password]"),
    ("a senha é Hunter2RT", "a senha é [REDACTED:password]"),
    ("het wachtwoord is Hunter2RT", "het wachtwoord is [REDACTED:password]"),
    ("lösenordet är Hunter2RT", "lösenordet är [REDACTED:password]"),
    ("passordet er Hunter2RT", "passordet er [REDACTED:password]"),
    ("adgangskoden er Hunter2RT", "adgangskoden er [REDACTED:password]"),
    ("hasło do bazy to Hunter2RT", "hasło do bazy to [REDACTED:password]"),
    ("пароль: Hunter2RT", "пароль: [REDACTED:password]"),
    ("пароль это Hunter2RT", "пароль это [REDACTED:password]"),
    ("пароль від бази — Hunter2RT", "пароль від бази — [REDACTED:password]"),
    ("veritabanı şifresi: Hunter2RT", "veritabanı şifresi: [REDACTED:password]"),
    ("şifre = Hunter2RT", "şifre = [REDACTED:password]"),
    ("密码是 Hunter2RT", "密码是 [REDACTED:password]"),
    ("密碼：Hunter2RT", "密碼：[REDACTED:password]"),
    ("パスワードは「Hunter2RT」です", "パスワードは「[REDACTED:password]」です"),
    ("パスワードはHunter2RTです", "パスワードは[REDACTED:password]です"),
    ("비밀번호는 Hunter2RT입니다", "비밀번호는 [REDACTED:password]입니다"),
    ("Passwort Hunter2RT", "Passwort [REDACTED:password]"),
    # found by the property tests: a value with a colon after a qualifier, a value that starts
    # with a colon, a key glued to the next word, full-width punctuation after a value
    (
        "le mot de passe de l'admin est Aa000:0 et ça marche.",
        "le mot de passe de l'admin est [REDACTED:password] et ça marche.",
    ),
    ("das Passwort ist :/Aa000 und es geht.", "das Passwort ist [REDACTED:password] und es geht."),
    ("数据库密码是Aa0000=，请勿外传。", "数据库密码是[REDACTED:password]，请勿外传。"),
    ("数据库密码=Hunter2RT，请勿外传", "数据库密码=[REDACTED:password]，请勿外传"),
    # their words as assignment keys
    ("passwort=Hunter2RT", "passwort=[REDACTED:password]"),
    ("contraseña: Hunter2RT", "contraseña: [REDACTED:password]"),
    ('KENNWORT="geheim"', 'KENNWORT="[REDACTED:password]"'),
    ("mot_de_passe = 'secret99'", "mot_de_passe = '[REDACTED:password]'"),
    ("haslo = 'Tajne123'", "haslo = '[REDACTED:password]'"),
    ("clave: Hunter2RT", "clave: [REDACTED:password]"),
]


@pytest.mark.parametrize(("text", "expected"), NEW_KINDS, ids=[t[:32] for t, _ in NEW_KINDS])
def test_pgpass_cookies_and_prose_beyond_english(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(expected) == expected and not contains_secret(expected)
    assert secret_mask(pl.Series([text, expected])).to_list() == [True, False]
    assert redact_series(pl.Series([text, expected])).to_list() == [expected, expected]
    # in a JSON record, escaped
    out = redact(json.dumps({"content": text}))
    assert out is not None and json.loads(out) == {"content": expected}, out


PGPASS_CLEAN = [
    "app/db.py:12:5: E501 Line too long (120 > 88)",
    "db.py:12:5: E501 Line too long",
    "src/app.py:3:1: F401 [*] `os` imported but unused",
    "main.c:3:1: error: expected ';' before '}' token",
    "app/db.py:12: error: Incompatible types in assignment",
    "tests/test_db.py:42:8: W0612: Unused variable 'x' (unused-variable)",
    "2026-01-01T10:00:00",
    "2026-01-01 10:00:00:123 INFO started",
    "12:30:45:678:901",
    "2001:db8:85a3:0:0:8a2e:370:7334",
    "fe80::1ff:fe23:4567:890a",
    "::ffff:192.0.2.128",
    "00:1a:2b:3c:4d:5e",
    "de:12:34:56:78:9a",
    "localhost:5432",
    "db.internal:5432/payments",
    "ERROR:root:module:func:message here",
    "INFO:uvicorn.error:Started:server:process",
    "WARNING:1234:worker:task:retrying in 5s",
    "a[1:2:3]",
    "x = a[1:2:3:4]",
    "root:x:0:0:root:/root:/bin/bash",
    "postgres:x:999:999:PostgreSQL administrator:/var/lib/postgresql:/bin/bash",
    "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
    "localhost:8080:api:v1:health",
    "hostname:port:database:username:password",
    "#hostname:port:database:username:password",
    "app.py:42:foo:bar:Baz9x",
    "jdbc:postgresql://db:5432/pay",
    "redis://cache:6379/0",
    "localhost:5432:*:postgres:$PGPASSWORD",
    "db.internal:5432:payments:app:Pw9x:extra",
    "docker run -p 5432:5432 -p 6432:6432 postgres:16",
]


# Where the text speaks of pgpass, any port and any password will do (documented).
PGPASS_ONLY_IN_CONTEXT = {
    "localhost:8080:api:v1:health",
    "db.internal:5432:payments:app:Pw9x:extra",
}


@pytest.mark.parametrize("text", PGPASS_CLEAN)
def test_colon_separated_text_is_no_pgpass_line(text: str) -> None:
    assert redact(text) == text
    context = f"see ~/.pgpass\n{text}"
    if text not in PGPASS_ONLY_IN_CONTEXT:
        assert redact(context) == context
    else:
        assert redact(context) != context


COOKIE_CLEAN = [
    "Cookie: chocolate chip",
    "the cookie: a small cake",
    'cookie: str = "session"',
    "cookie: Optional[str] = None",
    "Set-Cookie: <cookie-name>=<cookie-value>; Domain=<domain-value>; Secure; HttpOnly",
    "Cookie: session=${SESSION}; token=$TOKEN",
    'curl -H "Cookie: $COOKIE" https://example.com',
    "curl -b cookiefile -c cookiefile https://example.com",
    'curl -b "" https://example.com',
    "curl -b cookies.txt https://example.com/profile",
    "curl --cookie-jar jar.txt https://example.com",
    "git checkout -b feature/cookie-banner",
    "gunicorn -b 0.0.0.0:8000 app:app",
    "Set-Cookie: sid=; Expires=Thu, 01 Jan 1970 00:00:00 GMT",
    "Cookie: a=1; b=2",
    "const cookie = req.headers.cookie",
    "response.set_cookie(key, value, httponly=True)",
    ".example.com\tTRUE\t/\tFALSE\t1767225600\tsessionid\t$SESSION",
    "Cookie consent: required",
]


@pytest.mark.parametrize("text", COOKIE_CLEAN)
def test_cookie_look_alikes_stay(text: str) -> None:
    assert redact(text) == text


INTL_CLEAN = [
    "das Passwort ist erforderlich",
    "Das Passwort ist zu kurz.",
    "das Passwort ist noch erforderlich",
    "Passwort vergessen?",
    "der Passwortmanager ist KeePass",
    "le mot de passe est requis",
    "le mot de passe est trop court",
    "mot de passe oublié",
    "la contraseña es obligatoria",
    "contraseña incorrecta",
    "la clave es usar índices",
    "la clave primaria es `user_id`",
    "la clave es `user_id`",
    "a senha é obrigatória",
    "senha incorreta",
    "het wachtwoord is verplicht",
    "lösenordet är obligatoriskt",
    "passordet er påkrevd",
    "adgangskoden er forkert",
    "hasło jest wymagane",
    "hasło to podstawa",
    "пароль обязателен",
    "пароль это обязательное поле",
    "пароль — обязательное поле",
    "пароль є обов'язковим",
    "şifre gerekli",
    "parola è una parola",
    "la parola è 'ciao'",
    "密码错误",
    "密码是必填项",
    "请输入密码",
    "パスワードは8文字以上",
    "パスワードが違います",
    "비밀번호가 틀렸습니다",
    "비밀번호는 필수입니다",
    "le mot de passe est sha256",
    "remote motor promote",
    "hasLoaded: true",
    "bypassOrder: fifo",
    "clave: id",
    "clave_primaria: id",
    "parola: ciao",
]


@pytest.mark.parametrize("text", INTL_CLEAN)
def test_prose_about_passwords_in_other_languages_is_left_alone(text: str) -> None:
    assert redact(text) == text


def test_new_kinds_in_a_column_agree_with_the_scalar_path() -> None:
    values: list[str | None] = []
    for text, _ in NEW_KINDS:
        values += [text, None, json.dumps({"content": text})]
    values += PGPASS_CLEAN + COOKIE_CLEAN + INTL_CLEAN
    column = pl.Series("content", values)
    expected = [redact(v) for v in values]
    assert redact_series(column).to_list() == expected
    redacted, counts = redact_series_with_count(column)
    assert counts.to_list() == [0 if v is None else redact_with_count(v)[1] for v in values]
    assert secret_mask(column).to_list() == [v is not None and contains_secret(v) for v in values]
    assert not secret_mask(redacted).any()
    # every text holding one is found by the column path (it never skips a secret)
    dirty = [v for v in values if v is not None and contains_secret(v)]
    assert dirty and secret_mask(pl.Series(dirty)).all()


def test_password_words_of_other_languages_are_keywords() -> None:
    for spelling in (
        "passwort", "kennwort", "mot_de_passe", "motdepasse", "senha", "palavra_passe",
        "wachtwoord", "lösenord", "passord", "adgangskode", "kodeord", "hasło", "haslo",
        "şifre", "sifre", "пароль", "密码", "密碼", "パスワード", "비밀번호", "패스워드",
        "clave", "parola",
    ):  # fmt: skip
        assert keywords._KEY_ONLY.fullmatch(spelling), spelling
        assert keywords._kind_for_key(spelling) == "password", spelling
        assert any(word in spelling for word in keywords._KEYWORD_GATE), spelling


def test_re2_opens_every_detector_and_rule_the_python_gates_and_keywords_open() -> None:
    """`_gates._opened` runs every gate (unbounded, in RE2's syntax) and every rule keyword as
    one RE2 set; it opens at least the detectors whose gates (unbounded: a hatch alone is no
    match of any detector) Python's engine finds in the text, and exactly the rules whose
    keywords it holds."""
    texts = (
        [c.text for c in CASES] + CLEAN + PGPASS_CLEAN + COOKIE_CLEAN + [t for t, _ in NEW_KINDS]
    )
    texts += [json.dumps({"content": t}) for t in texts]
    gates = [(re.compile(_base._unbounded(g)), _gates._DETECTORS_BY_GATE[g]) for g in _gates._GATES]
    opened_any = 0
    for text in texts:
        lowered = _base._lower(text)
        expected = {i for gate, found in gates if gate.search(lowered) for i in found}
        opened, rules = _gates._opened(lowered)
        assert expected <= set(opened), (text, expected - set(opened))
        assert rules == ruleset.RULES.rules_for(lowered), text
        opened_any += bool(opened)
    assert opened_any > 100


def test_redact_json_cuts_cookie_values_a_parsed_header_holds() -> None:
    value = {
        "url": "https://app.example.com/api",
        "headers": {"Cookie": "sessionid=k9x2Qm7pL4; theme=dark", "Accept": "*/*"},
        "entries": [
            {"name": "set-cookie", "value": "SID=31d4d96e407aad42; Path=/; Secure; HttpOnly"},
            {"name": "Accept-Language", "value": "en-US,en;q=0.9"},
        ],
        "cookies": [
            {"name": "sessionid", "value": "k9x2Qm7pL4", "domain": ".example.com", "path": "/"}
        ],
        "env": [{"name": "DB_HOST", "value": "db.internal"}],  # no cookie: no domain, no path
        "template": {"cookie": "session=${SESSION}"},
    }
    out = redact_json(value)
    assert out["headers"] == {
        "Cookie": "sessionid=[REDACTED:cookie]; theme=[REDACTED:cookie]",
        "Accept": "*/*",
    }
    assert out["entries"] == [
        {"name": "set-cookie", "value": "SID=[REDACTED:cookie]; Path=/; Secure; HttpOnly"},
        {"name": "Accept-Language", "value": "en-US,en;q=0.9"},
    ]
    assert out["cookies"] == [
        {"name": "sessionid", "value": "[REDACTED:cookie]", "domain": ".example.com", "path": "/"}
    ]
    assert out["env"] == value["env"] and out["template"] == value["template"]
    assert redact_json(out) == out
    assert not contains_secret(json.dumps(out))


# --- linear time ------------------------------------------------------------------------------
#
# A landing line may hold a mebibyte; every gate, the prefilter and every detector run in time
# linear in the text (`bench/bench_redaction_adversarial.py` times them; tests never assert a
# time). What these tests hold is the design that makes it so, and that it loses nothing.


def _width(pattern: str) -> int:
    """The most characters a regex can match (unbounded: 4294967294)."""
    import re

    return re._parser.parse(pattern).getwidth()[1]  # type: ignore[attr-defined]


def test_every_gate_matches_within_a_bounded_width() -> None:
    """A gate is tried at each place its literal starts (the prefilter, `_open_detectors`): an
    unbounded repetition in it read the whole run at each place inside the run, so `key` *
    21000 took 42 s. Every gate, each rest `_open_detectors` tries after a literal, and the
    prefilters they make match within a bounded width."""
    limit = 8 * _base._GATE_RUN
    for gate in _gates._GATES:
        assert _width(gate) <= limit, gate
    assert _width(_gates._python_prefilter().pattern) <= limit


def test_bounded_gates_have_a_hatch_and_the_scan_reads_them_unbounded() -> None:
    """A run the detector allows past `_GATE_RUN` still opens it (the hatch); the RE2 scan,
    linear whatever the pattern, gets each gate in its unbounded form and opens the detector
    too, and the column path redacts as the scalar path does."""
    long_name = "x" * (_base._GATE_RUN + 10)
    prefilter = _gates._python_prefilter()
    assert prefilter.search(f"password_{long_name}=hunter2")
    assert prefilter.search(f"--{long_name}-password")
    assert prefilter.search(f"<{long_name}password")
    text = f"{long_name}_password=hunter2"
    assert prefilter.search(text)
    assert _gates._opened(text.lower())[0]
    assert redact_series(pl.Series([text])).to_list() == [redact(text)]


def _old_key(text: str) -> str | None:
    """The key regex before it took names whole (its result, kept to compare with), with the
    names ending in `key` added since."""
    import re

    old = (
        rf"(?:[\w.-]*?(?:{keywords._KW})[\w.-]*|[\w.-]*token|[\w.-]*key"
        rf"|(?:[\w.-]*[_.-])?(?:{keywords._WEAK_WORDS}))(?![\w.-])"
    )
    m = re.compile(rf"(?<![\w.-])(?:{old})", re.IGNORECASE).match(text)
    return m.group() if m else None


@pytest.mark.parametrize(
    "name",
    [
        "password", "db_password", "DB_PASSWORD", "pw", "db_pw", "upward", "pw_hash", "pass",
        "bypass", "bypassOrder", "hasLoaded", "hasło", "haslo_x", "passord", "passordet",
        "passordx", "şifre", "şifreler", "密码", "密码是", "数据库密码", "access-key", "accesskey",
        "max_tokens", "next_token", "tokenizer", "clave", "x.clave", "xclave", "parola",
        "keypass", "key_pass", "api.key", "x" * 90 + "password", "pw" * 300, "key" * 100 + "!",
        "x-", "", "token.", "a.token", "Contraseña", "contrasena", "mot_de_passe", "passwort2",
    ],
)  # fmt: skip
def test_a_key_is_the_whole_name_holding_a_keyword(name: str) -> None:
    """The key is looked ahead for, then taken whole: what the lazy form matched, in one pass
    (it read a long name once per keyword in it)."""
    for text in (name, f"{name}=x", f"{name}: x"):
        new = assignments._ASSIGNMENT.match(text)
        old = _old_key(text)
        if old is not None and text[len(old) :].startswith(("=", ":")):
            assert new is not None and new.group("key") == old, text
        elif new is not None:
            assert new.group("key") == old, text
        assert bool(keywords._KEY_ONLY.fullmatch(name)) == (_old_key(name) == name)


@pytest.mark.parametrize(
    "text",
    [
        "PASSWORD=" + "a" * 300 + " next",
        "password=" + "password=" * 60 + "Hunter2RT",
        "pw=" + "x,y" * 150,
        "api_key=" + "A1b" * 100 + ")",
        "DB_PASSWORD=" + "&" * 300,
        "cookie: sid=" + "Zx9" * 120 + "; theme=dark",
        "Passwort: " + "Hunter2RT" * 40,
        "das Passwort ist " + "Zx9" * 100 + ".",
    ],
)
def test_a_long_value_is_cut_whole(text: str) -> None:
    """A value longer than `_VALUE_SCAN` characters runs to the end of its run (read once,
    whichever key inside it asks) and is judged on its head: cut whole, nothing of it left."""
    out = redact(text)
    assert out is not None and "Zx9Zx9" not in out and "Hunter2RTH" not in out
    assert "a" * 200 not in out and "A1bA1b" not in out and "&" * 200 not in out
    assert redact(out) == out and not contains_secret(out)
    assert redact_series(pl.Series([text])).to_list() == [out]


@pytest.mark.parametrize(
    "text",
    [
        "PASSWORD=$(" + "cat /run/secrets/db " * 30 + ")",
        "pwd=/" + "home/dev/" * 40,
        "DB_PASSWORD=${{ " + "secrets.DB " * 40 + "}}",
        "das Passwort ist /" + "srv/app/" * 40,
    ],
)
def test_a_long_value_that_its_head_proves_no_secret_stays(text: str) -> None:
    assert redact(text) == text


def test_value_ends_agree_with_the_whole_value_where_it_is_short() -> None:
    """`_value_end` gives what `_balanced_len` of the whole value gave, for values up to
    `_VALUE_SCAN` characters and where a closing bracket ends one before that."""
    rng = random.Random(7)
    alphabet = "ab1()[]{}=&;,x "
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 400)))
        run = assignments._VALUE_RUN.match(text).end()  # type: ignore[union-attr]
        whole = values._balanced_len(text[:run])
        end, long = assignments._value_end(text, 0, assignments._VALUE_RUN)
        if not long:
            assert end == whole, text
        else:
            assert run > assignments._VALUE_SCAN and end == run >= whole, text


def test_atoms_are_found_by_bisection_as_by_a_scan() -> None:
    rng = random.Random(3)
    for _ in range(2000):
        atoms, pos = [], 0
        for _ in range(rng.randint(0, 6)):
            start = pos + rng.randint(0, 5)
            pos = start + rng.randint(1, 6)
            atoms.append((start, pos))
        lo, hi = sorted(rng.randint(0, pos + 3) for _ in range(2))
        start, end = sorted(rng.randint(lo, hi) for _ in range(2))
        scan = any(s < lo < e or s < hi < e or (s < end and start < e) for s, e in atoms)
        assert _base._touches_an_atom(atoms, lo, hi, start, end) == scan
        inside = [e for s, e in atoms if lo <= s < hi]
        assert _base._last_atom_in(atoms, lo, hi) == (inside[-1] if inside else 0)


def test_memos_answer_what_a_scan_answers() -> None:
    """`_escapes_next`, `_line_start`, `_run_end` and `_first_after` remember what they read in
    the last text; asked in any order, they answer as a fresh scan would."""
    import re

    rng = random.Random(11)
    run = re.compile(r"[ab]*")
    flag = re.compile(r"(?<![a-z])-p")
    for _ in range(300):
        text = "".join(rng.choice("ab\\\n -pc") for _ in range(rng.randint(0, 120)))
        for _ in range(40):
            i = rng.randint(0, len(text))
            backslashes = len(text[:i]) - len(text[:i].rstrip("\\"))
            assert _base._escapes_next(text, i) == (backslashes % 2 == 1), (text, i)
            assert _base._line_start(text, i) == text.rfind("\n", 0, i) + 1
            assert _base._run_end(run, text, i) == run.match(text, i).end()  # type: ignore[union-attr]
            found, fresh = _base._first_after(flag, text, i), flag.search(text, i)
            assert (found and found.span()) == (fresh and fresh.span()), (text, i)
    long_line = "x" * 10_000 + "\n" + "y" * 10_000
    assert _base._line_start(long_line, 15_000) == 10_001
    assert _base._line_start(long_line, 5_000) == 0


def test_lowering_keeps_the_length() -> None:
    """Anchored detectors look up where to start in the lowered text: `İ` lowers to two
    characters, which sent them back to a search of every position (quadratic)."""
    text = "İstanbul DB_PASSWORD=Hunter2RT İ"
    assert len(_base._lower(text)) == len(text)
    assert _base._lower(text) == text.replace("İ", "i").lower()
    assert redact(text) == "İstanbul DB_PASSWORD=[REDACTED:password] İ"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "curl -H 'X: -b a=b' -b 'sid=Qm7pL4; csrf=Zx9Ab2' https://app.example.com",
            "curl -H 'X: -b a=b' -b 'sid=[REDACTED:cookie]; csrf=[REDACTED:cookie]'"
            " https://app.example.com",
        ),
        (
            "curl https://x.example.com/a?b=1&c=2 -b sid=Qm7pL4",
            "curl https://x.example.com/a?b=1&c=2 -b sid=[REDACTED:cookie]",
        ),
        ("curl x\n -b sid=Qm7pL4", "curl x\n -b sid=Qm7pL4"),  # another command
    ],
)
def test_every_cookie_flag_after_curl_on_its_line_is_read(text: str, expected: str) -> None:
    """Each `-b` after a `curl` on its (continued) line is read: one inside a quoted word no
    longer hides the real one, nor does a `&` in an unquoted URL."""
    assert redact(text) == expected


def test_a_line_of_dashes_opens_no_flag_gate_and_a_long_flag_still_does() -> None:
    """The flag gate takes dashes whole before a word: a rule of dashes (in most source
    files) is no candidate, and costs each place one run; a flag behind many dashes is cut."""
    assert _gates._python_prefilter().search("# " + "-" * 90) is None
    assert _gates._opened("# " + "-" * 90) == ((), ())
    assert redact("run --" + "-" * 90 + "password Hunter2RT9 now") == (
        "run --" + "-" * 90 + "password [REDACTED:password] now"
    )


def test_an_email_after_a_json_escape_is_found_where_a_search_would() -> None:
    """The local part may start right after a `\\uXXXX` escape's backslash, where the walk
    back from `@` reached another `@` (a search of every position found it there)."""
    assert redact("@x\\u0070ay@example.com") == "@x[REDACTED:email]"
    assert redact("mail \\u0070ay@example.com now") == "mail [REDACTED:email] now"


def test_the_column_path_finds_what_only_a_rule_of_the_rule_set_finds() -> None:
    """A value that opens no gate but holds a rule's keyword (`glsa_`, Grafana's service
    account tokens) is a candidate of the polars prefilter too: `redact_series` cut nothing
    of it before, while `redact` did."""
    values_ = ["glsa_AbCdEfGhIjKlMnOpQrStUvWxYz123456_0a1b2c3d", "clean name"]
    series = pl.Series(values_)
    assert redact_series(series).to_list() == [redact(v) for v in values_]
    assert redact_series(series).to_list()[0] != values_[0]
    assert secret_mask(series).to_list() == [True, False]
