"""An in-process `memflow recall` builds its service without the API's web stack: importing
what `recall.terminal.recall_once` imports loads neither FastAPI nor a model runtime
(`bench/bench_cli_recall.py` measures the command; issue 17: a lexical answer within 2 s)."""

import subprocess
import sys

PROBE = (
    "import sys, recall.terminal, recall.build; "
    "print(','.join(m for m in ('fastapi', 'uvicorn', 'recall.api', 'recall.server', "
    "'torch', 'onnxruntime') if m in sys.modules))"
)


def test_recall_build_imports_no_web_stack_or_model_runtime():
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == ""


def test_recall_server_still_exports_the_builders():
    from recall import build, server

    assert server.build_service is build.build_service
    assert server.embedder is build.embedder
    assert server.Built is build.Built
