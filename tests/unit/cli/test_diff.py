"""``hangscope diff``: the same hang or not, through the command, from dumps and saved JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analyzer.cli.commands import app
from analyzer.diagnosis import MAX_SAVED_BYTES
from tests.conftest import SAMPLES
from tools.simulate import simulate_job

runner = CliRunner()
STALL = str(SAMPLES / "stall_w4")
CRASH = str(SAMPLES / "crash_w4")


def _diff(a: str, b: str, *more: str) -> tuple[int, str, str]:
    res = runner.invoke(app, ["diff", a, b, "-q", *more])
    return res.exit_code, res.stdout, res.stderr


def _saved(tmp_path: Path, sample: str, name: str = "saved.json") -> str:
    res = runner.invoke(app, ["analyze", sample, "-q", "-f", "json"])
    path = tmp_path / name
    path.write_text(res.stdout)
    return str(path)


def test_a_sample_is_the_same_hang_as_itself() -> None:
    code, out, _ = _diff(STALL, STALL)
    assert code == 0
    assert out.startswith("SAME HANG: fingerprint ")
    assert "differs:" not in out


def test_stall_and_crash_are_different_hangs_by_kind() -> None:
    code, out, _ = _diff(STALL, CRASH)
    assert code == 1
    assert out.startswith("DIFFERENT HANGS: fingerprints ")
    assert "  kind: not_joined (a), missing_dump (b)" in out.splitlines()
    assert "  culprit ranks: 1 (a), 2 (b)" in out.splitlines()  # told, not a difference


def test_the_json_diff_names_each_differing_field() -> None:
    code, out, _ = _diff(STALL, CRASH, "-f", "json")
    doc = json.loads(out)
    assert code == 1 and doc["schema"] == "hangscope.diff/1" and doc["same"] is False
    assert {"field": "kind", "a": "not_joined", "b": "missing_dump"} in doc["differs"]
    assert {d["field"] for d in doc["informational"]} == {"culprit_ranks", "world_size"}
    assert doc["a"]["fingerprint"]["id"] != doc["b"]["fingerprint"]["id"]


def test_the_torch_215_twin_is_the_same_hang() -> None:
    """The same program recorded on torch 2.15 (another recorder format): same fingerprint."""
    code, out, _ = _diff(str(SAMPLES / "opmix_stall_w4"), str(SAMPLES / "opmix_stall_w4_t215"))
    assert (code, out.split(":")[0]) == (0, "SAME HANG")


def test_dumps_and_the_json_analyze_wrote_of_them_are_the_same_hang(tmp_path: Path) -> None:
    saved = _saved(tmp_path, STALL)
    code, out, _ = _diff(STALL, saved)
    assert code == 0 and out.startswith("SAME HANG")
    code, _, _ = _diff(saved, _saved(tmp_path, CRASH, "crash.json"))
    assert code == 1


def test_renumbered_ranks_and_another_size_keep_the_fingerprint(tmp_path: Path) -> None:
    small = tmp_path / "small"
    large = tmp_path / "large"
    simulate_job(small, tp=2, pp=1, dp=2, fault="stall", fault_rank=1, seed=3, buffer_size=400)
    simulate_job(large, tp=4, pp=1, dp=4, fault="stall", fault_rank=9, seed=3, buffer_size=400)
    code, out, _ = _diff(str(small), str(large), "-f", "json")
    doc = json.loads(out)
    assert code == 0 and doc["same"] and doc["differs"] == []
    info = {d["field"]: (d["a"], d["b"]) for d in doc["informational"]}
    assert info == {"culprit_ranks": ([1], [9]), "world_size": (4, 16)}


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"\x00\x01 not json", "not JSON"),
        (b"[1, 2, 3]", "not the JSON of hangscope analyze"),
        (b'{"schema": "other.tool/3", "verdict": "hang"}', "not the JSON of hangscope analyze"),
        (b'{"schema": "hangscope.diagnosis/1.1", "verdict": "hang"}', "no fingerprint"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
    ],
)
def test_junk_or_foreign_json_is_one_line_and_exit_2(
    tmp_path: Path, content: bytes, says: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    code, out, err = _diff(STALL, str(bad))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and says in err
    assert err.startswith("hangscope: error: ")


def test_an_edited_fingerprint_is_refused(tmp_path: Path) -> None:
    saved = Path(_saved(tmp_path, STALL))
    doc = json.loads(saved.read_text())
    doc["fingerprint"]["kind"] = "missing_dump"
    saved.write_text(json.dumps(doc))
    code, _, err = _diff(str(saved), STALL)
    assert code == 2 and "does not match its parts" in err


def test_an_oversized_json_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate(MAX_SAVED_BYTES + 1)  # sparse: no disk written
    code, _, err = _diff(str(big), STALL)
    assert code == 2 and "larger than" in err and len(err.strip().splitlines()) == 1


def test_the_torch_215_recording_of_a_stall_differs_only_in_its_code() -> None:
    """torch 2.15's stall_w4 (another recorder format, another script): what is stable (the
    verdict, kind, op, group role) is alike; only the code location differs."""
    from tests.conftest import FIXTURES

    twin = FIXTURES / "torch2.15-gloo" / "stall_w4"
    if not twin.is_dir():
        pytest.skip("the shared torch 2.15 fixtures are not here")
    code, out, _ = _diff(STALL, str(twin), "-f", "json")
    doc = json.loads(out)
    assert code == 1 and [d["field"] for d in doc["differs"]] == ["location"]


def test_every_output_carries_the_fingerprint(tmp_path: Path) -> None:
    res = runner.invoke(app, ["analyze", STALL, "-q", "-f", "json"])
    fp = json.loads(res.stdout)["fingerprint"]
    assert set(fp) == {"id", "verdict", "kind", "op", "group_role", "location"}
    assert (fp["kind"], fp["op"], fp["group_role"]) == ("not_joined", "all_reduce", "default_pg")
    text = runner.invoke(app, ["analyze", STALL, "-q"]).stdout
    assert f"fingerprint: {fp['id']} (not_joined, all_reduce in default_pg, at " in text
    md = runner.invoke(app, ["analyze", STALL, "-q", "-f", "markdown"]).stdout
    assert f"- **Fingerprint:** {fp['id']} (not_joined" in md
    page = tmp_path / "r.html"
    runner.invoke(app, ["report", STALL, "-q", "-o", str(page), "--plotlyjs", "cdn"])
    banner = page.read_text().split("id='verdict'", 1)[1].split("</header>", 1)[0]
    assert f"fingerprint: <code>{fp['id']} (" in banner
