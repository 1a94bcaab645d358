"""The local Dagster instance every memflow command of one data directory shares:
`<data>/dagster/dagster.yaml` (or `$DAGSTER_HOME`), written on first use.

Besides the storage `memflow run` needs (`pipelines.event_log.INSTANCE_YAML`), the file sets up
what `memflow up` and `memflow dev` run on: the run queue with the production instance's
exclusion rule (`deploy/dagster.yaml`: at most one run per tenant block at a time, tag
`memflow/block`), a short dequeue interval (a write asks for its tenant's run at once, and the
queue should not add seconds to it), and run monitoring (a run whose worker died, e.g. when
`memflow up` was killed, is failed at the next start instead of holding its block for ever).

An instance file memflow wrote earlier without these settings is brought up to date in place; a
file somebody wrote by hand is left alone, and `block_limit_problem` says when it lacks the
exclusion rule.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipelines.batches import BLOCK_TAG

MARK = "# Written by memflow"
QUEUE_MARK = "# memflow: the run queue"

QUEUE_YAML = f"""\
{QUEUE_MARK} (pipelines/instance.py). At most one run per tenant block at a time, whoever
# launches it (the landing sensor, the UI, the API's ingest trigger); runs memflow executes in
# a process of its own (`memflow run`, the API's warm ingest worker) count too, and every run
# also takes its block's lock (pipelines/block_lock.py).
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
    # a code server that is slow to answer (a busy machine) does not fail the queued run
    max_user_code_failure_retries: 3
    user_code_failure_retry_delay: 10
concurrency:
  runs:
    tag_concurrency_limits:
      - key: {BLOCK_TAG}
        value:
          applyLimitPerUniqueValue: true
        limit: 1
# A code server that needs long to load the pipeline on a busy machine (minutes, measured
# here under load: BENCHMARKS.md "Freshness") is waited for, not given up on after 180 s.
code_servers:
  local_startup_timeout: 600
run_monitoring:
  enabled: true
  start_timeout_seconds: 180
  poll_interval_seconds: 30
  max_resume_run_attempts: 0
"""


def instance_yaml(home: Path) -> str:
    from pipelines.event_log import INSTANCE_YAML

    base = Path(home, "history", "runs").resolve()
    return INSTANCE_YAML.format(base_dir=json.dumps(str(base))) + QUEUE_YAML


def ensure_instance_config(home: Path) -> Path:
    """Write the instance file, or bring one memflow wrote up to date; a hand-written one is
    left as it is."""
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(instance_yaml(home))
        return config
    text = config.read_text()
    if text.startswith(MARK) and QUEUE_MARK not in text:
        config.write_text(text.rstrip("\n") + "\n" + QUEUE_YAML)
    return config


def block_limit_problem(home: Path) -> str | None:
    """Why runs of one block could overlap under this instance (None when they cannot)."""
    import yaml

    config = home / "dagster.yaml"
    try:
        found = yaml.safe_load(config.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        return f"{config} cannot be read ({type(exc).__name__})"
    runs = (found.get("concurrency") or {}).get("runs") or {}
    queue = (found.get("run_coordinator") or {}).get("config") or {}
    limits = runs.get("tag_concurrency_limits") or queue.get("tag_concurrency_limits")
    for limit in limits or []:
        if isinstance(limit, dict) and limit.get("key") == BLOCK_TAG and limit.get("limit") == 1:
            return None
    return (
        f"{config} sets no run queue limit on the tag {BLOCK_TAG}: the queue may start two runs "
        "of one tenant block at once (each then waits for the block's lock)"
    )
