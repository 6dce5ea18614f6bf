"""Rank 1 leaves the job cleanly (its engine and coordinator are told), then
fails while exiting, as an interpreter that crashes in its teardown does."""

import sys
import time

import elasticrun as er

er.init()
er.barrier()
rank = er.rank()
er.shutdown()
if rank == 1:
    time.sleep(1.5)
    sys.exit(4)
