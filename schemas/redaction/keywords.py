from __future__ import annotations

import functools
import re

from detect_secrets.plugins import keyword

# word ("密码是...": the key is 密码, not 密码是).
_CJK_KEYWORDS = ("密码", "密碼", "口令", "パスワード", "비밀번호", "패스워드", "암호", "รหัสผ่าน")
_PASSWORD_WORDS = (
    "passwort", "kennwort", "mot_?de_?passe", "senha", "palavra_?passe", "wachtwoord",
    "lösenord", "passord(?:et)?(?![a-z])", "adgangskode", "kodeord", "has[lł]o(?![a-z])",
    "[şs]ifre(?![a-z])", "пароль", *(f"{w}(?![^\\W\\d_])" for w in _CJK_KEYWORDS),
)  # fmt: skip
_MORE_KEYWORDS = ("access_?key", *_PASSWORD_WORDS)
_KW = "|".join(k.replace("_?", "[_.-]?") for k in (*keyword.DENYLIST, *_MORE_KEYWORDS))
_WEAK_WORDS = "pw|pass|psk|clave|parola"
# A key is a whole name (`[\w.-]` on both sides ends it) that holds a keyword, ends in `token`
# or ends in a weak word: looked ahead for, then the name taken whole (possessive). As
# `[\w.-]*?(?:kw)[\w.-]*(?![\w.-])` each keyword of a long name was tried against the rest
# of the name once a match failed after it: `pw` * 32000 read the name 32000 times.
_STRONG = (
    rf"[\w.-]*?(?:{_KW})|[\w.-]*token(?:[_.-]?\d+)?(?![\w.-])"
    rf"|(?:[\w.-]*[_.-])?(?:{_WEAK_WORDS})(?![\w.-])|(?-i:[A-Z][A-Z0-9]*PASS)(?![\w.-])"
)
# Also a name that ends in `key` (`RAILS_MASTER_KEY`, `APP_KEY`, `signingKey`,
# `Ocp-Apim-Subscription-Key`): a key of any kind, so its value must look made by a machine
# (`_KEY_NAMED_ONLY`, `values._random_value`): `sort_key: created_at` stays.
_KEY = rf"(?={_STRONG}|[\w.-]*key(?:[_.-]?\d+)?(?![\w.-]))[\w.-]++"
_STRONG_KEY = re.compile(rf"(?={_STRONG})[\w.-]++", re.IGNORECASE)
# `*key` names that name no secret: database and cache keys, public keys, keys of a map.
_NOT_A_SECRET_KEY = re.compile(
    r"(?:^|[_.-]|(?<=[a-z]))(?:public|pub|publishable|primary|foreign|sort|partition|cache"
    r"|idempotency|object|s3|row|routing|lookup|dedup|group|hot|short|composite|natural"
    r"|surrogate|unique|index|hash|shard|bucket|label|i18n|translation|message|map|dict|table"
    r"|column|field|attr|attribute|sequence|order|event|request|trace|span|config|setting"
    r"|option|registry|list|item|node|child|parent|mon|tur|hoc|whis|joc)[_.-]?key$",
    re.IGNORECASE,
)


@functools.lru_cache(maxsize=1024)
def _key_named_only(key: str) -> bool:
    """Whether `key` is a secret's name only by ending in `key` (no other keyword)."""
    key = key.strip("\\\"'])")
    return key.lower().endswith("key") and _STRONG_KEY.fullmatch(key) is None


# fullmatch: a bare `pass` or one glued to an upper-case name (`MYSQLPASS`), not `db_pass`;
# `clave` and `parola`, words for other things too, also as the last part of a name, with a
# value that looks strongly like a password.
_WEAK_KEY = re.compile(
    r"pass|(?-i:[A-Z][A-Z0-9]*PASS)|(?P<strong>(?:[\w.-]*[_.-])?(?:clave|parola))", re.IGNORECASE
)
_KEY_ONLY = re.compile(_KEY, re.IGNORECASE)
# Names that describe a secret without holding it: `SharedAccessKeyName=Root`,
# `password_file=/run/secrets/db`, `token_url`, `secret_length`, `keyType`.
_DESCRIBES_A_SECRET = re.compile(
    r"(?:[_.-]|(?<=[a-z])(?=[A-Z]))(?i:names?|file|path|dir|url|uri|length|len|size|type|ttl"
    r"|expiry|expires|version|count|format|header|field|env|var|policy|rotation|refs?)$"
)


@functools.lru_cache(maxsize=1024)
def _holds_a_secret(key: str) -> bool:
    key = key.rstrip("\\\"'])")
    if _DESCRIBES_A_SECRET.search(key) is not None:
        return False
    return not (_key_named_only(key) and _NOT_A_SECRET_KEY.search(key.lstrip("-")))


# Substrings every keyword of the list contains (a unit test checks each keyword against them).
# Those of a password word also name the kind (`_kind_for_key`).
_PASSWORD_STEMS = (
    "pass", "pwd", "contrase", "senha", "wachtwoord", "пароль", "kennwort", "lösenord",
    "adgangskode", "kodeord", "hasło", "haslo", "şifre", "sifre", "clave", "parola", "密码",
    "密碼", "口令", "パスワード", "비밀번호", "패스워드", "암호", "รหัสผ่าน",
)  # fmt: skip
_KEYWORD_GATE = ("key", "secret", "token", "pw", "psk", *_PASSWORD_STEMS)
# Where names holding a keyword start: each word no other word of the list is part of (`pw`
# finds `pwd`), the ASCII ones alone in an ASCII text.
_START_WORDS = tuple(w for w in _KEYWORD_GATE if not any(v != w and v in w for v in _KEYWORD_GATE))
_START_WORDS_ASCII = tuple(w for w in _START_WORDS if w.isascii())
_KEYWORDS_RE = "|".join(_KEYWORD_GATE)
# Gates demand what every match of their detector shows, not just a word: a bare `key` or


@functools.lru_cache(maxsize=1024)
def _kind_for_key(key: str) -> str:
    low = key.lower()
    if any(w in low for w in _PASSWORD_STEMS) or low.endswith(("pw", "psk")):
        return "password"
    if low.endswith("token"):
        return "token"
    return "api_key" if "api" in low else "secret"
