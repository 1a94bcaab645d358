"""Reading the landing zone: the files clients (or ``POST /v1/turns``) drop for the pipeline.

Format
======

Layout: ``<landing>/<org>/<repo>/<name>.jsonl`` (or ``.parquet``). ``<org>`` and ``<repo>`` are
the tenant scope and must be valid :class:`~schemas.scope.Scope` names. Names starting with
``.`` are ignored, so a writer should write ``.<name>.tmp`` and rename it when complete (a
dot-directory that holds landing files is reported, ``hidden_directory``, with its lines). Other
file types are ignored. Only regular files are ever opened: symlinks are not followed (at any
level), FIFOs, sockets and devices are never opened, and what `discover` did not list is not
read. Everything skipped is reported as a `LandingProblem` with a reason (and, where it can be
counted without following a link or blocking, the number of lines it holds).

JSON Lines: UTF-8, one JSON object (one conversation turn) per line; blank lines are skipped. A
line ends at LF, CRLF or a lone CR; a byte-order mark opening any line is dropped; U+2028,
U+2029 and U+0085 outside JSON strings separate records on a line that is not JSON as a whole
(`memflow.landing.jsonl`). A line holds at most :data:`MAX_LINE_BYTES`, not counting its ending.

==============  ===========================================================================
field           meaning
==============  ===========================================================================
``org``         tenant id; must equal the ``<org>`` directory (required, string)
``repo``        namespace; must equal the ``<repo>`` directory (required, string)
``session_id``  the agent session (required, non-empty string)
``turn_id``     unique within the session (required, non-empty string)
``ts``          ISO-8601 timestamp WITH a zone, e.g. ``2026-11-03T09:15:02-08:00`` or ``...Z``
                (spaces around it are dropped),
                inside the time window (`schemas.rules.TimeWindow`: from the setting
                ``MEMFLOW_HISTORY_START`` to a day after the moment the file is read)
``role``        ``user`` | ``assistant`` | ``tool``
``content``     the turn's text (required key; string, ``null`` is read as ``""``)
``client``      the agent, e.g. ``claude-code``, ``codex``, ``cursor`` (required, string)
``tool_name``   optional; the tool a ``tool`` turn called
``tool_input``  optional; the tool's input (a string holding a JSON object or array is
                decoded); checked and kept only for memflow's own tools, below
==============  ===========================================================================

A turn in which the agent saved facts itself has ``tool_name: "upsert_graph_triples"`` and
``tool_input: {"triples": [{"subject", "predicate", "object", "confidence"?, "valid_from"?,
"supersedes"?, "subject_type"?, "object_type"?}, ...]}``, where ``supersedes`` names the replaced
triple as ``{"subject", "predicate", "object"}``. Only the envelope (``triples`` is a list) is
checked here; each triple is validated downstream. Unknown fields are ignored.

A turn that takes facts out of memory has ``tool_name: "retract_facts"`` (`RETRACT_TOOL`) and
``tool_input: {"retract": [ITEM, ...], "reason"?, "by"?}``, each ITEM exactly one of
``{"fact_id"}``, ``{"subject", "predicate", "object"}`` or ``{"entity"}`` (non-empty strings);
anything else is ``bad_tool_input`` with a detail naming the item. Both tools are recognised
under the spellings agents record (`canonical_tool`: any case, camelCase or hyphens, an MCP or
namespace qualifier such as ``mcp__memflow__upsert_graph_triples``) and stored under their own
name. Any other tool's input is not memflow's to store: it is neither checked nor kept.

Parquet: one row per turn with the same columns; ``ts`` may be an ISO string or a timestamp with
a time zone (any zone, fixed offsets such as pandas' ``UTC+05:30`` included); ``tool_input``
may be a JSON string or a struct (null struct fields are dropped). A file is bounded before it
is decoded (`memflow.landing.parquet`): at most :data:`MAX_PARQUET_FILE_BYTES` on disk and
:data:`MAX_PARQUET_DECODED_BYTES` decoded, a row at most :data:`MAX_LINE_BYTES`.

Rejects
=======

A bad line (row) is quarantined with its file, 1-based line number and a reason, and the rest of
the file is still read. Reasons: ``invalid_json``, ``not_an_object``, ``missing_field:<name>``,
``bad_type:<name>``, ``bad_timestamp`` (unparseable or without a zone), ``ts_before_history_start``
and ``ts_in_future`` (outside the time window; the detail names the setting),
``bad_role``, ``scope_mismatch``, ``bad_tool_input``, ``duplicate_turn`` (the same session_id
+ turn_id again: a turn already ingested wins, then the earliest by ts, file and line),
``line_too_long`` (over :data:`MAX_LINE_BYTES`), ``bad_encoding`` (not UTF-8), ``bad_value``
(a Parquet value Python cannot hold), ``row_too_large`` (a Parquet row over
:data:`MAX_LINE_BYTES` decoded), ``file_too_large`` (a Parquet file past its bounds: one
record) and ``unreadable_file`` (a Parquet file that cannot be opened: one record). Every
non-blank line (Parquet row) read is one accepted turn or one reject.

Reading
=======

`read_tenant_files` is the one way to read a tenant: it reads the regular files `discover`
lists (or the given ones, checked to lie in the tenant's directory), each through one open file
descriptor, hashing exactly the bytes it parses, so every `FileRead` names the precise version
it describes (`FileFingerprint`: size, mtime_ns, sha256). A file that changes while it is read
(in place, or replaced by a rename: the old inode's size, mtime or ctime moves) is read again,
from its name; one that keeps changing is skipped and reported (``changed_during_read``), so a
result never mixes two versions.

Secrets: rejected records go through `_record` and id fields (session_id, turn_id, client,
tool_name, file names) through `_id`, the two places redaction of this module's output
happens. Turn content is not redacted here (the turns stage does it), so never log what this
module returns.
"""

from memflow.landing.discover import (
    Discovery,
    Listed,
    discover,
    is_landing_file,
    is_landing_name,
    tenant_files,
    tenant_listings,
    zone_listing,
)
from memflow.landing.files import (
    FileFingerprint,
    LandingFileError,
    fingerprint,
    relative_name,
    scope_of_file,
    source_name,
)
from memflow.landing.format import (
    JSONL_SUFFIX,
    LANDING_SUFFIXES,
    MAX_LINE_BYTES,
    MAX_PARQUET_DECODED_BYTES,
    MAX_PARQUET_FILE_BYTES,
    OWN_TOOLS,
    PARQUET_SUFFIX,
    READ_ATTEMPTS,
    REJECT_COLUMNS,
    RETRACT_TOOL,
    STAGE,
    TURN_COLUMNS,
    UPSERT_TOOL,
    canonical_tool,
    printable,
)
from memflow.landing.problems import LandingProblem, problem_line, problems_frame
from memflow.landing.read import (
    FileRead,
    LandingRead,
    TenantRead,
    days_in_file,
    read_landing_file,
    read_tenant_files,
    split_duplicates,
)
from memflow.landing.survey import count_records, landing_problems
from schemas.rules import MAX_RECORD_CHARS

__all__ = [
    "JSONL_SUFFIX",
    "LANDING_SUFFIXES",
    "MAX_LINE_BYTES",
    "MAX_PARQUET_DECODED_BYTES",
    "MAX_PARQUET_FILE_BYTES",
    "MAX_RECORD_CHARS",
    "OWN_TOOLS",
    "PARQUET_SUFFIX",
    "READ_ATTEMPTS",
    "REJECT_COLUMNS",
    "RETRACT_TOOL",
    "STAGE",
    "TURN_COLUMNS",
    "UPSERT_TOOL",
    "Discovery",
    "FileFingerprint",
    "FileRead",
    "LandingFileError",
    "LandingProblem",
    "LandingRead",
    "Listed",
    "TenantRead",
    "canonical_tool",
    "count_records",
    "days_in_file",
    "discover",
    "fingerprint",
    "is_landing_file",
    "is_landing_name",
    "landing_problems",
    "printable",
    "problem_line",
    "problems_frame",
    "read_landing_file",
    "read_tenant_files",
    "relative_name",
    "scope_of_file",
    "source_name",
    "split_duplicates",
    "tenant_files",
    "tenant_listings",
    "zone_listing",
]
