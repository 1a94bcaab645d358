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

from assets.automation import after_upstream
from assets.metadata import by_reason, count_reasons, per_tenant_table, preview, run_scopes
from assets.partitions import scope_partitions
from memflow.facts import build_facts
from resources.configurable import Storage
from schemas import rules
from schemas.contracts import EntityContract, FactContract
from schemas.tables import QUARANTINE, TRIPLES, Asset, conform


def _contract(name: str, asset: str, contract: type, frames: dict[str, pl.DataFrame]):
    errors = {}
    for tenant, df in frames.items():
        try:
            contract.validate(df, lazy=True)
        except Exception as exc:  # pandera SchemaErrors lists every failing check
            errors[tenant] = str(exc)[:2000]
    return AssetCheckResult(
        check_name=name,
        asset_key=asset,
        passed=not errors,
        severity=AssetCheckSeverity.ERROR,
        metadata={"failures": MetadataValue.json(errors)} if errors else {},
    )


@multi_asset(
    outs={
        Asset.VALIDATED_FACTS: AssetOut(
            io_manager_key="tables",
            description="Facts that meet every contract; stored facts are never evicted.",
            automation_condition=after_upstream(),
        ),
        Asset.ENTITIES: AssetOut(
            io_manager_key="tables",
            description="One entity per name key; other spellings kept as aliases.",
            automation_condition=after_upstream(),
        ),
        Asset.QUARANTINE: AssetOut(
            io_manager_key="tables",
            description="Every rejected line, item and triple of the tenant, with a reason.",
            automation_condition=after_upstream(),
        ),
    },
    partitions_def=scope_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    check_specs=[
        AssetCheckSpec("fact_contract", asset=Asset.VALIDATED_FACTS, blocking=True),
        AssetCheckSpec("entity_contract", asset=Asset.ENTITIES, blocking=True),
        AssetCheckSpec(
            "cap_usage",
            asset=Asset.VALIDATED_FACTS,
            description="Share of the per-repo caps in use; warns past 90% or "
            "when triples were rejected by a cap.",
        ),
    ],
    group_name="facts",
    compute_kind="polars",
)
def validated_facts(
    context: AssetExecutionContext,
    extracted_triples: dict[str, pl.DataFrame],
    extraction_rejects: dict[str, pl.DataFrame],
    turn_rejects: dict[str, pl.DataFrame],
    storage: Storage,
):
    started = time.perf_counter()
    tables = storage.tables()
    facts_out: dict[str, pl.DataFrame] = {}
    entities_out: dict[str, pl.DataFrame] = {}
    quarantine_out: dict[str, pl.DataFrame] = {}
    summary: dict[str, dict] = {}
    all_reasons: dict[str, int] = {}
    capped_tenants: list[str] = []
    for scope in run_scopes(context):
        key = scope.key
        triples = extracted_triples.get(key)
        triples = triples if triples is not None else pl.DataFrame()
        built = build_facts(
            scope,
            conform(triples, TRIPLES),
            tables.read(Asset.VALIDATED_FACTS, scope),
            tables.read(Asset.ENTITIES, scope),
        )
        quarantine = pl.concat(
            [
                conform(turn_rejects.get(key, pl.DataFrame()), QUARANTINE),
                conform(extraction_rejects.get(key, pl.DataFrame()), QUARANTINE),
                built.rejects,
            ]
        ).unique("reject_id", keep="first", maintain_order=True)
        facts_out[key], entities_out[key], quarantine_out[key] = (
            built.facts,
            built.entities,
            quarantine,
        )
        reasons = count_reasons(quarantine)
        for reason, n in reasons.items():
            all_reasons[reason] = all_reasons.get(reason, 0) + n
        if reasons.get(rules.Reason.FACT_CAP) or reasons.get(rules.Reason.ENTITY_CAP):
            capped_tenants.append(key)
        summary[key] = {
            "triples_in": triples.height,
            "facts": built.facts.height,
            "new_facts": built.new_facts,
            "entities": built.entities.height,
            "superseded": built.superseded,
            "rejects": quarantine.height,
        }
        context.log.info(f"{key}: {summary[key]}")

    total = {k: sum(v[k] for v in summary.values()) for k in next(iter(summary.values()), {})}
    yield Output(
        facts_out,
        output_name=Asset.VALIDATED_FACTS,
        metadata={
            "tenants": len(summary),
            "rows_in": total.get("triples_in", 0),
            "rows_out": total.get("facts", 0),
            "new_facts": total.get("new_facts", 0),
            "superseded": total.get("superseded", 0),
            "rejects_by_reason": by_reason(all_reasons),
            "per_tenant": per_tenant_table(summary),
            "duration_s": round(time.perf_counter() - started, 3),
            "preview": preview(
                next(iter(facts_out.values()), pl.DataFrame()),
                ["subject", "predicate", "object", "confidence", "valid_to", "session_id"],
            ),
        },
    )
    yield Output(
        entities_out,
        output_name=Asset.ENTITIES,
        metadata={
            "rows_out": total.get("entities", 0),
            "preview": preview(
                next(iter(entities_out.values()), pl.DataFrame()), ["name", "aliases", "types"]
            ),
        },
    )
    yield Output(
        quarantine_out,
        output_name=Asset.QUARANTINE,
        metadata={
            "rows_out": total.get("rejects", 0),
            "rejects_by_reason": by_reason(all_reasons),
            "preview": preview(
                next(iter(quarantine_out.values()), pl.DataFrame()),
                ["stage", "reason", "detail", "source_file", "line_no"],
            ),
        },
    )
    yield _contract("fact_contract", Asset.VALIDATED_FACTS, FactContract, facts_out)
    yield _contract("entity_contract", Asset.ENTITIES, EntityContract, entities_out)
    usage = {
        k: {
            "facts": f"{v['facts']}/{rules.MAX_FACTS_PER_REPO}",
            "entities": f"{v['entities']}/{rules.MAX_ENTITIES_PER_REPO}",
        }
        for k, v in summary.items()
    }
    near = [
        k
        for k, v in summary.items()
        if v["facts"] > 0.9 * rules.MAX_FACTS_PER_REPO
        or v["entities"] > 0.9 * rules.MAX_ENTITIES_PER_REPO
    ]
    yield AssetCheckResult(
        check_name="cap_usage",
        asset_key=Asset.VALIDATED_FACTS,
        passed=not near and not capped_tenants,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "usage": MetadataValue.json(usage),
            "over_90_percent": MetadataValue.json(near),
            "rejected_by_cap": MetadataValue.json(capped_tenants),
        },
    )
