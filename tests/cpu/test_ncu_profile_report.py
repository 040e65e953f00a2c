"""The harness's profile result built from a recorded ncu details CSV."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import TypeAdapter

from kernelblaster.harness.profile.outcome import (
    ProfileOutcome,
    ProfileReport,
    ProfileUnavailable,
    build_profile_report,
)
from kernelblaster.kb.signature_fields import SIGNATURE_FIELDS
from kernelblaster.tools.errors import UserFacingError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"


@pytest.fixture(scope="module")
def profile() -> ProfileReport:
    return build_profile_report((FIXTURES / "details_rules.csv").read_text())


def test_profile_carries_the_totals(profile: ProfileReport) -> None:
    assert profile.kernel_count == 2
    assert profile.total_gpu_time_ns == 68_288
    assert profile.total_elapsed_cycles == 135_056


def test_profile_carries_signature_summary_and_findings(profile: ProfileReport) -> None:
    assert len(profile.signature) == len(SIGNATURE_FIELDS)
    assert profile.signature_fields == SIGNATURE_FIELDS
    assert profile.signature_summary.startswith("latency-bound (memory-leaning)")
    assert "#0 scale" in profile.findings and "#1 rowsum" in profile.findings


def test_findings_respect_the_requested_budget() -> None:
    small = build_profile_report((FIXTURES / "details_rules.csv").read_text(), findings_chars=500)
    assert len(small.findings) <= 500


def test_profile_outcome_round_trips_through_json(profile: ProfileReport) -> None:
    adapter = TypeAdapter(ProfileOutcome)
    assert adapter.validate_json(profile.model_dump_json()) == profile
    unavailable = ProfileUnavailable(reason="ncu not found")
    assert adapter.validate_json(unavailable.model_dump_json()) == unavailable


def test_unparseable_csv_is_a_user_facing_error() -> None:
    with pytest.raises(UserFacingError, match="ncu details CSV"):
        build_profile_report("not,a,report\n1,2,3\n")
