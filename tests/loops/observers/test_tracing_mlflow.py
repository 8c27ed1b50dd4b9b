"""`loops.observers.tracing` end to end, against a real trace backend DSPy users run: MLflow's tracking server, started
on loopback by the test. A loop traced with `mlflow.dspy.autolog()` on shows DSPy's own spans (the predictor, the
adapter, the LM) under our role calls; `loops refine --otel` sends its spans over OTLP to the server's /v1/traces. Both
are read back through MLflow's API. Nothing leaves 127.0.0.1: MLflow's telemetry is off, LiteLLM (which the server
imports) reads its price map from its package, and every process the test starts refuses, and reports, any connection or
name lookup off this machine (`OFF_MACHINE`)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

mlflow = pytest.importorskip("mlflow", reason="the tracing-e2e extra is installed by the README's test command")

# The loopback LM server of the batch's tests, as a fixture here too.
from tests.loops.test_batch import server  # noqa: E402, F401

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]
OFFLINE = {"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
# A sitecustomize for the processes the test starts (the server, the traced programs): a connection to, or a
# name lookup of, anything but this machine is refused and written to LOOPS_OFF_MACHINE_LOG.
OFF_MACHINE = """
import os, socket
_LOCAL = ("127.", "::1", "localhost")
_log = os.environ["LOOPS_OFF_MACHINE_LOG"]
def _refuse(host):
    with open(_log, "a") as out:
        out.write(f"{os.getpid()} {host}\\n")
    raise OSError(f"the test allows no connection off this machine ({host})")
_connect, _lookup = socket.socket.connect, socket.getaddrinfo
def connect(sock, address):
    host = address[0] if isinstance(address, tuple) else str(address)
    if sock.family in (socket.AF_INET, socket.AF_INET6) and not str(host).startswith(_LOCAL):
        _refuse(host)
    return _connect(sock, address)
def getaddrinfo(host, *args, **kwargs):
    if host is not None and not str(host).startswith(_LOCAL):
        _refuse(host)
    return _lookup(host, *args, **kwargs)
socket.socket.connect, socket.getaddrinfo = connect, getaddrinfo
"""


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    """The environment of the processes the test starts: offline settings, and `OFF_MACHINE` loaded first. At
    the end, no process has tried to leave this machine."""
    where = tmp_path_factory.mktemp("offline")
    (where / "sitecustomize.py").write_text(OFF_MACHINE)
    log = where / "off-machine.log"
    yield {**os.environ, **OFFLINE, "PYTHONPATH": os.pathsep.join([str(where), str(ROOT)]),
           "LOOPS_OFF_MACHINE_LOG": str(log)}
    assert not log.exists(), f"a process tried to leave this machine: {log.read_text()}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory, offline):
    """MLflow's tracking server on 127.0.0.1 (a SQLite store in a temporary directory); its URL."""
    where, port = tmp_path_factory.mktemp("mlflow"), free_port()
    log = (where / "server.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{where / 'mlflow.db'}", "--default-artifact-root", str(where / "art")],
        env=offline, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        waited = time.monotonic() + 600  # minutes on a loaded machine: it imports much, and migrates its store
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > waited:
                pytest.fail(f"MLflow's server did not start:\n{(where / 'server.log').read_text()[-3000:]}")
            time.sleep(1)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def traces_of(url: str, experiment_id: str, count: int) -> list:
    """The experiment's traces, once `count` of them are there."""
    client = mlflow.MlflowClient(url)
    waited = time.monotonic() + 120
    while True:
        found = client.search_traces(locations=[experiment_id])
        if len(found) >= count or time.monotonic() > waited:
            return found
        time.sleep(1)


def tree(spans, parent=None) -> list:
    """The spans under `parent` as (name, [their trees]), in the order they started."""
    return [(span.name, tree(spans, span.span_id))
            for span in sorted(spans, key=lambda span: span.start_time_ns) if span.parent_id == parent]


AUTOLOGGED = textwrap.dedent("""
    import os
    os.environ["MLFLOW_USE_DEFAULT_TRACER_PROVIDER"] = "false"  # MLflow's spans in the global OTel provider
    import dspy, mlflow
    import loops, loops.observers.tracing
    from tests.loops.sample_runs import verdict
    from tests.scripted import scripted_lm

    experiment = mlflow.set_experiment("loops-autolog")
    mlflow.dspy.autolog()
    loops.observers.tracing.enable()
    lm = scripted_lm([{"reasoning": "r", "draft": "D0"}, verdict(2), {"improved_draft": "D1"}, verdict(3)])
    with dspy.context(lm=lm):
        print(loops.CreatorCriticIterator(max_iterations=3)(requirements="A haiku about rain").stop_reason)
    mlflow.flush_trace_async_logging()
    print(experiment.experiment_id)
""")


def test_mlflow_autolog_spans_nest_under_the_role_calls_of_a_traced_loop(mlflow_server, offline):
    ran = subprocess.run([sys.executable, "-c", AUTOLOGGED], cwd=ROOT, capture_output=True, text=True, timeout=900,
                         env={**offline, "MLFLOW_TRACKING_URI": mlflow_server})
    assert ran.returncode == 0, ran.stderr[-3000:]
    stop_reason, experiment_id = ran.stdout.split()[-2:]
    assert stop_reason == "approved"

    [found] = traces_of(mlflow_server, experiment_id, 1)
    spans = found.data.spans
    [run] = [span for span in spans if span.name == "invoke_workflow CreatorCriticIterator"]
    assert (run.attributes["gen_ai.operation.name"], run.attributes["loops.stop_reason"]) == ("invoke_workflow",
                                                                                             "approved")
    roles = [span for span in spans if span.parent_id == run.span_id]
    assert [role.name for role in roles] == ["invoke_agent creator", "invoke_agent critic", "invoke_agent iterator",
                                             "invoke_agent critic"]
    assert [role.attributes.get("loops.outcome") for role in roles if role.name.endswith("critic")] == [
        "needs revision (2/3 criteria)", "approved (3/3 criteria)"]
    for role in roles:
        # DSPy's module call (MLflow's autolog span) is the role's child, and the LM request is somewhere under it.
        [(module, below)] = tree(spans, role.span_id)
        assert module.endswith(".forward"), module
        flat = str(below)
        assert "LM.__call__" in flat and "chat scripted/test" in flat


def test_loops_refine_with_otel_sends_its_trace_over_otlp(mlflow_server, offline, server, tmp_path):  # noqa: F811
    experiment_id = mlflow.MlflowClient(mlflow_server).create_experiment("loops-otlp")
    env = {**offline, "DSPY_CACHEDIR": str(tmp_path / "cache"),
           "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{mlflow_server}/v1/traces",
           "OTEL_EXPORTER_OTLP_TRACES_HEADERS": f"x-mlflow-experiment-id={experiment_id}",
           "OTEL_SERVICE_NAME": "loops-e2e"}
    ran = subprocess.run([sys.executable, "-m", "loops", "refine", "A note", "--otel", "--model", "openai/loopback",
                          "--api-base", server.base_url, "--max-iterations", "2"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]

    [found] = traces_of(mlflow_server, experiment_id, 1)
    spans = found.data.spans
    assert tree(spans) == [("invoke_workflow CreatorCriticIterator", [
        ("invoke_agent creator", [("chat openai/loopback", [])]),
        ("invoke_agent critic", [("chat openai/loopback", [])])])]
    [run] = [span for span in spans if span.parent_id is None]
    assert (run.attributes["loops.stop_reason"], run.attributes["loops.success"]) == ("approved", True)
    creator = next(span for span in spans if span.name == "invoke_agent creator")
    assert (creator.attributes["gen_ai.request.model"], creator.attributes["gen_ai.system"]) == ("openai/loopback",
                                                                                               "openai")
