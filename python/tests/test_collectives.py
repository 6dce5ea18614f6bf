import pytest

from conftest import rank_lines, run_job


@pytest.mark.parametrize("np_", [1, 2, 3, 4])
def test_every_collective_op_and_dtype_matches_numpy(np_):
    out, _ = run_job(np_, "grid.py")
    for r in range(np_):
        lines = rank_lines(out, r)
        assert any(l.startswith(f"OK {r} ") for l in lines), out


def test_async_handles_complete_in_any_order():
    out, _ = run_job(3, "handles.py")
    for r in range(3):
        assert f"OK {r}" in rank_lines(out, r), out


def test_a_mismatch_fails_the_tensor_on_every_rank_naming_both_and_the_job_goes_on():
    out, _ = run_job(2, "mismatch.py")
    for r in range(2):
        lines = rank_lines(out, r)
        assert any("rank 0: allreduce(Average) F32 [3]" in l and "rank 1: allreduce(Average) F32 [4]" in l for l in lines), out
        assert f"OK {r}" in lines, out


def test_bad_arguments_raise_python_errors_that_say_what_to_do():
    out, _ = run_job(1, "errors.py")
    assert "OK 0" in rank_lines(out, 0), out


def test_a_worker_that_fails_after_leaving_cleanly_fails_the_job():
    # It said it finished and closed its control connection 1.5 s before its
    # exit status came: the exit status still decides.
    _, err = run_job(2, "late_failure.py", expect=1)
    assert "rank 1 on localhost exited with code 4" in err, err


def test_the_package_turns_busy_waiting_off_unless_told_otherwise():
    import os
    import subprocess
    import sys

    probe = "import elasticrun, os; print(os.environ['ELASTICRUN_SPIN_US'])"
    env = {k: v for k, v in os.environ.items() if k != "ELASTICRUN_SPIN_US"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                         text=True, timeout=60, check=True)
    assert out.stdout.strip() == "0", out
    env["ELASTICRUN_SPIN_US"] = "40"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                         text=True, timeout=60, check=True)
    assert out.stdout.strip() == "40", out


@pytest.mark.parametrize("np_", [1, 2])
def test_large_results_are_lent_from_a_pool_and_reused(np_):
    out, _ = run_job(np_, "pool.py")
    for r in range(np_):
        assert any(l.startswith(f"OK {r}") for l in rank_lines(out, r)), out
