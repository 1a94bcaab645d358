"""Importers: real agent transcripts into the landing zone (`memflow.landing` format).

- `memflow.importers.claude_code`: Claude Code session files
  (``~/.claude/projects/<project>/<session>.jsonl``, subagent files included).
- `memflow.importers.codex`: Codex rollout files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``),
  the older (bare response items) and the newer (``{"timestamp", "type", "payload"}``) shapes.
- `memflow.importers.common`: what both share: bounding and redaction of turns, the
  per-session landing files (idempotent by turn id) and the import report.
- `memflow.importers.tenant`: which tenant (``org/repo``) a session belongs to
  (``MEMFLOW_TENANT_MAP``, the recorded or local git remote, ``MEMFLOW_DEFAULT_ORG``): names that
  never collide. Standard library and `schemas` only, so a hook can import it on its fast path.
- `memflow.importers.origins`: how turns that are not the user's (sub-agents, teammates, other
  sessions, harness notifications) are marked for the extractor.
- `memflow.importers.offsets`: where the last incremental import of a growing file stopped.

Nothing is imported here on purpose: `recall.hooks` imports `tenant` on its fast path.
"""
