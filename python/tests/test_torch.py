import pytest

from conftest import rank_lines, run_job


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_horovod_torch_names_and_semantics(np_):
    out, _ = run_job(np_, "torch_api.py")
    for r in range(np_):
        assert f"OK {r}" in rank_lines(out, r), out


@pytest.mark.parametrize("np_,mode", [(2, "default"), (4, "default"), (2, "each"), (2, "small"),
                                      (2, "groups"), (3, "lists"), (2, "predivide")])
def test_distributed_optimizer_and_sync_batch_norm_match_one_process_on_the_global_batch(np_, mode):
    out, _ = run_job(np_, "torch_train.py", mode)
    for r in range(np_):
        assert f"OK {r}" in rank_lines(out, r), out
