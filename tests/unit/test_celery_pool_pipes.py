"""config/celery_app.py's fix for celery issue #9250: after a broker connection loss that ended
pool processes, the pool registers their pipes with the event loop again and a finished one's
is None. Celery's own ``iterate_file_descriptors_safely`` must drop it, not end the worker
(tests/e2e/test_broker_restart.py is the whole story; this is the one call, with kombu's real
hub and celery's real function)."""

from __future__ import annotations

import errno
import os

import pytest
from celery.concurrency.asynpool import iterate_file_descriptors_safely
from kombu.asynchronous import Hub
from kombu.asynchronous import hub as kombu_hub

import config.celery_app  # noqa: F401 - applies the fix


def test_a_closed_pipe_is_ebadf_and_an_open_one_its_descriptor():
    with pytest.raises(OSError, match="pipe is closed") as closed:
        kombu_hub.fileno(None)
    assert closed.value.errno == errno.EBADF
    read_end, write_end = os.pipe()
    try:
        assert kombu_hub.fileno(read_end) == read_end
    finally:
        os.close(read_end)
        os.close(write_end)


def test_the_pool_drops_a_finished_processs_pipe_and_keeps_the_live_ones():
    hub = Hub()
    read_end, write_end = os.pipe()
    try:
        pipes = [None, read_end]
        iterate_file_descriptors_safely(list(pipes), pipes, hub.add_reader, lambda: None)
        assert pipes == [read_end]  # the finished one is gone, the worker goes on
        assert read_end in hub.readers
    finally:
        hub.close()
        os.close(read_end)
        os.close(write_end)
