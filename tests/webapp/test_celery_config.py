from webapp.celery import app


def test_the_celery_app_is_named_webapp():
    assert app.main == "webapp"


def test_it_speaks_only_json():
    assert app.conf.task_serializer == "json"
    assert app.conf.result_serializer == "json"
    assert app.conf.accept_content == ["json"]


def test_it_declares_the_four_queues():
    names = {queue.name for queue in app.conf.task_queues}
    assert names == {"default", "compile", "gpu.sm90", "gpu.sm80"}
    assert app.conf.task_default_queue == "default"


def test_it_acknowledges_late_and_prefetches_one():
    assert app.conf.task_acks_late is True
    assert app.conf.task_reject_on_worker_lost is True
    assert app.conf.worker_prefetch_multiplier == 1


def test_the_broker_waits_longer_than_the_longest_task_before_redelivering():
    assert 0 < app.conf.task_soft_time_limit < app.conf.task_time_limit
    assert app.conf.broker_transport_options["visibility_timeout"] > app.conf.task_time_limit


def test_it_finds_the_ping_task():
    app.loader.import_default_modules()
    assert "webapp.workers.tasks.ping" in app.tasks
