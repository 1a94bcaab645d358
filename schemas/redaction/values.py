from __future__ import annotations

import math
import re
from collections import Counter

from detect_secrets.filters.heuristic import is_templated_secret

from schemas.redaction._base import (
    _PLACEHOLDER_START,
    PLACEHOLDER_PATTERN,
)
from schemas.redaction.keywords import (
    _WEAK_KEY,
    _key_named_only,
)

# Unquoted words that stand where a value would in code: literals, types, expression keywords.
_NOT_A_VALUE = frozenset(
    {"null", "none", "nil", "true", "false", "undefined", "str", "string", "bytes", "int",
     "bool", "boolean", "float", "number", "object", "dict", "list", "any", "secretstr",
     "secretbytes", "optional", "required", "empty", "redacted", "await", "new", "yield",
     "async", "function", "lambda", "typeof"}
)  # fmt: skip
_MASK_CHARS = frozenset("*xX.•#?_-")
# References a value stands for: `$VAR`, `${VAR}`, `$(command ...` (cut at its first space),
# `%(name)s`, `%s`, `{{ template }}`, `${{ ci.expression }}`.
_SHELL_REF = re.compile(r"\$\{?\w+\}?|\$\(.*|%\(\w+\)s|%s|\{\{.*\}\}|\$\{\{.*")
# A variable named like a secret (`password=password`, `== confirm_password`): no digit, as
# `Password123` is a password.
# (A look-ahead for the word, then the letters whole: `[A-Za-z_]*(?:pass|...)[A-Za-z_]*`
# tried each `pass` of `passpass...pass1` against the rest of the value.)
_SECRET_NAMED_VARIABLE = re.compile(
    r"(?=[A-Za-z_]*?(?:pass|pwd|secret|token|key|credential))[A-Za-z_]*+", re.IGNORECASE
)
_YAML_TAG = re.compile(r"![A-Za-z]+")
_IDENT = re.compile(r"[A-Za-z_$][\w$]*")
_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = frozenset(_OPENERS.values())


def _balanced_len(value: str) -> int:
    """How much of an unquoted value is the value: it ends before a closing bracket it did
    not open (`f(password=x)` holds `x`, `f(password=x).run()` too, `Hunter2RT(prod)` is one
    value). A closer it starts with, or one a letter or digit follows (`]close9`, `0)Aa000`),
    is its own: an enclosing call does not end before its argument or inside a word."""
    if _BRACKET(value) is None:
        return len(value)
    stack: list[str] = []
    for i, c in enumerate(value):
        if c in _OPENERS:
            stack.append(_OPENERS[c])
        elif c in _CLOSERS and (not stack or stack.pop() != c):
            if i and (i + 1 == len(value) or not value[i + 1].isalnum()):
                return i
            stack.clear()
    return len(value)


_BRACKETS = re.compile(r"[()\[\]{}]")
_BRACKET = _BRACKETS.search
_HAS_DIGIT = re.compile(r"\d").search
_CODE_SYNTAX = re.compile(r"[(\[{.:]").search  # what an expression needs beyond a name


def _password_like(word: str) -> bool:
    """An identifier no one names a function: upper and lower case and a digit (Hunter2RT)."""
    return word != word.lower() and word != word.upper() and _HAS_DIGIT(word) is not None


def _random_segment(word: str) -> bool:
    """A part no one names a variable: 16 characters or more mixing letters and 3 digits
    (`sat.zemisurwn15su2it51hs2s.yv9pm1hxb...` is a token, not an attribute chain)."""
    return len(word) >= 16 and sum(c.isdigit() for c in word) >= 3 and not word.isdigit()


def _is_code(value: str) -> bool:
    """An expression, not a literal: `get_password()`, `os.environ['PW']`, `Optional[str]`,
    `settings.DB_PASSWORD`. A call of a password-like name (`Hunter2RT(prod)`) or brackets
    followed by more text (`Sup3r[Secret]RT`) are literals."""
    if _CODE_SYNTAX(value) is None:
        return False
    pos = 0
    segments = 0
    groups = 0
    while pos < len(value):
        m = _IDENT.match(value, pos)
        if m is None or _password_like(m.group()) or _random_segment(m.group()):
            return False
        segments += 1
        pos = m.end()
        while pos < len(value) and value[pos] in _OPENERS:
            close = _group_end(value, pos)
            if close is None:  # cut off before it closes (`data.get(`): still a call
                return True
            groups += 1
            pos = close
        if pos == len(value):
            break
        if value.startswith("?.", pos):
            pos += 2
        elif value[pos] == "." or value.startswith("::", pos):
            pos += 1 if value[pos] == "." else 2
        else:
            return False
    return groups > 0 or segments > 1


def _group_end(value: str, pos: int) -> int | None:
    depth = 0
    for i in range(pos, len(value)):
        if value[i] in _OPENERS:
            depth += 1
        elif value[i] in _CLOSERS:
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def _without_placeholders(value: str) -> str:
    if _PLACEHOLDER_START not in value:
        return value
    return PLACEHOLDER_PATTERN.sub(" ", value).strip()


def _entropy(value: str) -> float:
    """Shannon entropy in bits per character."""
    if not value:
        return 0.0
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


_HEX_KEY = re.compile(r"[0-9a-fA-F]{32,}")


def _random_value(value: str) -> bool:
    """A value a machine made: 16 characters or more without a blank, hex of 32 or more
    (`RAILS_MASTER_KEY`, a 256-bit key) or letters and digits at 3.5 bits a character or more
    (base64, base64url, Laravel's `base64:...`); not words, paths or identifiers."""
    value = value.removeprefix("base64:")
    if len(value) < 16 or any(c.isspace() for c in value):
        return False
    if _HEX_KEY.fullmatch(value):
        return True
    return (
        any(c.isalpha() for c in value)
        and any(c.isdigit() for c in value)
        and _entropy(value) >= 3.5
    )


def _is_value(value: str, key: str, quoted: bool, literal: bool = False) -> bool:
    """False for what stands where a secret would but is none: references, masks, types, code.
    `literal`: the syntax has no expressions (a `.env` line, a shell variable)."""
    value = _without_placeholders(value)
    if len(value) < 2 or set(value) <= _MASK_CHARS:
        return False
    if is_templated_secret(value) or _SHELL_REF.fullmatch(value):
        return False
    if _key_named_only(key) and not _random_value(value):
        return False  # `sort_key: created_at`; `APP_KEY=base64:...` is a key
    if key.lower().endswith("token") and (len(value) < 8 or (value.isdigit() and len(value) < 16)):
        return False  # max_token: 512, next_token: "2"
    weak = _WEAK_KEY.fullmatch(key.strip("\\\"']"))
    if weak and not _prose_password(value, strong=weak.group("strong") is not None):
        return False  # `pass: 12` is a count, `pass: Hunter2RT` a password
    if key.lower() == "pwd" and value[0] in "/~":
        return False  # `pwd: /home/dev` is the working directory
    if quoted:
        return True
    if key in ("PWD", "OLDPWD") and value[0] in "/~":  # the shell's working directory
        return False
    if value.lower() in _NOT_A_VALUE or _YAML_TAG.fullmatch(value):
        return False
    if literal:
        return True
    if _SECRET_NAMED_VARIABLE.fullmatch(value.rstrip(":;,.")):
        return False
    if value[0] in _OPENERS and _group_end(value, 0) in (None, len(value)):
        return False  # a list, dict or tuple literal is no secret of its own
    return not _is_code(value)


# --- keyword assignments ----------------------------------------------------------------------

# detect-secrets' KeywordDetector finds the line of `password = ...` but its unquoted value
# runs to the end of the line; here the value stops at the first delimiter, so
# `PGPASSWORD=x psql -h db` keeps its command. Its keyword list is reused as is; added: `token`
# (GITHUB_TOKEN, access_token) only as the end of a name, so that max_tokens, token_type and
# tokenizer stay; `access_key` (SharedAccessKey, access_key_id); `pw` only as a whole name or
# its last part (`pw`, `DB_PW`), so that `pw_hash` and `upward` stay.
# Also added: the word for password in other languages (`_PASSWORD_WORDS`: Passwort, Kennwort,
# mot_de_passe, senha, palavra_passe, wachtwoord, lösenord, passord, adgangskode, kodeord,
# hasło, şifre, пароль, 密码, パスワード, 비밀번호 ...; contraseña is in the library's list);
# `pass` and `psk` as a whole name or its last part (`pass:`, `'pass':`, WPA's `psk=`), and so
# `clave` (Spanish: key, password) and `parola` (Turkish: password; Italian: word), all of
# which need a value that looks like a password ("tests pass: 12", `clave: id` stay).
# Those a longer name can hold by chance end where a letter would go on (`bypassOrder`,
# `hasLoaded`), and so do the Chinese, Japanese and Korean ones, which prose glues to the next
_PROSE_TRAILING = ".,;:!?)]}>"
# Words a password is said to be, or to be hashed or encoded with.
_PROSE_NOT_A_PASSWORD = frozenset(
    {"md5", "sha1", "sha256", "sha512", "sha-1", "sha-256", "sha-512", "base64", "base32",
     "utf8", "utf-8", "latin-1", "argon2", "argon2id", "argon2i", "pbkdf2", "bcrypt", "scrypt",
     "aes256", "aes-256", "hex", "ascii", "http", "https", "2fa", "mfa", "totp", "oauth2"}
)  # fmt: skip


def _plain_words(value: str) -> bool:
    """A word or hyphenated words in any alphabet, as prose writes them: lower case,
    capitalised or all capitals ("required", "Hashed", "base64-encoded", "erforderlich",
    "обязательно"); no inner capital, no symbol."""
    if "-" in value:
        return all(p.isalnum() and p == p.lower() for p in value.split("-"))
    return value.isalpha() and (value.islower() or value.isupper() or value.istitle())


def _prose_password(value: str, strong: bool) -> bool:
    """A word said to be a password that looks like one: a digit with letters, a symbol, or
    inner capitals; `strong` (no verb: "password Hunter2RT") needs letters, a digit and a
    capital or a symbol."""
    if len(value) < 4 or value.lower() in _PROSE_NOT_A_PASSWORD:
        return False
    if not _is_value(value, "password", quoted=False, literal=True):
        return False
    if value.isdigit():
        return len(value) >= 6 and not strong
    if _plain_words(value) and not (any(c.isdigit() for c in value) and "-" not in value):
        return False  # words: "required", "Hashed", "base64-encoded"
    if value[0] in "/~." or value.startswith(("http:", "https:")):
        return False  # a path or address
    digit = any(c.isdigit() for c in value)
    alpha = any(c.isalpha() for c in value)
    symbol = any(not c.isalnum() for c in value)
    inner_capital = any(c.isupper() for c in value[1:]) and any(c.islower() for c in value)
    if strong:  # "Passwort Sommer2024", "password Hunter2RT", "пароль от базы Qwerty1234"
        return alpha and digit and (symbol or any(c.isupper() for c in value))
    return (digit and alpha) or symbol or inner_capital
