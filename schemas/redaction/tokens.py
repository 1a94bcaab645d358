from __future__ import annotations

import re

from schemas.redaction._base import (
    _TOKEN_TAIL,
    _Detector,
)
from schemas.redaction.library import (
    _GITLAB_GATE,
    _aws_secret_ok,
    _near,
)
from schemas.redaction.values import (
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
        accept=_mixed_token,
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
        "azure_devops_pat",
        re.compile(r"(?<![A-Za-z0-9])[a-z2-7]{52}(?![A-Za-z0-9])"),
        ("azure", "dev.azure", "visualstudio", "ado", "azdo", "pat", "vsts"),
        priority=2,
        accept=_ado_pat_ok,
    ),
    _Detector(
        "aws_secret_key",
        re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"),
        ("aws", "secret", "access"),
        priority=2,
        accept=_aws_secret_ok,
    ),
)
