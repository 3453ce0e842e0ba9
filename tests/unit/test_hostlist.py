import pytest

from scheduler.core.hostlist import compress


@pytest.mark.parametrize(
    "names, folded",
    [
        ([], ""),
        (["hgx-01-h01"], "hgx-01-h01"),
        ([f"nvl72-01-h{n:02d}" for n in range(1, 17)], "nvl72-01-h[01-16]"),
        (["nvl72-03-h01", "nvl72-03-h02", "nvl72-03-h04", "nvl72-03-h05", "nvl72-03-h09"],
         "nvl72-03-h[01-02,04-05,09]"),
        (["hgx-02-h01", "nvl72-01-h02", "nvl72-01-h01"], "hgx-02-h01,nvl72-01-h[01-02]"),
        (["login", "node9", "node10"], "login,node[9-10]"),
    ],
)
def test_host_lists_fold_like_slurm(names, folded):
    assert compress(names) == folded
