from __future__ import annotations

import re
from collections.abc import Iterator

import re2

from schemas.redaction._base import (
    _TOKEN_TAIL,
    _Detector,
    _encodable,
)
from schemas.redaction.library import (
    _GITLAB_GATE,
    _aws_secret_ok,
    _near,
)
from schemas.redaction.values import (
    _entropy,
    _password_like,
)

# Token formats neither rule set names (Betterleaks 2.0, detect-secrets 1.5): a vendor's
# prefix, then what its generator makes. Each is found bare, in any text (the rule sets find
# several only next to the vendor's name), and runs on over the token's characters. The group
# that matched names the kind.
_PREFIXED = {
    # Slack's refresh and app-configuration tokens: `xoxe-1-...`, `xoxe.xoxp-1-...`
    "slack_token": r"xoxe(?:\.xox[a-z])?-\d+-[A-Za-z0-9-]{40,}",
    "stripe_webhook_secret": r"whsec_[A-Za-z0-9+/=]{24,}",
    "google_oauth_token": r"(?<![\w.])ya29\.[A-Za-z0-9_-]{30,}",
    "google_oauth_client_secret": r"GOCSPX-[A-Za-z0-9_-]{24,}",
    # New Relic's user, admin, ingest and REST keys: `NRAK-`, `NRAA-`, `NRII-`, `NRJS-`, `NRRA-`
    "newrelic_key": r"(?<![A-Za-z0-9])NR(?:AK|AA|II|JS|RA)-[A-Z0-9]{27}(?![A-Za-z0-9])",
    # Sentry's organisation and user auth tokens
    "sentry_token": r"sntry[su]_[A-Za-z0-9+/=_-]{30,}",
    # Fly.io's organisation and macaroon tokens outside `FlyV1 ...`
    "flyio_token": r"(?<![A-Za-z0-9])(?:fo1|fm[12][ar]?)_[A-Za-z0-9+/=_-]{30,}",
    # Doppler's service, service-account, CLI, personal, SCIM and audit tokens
    "doppler_token": r"(?<![\w.])dp\.(?:st|sa|ct|pt|scim|audit)\.[A-Za-z0-9_.-]{30,}",
    # Docker's config.json, base64: `{"auths":` (a Kubernetes `.dockerconfigjson`)
    "docker_config": r"eyJhdXRocyI6[A-Za-z0-9+/]{16,}={0,2}",
    # Azure DevOps' current personal access tokens: 84 characters holding `AZDO`
    "azure_devops_pat": r"(?<![A-Za-z0-9])(?=[A-Za-z0-9]{84}(?![A-Za-z0-9]))[A-Za-z0-9]{52,76}AZDO"
    r"[A-Za-z0-9]{4,28}",
}
_PREFIXED_GATE = (
    "xoxe",
    "whsec_",
    r"ya29\.",
    "gocspx-",
    "nr(?:ak|aa|ii|js|ra)-",
    "sntry[su]_",
    "fo1_",
    "fm[12][ar]?_",
    r"dp\.(?:st|sa|ct|pt|scim|audit)\.",
    "eyjhdxrocyi6",
    "azdo",
)
_PREFIXED_RE = re.compile("|".join(f"(?P<{kind}>{p})" for kind, p in _PREFIXED.items()))

# Azure DevOps' older personal access tokens: 52 characters of lowercase base32, random, with
# the product named near it (`AZURE_DEVOPS_PAT=`, "the ADO pat", a dev.azure.com remote).
_ADO_CONTEXT = re.compile(
    r"azure[ _-]?devops|dev\.azure\.com|visualstudio\.com|\bado\b|azdo|\bpat\b|vsts",
    re.IGNORECASE,
)


def _ado_pat_ok(m: re.Match[str]) -> bool:
    token = m.group(0)
    return any(c.isdigit() for c in token) and _near(m, _ADO_CONTEXT)


# --- tokens of vendors no rule set names -------------------------------------------------------
#
# Vendors now issue tokens as a short prefix naming them, `_` or `-`, and a long random body
# (GitHub's `ghp_` made it the norm: Cloudflare's `cfat_`, Heroku's `HRKU-`, Replicate's
# `r8_`, Groq's `gsk_`, Typeform's `tfp_` ...), and a new vendor's prefix is in no rule set
# yet. So a token of that shape is found whatever its prefix: a letter and up to nine letters
# or digits, `_` or `-` (a second short part may follow: `re_xxxxxxxx_...`), then 30 or more
# characters whose longest run of letters and digits is 20 or more (so `snake_case` and
# `kebab-case` names, made of words, are none), mixing letters and digits or both cases, at
# 4.2 bits a character or more (hex digests, at most 4.0, and words stay). Ids of the APIs
# agents call (`toolu_`, `msg_`, `chatcmpl-`, `req_` ...; most are shorter) and digests
# (`sha512-...`) are no token.
_PREFIXED_ANY = re.compile(
    r"(?<![A-Za-z0-9_.+/-])(?P<prefix>[A-Za-z][A-Za-z0-9]{0,9})[_-]"
    r"(?P<body>[A-Za-z0-9][A-Za-z0-9_-]{29,})"
)
_PREFIXED_ANY_GATE = ("[a-z][a-z0-9]{0,9}[_-][a-z0-9][a-z0-9_-]{29}",)
_ALNUM_RUN = re.compile(r"[A-Za-z0-9]+")
_ID_PREFIXES = frozenset(
    {"toolu", "srvtoolu", "msg", "msgbatch", "req", "chatcmpl", "call", "run", "thread",
     "asst", "file", "batch", "evt", "cus", "pi", "ch", "in", "sub", "price", "prod", "txn",
     "sha1", "sha256", "sha384", "sha512", "md5", "uuid", "id", "ulid", "test", "v1", "v2",
     "data", "base64", "chunk", "span", "trace", "session", "sess", "conv", "turn", "resp",
     "cmpl", "ft", "ftjob", "vs", "org", "proj", "user", "compl", "step", "item", "obj"}
)  # fmt: skip
_PREFIXED_ANY_ENTROPY = 4.2


def _prefixed_any_ok(m: re.Match[str]) -> bool:
    if m.group("prefix").lower() in _ID_PREFIXES:
        return False
    body = m.group("body")
    if max(len(r) for r in _ALNUM_RUN.findall(body)) < 20:
        return False
    letters = any(c.isalpha() for c in body)
    digits = any(c.isdigit() for c in body)
    cases = any(c.isupper() for c in body) and any(c.islower() for c in body)
    if not ((letters and digits) or cases):
        return False
    return _entropy(body) >= _PREFIXED_ANY_ENTROPY


def _prefixed_any_starts(text: str, lowered: str) -> Iterator[int]:
    """Where a prefix may start: at each `_` or `-` a long run of token characters follows,
    the start of the word before it (found by RE2, linear in the text)."""
    for m in _PREFIXED_ANY_RE2.finditer(text if text.isascii() else _encodable(text)):
        yield m.start()


_PREFIXED_ANY_RE2 = re2.compile(r"[A-Za-z][A-Za-z0-9]{0,9}[_-][A-Za-z0-9][A-Za-z0-9_-]{29,}")

# Password hashes: what a cracker needs to recover the password (shadow files, .htpasswd,
# database dumps). bcrypt `$2b$12$...`, Argon2 `$argon2id$v=19$m=...,t=...,p=...$salt$hash`,
# SHA-crypt and MD5-crypt `$6$salt$hash` (`$5$`, `$1$`, Apache's `$apr1$`), yescrypt `$y$`,
# scrypt `$7$`, Cisco's type 8 and 9 `$8$`, `$9$`.
_PASSWORD_HASH = re.compile(
    r"\$2[abxy]?\$\d{2}\$[./A-Za-z0-9]{53}"
    r"|\$argon2(?:id|i|d)\$v=\d+\$m=\d+,t=\d+,p=\d+\$[A-Za-z0-9+/]{8,}\$[A-Za-z0-9+/]{16,}"
    r"|\$(?:[15678]|apr1|9)\$(?:rounds=\d+\$)?[./A-Za-z0-9]{2,16}\$[./A-Za-z0-9]{22,86}"
    r"|\$y\$[./A-Za-z0-9]+\$[./A-Za-z0-9]{2,32}\$[./A-Za-z0-9]{43}"
)
_PASSWORD_HASH_GATE = (r"\$2[abxy]?\$", r"\$argon2", r"\$(?:[15678]|apr1|9|y)\$")


def _cased_token(m: re.Match[str]) -> bool:
    """Both cases (Hugging Face tokens are 34 letters, digits only now and then)."""
    token = m.group(0)
    return token != token.lower() and token != token.upper()


def _mixed_token(m: re.Match[str]) -> bool:
    """Random keys mix upper case, lower case and digits; slugs (`sk-learn-...`) do not."""
    return _password_like(m.group(0))


DETECTORS: tuple[_Detector, ...] = (
    # Token families detect-secrets 1.5 lacks: fine-grained GitHub PATs, bare npm tokens,
    # project, service-account and Anthropic `sk-` keys (no legacy T3BlbkFJ marker), Stripe
    # test keys, Google API keys, Hugging Face tokens, DigitalOcean tokens (personal, OAuth,
    # refresh), Azure AD client secrets (the `Q~` of the current format).
    _Detector("github_token", re.compile(r"github_pat_[A-Za-z0-9_]{22,}"), ("github_pat_",)),
    # GitLab's library patterns end in `{20,50}(?!\w)`: a token glued to a word character or
    # longer than 50 (`turn_glpat-..._2` in an id) would pass.
    _Detector(
        "gitlab_token",
        re.compile(r"(?:gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-|GR1348941)[\w-]{20,}"),
        _GITLAB_GATE,
    ),
    _Detector("npm_token", re.compile(r"npm_[A-Za-z0-9]{36,}"), ("npm_",)),
    _Detector(
        "anthropic_key", re.compile(r"sk-ant-(?<![A-Za-z0-9]sk-ant-)[A-Za-z0-9_-]{20,}"), ("sk-",)
    ),
    _Detector(
        "openai_key",
        re.compile(r"sk-(?<![A-Za-z0-9]sk-)[A-Za-z0-9_-]{20,}"),
        ("sk-",),
        priority=1,
        accept=_mixed_token,
        skip_rejected=True,
    ),
    _Detector("stripe_key", re.compile(r"[rs]k_test_[0-9a-zA-Z]{24,}"), ("k_test_",)),
    _Detector("gcp_api_key", re.compile(r"AIza[0-9A-Za-z_-]{35}"), ("aiza",), tail=_TOKEN_TAIL),
    _Detector(
        "huggingface_token",
        re.compile(r"hf_(?<![A-Za-z0-9]hf_)[A-Za-z0-9]{34,}"),
        ("hf_",),
        accept=_cased_token,
        skip_rejected=True,
    ),
    _Detector(
        "digitalocean_token",
        re.compile(r"(?<![A-Za-z0-9])do[opr]_v1_[a-f0-9]{64}"),
        ("_v1_",),
        tail=_TOKEN_TAIL,
    ),
    _Detector(
        "azure_client_secret",
        re.compile(r"[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,}"),
        ("q~",),
    ),
    # More vendor token families with a fixed prefix, none in detect-secrets 1.5 (formats as
    # gitleaks documents them): one regex, the group that matched names the kind.
    _Detector(
        "token",
        re.compile(
            r"(?P<shopify_token>shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32})"
            r"|(?P<atlassian_token>ATATT3[A-Za-z0-9_=-]{40,})"
            r"|(?P<databricks_token>(?<![A-Za-z0-9])dapi[a-f0-9]{32}(?:-\d)?)"
            r"|(?P<vault_token>(?<![A-Za-z0-9])hv[sb]\.[A-Za-z0-9_-]{24,})"
            r"|(?P<terraform_token>[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,})"
            r"|(?P<linear_token>lin_(?:api|oauth)_[A-Za-z0-9]{40})"
            r"|(?P<postman_token>PMAK-[a-f0-9]{24}-[a-f0-9]{34})"
            r"|(?P<slack_token>xapp-\d-[A-Z0-9]+-\d+-[A-Za-z0-9]+)"
            r"|(?P<discord_webhook>https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/"
            r"\d+/[\w-]{60,})"
            r"|(?P<mailgun_key>(?<![A-Za-z0-9])key-[0-9a-z]{32})"
        ),
        (
            *("shpat_", "shpca_", "shppa_", "shpss_", "atatt3", "dapi", r"hvs\.", r"hvb\."),
            *(r"\.atlasv1\.", "lin_api_", "lin_oauth_", "pmak-", "xapp-", "/api/webhooks/", "key-"),
        ),
        kind_of=lambda m: m.lastgroup or "token",
        tail=_TOKEN_TAIL,
    ),
    _Detector(
        "token",
        _PREFIXED_RE,
        _PREFIXED_GATE,
        kind_of=lambda m: m.lastgroup or "token",
        tail=_TOKEN_TAIL,
    ),
    _Detector(
        "token",
        _PREFIXED_ANY,
        _PREFIXED_ANY_GATE,
        priority=7,  # after the rule set's rules: where a rule names the vendor, its kind stays
        accept=_prefixed_any_ok,
        starts=_prefixed_any_starts,
    ),
    _Detector("password_hash", _PASSWORD_HASH, _PASSWORD_HASH_GATE, priority=1),
    _Detector(
        "azure_devops_pat",
        re.compile(r"(?<![A-Za-z0-9])[a-z2-7]{52}(?![A-Za-z0-9])"),
        ("azure", "dev.azure", "visualstudio", "ado", "azdo", "pat", "vsts"),
        priority=2,
        accept=_ado_pat_ok,
    ),
    _Detector(
        "aws_secret_key",
        re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"),
        ("aws", "secret", "access", "akia", "asia", "ltai"),
        priority=2,
        accept=_aws_secret_ok,
    ),
    # Alibaba Cloud's AccessKey secret: 30 characters, next to its `LTAI` key id or a secret
    # word (`f.write(LTAI..., AIu0...)`).
    _Detector(
        "access_key_secret",
        re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9]{30}(?![A-Za-z0-9/+=])"),
        ("ltai", "alibaba", "aliyun"),
        priority=2,
        accept=_aws_secret_ok,
    ),
)
