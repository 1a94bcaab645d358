"""The bundled sample landing zone: coding-agent sessions of four repos, made deterministically.

``python -m tests.support.sample_landing [--out DIR]`` (re)writes ``landing-sample/``; the same code
always writes byte-identical files. The sample carries what the pipeline has to cope with:
decisions and conventions stated in text (for the local extraction model) and saved by the agent
(``upsert_graph_triples``), spelling variants of one entity, a supersession, planted secrets in
text and in triple names, bad predicates, over-long names, bad confidences, broken landing lines
and one repo whose agent saves more facts than the per-repo cap. Every value that looks like a
credential is fake.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import polars as pl

from memflow.landing import LANDING_SUFFIXES, UPSERT_TOOL
from schemas.scope import Scope

SEED = 20261102
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "landing-sample"

PAYMENTS = Scope("acme", "payments-api")
CONSOLE = Scope("acme", "web-console")
ML = Scope("globex", "ml-platform")
OVER_CAP_TENANT = Scope("initech", "monorepo")
SAMPLE_TENANTS: tuple[Scope, ...] = (PAYMENTS, CONSOLE, ML, OVER_CAP_TENANT)


def _jwt() -> str:
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = b64(b'{"alg":"HS256","typ":"JWT"}')
    payload = b64(
        b'{"sub":"svc-feature-api","aud":"feature-store","iat":1793700000,"exp":1793703600}'
    )
    key = b"memflow-sample-not-a-real-signing-key"
    signature = hmac.new(key, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{b64(signature)}"


def _rsa_body() -> str:
    # DER-looking prefix so the block reads like PKCS#1; the rest is deterministic noise.
    der = bytes.fromhex("308204a40201000282010100") + random.Random(f"{SEED}-pem").randbytes(1180)
    text = base64.b64encode(der).decode()
    return "\n".join(text[i : i + 64] for i in range(0, len(text), 64))


# Fake but format-valid secrets, by kind. Each value must not survive into any stored table.
SECRETS: dict[str, str] = {
    "aws_access_key_id": "AKIAQ3EXAMPLEFAKE7XZ",
    "github_token": "ghp_FAKEmemflowSampleToken00000000000001",
    "slack_bot_token": "xoxb-2026110300001-4815162342001-FAKEmemflowSampleSlack01",
    "jwt": _jwt(),
    "password": "Tr0ub4dor-and-3-FAKE",
    "postgres_password": "pgFAKEpa55-7731",
    "rsa_private_key": _rsa_body(),
    "email": "priya.raman@acme.example.com",
    "openai_api_key": "sk-FAKEmemflowSampleOpenAIkey0123456789abcdefABCDEF",
}
PLANTED_SECRETS: tuple[str, ...] = tuple(SECRETS.values())
PG_DSN = (
    f"postgres://payments_app:{SECRETS['postgres_password']}"
    "@pgbouncer.payments.internal:6432/payments"
)
RSA_BLOCK = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    + SECRETS["rsa_private_key"]
    + "\n-----END RSA PRIVATE KEY-----"
)

# Spellings of one entity that share a norm_key ("postgresql"); "Ｐｏｓｔｇｒｅｓ" (full-width)
# also appears but normalises to "postgres", an alias rather than the same key.
POSTGRES_VARIANTS: tuple[str, ...] = (
    "PostgreSQL",
    "postgresql",
    "Postgre SQL",
    "ＰｏｓｔｇｒｅＳＱＬ",
)
POSTGRES_FULLWIDTH_ALIAS = "Ｐｏｓｔｇｒｅｓ"
SUPERSEDED_TRIPLE = ("payments-api", "USES", "Redis 6")
REPLACEMENT_TRIPLE = ("payments-api", "USES", "Valkey 8")
FIXABLE_PREDICATES = ("uses", "depends on")
UNFIXABLE_PREDICATES = ("likes!!!", "", "has-a-very-weird predicate?")
LONG_NAME = (
    "the nightly reconciliation batch job that re-reads every settlement file from the acquirer "
    "SFTP drop and rewrites ledger entries whose settlement currency differs from the charge"
)
# What `memflow.landing` rejects in the sample, by reason (all in one web-console session).
EXPECTED_LANDING_REJECTS: dict[str, int] = {
    "bad_timestamp": 1,
    "duplicate_turn": 1,
    "invalid_json": 1,
}

_PST = timezone(timedelta(hours=-8))
_CET = timezone(timedelta(hours=1))
_IST = timezone(timedelta(hours=5, minutes=30))
_JST = timezone(timedelta(hours=9))
_EET = timezone(timedelta(hours=2))
_GAPS = {"user": (35, 420), "assistant": (4, 75), "tool": (1, 25)}


def _t(
    subject: str,
    predicate: str,
    obj: str,
    st: str | None = None,
    ot: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    triple: dict[str, Any] = {"subject": subject, "predicate": predicate, "object": obj}
    if st:
        triple["subject_type"] = st
    if ot:
        triple["object_type"] = ot
    triple.update(extra)
    return triple


def _sup(subject: str, predicate: str, obj: str) -> dict[str, str]:
    return {"subject": subject, "predicate": predicate, "object": obj}


# ------------------------------------------------------------------------------------ sessions


@dataclass
class _Session:
    """One agent session; methods append turns with a clock that advances like a real one."""

    rng: random.Random
    scope: Scope
    client: str
    clock: datetime  # local time with the user's offset
    parquet: bool = False
    session_id: str = ""
    lines: list[dict[str, Any] | str] = field(default_factory=list)
    _n: int = 0

    def __post_init__(self) -> None:
        self.session_id = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    # ----------------------------------------------------------------------------- primitives

    def _stamp(self) -> str:
        if self.client == "claude-code":
            return (
                self.clock.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            )
        if self.client == "cursor":
            return self.clock.isoformat(timespec="milliseconds")
        return self.clock.isoformat(timespec="seconds")

    def _turn_id(self) -> str:
        self._n += 1
        if self.client == "claude-code":
            return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        return f"turn-{self._n:03d}"

    def add(
        self, role: str, content: str, tool_name: str | None = None, tool_input: Any = None
    ) -> dict[str, Any]:
        low, high = _GAPS[role]
        self.clock += timedelta(
            seconds=self.rng.randint(low, high), milliseconds=self.rng.randint(0, 999)
        )
        line: dict[str, Any] = {
            "org": self.scope.tenant_id,
            "repo": self.scope.ns,
            "session_id": self.session_id,
            "turn_id": self._turn_id(),
            "ts": self._stamp(),
            "role": role,
            "content": content,
            "client": self.client,
        }
        if tool_name is not None:
            line["tool_name"] = tool_name
            line["tool_input"] = json.dumps(tool_input) if self.parquet else tool_input
        self.lines.append(line)
        return line

    def user(self, text: str) -> None:
        self.add("user", text)

    def assistant(self, text: str) -> None:
        self.add("assistant", text)

    def run(self, command: str, output: str) -> None:
        if self.client == "codex":
            self.add("tool", output, "shell", {"command": ["bash", "-lc", command]})
        elif self.client == "cursor":
            self.add("tool", output, "run_terminal_cmd", {"command": command})
        else:
            self.add("tool", output, "Bash", {"command": command})

    def read(self, path: str, output: str) -> None:
        if self.client == "codex":
            self.add("tool", output, "shell", {"command": ["bash", "-lc", f"sed -n 1,80p {path}"]})
        elif self.client == "cursor":
            self.add("tool", output, "read_file", {"target_file": path})
        else:
            self.add("tool", output, "Read", {"file_path": path})

    def edit(self, path: str, summary: str) -> None:
        if self.client == "codex":
            patch = (
                f"*** Begin Patch\n*** Update File: {path}\n@@\n- # before\n+ # {summary}\n"
                "*** End Patch"
            )
            self.add(
                "tool",
                f"Success. Updated the following files:\nM {path}",
                "apply_patch",
                {"patch": patch},
            )
        elif self.client == "cursor":
            self.add(
                "tool",
                f"The apply model made the following changes to {path}.",
                "edit_file",
                {"target_file": path, "instructions": summary},
            )
        else:
            self.add(
                "tool",
                f"The file {path} has been updated.",
                "Edit",
                {"file_path": path, "old_string": "# before", "new_string": f"# {summary}"},
            )

    def save(self, *triples: dict[str, Any]) -> None:
        noun = "triple" if len(triples) == 1 else "triples"
        self.add(
            "tool",
            f"Saved {len(triples)} {noun} to project memory.",
            UPSERT_TOOL,
            {"triples": list(triples)},
        )

    def cut_last(self, chars: int) -> None:
        """The previous turn's line, cut short (a client killed mid-write)."""
        last = self.lines.pop()
        assert isinstance(last, dict)
        self.lines.append(json.dumps(last, ensure_ascii=False, separators=(",", ":"))[:chars])

    def drop_zone_of_last(self) -> None:
        last = self.lines[-1]
        assert isinstance(last, dict)
        local = datetime.fromisoformat(last["ts"]).replace(tzinfo=None)
        last["ts"] = local.isoformat(timespec="milliseconds")

    def resend_last(self) -> None:
        """A client retry: the previous line again, byte for byte."""
        last = self.lines[-1]
        assert isinstance(last, dict)
        self.lines.append(dict(last))

    def pause(self, minutes: int) -> None:
        self.clock += timedelta(minutes=minutes)

    # ------------------------------------------------------------------------ routine episodes

    def routine(self, work: _Work) -> None:
        """A stretch of ordinary work: a failing test, a feature, lint, or a question."""
        kind = self.rng.choice(("bug", "bug", "feature", "lint", "question"))
        getattr(self, f"_{kind}")(work)

    def _bug(self, w: _Work) -> None:
        test, path, error, cause, fix = w.draw("bugs")
        asks = (
            f"`{test}` started failing after the last merge, can you take a look?",
            f"CI is red on {test}. Please fix it without touching the test unless it's wrong.",
            f"{test} fails locally for me too. What's going on?",
        )
        self.user(self.rng.choice(asks))
        self.assistant("Let me reproduce it first.")
        self.run(
            w.test_cmd(test),
            f"FAILED {test} - {error}\n1 failed in {self.rng.uniform(0.3, 4):.2f}s",
        )
        self.read(path, f"# {path}\n...")
        self.assistant(f"The failure comes from {path}: {cause}. Fix: {fix}.")
        self.edit(path, fix)
        self.run(w.test_cmd(test), f"1 passed in {self.rng.uniform(0.3, 4):.2f}s")
        self.assistant("Fixed; the test passes and nothing else changed.")

    def _feature(self, w: _Work) -> None:
        what, path = w.draw("features")
        self.user(f"Next: add {what}.")
        self.assistant(
            f"Plan: implement it in {path}, add a test next to the existing ones, "
            "then run the suite."
        )
        self.edit(path, f"add {what}")
        w.suite += 1
        self.run(w.test_cmd(), f"{w.suite} passed in {self.rng.uniform(8, 60):.2f}s")
        self.assistant(f"Done: added {what} in {path}, with a test; the suite passes.")

    def _lint(self, w: _Work) -> None:
        p = w.profile
        self.user(
            self.rng.choice(
                (
                    "Run the linter and fix what it finds.",
                    "Can you clean up the lint warnings before I open the PR?",
                )
            )
        )
        files = self.rng.sample(p.files, k=min(3, len(p.files)))
        report = "\n".join(
            f"{f}:{self.rng.randint(3, 220)}:{self.rng.randint(1, 40)}: {code}"
            for f, code in zip(files, self.rng.sample(p.lint_codes, k=len(files)), strict=True)
        )
        self.run(p.lint_cmd, f"{report}\nFound {len(files)} errors.")
        for f in files:
            self.edit(f, "lint fix")
        self.run(p.lint_cmd, "All checks passed!")
        self.assistant(f"Fixed {len(files)} findings in {', '.join(files)}.")

    def _question(self, w: _Work) -> None:
        question, answer = w.draw("questions")
        self.user(question)
        self.assistant(answer)


@dataclass(frozen=True)
class _Profile:
    test_cmd: str
    lint_cmd: str
    files: list[str]
    lint_codes: list[str]
    bugs: list[tuple[str, str, str, str, str]]  # test, file, error, cause, fix
    features: list[tuple[str, str]]  # what, file
    questions: list[tuple[str, str]]


class _Work:
    """One tenant's routine work: draws each story once before any repeats."""

    def __init__(self, rng: random.Random, profile: _Profile) -> None:
        self.rng = rng
        self.profile = profile
        self.suite = rng.randint(60, 240)  # tests in the repo's suite
        self._decks: dict[str, list[Any]] = {}

    def test_cmd(self, target: str = "") -> str:
        return " ".join(self.profile.test_cmd.format(target=target).split())

    def draw(self, kind: str) -> Any:
        """The next story of a kind ("bugs", "features", "questions")."""
        deck = self._decks.get(kind)
        if not deck:
            deck = list(getattr(self.profile, kind))
            self.rng.shuffle(deck)
            self._decks[kind] = deck
        return deck.pop()


# ---------------------------------------------------------------------------- acme/payments-api

_PAYMENTS_PROFILE = _Profile(
    test_cmd="uv run pytest {target} -q",
    lint_cmd="uv run ruff check .",
    files=[
        "app/refunds.py",
        "app/webhooks.py",
        "app/settlement/batch.py",
        "app/api/payments.py",
        "app/money.py",
        "app/idempotency.py",
    ],
    lint_codes=[
        "F401 `decimal.ROUND_HALF_UP` imported but unused",
        "E501 Line too long (104 > 100)",
        "B008 Do not perform function call `Depends` in argument defaults",
        "UP035 Import from `collections.abc` instead: `Iterable`",
    ],
    bugs=[
        (
            "tests/test_refunds.py::test_partial_refund_rounding",
            "app/refunds.py",
            "AssertionError: assert 1999 == 2000",
            "the refund amount is computed with float division before converting to minor units",
            "switched it to integer arithmetic on cents, with Decimal quantize for the fee split",
        ),
        (
            "tests/test_webhooks.py::test_signature_rejects_replay",
            "app/webhooks.py",
            "Failed: DID NOT RAISE <class 'app.errors.ReplayError'>",
            "the timestamp tolerance compares seconds against milliseconds",
            "the header timestamp is parsed as seconds now and checked against a 300 s window",
        ),
        (
            "tests/test_settlement.py::test_batch_groups_by_currency",
            "app/settlement/batch.py",
            "KeyError: 'JPY'",
            "zero-decimal currencies are missing from the exponent table",
            "added JPY and KRW with exponent 0 to CURRENCY_EXPONENTS",
        ),
        (
            "tests/test_idempotency.py::test_same_key_returns_cached_response",
            "app/idempotency.py",
            "AssertionError: assert 201 == 200",
            "the cached response stores the status before the handler sets it",
            "the status is captured after the handler returns",
        ),
        (
            "tests/test_api.py::test_list_payments_pagination",
            "app/api/payments.py",
            "AssertionError: assert 51 == 50",
            "the cursor query uses <= instead of < on created_at",
            "made the cursor condition strict and broke ties by id",
        ),
    ],
    features=[
        ("a `GET /v1/refunds/{id}` endpoint", "app/api/refunds.py"),
        ("request ids on every settlement log line", "app/logging.py"),
        ("retries with exponential backoff around the acquirer client", "app/acquirer/client.py"),
        ("a `--dry-run` flag for the settlement CLI", "app/settlement/cli.py"),
        ("a Prometheus counter for declined payments by reason", "app/metrics.py"),
    ],
    questions=[
        (
            "Why does the settlement job run at 02:00 UTC and not at midnight?",
            "The acquirer publishes the previous day's settlement file at about 01:30 UTC, so "
            "02:00 leaves a buffer. The schedule is in deploy/cron/settlement.yaml.",
        ),
        (
            "Where do we validate currency codes?",
            "In app/money.py: `Currency.parse` checks ISO 4217 codes against a generated table, "
            "and the request models call it, so the handlers never see an unknown currency.",
        ),
        (
            "Is there a reason fastapi is pinned?",
            "Yes: 0.116 changed how dependency overrides resolve in tests, which broke the "
            "fixtures in tests/conftest.py. The pin has a comment pointing at that.",
        ),
    ],
)


def _payments(rng: random.Random) -> Iterator[_Session]:
    p = _Work(rng, _PAYMENTS_PROFILE)
    s = _Session(rng, PAYMENTS, "claude-code", datetime(2026, 11, 2, 9, 12, 4, tzinfo=_PST))
    s.user(
        "Before you start on the refund endpoint, some ground rules for this repo: we use uv, "
        "not pip or poetry. Tests go in tests/ with pytest, one file per module, and we lint "
        "with ruff. Please remember these."
    )
    s.assistant(
        "Got it: `uv run pytest`, `uv run ruff check`, tests under tests/ mirroring the "
        "package. Saving these conventions to project memory."
    )
    s.save(
        _t("payments-api", "USES", "uv", "service", "tool", confidence=0.95),
        _t("payments team", "PREFERS", "uv", "team", "tool", confidence=0.9),
        _t(
            "payments-api",
            "CONVENTION",
            "tests live in tests/ and run with pytest",
            "service",
            "convention",
            confidence=0.95,
        ),
        _t("payments-api", "USES", "pytest", "service", "tool"),
        _t("payments-api", "USES", "ruff", "service", "tool"),
    )
    s.user(
        "Also: the payments service talks to Postgres 16 via pgbouncer. Never open direct "
        "connections to the primary; the pool is sized for pgbouncer only."
    )
    s.assistant(
        "Understood: every database connection goes through the pgbouncer DSN. Recording that."
    )
    s.save(
        _t("payments-api", "USES", "PostgreSQL", "service", "database", confidence=0.95),
        _t("PostgreSQL", "HAS_VERSION", "16", "database", "version"),
        _t("payments-api", "CONNECTS_VIA", "PgBouncer", "service", "tool", confidence=0.9),
    )
    for _ in range(3):
        s.routine(p)
    yield s

    s = _Session(rng, PAYMENTS, "claude-code", datetime(2026, 11, 3, 10, 5, 40, tzinfo=_CET))
    s.user(
        "The settlement job is timing out against postgresql again. Can you check the pool "
        "config in app/db.py?"
    )
    s.assistant("Reading app/db.py.")
    s.read(
        "app/db.py",
        "import os\n\nfrom sqlalchemy.ext.asyncio import create_async_engine\n\n"
        f'DATABASE_URL = os.environ.get("DATABASE_URL", "{PG_DSN}")\n'
        "engine = create_async_engine(DATABASE_URL, pool_size=40, max_overflow=10)\n",
    )
    s.assistant(
        "Two problems. The pool size is 40 but pgbouncer's default_pool_size is 20, so "
        "half the settlement workers queue. And app/db.py hardcodes a fallback DSN with "
        "a password in it; that should come from the environment only. Remove it?"
    )
    s.user(
        "Yes, remove it. Credentials come from AWS Secrets Manager, never from code. And set "
        "the pool to 20."
    )
    s.edit("app/db.py", "read DATABASE_URL from the environment only; pool_size=20")
    s.save(
        _t(PG_DSN, "CONNECTS_TO", "postgresql", "dsn", "database"),
        _t(
            "payments-api",
            "CONVENTION",
            "credentials come from AWS Secrets Manager",
            "service",
            "convention",
            confidence=0.95,
        ),
        _t("payments-api", "USES", "AWS Secrets Manager", "service", "service"),
    )
    s.user("btw the reporting replica is also Postgre SQL 16, same major as the primary.")
    s.assistant("Noted.")
    s.save(_t("reporting-replica", "USES", "Postgre SQL", "database", "database"))
    s.pause(50)
    s.user(
        "CI is failing on the S3 upload step. Here's what the runner has: "
        f"AWS_ACCESS_KEY_ID={SECRETS['aws_access_key_id']} AWS_REGION=eu-central-1"
    )
    s.assistant(
        "That key id belongs to the old ci-uploader IAM user, which lost s3:PutObject on "
        "the artifacts bucket last week. Since it's now in this transcript, rotate it; "
        "the upload step should assume the ci-artifacts role via OIDC instead."
    )
    s.save(
        _t("ci-uploader", "USES", SECRETS["aws_access_key_id"], "iam user", "credential"),
        _t("payments-api CI", "DEPLOYS_TO", "S3 artifacts bucket", "pipeline", "storage"),
    )
    for _ in range(3):
        s.routine(p)
    yield s

    s = _Session(rng, PAYMENTS, "codex", datetime(2026, 11, 4, 14, 30, 2, tzinfo=_IST))
    s.user(
        "Context for this PR: idempotency keys live in Redis 6 right now, TTL 24h. Don't "
        "change that here."
    )
    s.assistant("OK, I'll leave the idempotency store alone.")
    s.save(
        _t(
            *SUPERSEDED_TRIPLE,
            "service",
            "cache",
            confidence=0.9,
            valid_from="2026-11-04T09:00:00Z",
        ),
        _t("idempotency keys", "STORED_IN", "Redis 6", "concept", "cache"),
    )
    s.user("What does payments-api talk to besides the database?")
    s.assistant(
        "Stripe's API for card payments, the ledger-service over gRPC for bookings, and "
        "maybe fraud-scoring: there is a client for it in app/fraud.py but I can't see it "
        "called anywhere."
    )
    s.save(
        _t("payments-api", "uses", "Stripe API", "service", "api"),
        _t("payments-api", "depends on", "ledger-service", "service", "service"),
        _t("payments-api", "DEPENDS_ON", "fraud-scoring", "service", "service", confidence=0.3),
    )
    s.user(
        "ledger-service の DB は Ｐｏｓｔｇｒｅｓ です (ＰｏｓｔｇｒｅＳＱＬ 16, shared cluster)."
    )
    s.assistant(
        "Thanks, recording that ledger-service also runs on the shared PostgreSQL 16 cluster."
    )
    s.save(
        _t("ledger-service", "USES", POSTGRES_FULLWIDTH_ALIAS, "service", "database"),
        _t("ledger-service", "USES", "ＰｏｓｔｇｒｅＳＱＬ", "service", "database"),
    )
    for _ in range(3):
        s.routine(p)
    yield s

    # Starts 23:50 UTC on Nov 5 and runs past midnight UTC: two day partitions.
    s = _Session(rng, PAYMENTS, "claude-code", datetime(2026, 11, 5, 15, 50, 0, tzinfo=_PST))
    s.user(
        "We moved from Redis 6 to Valkey 8 last night for the idempotency store: same "
        "protocol, the client didn't change. Update your notes."
    )
    s.assistant("Updating memory: Valkey 8 replaces Redis 6 for payments-api's idempotency keys.")
    s.save(
        _t(
            *REPLACEMENT_TRIPLE,
            "service",
            "cache",
            confidence=0.95,
            valid_from="2026-11-05T06:00:00Z",
            supersedes=_sup(*SUPERSEDED_TRIPLE),
        ),
        _t(
            "idempotency keys",
            "STORED_IN",
            "Valkey 8",
            "concept",
            "cache",
            valid_from="2026-11-05T06:00:00Z",
            supersedes=_sup("idempotency keys", "STORED_IN", "Redis 6"),
        ),
    )
    s.user(
        f"For the record, docker-compose.local.yml uses password={SECRETS['password']} for "
        "the throwaway test database. That's fine to keep in the compose file."
    )
    s.assistant(
        "Fine for a local-only container, but I'd still read it from .env so the same "
        "compose file works in CI with a generated password. I won't store it in memory."
    )
    s.user("Where is this thing deployed, and who owns the reconciliation job?")
    s.assistant(
        "payments-api runs on EKS (the payments-prod cluster) behind the internal ALB. "
        "The reconciliation batch job runs on payments-worker; ownership isn't written "
        "down anywhere I can find."
    )
    s.save(
        _t("payments-api", "DEPLOYED_ON", "EKS", "service", "platform", confidence=1.7),
        _t("payments-api", "DEPLOYED_ON", "payments-prod", "service", "cluster", confidence="high"),
        _t(LONG_NAME, "RUNS_ON", "payments-worker", "job", "service"),
    )
    for _ in range(2):
        s.routine(p)
    yield s

    s = _Session(rng, PAYMENTS, "claude-code", datetime(2026, 11, 6, 8, 55, 12, tzinfo=_PST))
    s.user(
        f"Priya ({SECRETS['email']}) owns payments-api now; page her for anything "
        "settlement related."
    )
    s.assistant("Recorded Priya as the owner of payments-api.")
    s.save(_t(SECRETS["email"], "OWNS", "payments-api", "person", "service"))
    s.user(
        "And the payments_api service publishes payment.settled events to Kafka, topic "
        "payments.settled.v1. Consumers must be idempotent."
    )
    s.assistant("Saved.")
    s.save(
        _t("payments_api", "PUBLISHES_TO", "Kafka", "service", "queue"),
        _t(
            "payments-api",
            "CONVENTION",
            "event consumers must be idempotent",
            "service",
            "convention",
        ),
    )
    for _ in range(3):
        s.routine(p)
    yield s


# ----------------------------------------------------------------------------- acme/web-console

_CONSOLE_PROFILE = _Profile(
    test_cmd="pnpm vitest run {target}",
    lint_cmd="pnpm lint",
    files=[
        "src/components/AmountInput.tsx",
        "src/lib/api.ts",
        "src/hooks/usePayments.ts",
        "app/(dashboard)/payments/page.tsx",
        "app/(dashboard)/refunds/RefundDialog.tsx",
    ],
    lint_codes=[
        "error  'useMemo' is defined but never used  @typescript-eslint/no-unused-vars",
        "warning  React Hook useEffect has a missing dependency: 'merchantId'",
        "error  Prefer named exports  import/no-default-export",
        "error  Unexpected any. Specify a different type  @typescript-eslint/no-explicit-any",
    ],
    bugs=[
        (
            "src/components/AmountInput.test.tsx",
            "src/components/AmountInput.tsx",
            "AssertionError: expected '1,000.00' to be '1.000,00'",
            "the formatter ignores the user's locale and always uses en-US",
            "passed the session locale into Intl.NumberFormat",
        ),
        (
            "src/lib/api.test.ts",
            "src/lib/api.ts",
            "TypeError: fetch failed",
            "the BFF base URL is read at import time, before the test sets it",
            "the base URL is read when the client is created",
        ),
        (
            "tests/e2e/refund.spec.ts",
            "app/(dashboard)/refunds/RefundDialog.tsx",
            "Timeout 5000ms exceeded waiting for getByRole('button', { name: 'Confirm refund' })",
            "the button label changed to 'Refund' in the last copy update",
            "restored the 'Confirm refund' label from the design spec",
        ),
        (
            "src/hooks/usePayments.test.ts",
            "src/hooks/usePayments.ts",
            "AssertionError: expected 2 calls, received 3",
            "the query key contains a new Date object, so every render refetches",
            "the query key uses the ISO date string instead",
        ),
    ],
    features=[
        ("a CSV export button on the payments table", "app/(dashboard)/payments/ExportButton.tsx"),
        ("dark mode for the dashboard shell", "app/(dashboard)/layout.tsx"),
        ("an empty state for merchants without payouts", "app/(dashboard)/payouts/EmptyState.tsx"),
        ("keyboard shortcuts in the refund dialog", "app/(dashboard)/refunds/RefundDialog.tsx"),
    ],
    questions=[
        (
            "Why do we proxy payments-api through the BFF instead of calling it from the browser?",
            "The BFF adds the service token server-side and strips internal fields such as the "
            "acquirer reference, so neither ever reaches the browser.",
        ),
        (
            "Where do the feature flags come from?",
            "From LaunchDarkly, read server-side in app/flags.ts and passed down as props; client "
            "components never call the SDK directly.",
        ),
    ],
)


def _console(rng: random.Random) -> Iterator[_Session]:
    p = _Work(rng, _CONSOLE_PROFILE)
    s = _Session(rng, CONSOLE, "cursor", datetime(2026, 11, 2, 10, 2, 31, tzinfo=_CET))
    s.user(
        "Quick ground rules: we use pnpm, not npm. Never commit a package-lock.json, only "
        "pnpm-lock.yaml."
    )
    s.assistant("Understood, I'll only use pnpm and keep pnpm-lock.yaml as the single lockfile.")
    s.save(
        _t("web-console", "USES", "pnpm", "app", "tool", confidence=0.95),
        _t("frontend team", "PREFERS", "pnpm", "team", "tool"),
        _t("web-console", "CONVENTION", "pnpm-lock.yaml is the only lockfile", "app", "convention"),
    )
    s.user(
        "Unit tests are Vitest, end-to-end tests are Playwright under tests/e2e. We're on "
        "Next.js 15 with the app router and React 19; prefer server components and no "
        "default exports."
    )
    s.assistant("Noted; client components only where there's interactivity.")
    s.save(
        _t("web-console", "USES", "Vitest", "app", "tool"),
        _t("web-console", "USES", "Playwright", "app", "tool"),
        _t("web-console", "USES", "Next.js 15", "app", "framework"),
        _t("web-console", "CONVENTION", "no default exports", "app", "convention"),
    )
    for _ in range(3):
        s.routine(p)
    yield s

    s = _Session(rng, CONSOLE, "codex", datetime(2026, 11, 3, 16, 20, 9, tzinfo=_CET))
    s.user(
        "The release workflow 401s on `gh release create`. I exported "
        f"GITHUB_TOKEN={SECRETS['github_token']} locally and it works from my laptop, so "
        "it must be the Actions secret."
    )
    s.assistant(
        "That's a personal access token; please revoke it since it's in this session "
        "now. In Actions the workflow should use the built-in GITHUB_TOKEN with "
        "`permissions: contents: write`, which it currently lacks."
    )
    s.edit(".github/workflows/release.yml", "grant contents: write to the release job")
    s.save(
        _t("release workflow", "USES", "GITHUB_TOKEN", "workflow", "credential"),
        _t(
            "release workflow",
            "AUTHENTICATES_WITH",
            SECRETS["github_token"],
            "workflow",
            "credential",
        ),
    )
    s.user(
        "web-console calls payments-api only through the BFF at /api/payments. Never from "
        "the browser directly."
    )
    s.assistant("Recorded.")
    s.save(
        _t("web-console", "DEPENDS_ON", "Payments API", "app", "service"),
        _t(
            "web-console",
            "CONVENTION",
            "payments-api is called only through the BFF",
            "app",
            "convention",
        ),
    )
    for _ in range(3):
        s.routine(p)
    yield s

    # The session whose client wrote a broken line, a line without a zone and a retry.
    s = _Session(rng, CONSOLE, "cursor", datetime(2026, 11, 4, 9, 41, 0, tzinfo=_EET))
    s.user("Where is web-console deployed? I keep forgetting.")
    s.assistant(
        "On Vercel: production tracks main, previews per PR. The payments proxy runs as "
        "a Vercel function in the fra1 region next to payments-api."
    )
    s.save(_t("web-console", "DEPLOYED_ON", "Vercel", "app", "platform", confidence=0.9))
    s.assistant("I'll update the deployment notes in docs/deploy.md while I'm at it.")
    s.cut_last(230)
    s.user("Also the design team likes Tailwind and we keep the tokens in packages/design-tokens.")
    s.drop_zone_of_last()
    s.save(
        _t("frontend team", "likes!!!", "Tailwind CSS", "team", "framework"),
        _t("web-console", "", "Storybook", "app", "tool"),
        _t("web-console", "has-a-very-weird predicate?", "design tokens", "app", "package"),
    )
    s.resend_last()
    for _ in range(3):
        s.routine(p)
    yield s

    s = _Session(
        rng, CONSOLE, "cursor", datetime(2026, 11, 5, 13, 7, 45, tzinfo=_CET), parquet=True
    )
    s.user("The dashboard reads payouts from payments_api too, right?")
    s.assistant("Yes, through the same BFF route, /api/payments/payouts.")
    s.save(_t("web-console", "DEPENDS_ON", "payments_api", "app", "service"))
    for _ in range(3):
        s.routine(p)
    yield s

    s = _Session(rng, CONSOLE, "claude-code", datetime(2026, 11, 6, 11, 30, 0, tzinfo=_CET))
    s.user("We're replacing Jest with Vitest everywhere; the last Jest config goes away today.")
    s.assistant("I'll delete jest.config.js and the babel-jest dependency.")
    s.run(
        "pnpm remove jest babel-jest @types/jest",
        "Progress: resolved 812, reused 790\n"
        "dependencies:\n- jest 29.7.0\n- babel-jest 29.7.0\nDone in 2.4s",
    )
    for _ in range(3):
        s.routine(p)
    yield s


# ---------------------------------------------------------------------------- globex/ml-platform

_ML_PROFILE = _Profile(
    test_cmd="poetry run pytest {target} -q",
    lint_cmd="poetry run ruff check src tests",
    files=[
        "src/mlp/features/join.py",
        "src/mlp/train/trainer.py",
        "src/mlp/registry/promote.py",
        "src/mlp/cli/jobs.py",
    ],
    lint_codes=[
        "F841 Local variable `loss` is assigned to but never used",
        "E741 Ambiguous variable name: `l`",
        "SIM108 Use ternary operator",
        "B006 Do not use mutable data structures for argument defaults",
    ],
    bugs=[
        (
            "tests/test_features.py::test_point_in_time_join",
            "src/mlp/features/join.py",
            "AssertionError: frame shapes differ (1000, 12) vs (1000, 13)",
            "the join picks up the label column from the feature view",
            "the label column is excluded from the feature view's schema",
        ),
        (
            "tests/test_trainer.py::test_resume_from_checkpoint",
            "src/mlp/train/trainer.py",
            "FileNotFoundError: checkpoints/step_500/optimizer.pt",
            "the optimizer state is saved as optim.pt since the refactor",
            "the loader reads optim.pt and falls back to optimizer.pt",
        ),
        (
            "tests/test_registry.py::test_promote_requires_eval",
            "src/mlp/registry/promote.py",
            "Failed: DID NOT RAISE <class 'mlp.registry.PromotionError'>",
            "the eval gate checks a metric key the evaluator never logs",
            "the gate reads `eval/auc`, which the evaluator actually logs",
        ),
    ],
    features=[
        (
            "a Kueue LocalQueue per team in the training chart",
            "deploy/charts/training/templates/localqueue.yaml",
        ),
        ("a `mlp jobs logs` command", "src/mlp/cli/jobs.py"),
        ("mixed precision behind a --amp flag", "src/mlp/train/trainer.py"),
    ],
    questions=[
        (
            "How do training jobs get GPUs?",
            "Through Kueue: each team has a LocalQueue mapped to the h100 ClusterQueue, and jobs "
            "wait there until quota frees up. Nobody schedules pods on GPU nodes directly.",
        ),
        (
            "Where do experiment runs get logged?",
            "To the MLflow tracking server at mlflow.ml.internal; the trainer logs params, metrics "
            "and the final checkpoint as an artifact.",
        ),
    ],
)


def _ml(rng: random.Random) -> Iterator[_Session]:
    p = _Work(rng, _ML_PROFILE)
    s = _Session(rng, ML, "codex", datetime(2026, 11, 2, 10, 15, 0, tzinfo=_JST))
    s.user(
        "Training jobs run on Kubernetes with Kueue for quota; the GPU pool is H100s on GKE. "
        "We use Poetry here, not uv: the repo is pinned to Poetry 1.8."
    )
    s.assistant("Understood. I'll use `poetry run` for everything and submit jobs through Kueue.")
    s.save(
        _t("ml-platform", "DEPLOYED_ON", "GKE", "platform", "platform", confidence=0.95),
        _t("ml-platform", "USES", "Kueue", "platform", "tool"),
        _t("ml team", "PREFERS", "Poetry", "team", "tool"),
        _t("training jobs", "RUN_ON", "H100 node pool", "workload", "hardware"),
    )
    s.user("Experiment tracking is MLflow, and the model registry is mlflow too.")
    s.assistant("Recorded both.")
    s.save(
        _t("ml-platform", "USES", "MLflow", "platform", "tool"),
        _t("model registry", "USES", "mlflow", "component", "tool"),
    )
    for _ in range(3):
        s.routine(p)
    yield s

    s = _Session(rng, ML, "claude-code", datetime(2026, 11, 3, 14, 2, 11, tzinfo=UTC))
    s.user(
        "The alerts bot posts to #ml-alerts with "
        f"{SECRETS['slack_bot_token']} and it started getting not_in_channel errors."
    )
    s.assistant(
        "not_in_channel means the bot user was removed from #ml-alerts; re-invite it. "
        "Also, that bot token is now in this transcript, so rotate it and keep it in the "
        "alerts-bot Kubernetes secret only."
    )
    s.user(
        "The feature API rejects my token, is the audience wrong? Authorization: Bearer "
        f"{SECRETS['jwt']}"
    )
    s.assistant(
        "The token's audience is feature-store but the feature API expects "
        "feature-api, and it expired an hour after issue. Request a new one from the "
        "token service with the right audience."
    )
    s.user("Features come from Feast, backed by PostgreSQL as the offline store.")
    s.assistant("Saved.")
    s.save(
        _t("ml-platform", "USES", "Feast", "platform", "tool"),
        _t("Feast", "DEPENDS_ON", "PostgreSQL", "tool", "database"),
    )
    for _ in range(3):
        s.routine(p)
    yield s

    s = _Session(rng, ML, "codex", datetime(2026, 11, 5, 11, 48, 30, tzinfo=_JST))
    s.user(
        f"For the eval harness I set OPENAI_API_KEY={SECRETS['openai_api_key']}, but we "
        "should switch the judge to the local vLLM server instead."
    )
    s.assistant(
        "Agreed. I'll point the judge at the vLLM OpenAI-compatible endpoint on the "
        "cluster and drop the key from the harness config."
    )
    s.edit("evals/config.yaml", "judge endpoint -> http://vllm.ml.internal:8000/v1")
    s.save(
        _t("eval harness", "USES", "vLLM", "component", "tool", confidence=0.9),
        _t(
            "eval harness",
            "AUTHENTICATES_WITH",
            SECRETS["openai_api_key"],
            "component",
            "credential",
        ),
    )
    s.user(
        "Here is the deploy key for the model-sync bot, please add it to the k8s secret:\n"
        + RSA_BLOCK
    )
    s.assistant(
        "I won't paste a private key into a manifest. Create the secret from the file: "
        "`kubectl create secret generic model-sync-deploy-key --from-file=id_rsa`, and "
        "since the key is now in this chat, generate a fresh one."
    )
    for _ in range(3):
        s.routine(p)
    yield s

    s = _Session(rng, ML, "claude-code", datetime(2026, 11, 7, 9, 0, 0, tzinfo=_EET))
    s.user(
        "Notebooks are never committed; exploratory code lives in the scratch bucket. And "
        "ML Flow runs must be tagged with the git sha."
    )
    s.assistant("Saving both conventions.")
    s.save(
        _t("ml-platform", "CONVENTION", "notebooks are not committed", "platform", "convention"),
        _t("ML Flow", "CONVENTION", "runs are tagged with the git sha", "tool", "convention"),
    )
    for _ in range(3):
        s.routine(p)
    yield s


# ------------------------------------------------------------------------------ initech/monorepo

_ROOTS = ("pkg", "internal", "services", "libs")
_DOMAINS = (
    "billing",
    "core",
    "auth",
    "search",
    "catalog",
    "orders",
    "inventory",
    "shipping",
    "pricing",
    "payments",
    "notifications",
    "users",
    "analytics",
    "reporting",
    "storage",
    "messaging",
    "scheduler",
    "gateway",
    "config",
    "telemetry",
    "identity",
    "tax",
    "fraud",
    "experiments",
    "media",
)
_COMPONENTS = (
    "ledger",
    "money",
    "invoice",
    "client",
    "server",
    "store",
    "cache",
    "models",
    "handlers",
    "routes",
    "schema",
    "migrations",
    "validation",
    "events",
    "queue",
    "worker",
    "metrics",
    "tracing",
    "logging",
    "retry",
    "ratelimit",
    "session",
    "tokens",
    "crypto",
    "encoding",
    "http",
    "grpc",
    "sql",
    "testutil",
    "fixtures",
    "flags",
    "audit",
    "export",
    "importer",
    "sync",
    "index",
    "query",
    "planner",
    "policy",
    "api",
)
_TEAMS = (
    "team-billing",
    "team-platform",
    "team-commerce",
    "team-data",
    "team-identity",
    "team-growth",
    "team-infra",
    "team-search",
)
OVER_CAP_MODULES = 3_200
_BATCH = 250


def _monorepo(rng: random.Random) -> Iterator[_Session]:
    every = [f"{r}/{d}/{c}" for r in _ROOTS for d in _DOMAINS for c in _COMPONENTS]
    modules = sorted(rng.sample(every, OVER_CAP_MODULES))
    core = [m for m in modules if "/core/" in m or "/config/" in m]
    edges: list[dict[str, Any]] = []
    for m in modules:
        wanted = rng.randint(2, 5)
        picked: list[str] = []
        while len(picked) < wanted:
            dep = rng.choice(core) if rng.random() < 0.3 else rng.choice(modules)
            if dep != m and dep not in picked:
                picked.append(dep)
        edges.extend(_t(m, "DEPENDS_ON", d, "module", "module") for d in picked)
    areas = [f"{r}/{d}" for r in _ROOTS for d in _DOMAINS]
    owners = [
        _t(_TEAMS[i % len(_TEAMS)], "OWNS", area, "team", "module") for i, area in enumerate(areas)
    ]
    batches = [edges[i : i + _BATCH] for i in range(0, len(edges), _BATCH)]
    starts = (
        datetime(2026, 11, 9, 9, 0, tzinfo=_EET),
        datetime(2026, 11, 9, 21, 30, tzinfo=_EET),
        datetime(2026, 11, 10, 8, 45, tzinfo=_EET),
    )
    per_session = -(-len(batches) // len(starts))
    for n, start in enumerate(starts):
        s = _Session(rng, OVER_CAP_TENANT, "claude-code", start)
        if n == 0:
            s.user(
                "Inventory every module's imports across the monorepo and save the "
                "dependency graph to memory, so later sessions can answer 'what breaks if I "
                "change X'. Start with the ownership map in CODEOWNERS."
            )
            s.assistant(
                "Reading CODEOWNERS, then walking the import graph package by package. "
                "I'll save edges in batches of about 250."
            )
            s.save(*owners)
        else:
            s.user("Continue the dependency inventory where you left off.")
        for batch in batches[n * per_session : (n + 1) * per_session]:
            s.assistant(
                f"Scanned imports from {batch[0]['subject']} through "
                f"{batch[-1]['subject']}; saving {len(batch)} edges."
            )
            s.save(*batch)
        s.assistant(
            "That's everything for this pass."
            if n < len(starts) - 1
            else "Inventory complete: every module's direct dependencies are saved."
        )
        yield s


# ------------------------------------------------------------------------------------- writing


def _sessions() -> list[_Session]:
    rng = random.Random(SEED)
    return [*_payments(rng), *_console(rng), *_ml(rng), *_monorepo(rng)]


def _file_name(s: _Session) -> str:
    first = s.lines[0]
    assert isinstance(first, dict)
    suffix = ".parquet" if s.parquet else ".jsonl"
    return f"{first['ts'][:10]}_{s.client}_{s.session_id[:8]}{suffix}"


def _write_jsonl(s: _Session, path: Path) -> None:
    text = "".join(
        (
            line
            if isinstance(line, str)
            else json.dumps(line, ensure_ascii=False, separators=(",", ":"))
        )
        + "\n"
        for line in s.lines
    )
    path.write_bytes(text.encode("utf-8"))


_PARQUET_COLUMNS = (
    "org",
    "repo",
    "session_id",
    "turn_id",
    "ts",
    "role",
    "content",
    "client",
    "tool_name",
    "tool_input",
)


def _write_parquet(s: _Session, path: Path) -> None:
    rows = [line for line in s.lines if isinstance(line, dict)]
    frame = pl.DataFrame(
        {c: [row.get(c) for row in rows] for c in _PARQUET_COLUMNS},
        schema=dict.fromkeys(_PARQUET_COLUMNS, pl.String()),
    )
    frame.write_parquet(path, compression="zstd", statistics=False)


def generate(out: str | Path = DEFAULT_OUT) -> list[Path]:
    """Write the sample under ``out`` and return the files written. Landing files of the sample
    tenants that the generator no longer writes are removed; nothing else is touched."""
    root = Path(out)
    written: list[Path] = []
    for scope in SAMPLE_TENANTS:
        folder = root / scope.tenant_id / scope.ns
        if folder.is_dir():
            for old in folder.iterdir():
                if old.is_file() and old.name.endswith(LANDING_SUFFIXES):
                    old.unlink()
        folder.mkdir(parents=True, exist_ok=True)
    for s in _sessions():
        path = root / s.scope.tenant_id / s.scope.ns / _file_name(s)
        (_write_parquet if s.parquet else _write_jsonl)(s, path)
        written.append(path)
    return sorted(written)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.sample_landing", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="landing root to write")
    args = parser.parse_args(argv)
    files = generate(args.out)
    size = sum(f.stat().st_size for f in files)
    print(f"wrote {len(files)} files, {size:,} bytes, under {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
