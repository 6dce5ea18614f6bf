"""``--max-restarts``: a torch.distributed script written for torchrun,
which checkpoints and resumes, survives a ``kill -9`` of a rank by
elasticrun starting every worker again."""

import re
import sys
import tempfile

from conftest import WORKERS, elasticrun, rank_lines, run_and_kill, run_job
from test_elastic import final_weights

STEPS = 30


def test_a_checkpointing_torchrun_script_is_restarted_and_ends_on_the_undisturbed_weights():
    with tempfile.TemporaryDirectory() as d:
        quiet, _ = run_job(2, "torchrun_ckpt.py", f"{d}/quiet.pt", STEPS, 0)
    want = final_weights(quiet)
    with tempfile.TemporaryDirectory() as d:
        cmd = [elasticrun(), "-np", "2", "--max-restarts", "2", sys.executable,
               str(WORKERS / "torchrun_ckpt.py"), f"{d}/ckpt.pt", str(STEPS), "0.05"]
        code, out, err, killed = run_and_kill(cmd, r"\[1\]<stdout>:pid 1 (\d+)", r"<stdout>:step 10$")
    assert killed and code == 0, out + err
    assert "was killed by signal 9 (SIGKILL)" in err, err
    assert "restart 1 of 2 (TORCHELASTIC_RESTART_COUNT=1)" in err, err
    resumed = [int(m) for m in re.findall(r"resumed (\d+) restart 1", "\n".join(rank_lines(out, 0)))]
    assert resumed and resumed[0] >= 10, out
    got = final_weights(out)
    assert all(abs(a - b) < 1e-5 for a, b in zip(got, want)), (got, want)
