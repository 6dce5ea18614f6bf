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


@pytest.mark.parametrize("bucket_mb", ["0", "4"])
def test_unused_and_frozen_parameters_are_reduced_as_zeros_and_left_alone(bucket_mb):
    out, _ = run_job(2, "torch_unused.py", bucket_mb)
    for r in range(2):
        assert f"OK {r}" in rank_lines(out, r), out


@pytest.mark.parametrize("mode", ["accumulate", "fp16"])
def test_distributed_optimizer_accumulating_passes_or_in_fp16_matches_one_process(mode):
    out, _ = run_job(2, "torch_accum.py", mode)
    for r in range(2):
        assert f"OK {r}" in rank_lines(out, r), out


@pytest.mark.parametrize("np_", [1, 2])
def test_contiguous_gradients_are_reduced_where_they_lie(np_):
    out, _ = run_job(np_, "torch_inplace.py")
    for r in range(np_):
        assert f"OK {r}" in rank_lines(out, r), out
