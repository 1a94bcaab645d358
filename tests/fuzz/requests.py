"""Generated requests to the write endpoints (``POST /v1/turns``, ``POST /v1/triples``): valid
bodies mixed with every malformation of the landing catalogs (`tests.fuzz.zones`: each line
family becomes a turn item, each triple family a triple item) and of the request itself
(tenant spellings, body shapes, encodings, sizes, nesting), with secrets planted in every
field."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from tests.fuzz.planted import SCOPE_SAFE_TOKENS, Secret
from tests.fuzz.zones import (
    COMMON_LINE_FAMILIES,
    NAMES,
    NOT_JSON,
    TRIPLE_FAMILIES,
    Build,
    Chooser,
    DrawChooser,
    Where,
    make_line,
    make_triple,
)

# The key of the requests: org "acme", every repo; "globex/ml" is another org's tenant.
GRANTED = Where("acme", "payments-api")
TENANTS = [
    "granted",
    "granted_org_repo",
    "other_repo",
    "foreign",
    "trailing_newline",
    "space",
    "dotdot",
    "lookalike",
    "upper",
    "no_slash",
    "three_parts",
    "empty",
    "missing",
    "long",
    "secret_repo",
    "disagreeing",
]
BODY_TROUBLES = [
    "none",
    "none",
    "none",
    "extra_field",
    "not_a_list",
    "empty_list",
    "too_many",
    "huge",
    "deep",
    "not_json",
    "invalid_utf8",
    "lone_surrogate",
    "text_plain",
    "array_body",
]


@dataclass
class Request:
    path: str
    body: bytes
    content_type: str = "application/json"
    secrets: list[Secret] = field(default_factory=list)
    tenant: str = "granted"
    trouble: str = "none"

    def __repr__(self) -> str:
        body = self.body[:300] + (b"..." if len(self.body) > 300 else b"")
        return f"Request({self.path}, tenant={self.tenant}, trouble={self.trouble}, {body!r})"


def _tenant(b: Build, variant: str) -> dict[str, Any]:
    org, repo = GRANTED.org, GRANTED.repo
    spelled = {
        "granted": f"{org}/{repo}",
        "other_repo": f"{org}/another.repo_2",
        "foreign": "globex/ml",
        "trailing_newline": f"{org}/{repo}\n",
        "space": f"{org} /{repo}",
        "dotdot": f"{org}/../{repo}",
        "lookalike": f"аcme/{repo}",
        "upper": f"ACME/{repo}",
        "no_slash": org,
        "three_parts": f"{org}/{repo}/x",
        "empty": "",
        "long": f"{org}/{'r' * 150}",
    }
    if variant in spelled:
        return {"tenant": spelled[variant]}
    if variant == "granted_org_repo":
        return {"org": org, "repo": repo}
    if variant == "secret_repo":
        return {"tenant": f"{org}/{b.token(SCOPE_SAFE_TOKENS)}"}
    if variant == "disagreeing":
        return {"tenant": f"{org}/{repo}", "org": "globex", "repo": repo}
    return {}


def _turn_item(b: Build) -> Any:
    family = b.ch.pick(COMMON_LINE_FAMILIES)  # no MiB-long lines: the body limit is 1 MiB
    line = make_line(b, GRANTED, family, b.ch.pick(family.variants))
    try:
        item = json.loads(line)
    except (ValueError, RecursionError):
        return line.decode("utf-8", "replace")
    if isinstance(item, dict) and not b.ch.chance(10):
        item.pop("org", None)
        item.pop("repo", None)
    return item


def _triple_item(b: Build) -> Any:
    family = b.ch.pick(TRIPLE_FAMILIES)
    return make_triple(b, family, b.ch.pick(family.variants))


def _clean_turn(b: Build) -> dict[str, Any]:
    """A turn the API must accept, with secrets where clients put them."""
    t = b.turn(GRANTED.org, GRANTED.repo)
    del t["org"], t["repo"]
    place = b.ch.pick(["none", "none", "content", "session_id", "client", "tool", "upsert"])
    if place == "content":
        t["content"] = f"{t['content']} {b.secret_text()}"
    elif place in ("session_id", "client"):
        t[place] = f"{place}-{b.token()}"
    elif place == "tool":
        t.update(role="tool", tool_name="Bash", tool_input={"command": b.secret_text()})
    elif place == "upsert":
        items = [{"subject": "api-svc", "predicate": "USES", "object": f"store {b.next_id()}"}]
        if b.ch.chance(50):
            items.append({"subject": f"{b.secret_text()} svc", "predicate": "uses", "object": "x"})
        t.update(role="tool", content="", tool_name="upsert_graph_triples")
        t["tool_input"] = {"triples": items}
    return t


def _clean_triple(b: Build) -> dict[str, Any]:
    item: dict[str, Any] = {
        "subject": b.ch.pick(["payments-api", "Node 18", "O'Reilly", "x\\y", "раyments"]),
        "predicate": b.ch.pick(["USES", "depends on", "runsOn"]),
        "object": f"store {b.next_id()}",
    }
    extra = b.ch.pick(["none", "confidence", "valid_from", "types", "secret", "supersedes"])
    if extra == "confidence":
        item["confidence"] = b.ch.pick([0.6, 0.9, 1, "0.75"])
    elif extra == "valid_from":
        item["valid_from"] = b.ch.pick(["2023-05-08", "2023-05", "2023", "2023-05-08T10:00:00"])
    elif extra == "types":
        item["subject_type"], item["object_type"] = "service", "datastore"
    elif extra == "secret":
        item["object"] = f"vault with {b.secret_text()}"
    elif extra == "supersedes":
        item["supersedes"] = {"subject": "payments-api", "predicate": "USES", "object": "old"}
    return item


def build_request(ch: Chooser) -> Request:
    b = Build(ch)
    path = ch.pick(["/v1/turns", "/v1/triples"])
    # Most requests are clean or nearly (so the landing path is fuzzed), the rest anything.
    mode = ch.pick(["clean", "clean", "one_bad", "chaos"])
    tenant = ch.pick(TENANTS[:3] if mode != "chaos" else TENANTS)
    trouble = ch.pick(BODY_TROUBLES) if mode == "chaos" else "none"
    body: dict[str, Any] = _tenant(b, tenant)
    n = ch.upto(1, 4)
    if path == "/v1/turns":
        make = _turn_item if mode == "chaos" else _clean_turn
        body["turns"] = [make(b) for _ in range(n)]
        if mode == "one_bad":
            body["turns"].insert(ch.upto(0, n), _turn_item(b))
    else:
        make = _triple_item if mode == "chaos" else _clean_triple
        body["triples"] = [make(b) for _ in range(n)]
        if mode == "one_bad":
            body["triples"].insert(ch.upto(0, n), _triple_item(b))
        session = ch.pick(["absent", "plain", "secret", "long", "empty", "name"])
        if session == "secret":
            body["session_id"] = "sess-" + b.token()
        elif session == "name":
            body["session_id"] = ch.pick(NAMES)
        elif session != "absent":
            body["session_id"] = {"plain": "s-api", "long": "s" * 201, "empty": ""}[session]
        if ch.chance(30):
            body["client"] = ch.pick(["claude-code", "", "c" * 101, "client/" + b.token()])
    key = "turns" if path == "/v1/turns" else "triples"
    content_type = "application/json"
    if trouble == "extra_field":
        body["extra"] = b.secret_text()
    elif trouble == "not_a_list":
        body[key] = body[key][0]
    elif trouble == "empty_list":
        body[key] = []
    elif trouble == "too_many":
        body[key] = body[key] * 501
    elif trouble == "huge":
        body["pad"] = "x" * (1 << 20)
    elif trouble == "deep":
        deep: Any = 1
        for _ in range(3000):
            deep = [deep]
        body[key] = [deep]
    raw = _encode(body)
    if trouble == "not_json":
        raw = ch.pick(NOT_JSON)
    elif trouble == "invalid_utf8":
        raw = raw.replace(b"}", b',"x":"\xff\xfe"}', 1) if raw.endswith(b"}") else raw + b"\xff"
    elif trouble == "lone_surrogate":
        raw = raw[:-1] + b',"x":"\\ud800"}'
    elif trouble == "text_plain":
        content_type = "text/plain"
    elif trouble == "array_body":
        raw = b"[" + raw + b"]"
    return Request(path, raw, content_type, b.zone.secrets, tenant, trouble)


def _encode(body: Any) -> bytes:
    try:
        return json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
    except (RecursionError, ValueError):
        return b'{"broken": '


@st.composite
def requests(draw: st.DrawFn) -> Request:
    return build_request(DrawChooser(draw))


__all__ = ["GRANTED", "Request", "build_request", "requests"]
