"""kill -9 of one of two ranks during CUDA training from Python: runs
elastic_worker.py as an elastic job of 2 ranks (``ELASTICRUN`` names the
binary; extra arguments go to elasticrun before the program, such as a
wrapper giving each process its own NCCL_HOSTID), kills rank 1 at step 40,
and checks that the job ends with every step done. Prints the recovery:
from the kill to the survivor's first step in the new generation, and to
the replacement's first step. Exits 1 if the job failed."""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
steps = 200
with tempfile.TemporaryDirectory() as d:
    hosts = os.path.join(d, "hosts.sh")
    with open(hosts, "w") as f:
        f.write("#!/bin/sh\necho localhost:2\n")
    os.chmod(hosts, 0o755)
    cmd = [os.environ.get("ELASTICRUN", "elasticrun"), "--min-np", "1", "--max-np", "2",
           "--host-discovery-script", hosts, *sys.argv[1:], sys.executable,
           os.path.join(here, "elastic_worker.py"), str(steps), "0.01"]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, errs = [], []
    readers = [threading.Thread(target=lambda: lines.extend(job.stdout), daemon=True),
               threading.Thread(target=lambda: errs.extend(job.stderr), daemon=True)]
    for t in readers:
        t.start()
    killed_ms, deadline = None, time.monotonic() + 150
    while job.poll() is None:
        out = "".join(lines)
        m = re.search(r"\[1\]<stdout>:pid 1 (\d+)", out)
        if m and killed_ms is None and re.search(r"<stdout>:step 40 ", out):
            os.kill(int(m.group(1)), signal.SIGKILL)
            killed_ms = int(time.time() * 1000)
        if time.monotonic() > deadline:
            job.kill()
            print("the job did not finish in time", flush=True)
            break
        time.sleep(0.005)
    for t in readers:
        t.join(10)
out, err = "".join(lines), "".join(errs)
sys.stdout.write(out[-3000:])
sys.stderr.write(err[-6000:])
steps_after = [(int(m.group(1)), int(m.group(2)), int(m.group(3))) for m in
               re.finditer(r"\[(\d+)\]<stdout>:step \d+ size (\d+) unix_ms (\d+)", out)]
trains = [json.loads(line.partition("<stdout>:")[2]) for line in out.splitlines()
          if '"event": "train"' in line]
back = [t["unix_ms"] - killed_ms for t in trains if killed_ms and t["unix_ms"] > killed_ms]
first_step = [ms - killed_ms for (_, _, ms) in steps_after if killed_ms and ms > killed_ms]
print(json.dumps({"killed": killed_ms is not None, "exit": job.returncode,
                  "entered_training_after_kill_ms": back,
                  "first_step_after_kill_ms": first_step[:1],
                  "final_step_seen": f"step {steps} " in out}), flush=True)
ok = killed_ms is not None and job.returncode == 0 and f"step {steps} " in out and \
    "was killed by signal 9" in err
print("cuda elastic kill: " + ("ok" if ok else "FAILED"), flush=True)
sys.exit(0 if ok else 1)
