"""Heartbeats of the Celery worker and beat: recorded, exported as
``payments_process_heartbeat_age_seconds`` and checked by ``manage.py heartbeat_check``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from config.celery_app import app
from heartbeats.celery import HeartbeatScheduler, beat_name
from heartbeats.models import Heartbeat
from heartbeats.services import heartbeat_ages, heartbeat_forget, heartbeat_record

pytestmark = pytest.mark.django_db


def test_a_heartbeat_is_upserted_and_its_age_exported(client):
    then = timezone.now() - timedelta(seconds=90)
    assert heartbeat_record("worker", "celery@a", now=then)
    assert heartbeat_record("worker", "celery@a", now=then + timedelta(seconds=30))
    assert Heartbeat.objects.count() == 1
    ((kind, name, age),) = heartbeat_ages(now=then + timedelta(seconds=100))
    assert (kind, name, age) == ("worker", "celery@a", 70.0)
    text = client.get("/metrics").content.decode()
    assert 'payments_process_heartbeat_age_seconds{kind="worker",name="celery@a"}' in text
    assert "payments_process_heartbeats_up 1.0" in text


def test_a_clean_stop_forgets_the_heartbeat():
    heartbeat_record("beat", "beat@a")
    heartbeat_forget("beat@a")
    assert not Heartbeat.objects.exists()


def test_heartbeat_check_exits_0_when_fresh_and_1_when_stale_or_missing(capsys):
    with pytest.raises(SystemExit) as missing:
        call_command("heartbeat_check", "worker")
    assert missing.value.code == 1
    heartbeat_record("worker", "celery@old", now=timezone.now() - timedelta(minutes=5))
    with pytest.raises(SystemExit) as stale:
        call_command("heartbeat_check", "worker", "--max-age", "60")
    assert stale.value.code == 1
    assert "celery@old" in capsys.readouterr().err
    heartbeat_record("worker", "celery@new")
    call_command("heartbeat_check", "worker", "--max-age", "60")  # the freshest counts
    with pytest.raises(SystemExit) as named:
        call_command("heartbeat_check", "worker", "--name", "celery@old", "--max-age", "60")
    assert named.value.code == 1


def test_beat_s_scheduler_beats_from_its_tick_and_forgets_on_close(tmp_path, settings):
    settings.HEARTBEAT_INTERVAL_SECONDS = 15
    scheduler = HeartbeatScheduler(app=app, schedule_filename=str(tmp_path / "schedule"))
    try:
        assert scheduler.tick() <= 15  # never sleeps past the next heartbeat
        assert Heartbeat.objects.get(name=beat_name()).kind == "beat"
    finally:
        scheduler.close()
    assert not Heartbeat.objects.filter(name=beat_name()).exists()
