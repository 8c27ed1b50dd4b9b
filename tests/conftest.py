import os
import socket
import tempfile

# Before DSPy is imported: no price-map download, and a cache no earlier run has filled.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ["DSPY_CACHEDIR"] = tempfile.mkdtemp(prefix="loops-test-dspy-cache-")
# The pytest runs the tests start (a loop's validator, the CLI's) load no plugins: none of their test files needs
# one, and the dev environment's cost 0.8 s a run, three times pytest itself (nbmake imports jsonschema, whose
# rfc3987-syntax builds a grammar on import). This run's own plugins are loaded before this file is read.
os.environ.setdefault("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")

import pytest  # noqa: E402

_LOOPBACK = ("127.", "::1", "localhost")


@pytest.fixture(autouse=True)
def no_hosted_models(monkeypatch):
    """Tests never reach a hosted LM: any connection off this machine fails the test."""
    real_connect = socket.socket.connect

    def guarded_connect(sock, address):
        host = address[0] if isinstance(address, tuple) else str(address)
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not str(host).startswith(_LOOPBACK):
            raise AssertionError(f"a test tried to reach {address!r}; tests must use scripted or embedded LMs")
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
