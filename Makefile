# Shortcuts; the scripts in bin/ do the real work (and set up .venv when needed).
PY := .venv/bin/python

.PHONY: run test lint fmt worker migrate

run:
	./bin/run

test:
	./bin/test

lint:
	$(PY) -m ruff check .

fmt:
	$(PY) -m ruff format webapp tests/webapp manage.py
	$(PY) -m ruff check --fix .

worker:
	$(PY) -m celery -A webapp worker -Q default,compile --concurrency 2 --loglevel INFO

migrate:
	$(PY) manage.py migrate
