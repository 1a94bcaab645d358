"""`recall.answers.assemble` builds the same models as pydantic's model_construct."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from recall.answers import Provenance, RecalledFact, assemble

VALUES = {
    "fact_id": "f_1",
    "subject_id": "e_1",
    "subject": "Maria",
    "predicate": "VOLUNTEERS_AT",
    "object_id": "e_2",
    "object": "homeless shelter",
    "confidence": 1.0,
    "valid_from": datetime(2022, 12, 17, tzinfo=UTC),
    "valid_to": None,
    "provenance": Provenance.model_construct(
        session_id="conv-41", turn_id="D1:3", client="c", model="explicit"
    ),
    "hop": 1,
    "score": 0.5,
    "contradicts": ["f_2"],
}


def test_assemble_equals_model_construct() -> None:
    built = assemble(RecalledFact, dict(VALUES))
    reference = RecalledFact.model_construct(**VALUES)
    assert built == reference
    assert built.model_dump() == reference.model_dump()
    assert json.loads(built.model_dump_json()) == json.loads(reference.model_dump_json())
    assert built.model_fields_set == reference.model_fields_set == set(RecalledFact.model_fields)
    assert set(VALUES) == set(RecalledFact.model_fields)  # every field, nothing else
    # The JSON validates as the API's response schema would.
    assert RecalledFact.model_validate_json(built.model_dump_json()) == reference


def test_assembled_models_stay_frozen() -> None:
    built = assemble(RecalledFact, dict(VALUES))
    with pytest.raises(ValidationError):
        built.subject = "someone else"  # type: ignore[misc]
