"""The artifact store: successful compile-cache entries shared between machines through
a Django storage, ``STORAGES["artifacts"]`` (``var/artifacts`` by default; any backend by setting).

A compile step publishes each library it built (engine.compilation.cache_entries.pack_entry: one
gzip'd tar per cache key, ``kernels/<key[:2]>/<key>.tar.gz``) unless the store has it. A GPU step
fetches the entries of its batch that its own compile cache lacks and installs them
(engine.compilation.cache_entries. install_entry: checked against the sha256s recorded at publish,
written whole or not at all) before its child starts, so the child finds them as if built on its
host. The keys are engine.compilation.compile's cache keys, computed on each side from the source,
the archs for the problem's arch, the flags and the local nvcc and CUTLASS versions: machines with
other toolchains never share an entry.

A store that is down, a key it lacks, an artifact refused by the checks: the GPU step's child
compiles what is missing, as it does without a store. The batch functions never raise.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages

from engine.codegen import get_family
from engine.compilation.cache_entries import install_entry, pack_entry
from engine.compilation.compile import config_keys, try_load
from engine.config import EngineConfig
from engine.config import load as load_config

logger = logging.getLogger(__name__)


def artifact_storage() -> Storage:
    return storages["artifacts"]


def artifact_name(key: str) -> str:
    return f"kernels/{key[:2]}/{key}.tar.gz"


def artifacts_publish(
    *, keys: Iterable[str], config: EngineConfig | None = None, storage: Storage | None = None
) -> dict[str, int]:
    """Publish the local cache entries ``keys``; counts of ``published``, ``present`` (the store
    had it: each key is stored once) and ``unbuilt`` (no successful local entry)."""
    config = config or load_config()
    storage = storage or artifact_storage()
    counts: Counter[str] = Counter()
    for key in dict.fromkeys(keys):
        name = artifact_name(key)
        if storage.exists(name):
            counts["present"] += 1
            continue
        data = pack_entry(key, config)
        if not data:
            counts["unbuilt"] += 1
            continue
        saved = storage.save(name, ContentFile(data))
        if saved != name:  # another worker published the key meanwhile: theirs stays
            storage.delete(saved)
            counts["present"] += 1
        else:
            counts["published"] += 1
    return dict(counts)


def artifacts_fetch(
    *, keys: Iterable[str], config: EngineConfig | None = None, storage: Storage | None = None
) -> dict[str, int]:
    """Install the entries ``keys`` that the local cache lacks from the store; counts of
    ``installed``, ``present`` (the local cache had it), ``missing`` (the store lacks it) and
    ``refused`` (it failed a check: logged, never installed)."""
    config = config or load_config()
    storage = storage or artifact_storage()
    counts: Counter[str] = Counter()
    for key in dict.fromkeys(keys):
        if try_load(key, config) is not None:
            counts["present"] += 1
            continue
        name = artifact_name(key)
        if not storage.exists(name):
            counts["missing"] += 1
            continue
        with storage.open(name, "rb") as handle:
            data = handle.read()
        installed = install_entry(key, data, config)
        if installed.status == "refused":
            logger.error("artifact %s refused, not installed: %s", name, installed.reason)
        counts[installed.status] += 1
    return dict(counts)


def artifacts_publish_built(*, keys: Iterable[str]) -> dict[str, Any]:
    """:func:`artifacts_publish` for a compile step: a store that fails is logged, not raised
    (the GPU step compiles what it cannot fetch)."""
    if not settings.GEMMFORGE_ARTIFACT_STORE:
        return {}
    try:
        return artifacts_publish(keys=keys)
    except Exception as exc:
        logger.warning("could not publish to the artifact store", exc_info=True)
        return {"error": f"{type(exc).__name__}: {exc}"}


def artifacts_fetch_batch(
    *, candidates: Iterable[tuple[str, Mapping[str, Any]]], arch: str
) -> dict[str, Any]:
    """:func:`artifacts_fetch` for a GPU step's batch (``(family, knobs)`` per candidate) on a
    GPU of ``arch``: the keys its child's engine.compilation.compile.compile_configs will look up. A
    store (or a toolchain) that fails is logged, not raised: the child compiles what is missing."""
    if not settings.GEMMFORGE_ARTIFACT_STORE:
        return {}

    try:
        configs = [get_family(family).from_knobs(dict(knobs)) for family, knobs in candidates]
        return artifacts_fetch(keys=config_keys(configs, target_arch=arch))
    except Exception as exc:
        logger.warning("could not fetch from the artifact store", exc_info=True)
        return {"error": f"{type(exc).__name__}: {exc}"}
