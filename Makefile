# Shortcuts; the scripts in bin/ do the real work (and set up .venv when needed).
PY := .venv/bin/python

.PHONY: run test test-fast lint fmt worker migrate

run:
	./bin/run

test:
	./bin/test

# The edit-test loop: no services, no browser, no nvcc, no GPU, nothing marked slow.
test-fast:
	$(PY) -m pytest -q -p no:cacheprovider -m "not gpu and not nvcc and not services and not slow and not browser"

lint:
	$(PY) -m ruff check .

fmt:
	$(PY) -m ruff format webapp tests/webapp manage.py
	$(PY) -m ruff check --fix .

worker:
	$(PY) -m celery -A webapp worker -Q default,compile --concurrency 2 --loglevel INFO

migrate:
	$(PY) manage.py migrate
