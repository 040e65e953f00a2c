"""Measurements cached as JSON files (GPU peaks, PyTorch baselines): measured once, read back after, measured
again when the entry is damaged, and written whole so that a suite's parallel workers never read half."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from kernelblaster.tools.files import abandoned_temporaries, cached_measurement


class _Peak(BaseModel):
    gbs: float


class _Meter:
    """Counts how often the cache asked for a measurement."""

    def __init__(self, value: float) -> None:
        self.value, self.calls = value, 0

    def __call__(self) -> _Peak:
        self.calls += 1
        return _Peak(gbs=self.value)


def test_a_missing_entry_is_measured_and_written(tmp_path: Path) -> None:
    path = tmp_path / "peaks" / "gpu.json"
    assert cached_measurement(path, _Peak, _Meter(3000.0)) == _Peak(gbs=3000.0)
    assert _Peak.model_validate_json(path.read_text()) == _Peak(gbs=3000.0)


def test_a_cached_entry_is_returned_without_measuring(tmp_path: Path) -> None:
    path = tmp_path / "gpu.json"
    path.write_text(_Peak(gbs=2500.0).model_dump_json())
    meter = _Meter(3000.0)
    assert cached_measurement(path, _Peak, meter) == _Peak(gbs=2500.0)
    assert meter.calls == 0


def test_a_damaged_entry_is_measured_again_and_replaced(tmp_path: Path) -> None:
    path = tmp_path / "gpu.json"
    path.write_text('{"gbs": ')
    meter = _Meter(3000.0)
    assert cached_measurement(path, _Peak, meter) == _Peak(gbs=3000.0)
    assert meter.calls == 1 and _Peak.model_validate_json(path.read_text()) == _Peak(gbs=3000.0)


def test_writing_an_entry_leaves_no_temporary_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "gpu.json"
    cached_measurement(path, _Peak, _Meter(3000.0))
    assert abandoned_temporaries(path) == [] and [entry.name for entry in tmp_path.iterdir()] == ["gpu.json"]


def test_remeasuring_ignores_a_cached_entry_and_replaces_it(tmp_path: Path) -> None:
    path = tmp_path / "gpu.json"
    path.write_text(_Peak(gbs=2500.0).model_dump_json())
    meter = _Meter(3000.0)
    assert cached_measurement(path, _Peak, meter, remeasure=True) == _Peak(gbs=3000.0)
    assert meter.calls == 1 and _Peak.model_validate_json(path.read_text()) == _Peak(gbs=3000.0)
