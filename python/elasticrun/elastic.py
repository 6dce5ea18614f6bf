"""Elastic training in Python, as Horovod's ``hvd.elastic``: a ``State`` to
commit, restore and sync, and ``run`` to wrap the training function.

When a collective fails because workers failed (``WorkersFailed``, Horovod's
``HorovodInternalError``), ``run`` restores the last commit, joins the next
generation and calls the function again after syncing the state from rank 0.
When hosts were added or removed, ``State.commit()`` raises
``HostsUpdatedInterrupt`` on every rank at the same commit, and ``run``
joins the next generation without rolling back.
"""

import copy
import functools

import numpy as _np

from . import _elasticrun as _native
from ._elasticrun import LeftJob, WorkersFailed

HorovodInternalError = WorkersFailed


class HostsUpdatedInterrupt(RuntimeError):
    """Hosts were added or removed: go on in the next generation from here."""

    def __init__(self, skip_sync=False):
        super().__init__("hosts were updated")
        self.skip_sync = skip_sync


class State:
    """What training needs to survive membership changes; subclasses say how
    to save, restore and sync it."""

    def __init__(self):
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions called after every move to a new generation (rank and
        size may have changed: rescale the learning rate, re-shard data)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for cb in self._reset_callbacks:
            cb()

    def commit(self):
        """Keeps the current state as the one to come back to, then checks
        for host updates (every rank decides the same)."""
        self._committed_steps = _native.steps()
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        if not _native.is_elastic():
            return
        from . import allreduce, Max

        flag = _np.array([1 if _native.hosts_updated() else 0], _np.uint8)
        if allreduce(flag, name="elastic.host_updates", op=Max)[0]:
            raise HostsUpdatedInterrupt()

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError


class ObjectState(State):
    """State held in attributes (``ObjectState(epoch=0, batch=0)``): any
    picklable values, synced from rank 0."""

    def __init__(self, **kwargs):
        super().__init__()
        self._keys = list(kwargs)
        for k, v in kwargs.items():
            setattr(self, k, v)
        self._saved = {}
        self.save()

    def _values(self):
        """Each attribute's value; an object with ``state_dict()`` (a data
        sampler) by its state."""
        return {k: _state_of(getattr(self, k)) for k in self._keys}

    def _set(self, values):
        for k, v in values.items():
            current = getattr(self, k, None)
            if _stateful(current):
                current.load_state_dict(v)
            else:
                setattr(self, k, v)

    def save(self):
        self._saved = copy.deepcopy(self._values())

    def restore(self):
        self._set(copy.deepcopy(self._saved))

    def sync(self):
        """Makes every rank's values, and its step count, rank 0's: one
        broadcast of both."""
        from . import _broadcast_pickled

        values, steps = _broadcast_pickled((self._values(), _native.steps()), 0, "elastic.state")
        self._set(values)
        self.save()
        _set_steps(self, steps)
        self._steps_synced = True


def _set_steps(state, steps):
    """The step count as synced, kept with the state's commit."""
    _native.set_steps(int(steps))
    state._committed_steps = int(steps)


def _sync_steps(state):
    """Makes every rank's step count rank 0's, as the state was synced, and
    keeps it with the state's commit (unless the state's sync did)."""
    if getattr(state, "_steps_synced", False):
        state._steps_synced = False
        return
    from . import broadcast

    n = broadcast(_np.array([_native.steps()], _np.int64), 0, name="elastic.steps")
    _set_steps(state, n[0])


def _stateful(v):
    return hasattr(v, "state_dict") and hasattr(v, "load_state_dict") and not isinstance(v, type)


def _state_of(v):
    return v.state_dict() if _stateful(v) else v


def run(func):
    """Wraps ``func(state, ...)`` so that it survives workers failing and
    hosts coming and going (see the module's docs)."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        reset = False
        # The step reached in the generation left (none for a newcomer).
        reached = None
        while True:
            if reset:
                _native.rejoin()
                state.on_reset()
            try:
                state.sync()
                _sync_steps(state)
                _native.report_running(reached)
                return func(state, *args, **kwargs)
            except WorkersFailed:
                if not _native.is_elastic():
                    raise
                reached = _native.steps()
                state.restore()
                _native.set_steps(getattr(state, "_committed_steps", 0))
                reset = True
            except HostsUpdatedInterrupt:
                reached = _native.steps()
                reset = True

    return wrapper


__all__ = ["HorovodInternalError", "HostsUpdatedInterrupt", "LeftJob", "ObjectState", "State",
           "WorkersFailed", "run"]
