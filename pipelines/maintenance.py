"""Table maintenance: compaction and vacuum of the Delta tables, as a job and a daily schedule.

Every run commits each table once, so files and log entries accumulate: `TableStore.maintain`
compacts each tenant partition's small files, vacuums data files that no version younger than
the retention names (a week by default: time travel reaches that far back), writes a
checkpoint and drops expired log entries; a table an earlier memflow created first gets the
properties memflow creates its tables with (`table_configuration`: the checkpoint interval, no
column statistics, or statistics on the tenant columns only for a table without partitions).
Readers and writers go on meanwhile (compaction is a commit like any other; delta-rs's
conflict checker orders it with the runs' commits).
`memflow tables --maintain` does the same from the command line.
"""

from dataclasses import asdict

from dagster import (
    Config,
    DefaultScheduleStatus,
    MetadataValue,
    OpExecutionContext,
    ScheduleDefinition,
    job,
    op,
)

from resources.configurable import Storage
from resources.tables import DEFAULT_RETENTION_HOURS


class MaintenanceConfig(Config):
    retention_hours: int = DEFAULT_RETENTION_HOURS


@op(description="Compact, vacuum and checkpoint every Delta table (resources.tables).")
def maintain_tables(
    context: OpExecutionContext, config: MaintenanceConfig, storage: Storage
) -> None:
    done = storage.tables().maintain(retention_hours=config.retention_hours)
    context.add_output_metadata(
        {
            "tables": len(done),
            "files_compacted": sum(m.files_compacted for m in done),
            "files_vacuumed": sum(m.files_vacuumed for m in done),
            "tables_given_the_properties": sum(bool(m.properties_set) for m in done),
            "retention_hours": config.retention_hours,
            "detail": MetadataValue.json([asdict(m) for m in done]),
        }
    )


@job(
    description="Compaction and vacuum of the Delta tables: small files merged per tenant, "
    "files older than the retention (a week) removed, the log checkpointed. Time travel "
    "reaches back as far as the retention."
)
def table_maintenance() -> None:
    maintain_tables()


daily_table_maintenance = ScheduleDefinition(
    job=table_maintenance,
    cron_schedule="17 3 * * *",
    default_status=DefaultScheduleStatus.RUNNING,
    description="table_maintenance once a day, at night.",
)
