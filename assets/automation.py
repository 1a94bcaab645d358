"""Automation conditions for the per-tenant assets."""

from __future__ import annotations

from dagster import AutomationCondition


def after_upstream() -> AutomationCondition:
    """Run a tenant's partition when any upstream partition of it was updated.

    `AutomationCondition.eager()` also waits until no dependency partition is missing; a
    tenant's per-day upstream is missing on every day without turns, so eager would never fire.
    This is eager without that clause (and without the newly-missing trigger).
    """
    return (
        AutomationCondition.any_deps_updated().since_last_handled()
        & ~AutomationCondition.any_deps_in_progress()
        & ~AutomationCondition.in_progress()
    ).with_label("after upstream")
