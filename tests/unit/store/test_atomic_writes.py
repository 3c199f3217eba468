"""Files written whole or not at all (analyzer.store.atomic.write_atomically)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.store import write_atomically


def test_a_failed_write_leaves_nothing_and_the_old_file_as_it_was(tmp_path: Path) -> None:
    target = tmp_path / "timeline.png"
    target.write_bytes(b"old")
    seen: list[Path] = []

    def half(tmp: Path) -> None:
        seen.append(tmp)
        tmp.write_bytes(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        write_atomically(target, half)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["timeline.png"]
    # the temporary name keeps the suffix last: writers that read the format from it work
    assert seen[0].suffix == ".png" and seen[0].name.startswith(".timeline.png.")


def test_a_whole_write_replaces_the_file(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"
    write_atomically(target, lambda tmp: tmp.write_text("new"))
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["a.txt"]
