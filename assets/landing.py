"""landing_problems: what the landing zone holds that no tenant's turns came from, with the
lines it holds, so that nothing dropped there goes unreported."""

from collections import Counter

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    MaterializeResult,
    asset,
)

from assets.metadata import by_reason, preview
from assets.retries import retry_transient_only
from memflow import landing
from resources.configurable import Storage
from schemas.tables import Asset


@asset(
    name=Asset.LANDING_PROBLEMS,
    description="Entries of the landing zone that were not read, with the reason and the "
    "lines they hold where they can be counted: directories whose names are not valid scopes, "
    "symlinks (never followed), special files, misplaced files, nested directories. Stored at "
    "the Delta table tables/landing_problems/ (the zone as a whole, not a tenant).",
    group_name="ingest",
    check_specs=[
        AssetCheckSpec(
            "landing_zone_clean",
            asset=Asset.LANDING_PROBLEMS,
            description="Warns while the landing zone holds entries no tenant reads; the "
            "metadata says which and how many lines they hold.",
        )
    ],
    kinds={"polars"},
)
@retry_transient_only
def landing_problems(context: AssetExecutionContext, storage: Storage):
    frame = landing.landing_problems(storage.landing)
    storage.tables().write_zone(frame, Asset.LANDING_PROBLEMS)
    lines = int(frame["lines"].sum() or 0) if frame.height else 0
    reasons = dict(Counter(frame["reason"].to_list())) if frame.height else {}
    if frame.height:
        context.log.warning(f"{frame.height} landing-zone entries not read ({lines} lines)")
    yield MaterializeResult(
        metadata={
            "problems": frame.height,
            "lines_not_read": lines,
            "by_reason": by_reason(reasons),
            "preview": preview(frame, ["path", "reason", "lines", "detail"]),
        }
    )
    yield AssetCheckResult(
        check_name="landing_zone_clean",
        passed=not frame.height,
        severity=AssetCheckSeverity.WARN,
        metadata={"problems": frame.height, "lines_not_read": lines},
    )
