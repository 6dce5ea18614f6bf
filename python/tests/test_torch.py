import pytest

from conftest import rank_lines, run_job


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_horovod_torch_names_and_semantics(np_):
    out, _ = run_job(np_, "torch_api.py")
    for r in range(np_):
        assert f"OK {r}" in rank_lines(out, r), out


@pytest.mark.parametrize("np_", [2, 4])
def test_distributed_optimizer_and_sync_batch_norm_match_one_process_on_the_global_batch(np_):
    out, _ = run_job(np_, "torch_train.py")
    for r in range(np_):
        assert f"OK {r}" in rank_lines(out, r), out
