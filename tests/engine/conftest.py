"""Fixtures of the engine's tests."""

from __future__ import annotations

import pytest


class VerifierSandboxes(list):
    """What each verifier child of one test ran under (engine.isolation.sandbox.Applied, None:
    none), and its command."""

    def __init__(self) -> None:
        super().__init__()
        self.commands: list[str] = []

    def assert_all_sandboxed(self) -> None:
        from engine.config import SandboxNetwork, load
        from engine.isolation import sandbox

        assert self, "no verifier child ran"
        expected = sandbox.gpu_policy().limits
        for applied in self:
            assert applied is not None, "a verifier child ran without the candidate sandbox"
            assert applied.limits == expected, applied.describe()
            # isolated, or the OS refused (recorded)
            if load().sandbox_network == SandboxNetwork.AUTO:
                assert applied.network != sandbox.NETWORK_OFF, applied.describe()


@pytest.fixture
def verifier_sandboxes(monkeypatch) -> VerifierSandboxes:
    """Records the sandbox of every engine.verify.verifier child: its ProcessResult passes through
    engine.verify.verifier.interpret on its way to a verdict."""
    from engine.verify import verifier as verify_module

    seen = VerifierSandboxes()
    real_interpret = verify_module.interpret

    def interpret(result, verdict_path, timeout):
        seen.append(result.sandbox)
        seen.commands.append(result.command)
        return real_interpret(result, verdict_path, timeout)

    monkeypatch.setattr(verify_module, "interpret", interpret)
    return seen
