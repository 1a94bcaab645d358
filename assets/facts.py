"""validated_facts, entities, quarantine per tenant: contracts, resolution, caps, supersession."""

import time

import polars as pl
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetOut,
    BackfillPolicy,
    MetadataValue,
    Output,
    multi_asset,
)

from assets.metadata import (
    by_reason,
    contract_check,
    count_reasons,
    preview,
    run_scopes,
    stored_table,
    tenant_metadata,
)
from assets.partitions import scope_partitions
from assets.retries import retry_transient_only
from memflow.facts import FactsBuild, build_facts, tenant_quarantine
from resources.configurable import Storage
from schemas import rules
from schemas.contracts import EntityContract, FactContract, quarantine_contract_failures
from schemas.rules import SEVERITY_WARNING
from schemas.scope import Scope
from schemas.tables import RETRACTION_REQUESTS, TRIPLES, Asset, conform


@multi_asset(
    outs={
        Asset.VALIDATED_FACTS: AssetOut(
            io_manager_key="tables",
            description="Facts that meet every contract; stored facts are never evicted "
            "(its own previous output is the state it updates).",
        ),
        Asset.ENTITIES: AssetOut(
            io_manager_key="tables",
            description="One entity per name key; other spellings kept as aliases.",
        ),
        Asset.QUARANTINE: AssetOut(
            io_manager_key="tables",
            description="Every rejected line, item and triple of the tenant, with a reason; "
            "severity error (not stored) or warning (stored, with a caveat).",
        ),
        Asset.FACT_MERGES: AssetOut(
            io_manager_key="tables",
            description="Triples that repeated a fact: their spelling (kept as an alias), "
            "confidence and provenance, and the fact they were merged into.",
        ),
        Asset.RETRACTIONS: AssetOut(
            io_manager_key="tables",
            description="Facts closed by a retraction or an entity forget: which fact, when, "
            "who asked, why and the retract turn. A request that closed nothing is a "
            "retract_unknown quarantine row.",
        ),
    },
    partitions_def=scope_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    check_specs=[
        AssetCheckSpec(
            "fact_contract",
            asset=Asset.VALIDATED_FACTS,
            blocking=True,
            description="Stored facts meet FactContract (names, predicate casing, confidence, "
            "validity, caps, no secrets); failing rows are quarantined first.",
        ),
        AssetCheckSpec(
            "entity_contract",
            asset=Asset.ENTITIES,
            blocking=True,
            description="Stored entities meet EntityContract (unique ids, 120-character "
            "names, caps, no secrets).",
        ),
        AssetCheckSpec(
            "triples_accounted",
            asset=Asset.VALIDATED_FACTS,
            description="Every triple is a stored fact, merged into one, or quarantined: "
            "triples in = facts (stored + new) + merged + rejects, for every tenant of the run.",
        ),
        AssetCheckSpec(
            "cap_usage",
            asset=Asset.VALIDATED_FACTS,
            description="Share of the per-repo caps in use over every stored tenant; warns "
            "past 90% or while any tenant has triples rejected by a cap.",
        ),
    ],
    group_name="facts",
    compute_kind="polars",
)
@retry_transient_only
def validated_facts(
    context: AssetExecutionContext,
    extracted_triples: dict[str, pl.DataFrame],
    extraction_rejects: dict[str, pl.DataFrame],
    turn_rejects: dict[str, pl.DataFrame],
    retraction_requests: dict[str, pl.DataFrame],
    storage: Storage,
):
    tables = storage.tables()
    facts_out: dict[str, pl.DataFrame] = {}
    entities_out: dict[str, pl.DataFrame] = {}
    quarantine_out: dict[str, pl.DataFrame] = {}
    merges_out: dict[str, pl.DataFrame] = {}
    retractions_out: dict[str, pl.DataFrame] = {}
    unbalanced: dict[str, dict[str, int]] = {}
    scopes = list(run_scopes(context))
    built_by: dict[str, tuple[float, FactsBuild]] = {}
    for scope in scopes:
        started = time.perf_counter()
        triples = conform(extracted_triples.get(scope.key, pl.DataFrame()), TRIPLES)
        built = build_facts(
            scope,
            triples,
            stored_table(storage, Asset.VALIDATED_FACTS, scope),
            stored_table(storage, Asset.ENTITIES, scope),
            conform(retraction_requests.get(scope.key, pl.DataFrame()), RETRACTION_REQUESTS),
        )
        built_by[scope.key] = (time.perf_counter() - started, built)
    # One validation per contract for the whole run (quarantine_contract_failures).
    facts_ok, fact_rejects_by = quarantine_contract_failures(
        {k: b.facts for k, (_, b) in built_by.items()}, FactContract, "validation", ("fact_id",)
    )
    entities_ok, entity_rejects_by = quarantine_contract_failures(
        {k: b.entities for k, (_, b) in built_by.items()},
        EntityContract,
        "validation",
        ("entity_id",),
    )
    summaries: dict[str, dict[str, int]] = {}
    for scope in scopes:
        started = time.perf_counter()
        key = scope.key
        spent, built = built_by[key]
        facts, fact_rejects = facts_ok[key], fact_rejects_by[key]
        entities, entity_rejects = entities_ok[key], entity_rejects_by[key]
        quarantine = tenant_quarantine(
            [turn_rejects.get(key), extraction_rejects.get(key)],
            built,
            [fact_rejects, entity_rejects],
        )
        facts_out[key], entities_out[key], quarantine_out[key] = facts, entities, quarantine
        merges_out[key] = built.merges
        retractions_out[key] = built.retractions
        if not built.balanced:
            unbalanced[key] = built.counts
        summaries[key] = _record_tenant(
            context,
            scope,
            built,
            (facts, entities, quarantine),
            (fact_rejects, entity_rejects),
            spent + time.perf_counter() - started,
        )

    tables.record_summaries(Asset.VALIDATED_FACTS, summaries)  # one commit for the run
    yield Output(facts_out, output_name=Asset.VALIDATED_FACTS)
    yield Output(entities_out, output_name=Asset.ENTITIES)
    yield Output(quarantine_out, output_name=Asset.QUARANTINE)
    yield Output(merges_out, output_name=Asset.FACT_MERGES)
    yield Output(retractions_out, output_name=Asset.RETRACTIONS)
    yield contract_check("fact_contract", Asset.VALIDATED_FACTS, FactContract, facts_out)
    yield contract_check("entity_contract", Asset.ENTITIES, EntityContract, entities_out)
    yield AssetCheckResult(
        check_name="triples_accounted",
        asset_key=Asset.VALIDATED_FACTS,
        passed=not unbalanced,
        severity=AssetCheckSeverity.ERROR,
        metadata={"unbalanced": MetadataValue.json(unbalanced)},
    )
    yield _cap_usage(tables.summaries(Asset.VALIDATED_FACTS))


def _record_tenant(
    context: AssetExecutionContext,
    scope: Scope,
    built: FactsBuild,
    stored: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame],
    contract_rejects: tuple[pl.DataFrame, pl.DataFrame],
    seconds: float,
) -> dict[str, int]:
    """The tenant's metadata on its three tables (facts, entities, quarantine), and the
    summary the cap check reads."""
    facts, entities, quarantine = stored
    fact_rejects, entity_rejects = contract_rejects
    counts = built.counts
    reasons = count_reasons(quarantine.filter(pl.col("severity") != SEVERITY_WARNING))
    warnings = count_reasons(quarantine.filter(pl.col("severity") == SEVERITY_WARNING))
    capped = bool(reasons.get(rules.Reason.FACT_CAP) or reasons.get(rules.Reason.ENTITY_CAP))
    tenant_metadata(
        context,
        Asset.VALIDATED_FACTS,
        scope,
        {
            **counts,
            "rows_out": facts.height,
            "superseded": built.superseded,
            "retracted": built.retracted,
            "retract_unknown": built.retract_unknown,
            "rekeyed": MetadataValue.json(built.rekeyed),
            "contract_rejects": fact_rejects.height,
            # `rejects` above counts this step's triples; this is the tenant's whole
            # quarantine (landing, extraction and validation), errors only.
            "quarantine_by_reason": by_reason(reasons),
            "cap_use": f"{facts.height}/{rules.MAX_FACTS_PER_REPO} facts, "
            f"{entities.height}/{rules.MAX_ENTITIES_PER_REPO} entities",
            "duration_s": round(seconds, 3),
            "preview": preview(
                facts.sort("valid_from", descending=True),
                ["subject", "predicate", "object", "confidence", "valid_to", "session_id"],
            ),
        },
    )
    tenant_metadata(
        context,
        Asset.ENTITIES,
        scope,
        {
            "rows_out": entities.height,
            "new_entities": built.new_entities,
            "contract_rejects": entity_rejects.height,
            "preview": preview(entities, ["name", "aliases", "types"]),
        },
    )
    tenant_metadata(
        context,
        Asset.QUARANTINE,
        scope,
        {
            "rows_out": quarantine.height,
            "rejects_by_reason": by_reason(reasons),
            "warnings_by_reason": by_reason(warnings),
            "preview": preview(quarantine, ["stage", "reason", "detail", "source_file", "line_no"]),
        },
    )
    return {
        "facts": facts.height,
        "entities": entities.height,
        "capped": int(capped),
        **counts,
        "contract_rejects": fact_rejects.height + entity_rejects.height,
    }


def _cap_usage(summaries: dict[str, dict[str, int]]) -> AssetCheckResult:
    """Over every tenant ever stored, not only this run's: a tenant at its cap keeps the check
    failed until its usage drops."""
    near = sorted(
        k
        for k, v in summaries.items()
        if v.get("facts", 0) > 0.9 * rules.MAX_FACTS_PER_REPO
        or v.get("entities", 0) > 0.9 * rules.MAX_ENTITIES_PER_REPO
    )
    capped = sorted(k for k, v in summaries.items() if v.get("capped"))
    top = sorted(summaries.items(), key=lambda kv: -kv[1].get("facts", 0))[:20]
    return AssetCheckResult(
        check_name="cap_usage",
        asset_key=Asset.VALIDATED_FACTS,
        passed=not near and not capped,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "tenants": len(summaries),
            "over_90_percent": MetadataValue.json(near),
            "rejected_by_cap": MetadataValue.json(capped),
            "largest": MetadataValue.json(
                {
                    k: f"{v.get('facts', 0)}/{rules.MAX_FACTS_PER_REPO} facts, "
                    f"{v.get('entities', 0)}/{rules.MAX_ENTITIES_PER_REPO} entities"
                    for k, v in top
                }
            ),
        },
    )
