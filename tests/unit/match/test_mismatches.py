"""What a desync is held against (:mod:`analyzer.match.mismatches`)."""

from __future__ import annotations

from analyzer.match import sibling_family


def test_sibling_groups_share_a_description_or_a_torchcomms_comm_name() -> None:
    """The groups a desync is held against (`analyzer.match.odd_against_siblings`): those of
    the same description, or, where TorchComms writes none, of the same comm name."""
    assert sibling_family("3", "TENSOR_MODEL_PARALLEL_GROUP") == "TENSOR_MODEL_PARALLEL_GROUP"
    assert sibling_family("tp[6,7]", "") == "tp"
    assert sibling_family("0", "default_pg") == ""
    assert sibling_family("5", "undefined") == ""
    assert sibling_family("world[0-7]", "") == ""
    assert sibling_family("7", "") == ""
