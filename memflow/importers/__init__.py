"""Importers: real agent transcripts into the landing zone (`memflow.landing` format).

- `memflow.importers.claude_code`: Claude Code session files
  (``~/.claude/projects/<project>/<session>.jsonl``, subagent files included).
- `memflow.importers.codex`: Codex rollout files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``),
  the older (bare response items) and the newer (``{"timestamp", "type", "payload"}``) shapes.
- `memflow.importers.common`: what both share: bounding and redaction of turns, the
  per-session landing files (idempotent by turn id) and the import report.
- `memflow.importers.tenant`: which tenant (``org/repo``) a working directory belongs to
  (``MEMFLOW_TENANT_MAP``, the git remote, ``MEMFLOW_DEFAULT_ORG``). Standard library only, so a
  hook can import it without loading the redaction or table stack.

Nothing is imported here on purpose: `recall.hooks` imports `tenant` on its fast path.
"""
