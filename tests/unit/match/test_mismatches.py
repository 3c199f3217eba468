"""What a desync is held against (:mod:`analyzer.match.mismatches`)."""

from __future__ import annotations

import pytest

from analyzer.match import sibling_family


@pytest.mark.parametrize(
    ("name", "desc", "family"),
    [
        ("3", "TENSOR_MODEL_PARALLEL_GROUP", "TENSOR_MODEL_PARALLEL_GROUP"),
        ("tp[6,7]", "", "tp"),  # TorchComms: no description, one comm name per kind
        ("0", "default_pg", ""),
        ("5", "undefined", ""),
        ("world[0-7]", "", ""),
        ("7", "", ""),
    ],
)
def test_sibling_groups_share_a_description_or_a_torchcomms_comm_name(
    name: str, desc: str, family: str
) -> None:
    """The groups a desync is held against (`analyzer.match.odd_against_siblings`): those of
    the same description, or, where TorchComms writes none, of the same comm name."""
    assert sibling_family(name, desc) == family
