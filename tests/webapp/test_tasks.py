from webapp.workers.tasks import ping


def test_ping_echoes_its_payload():
    result = ping.delay("hello").get(timeout=5)  # eager in tests
    assert result["pong"] == "hello"
    assert result["at"]


def test_ping_takes_json_arguments_only():
    assert ping.apply(kwargs={"payload": "x"}).get()["pong"] == "x"
