"""What the DDP test workers (c10d_ddp.py, elastic_ddp.py) check after
``destroy_process_group``: that no thread of the ``elasticrun`` backend's
destroyed groups is left for the interpreter's teardown."""

import threading

# The backend's completer thread (elasticrun.torch.backend).
NAME = "elasticrun-c10d"


def assert_none_left(timeout=30):
    """Waits up to ``timeout`` seconds for each such thread to end, then
    fails naming those still running."""
    for t in threading.enumerate():
        if t.name == NAME:
            t.join(timeout=timeout)
    left = [t.name for t in threading.enumerate() if t.name == NAME]
    assert not left, f"threads of destroyed process groups still running: {left}"
