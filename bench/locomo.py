"""The public recall benchmark: LoCoMo conversations landed through memflow's pipeline.

Input (`bench/data/locomo/`, CC BY-NC 4.0, see NOTICE.md): triples a model extracted from eight
LoCoMo conversations without seeing the questions (each with the `dia_ids` of the turns it was
read from), the questions of categories 1, 2 and 4 with their evidence turns, and the session
dates. conv-26 and conv-30 are kept aside and never read here.

Landing (`write_landing`): one `upsert_graph_triples` tool turn per dia_id, `session_id` = the
conversation id, `turn_id` = the dia_id, `ts` = the session's date and time (UTC), tenant
`locomo/<conv>`. A triple read from several turns is saved in each of them, as an agent saving
what each turn said would. `valid_from` is written as an instant the landing format accepts
("2022-12-17" -> "2022-12-17T00:00:00Z", "2022-12" -> the 1st, "2022" -> 1 January); nothing
else of a triple is changed. `run_pipeline` then runs `pipelines.runner.run_all` over it with
the in-process sentence-transformers embedder (all-MiniLM-L6-v2): facts carry the dia_id of
their first statement (`turn_id`) and of every turn that stated them (`sources`) as
provenance, and the `fact_embeddings` asset and the vector sink store the fact vectors recall
and the flat baselines read.

The conversations are split: recall was tuned on `TUNE` only; `HELD_OUT` was not looked at while
tuning and is reported on its own.

Labels: every question is scored with LoCoMo's published evidence turns and again with the
corrected evidence lists of locomo-audit (`bench/data/locomo-audit/`, its `WRONG_CITATION`
entries; `Question.audited`): 41 of the 57 corrections are for questions of these eight
conversations.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data" / "locomo"
AUDIT = ROOT / "bench" / "data" / "locomo-audit" / "wrong_citations.jsonl"
LABELS = ("published", "audited")
CATEGORIES = (1, 2, 4)  # the question categories in the set: multi-hop, temporal, single-hop
CONVS = ("conv-41", "conv-42", "conv-43", "conv-44", "conv-47", "conv-48", "conv-49", "conv-50")
TUNE = ("conv-41", "conv-42", "conv-43", "conv-44")
HELD_OUT = ("conv-47", "conv-48", "conv-49", "conv-50")
# Never seen by anyone tuning recall: triples written blind for this benchmark on 2026-12-02
# (`*-unseen` files, NOTICE.md), run through the pipeline in a data directory of their own.
UNSEEN = ("conv-30",)
ORG = "locomo"
CLIENT = "locomo-bench"
READY_MARK = "locomo-ready.json"
# The torch provider's default, the float model: a mark naming no model holds it (the ONNX
# provider's default is its 8-bit variant, `all-MiniLM-L6-v2-int8`, since issue 20).
DEFAULT_MODEL = "all-MiniLM-L6-v2"
# Bump when the landing (what `landing_turns` writes) or what the pipeline makes of it changes:
# a data directory holding an older run is then run again. 2: sources, fact_embeddings.
LANDING_VERSION = "2"
_DIA = re.compile(r"D(\d+):(\d+)")


@dataclass(frozen=True, slots=True)
class Question:
    conv: str
    text: str
    category: int  # 1 multi-hop, 2 temporal, 4 single-hop (LoCoMo's numbering)
    evidence: tuple[str, ...]  # dia_ids, as LoCoMo lists them (a malformed one stays uncovered)
    answer: str
    audited: tuple[str, ...] = ()  # locomo-audit's corrected evidence ((): no correction)

    def labels(self, kind: str) -> tuple[str, ...]:
        """The evidence turns under label set `kind` (`LABELS`)."""
        if kind not in LABELS:
            raise ValueError(f"labels must be one of {', '.join(LABELS)}")
        return (self.audited or self.evidence) if kind == "audited" else self.evidence


def scope_of(conv: str) -> Any:
    from schemas.scope import Scope

    return Scope(ORG, conv)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load_triples(conv: str, root: Path = DATA) -> list[dict[str, Any]]:
    return _jsonl(root / f"{conv}.jsonl")


def load_questions(
    convs: Iterable[str] = CONVS, root: Path = DATA, audit: Path | None = AUDIT
) -> list[Question]:
    """The questions of `convs`, each with locomo-audit's corrected evidence when it has one
    (`audit` None: none). A correction that names a question of `convs` the set does not hold,
    or whose cited evidence is not the published one, raises: the two files must agree."""
    wanted = set(convs)
    fixes = corrected_evidence(audit) if audit is not None else {}
    out = []
    files = ["questions.jsonl", *(["questions-unseen.jsonl"] if wanted & set(UNSEEN) else [])]
    for q in (row for name in files for row in _jsonl(root / name)):
        if q["conv"] not in wanted:
            continue
        published = tuple(q["evidence"])
        fix = fixes.pop((q["conv"], q["question"]), None)
        if fix is not None and tuple(fix[0]) != published:
            raise ValueError(f"{q['conv']}: audit cites {fix[0]} for {q['question']!r}, "
                             f"the set {list(published)}")  # fmt: skip
        out.append(
            Question(
                q["conv"], q["question"], int(q["category"]), published, str(q["answer"]),
                tuple(fix[1]) if fix is not None else (),
            )
        )  # fmt: skip
    left = [k for k, (_, _, category) in fixes.items() if k[0] in wanted and category in CATEGORIES]
    if left:
        raise ValueError(f"audit corrections for questions the set lacks: {left}")
    return out


def corrected_evidence(
    path: Path = AUDIT,
) -> dict[tuple[str, str], tuple[list[str], list[str], int]]:
    """(conv, question) -> (cited evidence, corrected evidence, category) of locomo-audit's
    WRONG_CITATION entries."""
    out = {}
    for row in _jsonl(path):
        out[(row["conv"], row["question"])] = (
            list(row["cited_evidence"]), list(row["correct_evidence"]), int(row["category"])
        )  # fmt: skip
    return out


def session_dates(root: Path = DATA) -> dict[str, dict[int, datetime]]:
    """conv -> session number -> the session's date and time, read as UTC."""
    raw = json.loads((root / "sessions.json").read_text(encoding="utf-8"))
    raw.update(json.loads((root / "sessions-unseen.json").read_text(encoding="utf-8")))
    out: dict[str, dict[int, datetime]] = {}
    for conv, sessions in raw.items():
        out[conv] = {}
        for key, text in sessions.items():
            m = re.fullmatch(r"session_(\d+)_date_time", key)
            if m:
                when = datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")
                out[conv][int(m.group(1))] = when.replace(tzinfo=UTC)
    return out


def session_of(dia_id: str) -> int:
    m = _DIA.fullmatch(dia_id)
    if m is None:
        raise ValueError(f"not a dia_id: {dia_id!r}")
    return int(m.group(1))


def instant(valid_from: str) -> str:
    """YYYY-MM-DD, YYYY-MM or YYYY as an ISO instant with a zone (the landing format's)."""
    parts = valid_from.strip().split("-")
    year = int(parts[0])
    month = int(parts[1]) if len(parts) > 1 else 1
    day = int(parts[2]) if len(parts) > 2 else 1
    return datetime(year, month, day, tzinfo=UTC).isoformat().replace("+00:00", "Z")


def landing_turns(conv: str, dates: dict[int, datetime]) -> list[dict[str, Any]]:
    """One tool turn per dia_id that yielded triples, in conversation order."""
    from memflow.landing_writer import explicit_turn

    by_turn: dict[str, list[dict[str, Any]]] = {}
    for row in load_triples(conv):
        triple = {
            "subject": row["subject"],
            "predicate": row["predicate"],
            "object": row["object"],
            "subject_type": row.get("subject_type"),
            "object_type": row.get("object_type"),
            "valid_from": instant(row["valid_from"]),
        }
        triple = {k: v for k, v in triple.items() if v}
        for dia in dict.fromkeys(row["dia_ids"]):
            by_turn.setdefault(dia, []).append(triple)
    order = sorted(by_turn, key=_turn_order)
    return [
        explicit_turn(
            session_id=conv,
            turn_id=dia,
            ts=dates[session_of(dia)],
            client=CLIENT,
            triples=by_turn[dia],
        )
        for dia in order
    ]


def write_landing(landing: Path, convs: Sequence[str] = CONVS) -> dict[str, int]:
    """Write each conversation's turns as one landing file; returns turns per tenant."""
    from memflow.landing_writer import turn_line

    dates = session_dates()
    counts: dict[str, int] = {}
    for conv in convs:
        scope = scope_of(conv)
        turns = landing_turns(conv, dates[conv])
        folder = landing / scope.tenant_id / scope.ns
        folder.mkdir(parents=True, exist_ok=True)
        body = b"".join(turn_line(scope, t) + b"\n" for t in turns)
        tmp = folder / f".{conv}.jsonl"
        tmp.write_bytes(body)
        os.replace(tmp, folder / f"{conv}.jsonl")
        counts[scope.key] = len(turns)
    return counts


def input_digest(convs: Sequence[str] = CONVS) -> str:
    h = hashlib.sha256()
    sessions = ["sessions-unseen.json"] if set(convs) & set(UNSEEN) else ["sessions.json"]
    for name in [*(f"{c}.jsonl" for c in convs), *sessions]:
        h.update(name.encode())
        h.update((DATA / name).read_bytes())
    h.update(LANDING_VERSION.encode())
    return h.hexdigest()[:16]


def run_pipeline(
    data: Path, convs: Sequence[str] = CONVS, *, model: str = "", log: Any = print
) -> dict[str, Any]:
    """Land the conversations and run every asset over them (skipped when `data` already
    holds a run of the same input with `model`'s vectors). Returns what was run.

    `model`: "" embeds with the torch provider and its default model, the float
    all-MiniLM-L6-v2 (the vectors every figure before issue 20's default change was measured
    with); an ONNX provider model name (`all-MiniLM-L6-v2-int8`, that provider's default) embeds
    with the ONNX provider under that name instead. A second model's run over the same data
    adds its vectors beside the first's (the stores keep each model's vectors apart)."""
    mark = data / READY_MARK
    digest = input_digest(convs)
    held: list[str] = []
    if mark.exists():
        info = json.loads(mark.read_text())
        if info.get("digest") == digest:
            held = info.get("models", [DEFAULT_MODEL])
            if (model or DEFAULT_MODEL) in held:
                log(f"pipeline output reused from {data}")
                return info
    from pipelines.runner import run_all
    from pipelines.settings import resolve

    landing = data / "landing"
    turns = write_landing(landing, convs)
    os.environ["DAGSTER_HOME"] = str(data / "dagster")
    resolve(
        {
            "MEMFLOW_LANDING_DIR": str(landing),
            "MEMFLOW_DATA_DIR": str(data),
            "MEMFLOW_EXTRACTOR": "none",
            "MEMFLOW_EMBEDDER": "onnx" if model else "sentence-transformers",
            "MEMFLOW_EMBEDDING_MODEL": model,
            "MEMFLOW_GRAPH_BACKEND": "sqlite",
            "MEMFLOW_MILVUS_URI": "",
            "MEMFLOW_RETENTION_DAYS": "-1",
        },
        data / "no.env",
    )
    started = datetime.now(UTC)
    outcome = run_all(str(landing), str(data), progress=log)
    if outcome.failures or not outcome.tenants:
        failed = [f.line(outcome.dagster_home) for f in outcome.failures]
        raise RuntimeError(f"the pipeline failed: {failed or 'no tenants'}")
    info = {
        "digest": digest,
        "tenants": [s.key for s in outcome.tenants],
        "landing_turns": turns,
        "runs": outcome.runs,
        "seconds": round(outcome.seconds, 1),
        "problems": outcome.problems,
        "models": sorted({*held, model or DEFAULT_MODEL}),
        "assets": asset_costs(),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "started_at": started.isoformat(timespec="seconds"),
    }
    mark.write_text(json.dumps(info, indent=2))
    return info


COSTED = ("validated_facts", "entity_embeddings", "fact_embeddings", "graph_sink", "vector_sink")


def asset_costs(assets: Sequence[str] = COSTED) -> dict[str, dict[str, float]]:
    """Per asset, over the tenants of its latest materializations in this Dagster instance
    (DAGSTER_HOME): seconds (the per-tenant `duration_s` summed), tenants, and what the
    embedding assets embedded and the sinks wrote."""
    from dagster import AssetKey, DagsterInstance

    instance = DagsterInstance.get()
    out: dict[str, dict[str, float]] = {}
    for asset in assets:
        latest: dict[str, dict[str, Any]] = {}
        for record in instance.fetch_materializations(AssetKey(asset), limit=1000).records:
            mat = record.asset_materialization
            if mat is not None and mat.partition and mat.partition not in latest:
                latest[mat.partition] = {k: v.value for k, v in mat.metadata.items()}
        summed: dict[str, float] = {"tenants": len(latest)}
        for key in ("duration_s", "embedded", "rows_written", "fact_rows_written"):
            values = [m[key] for m in latest.values() if isinstance(m.get(key), int | float)]
            if values:
                summed[key] = round(sum(values), 3)
        out[asset] = summed
    return out


# -- provenance -------------------------------------------------------------------------------


def stored_provenance(facts: Iterable[Any]) -> dict[str, frozenset[str]]:
    """fact_id -> the turns the stored fact names: its first statement's `turn_id` and every
    turn of its `sources` (the conversation is the session: only turn ids differ)."""
    return {f.fact_id: frozenset({f.turn_id, *(t for _, t in f.sources)}) for f in facts}


def first_provenance(statements: dict[str, frozenset[str]]) -> dict[str, frozenset[str]]:
    """fact_id -> the earliest turn (session, then turn number) among its statements: the one
    turn a fact would name without `sources` (its first statement, by the turn's time)."""
    return {fid: frozenset([min(turns, key=_turn_order)]) for fid, turns in statements.items()}


def _turn_order(dia_id: str) -> tuple[int, int]:
    m = _DIA.fullmatch(dia_id)
    return (int(m.group(1)), int(m.group(2))) if m else (1 << 30, 0)


def statement_provenance(data: Path, scope: Any) -> dict[str, frozenset[str]]:
    """fact_id -> every turn whose triples state the fact, read from the extracted_triples
    table with ids resolved the way `memflow.facts` resolves them: an independent check of the
    stored `sources` (equal while no fact is stated in more than 32 turns)."""
    from resources.tables import TableStore
    from schemas.tables import Asset
    from schemas.triples import resolve_fact_id

    frame = TableStore(data).read_table(Asset.EXTRACTED_TRIPLES, scope)
    out: dict[str, set[str]] = {}
    if frame is not None:
        for s, p, o, turn in frame.select("subject", "predicate", "object", "turn_id").iter_rows():
            fid = resolve_fact_id(scope.tenant_id, scope.ns, s, p, o)
            out.setdefault(fid, set()).add(turn)
    return {k: frozenset(v) for k, v in out.items()}


# -- metrics ----------------------------------------------------------------------------------


def score_ranking(
    ranked: Sequence[str], evidence: Sequence[str], prov: dict[str, frozenset[str]]
) -> dict[str, float]:
    """The curve of one answer (fact ids, best first) against the evidence turns
    (`bench.curve`: recall of the first k facts' provenance, k = 5 ... 40, and MRR)."""
    from bench.curve import curve

    return curve(ranked, evidence, lambda fid: prov.get(fid, frozenset()))


def ceiling(
    questions: Sequence[Question],
    prov: dict[str, dict[str, frozenset[str]]],
    labels: str = "published",
) -> float:
    """Mean share of evidence turns that any fact's provenance holds (no limit on facts)."""
    total = 0.0
    for q in questions:
        held = set().union(*prov[q.conv].values()) if prov[q.conv] else set()
        evidence = set(q.labels(labels))
        total += len(held & evidence) / len(evidence)
    return round(total / len(questions), 4) if questions else 0.0
